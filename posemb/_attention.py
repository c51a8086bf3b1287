"""A reference scaled dot-product attention in NumPy.

Small and plain, for checking models built with posemb's masks and biases
(ALiBi, T5) against PyTorch's ``scaled_dot_product_attention``.
"""
from __future__ import annotations

from typing import Any

import numpy as np

from . import _checks

__all__ = ["scaled_dot_product_attention"]


def _broadcasts_to(x: np.ndarray, shape: tuple[int, ...], name: str) -> None:
    try:
        ok = np.broadcast_shapes(x.shape, shape) == shape
    except ValueError:
        ok = False
    if not ok:
        raise ValueError(f"{name} of shape {x.shape} must broadcast to the scores' shape {shape}")


def scaled_dot_product_attention(q: Any, k: Any, v: Any, *, mask: Any = None,
                                 bias: Any = None, scale: float | None = None) -> np.ndarray:
    """``softmax(q @ k^T * scale + bias + mask) @ v``, PyTorch's convention.

    ``q`` is ``(..., heads, L, E)``, ``k`` ``(..., heads, S, E)``, ``v``
    ``(..., heads, S, Ev)``; leading axes broadcast.  ``scale`` defaults to
    ``1 / sqrt(E)``.  ``bias`` (e.g. :func:`posemb.alibi_bias` or
    :func:`posemb.t5_relative_bias`, ``(heads, L, S)``) is added to the
    scores.  ``mask`` broadcasts to ``(..., heads, L, S)`` and is either
    boolean -- True = may attend, as in PyTorch -- or additive (added to the
    scores, e.g. :func:`posemb.to_additive`).

    The softmax subtracts each row's maximum before ``exp``.  **A row in
    which every key is masked gives zeros, not NaN** (as PyTorch >= 2.5
    does); so does an empty key axis (``S = 0``).  float16 inputs are
    computed in float32 and the result rounded to float16.

    Returns
    -------
    numpy.ndarray
        ``(..., heads, L, Ev)``, the result dtype of ``q``, ``k``, ``v``.

    Examples
    --------
    >>> import numpy as np, posemb
    >>> rng = np.random.default_rng(0)
    >>> q, k, v = (rng.standard_normal((2, 4, 5, 8), dtype=np.float32) for _ in range(3))
    >>> out = posemb.scaled_dot_product_attention(
    ...     q, k, v, mask=posemb.causal_mask(5), bias=posemb.alibi_bias(4, 5, 5))
    >>> out.shape, out.dtype
    ((2, 4, 5, 8), dtype('float32'))
    >>> bool(np.allclose(out[..., 0, :], v[..., 0, :]))     # the first query sees one key
    True
    >>> none = np.zeros((5, 5), dtype=bool)
    >>> float(np.abs(posemb.scaled_dot_product_attention(q, k, v, mask=none)).max())
    0.0
    """
    arrays = []
    for name, x in (("q", q), ("k", k), ("v", v)):
        x = np.asarray(_checks.float_operand(x, name))
        if x.ndim < 2:
            raise ValueError(f"{name} must have shape (..., seq, dim), got {x.shape}")
        arrays.append(x)
    q, k, v = arrays
    if q.shape[-1] != k.shape[-1]:
        raise ValueError(f"q and k must have the same last axis, got {q.shape} and {k.shape}")
    if k.shape[-2] != v.shape[-2]:
        raise ValueError(f"k and v must have the same sequence axis, got {k.shape} and {v.shape}")
    dtype = np.result_type(q, k, v)
    work = np.float32 if dtype == np.float16 else dtype.type
    if scale is None:
        scale_v = 1.0 / np.sqrt(q.shape[-1]) if q.shape[-1] else 1.0
    else:
        scale_v = _checks.finite_float(scale, "scale")
    try:
        lead = np.broadcast_shapes(q.shape[:-2], k.shape[:-2], v.shape[:-2])
    except ValueError:
        raise ValueError(
            f"q, k and v leading axes must broadcast, got {q.shape}, {k.shape}, {v.shape}") from None
    scores_shape = lead + (q.shape[-2], k.shape[-2])
    # scores, exp, weights and a masked copy: four score-sized temporaries
    _checks.check_result(scores_shape, work, "q and k", copies=4,
                         what=f"the {scores_shape} attention scores and their temporaries")

    scores = np.matmul(q.astype(work, copy=False),
                       np.swapaxes(k.astype(work, copy=False), -1, -2))
    scores *= work(scale_v)
    if bias is not None:
        b = np.asarray(_checks.float_operand(bias, "bias"))
        _broadcasts_to(b, scores_shape, "bias")
        scores = scores + b.astype(work, copy=False)
    if mask is not None:
        m = np.asarray(mask)
        _broadcasts_to(m, scores_shape, "mask")
        if m.dtype == np.bool_:
            scores = np.where(m, scores, work(-np.inf))
        elif m.dtype in _checks.FLOAT_DTYPES:
            scores = scores + m.astype(work, copy=False)
        else:
            raise TypeError(f"mask must be boolean or float, got dtype {m.dtype}")
    scores = np.broadcast_to(scores, scores_shape)

    if scores_shape[-1] == 0:
        out_shape = np.broadcast_shapes(lead, v.shape[:-2]) + (q.shape[-2], v.shape[-1])
        return np.zeros(out_shape, dtype=dtype)
    row_max = scores.max(axis=-1, keepdims=True)
    row_max = np.where(np.isneginf(row_max), work(0), row_max)   # fully masked rows
    e = np.exp(scores - row_max)
    total = e.sum(axis=-1, keepdims=True)
    p = e / np.where(total == 0, work(1), total)                 # all-zero rows stay zero
    return np.matmul(p, v.astype(work, copy=False)).astype(dtype, copy=False)

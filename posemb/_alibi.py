"""ALiBi: attention with linear biases (Press et al., "Train Short, Test Long").

Head ``h`` adds ``-m_h * (i - j)`` to the score of query position ``i`` and
key ``j`` (to be combined with a causal mask), or ``-m_h * |i - j|`` in the
symmetric (non-causal, MPT) form.  The slopes ``m_h`` are Press's
``get_slopes``: a geometric sequence ``2**(-8/n), 2**(-16/n), ...`` for ``n``
a power of two, and for other ``n`` the sequence of the largest power of two
``c < n`` followed by every other slope of ``2c`` heads.
"""
from __future__ import annotations

import operator
from typing import Any

import numpy as np

from . import _checks
from . import _native as _core

__all__ = ["alibi_slopes", "alibi_bias"]



def alibi_slopes(num_heads: int, *, dtype: Any = np.float64,
                 alibi_bias_max: float = 8.0) -> np.ndarray:
    """Press's ALiBi slopes ``get_slopes(num_heads)``.

    Each slope is ``2 ** e`` with the exact exponent ``e = -8 (h + 1) / c``
    (``c`` a power of two), evaluated in float64 and rounded once to
    ``dtype``: within an ulp of Press's ``start * ratio ** i``, and exact when
    ``e`` is an integer.  For ``num_heads`` not a power of two, with ``c`` the
    largest power of two below it, the slopes are ``get_slopes(c)`` followed
    by ``get_slopes(2c)[0::2][:num_heads - c]``.  The ``1 / 2**(8h/H)`` of the
    "Positional Encodings in Transformer Models" tutorial is the power-of-two case.

    Parameters
    ----------
    num_heads : int
        ``>= 1``.
    dtype : float16, float32 or float64
    alibi_bias_max : float
        The 8 of ``-8 (h + 1) / c``: MPT's ``attn_config["alibi_bias_max"]``
        (``build_mpt_alibi_tensor``; its head order for ``num_heads`` not a
        power of two is the same as Press's).

    Returns
    -------
    numpy.ndarray
        ``(num_heads,)``.

    Examples
    --------
    >>> import posemb
    >>> posemb.alibi_slopes(4).tolist()
    [0.25, 0.0625, 0.015625, 0.00390625]
    >>> posemb.alibi_slopes(6).tolist()        # slopes(4) + slopes(8)[0::2][:2]
    [0.25, 0.0625, 0.015625, 0.00390625, 0.5, 0.125]
    >>> posemb.alibi_slopes(4, alibi_bias_max=16).tolist()     # MPT with alibi_bias_max 16
    [0.0625, 0.00390625, 0.000244140625, 1.52587890625e-05]
    """
    n = _checks.size(num_heads, "num_heads", minimum=1)
    dt = _checks.float_dtype(dtype)
    _checks.check_result((n,), np.float64, "num_heads", copies=3)
    c = 1 << (n.bit_length() - 1)                 # largest power of two <= n
    top = _checks.positive_float(alibi_bias_max, "alibi_bias_max")
    exponents = -top * np.arange(1, c + 1, dtype=np.float64) / c
    if c < n:                                     # slopes(2c)[0::2][:n-c]
        odd = 2.0 * np.arange(n - c, dtype=np.float64) + 1.0
        exponents = np.concatenate([exponents, -top * odd / (2 * c)])
    return np.exp2(exponents).astype(dt)


def _slopes(slopes_or_num_heads: Any) -> np.ndarray:
    if isinstance(slopes_or_num_heads, (bool, np.bool_)):
        raise TypeError("slopes_or_num_heads must be an int or a 1-D array of slopes, got a bool")
    try:
        n = operator.index(slopes_or_num_heads)
    except TypeError:
        pass
    else:
        if n < 1:
            raise ValueError(f"slopes_or_num_heads must be >= 1 heads, got {n}")
        return alibi_slopes(n)
    s = np.asarray(slopes_or_num_heads)
    if s.dtype.kind not in "fiu":
        raise TypeError(
            f"slopes_or_num_heads must be an int or a 1-D array of real slopes, got dtype {s.dtype}")
    if s.ndim != 1:
        raise ValueError(f"slopes_or_num_heads must be 1-D (one slope per head), got shape {s.shape}")
    s = _checks.c_array(s, np.float64)
    if not np.isfinite(s).all():
        raise ValueError("slopes_or_num_heads must be finite")
    return s


def _arguments(slopes_or_num_heads: Any, query_length: Any, key_length: Any, symmetric: Any,
               query_offset: Any) -> tuple[np.ndarray, tuple[int, int, int], int, bool]:
    """alibi_bias's arguments checked: slopes, the output shape, the query
    offset and symmetric."""
    slopes = _slopes(slopes_or_num_heads)
    q = _checks.bounded(query_length, "query_length", _checks.MAX_ALIBI_EXTENT)
    k = _checks.bounded(key_length, "key_length", _checks.MAX_ALIBI_EXTENT)
    if query_offset is None:
        off = k - q
    else:
        off = _checks.bounded(query_offset, "query_offset", _checks.MAX_ALIBI_EXTENT, signed=True)
    return slopes, (slopes.shape[0], q, k), off, _checks.flag(symmetric, "symmetric")


def alibi_bias_bf16_bits(slopes_or_num_heads: Any, query_length: int, key_length: int, *,
                         symmetric: bool = False, query_offset: int | None = None) -> np.ndarray:
    """alibi_bias as bfloat16 bit patterns (uint16) for posemb.torch: each
    float64 value rounded to bfloat16 through float32, as torch's cast of
    the float64 bias (one diagonal value at a time, then rows copied)."""
    slopes, shape, off, symmetric = _arguments(slopes_or_num_heads, query_length, key_length,
                                               symmetric, query_offset)
    _checks.check_result(shape, np.uint16, "slopes_or_num_heads, query_length and key_length")
    bits = np.empty(shape, np.uint16)
    _core._alibi_bias_bf16(slopes, bits, off, symmetric)
    return bits


def alibi_bias(slopes_or_num_heads: Any, query_length: int, key_length: int, *,
               symmetric: bool = False, query_offset: int | None = None,
               dtype: Any = np.float32, out: np.ndarray | None = None) -> np.ndarray:
    """ALiBi bias ``(heads, query_length, key_length)`` to add to attention scores.

    ``bias[h, i, j] = -m_h * (p_i - j)`` (causal form: combine with a causal
    mask, which hides the ``j > p_i`` entries), or ``-m_h * |p_i - j|`` with
    ``symmetric=True``; ``p_i = query_offset + i``.  ``query_offset`` defaults
    to ``key_length - query_length``: the queries are the last positions (the
    KV-cache case).  Press, BLOOM and MPT add ``m_h * j`` instead, which
    differs by a per-row constant that softmax ignores.  Products are formed
    in float64 and rounded once.

    Parameters
    ----------
    slopes_or_num_heads : int or array_like of float
        A head count (slopes from :func:`alibi_slopes`) or the slopes.
    query_length, key_length : int
    symmetric : bool
    query_offset : int, optional
    dtype : float16, float32 or float64
    out : numpy.ndarray, optional
        A C-contiguous ``(heads, query_length, key_length)`` array to write
        into (reusing a buffer skips allocating and faulting in fresh pages);
        the result then has ``out``'s dtype and ``dtype`` is not used.

    Examples
    --------
    >>> import posemb
    >>> posemb.alibi_bias(2, 3, 3)[0]           # slopes 1/16, 1/256
    array([[ 0.    ,  0.0625,  0.125 ],
           [-0.0625,  0.    ,  0.0625],
           [-0.125 , -0.0625,  0.    ]], dtype=float32)
    >>> posemb.alibi_bias([0.5], 1, 4, symmetric=True)      # decoding the 4th token
    array([[[-1.5, -1. , -0.5,  0. ]]], dtype=float32)
    >>> buf = np.empty((2, 3, 3), np.float32)
    >>> posemb.alibi_bias(2, 3, 3, out=buf) is buf
    True
    """
    slopes, shape, off, symmetric = _arguments(slopes_or_num_heads, query_length, key_length,
                                               symmetric, query_offset)
    if out is not None:
        out = _checks.out_array(out, shape)
        _core._alibi_bias(slopes, out, off, symmetric)
        return out
    dt = _checks.float_dtype(dtype)
    _checks.check_result(shape, dt, "slopes_or_num_heads, query_length and key_length")
    res = np.empty(shape, dtype=dt)
    _core._alibi_bias(slopes, res, off, symmetric)
    return res

"""Attention masks.

posemb's masks follow PyTorch ``scaled_dot_product_attention``: a boolean
mask is **True where the query may attend to the key**.  (``nn.MultiheadAttention``'s
``key_padding_mask`` and PositionalEmbeddings.jl's ``create_padding_mask``
use the opposite convention; the two Julia-compatible functions below say
which they follow.)
"""
from __future__ import annotations

from typing import Any

import numpy as np

from . import _checks, _core

__all__ = [
    "causal_mask",
    "padding_mask",
    "to_additive",
    "create_causal_mask",
    "create_padding_mask",
]


def _signed(value: Any, name: str) -> int:
    return _checks.bounded(value, name, _checks.MAX_EXTENT, signed=True)


def causal_mask(query_length: int, key_length: int | None = None, *,
                window: int | None = None, query_offset: int | None = None) -> np.ndarray:
    """Causal mask ``(query_length, key_length)``, True = may attend.

    Query ``i`` sits at position ``p_i = query_offset + i`` and sees key ``j``
    when ``j <= p_i`` (and ``p_i - window < j`` with a sliding ``window``, HF's
    rule).  ``query_offset`` defaults to ``key_length - query_length``: the
    mask is aligned to the lower right, PyTorch's
    ``tril(ones(q, k), diagonal=k - q)`` for a KV cache; pass
    ``query_offset=0`` for the upper-left ``tril(ones(q, k))``.

    Parameters
    ----------
    query_length : int
    key_length : int, optional
        Defaults to ``query_length``.
    window : int, optional
        ``>= 1``: keys ``p_i - window < j <= p_i`` (``window`` keys, itself included).
    query_offset : int, optional

    Examples
    --------
    >>> import posemb
    >>> posemb.causal_mask(3).astype(int)
    array([[1, 0, 0],
           [1, 1, 0],
           [1, 1, 1]])
    >>> posemb.causal_mask(2, 4).astype(int)             # lower-right aligned
    array([[1, 1, 1, 0],
           [1, 1, 1, 1]])
    >>> posemb.causal_mask(4, window=2).astype(int)
    array([[1, 0, 0, 0],
           [1, 1, 0, 0],
           [0, 1, 1, 0],
           [0, 0, 1, 1]])
    """
    q = _checks.bounded(query_length, "query_length", _checks.MAX_EXTENT)
    k = q if key_length is None else _checks.bounded(key_length, "key_length", _checks.MAX_EXTENT)
    w = -1 if window is None else _checks.size(window, "window", minimum=1)
    off = k - q if query_offset is None else _signed(query_offset, "query_offset")
    _checks.check_result((q, k), np.bool_, "query_length and key_length")
    out = np.empty((q, k), dtype=np.bool_)
    _core._causal_mask(out, off, min(w, _checks.MAX_WINDOW))
    return out


def _lengths(lengths: Any, max_length: int) -> np.ndarray:
    n = _checks.int_vector(lengths, "lengths")      # one length per sequence
    if n.size and (int(n.min()) < 0 or int(n.max()) > max_length):
        raise ValueError(
            f"lengths must be in [0, max_length={max_length}], got "
            f"[{int(n.min())}, {int(n.max())}]")
    return n


def padding_mask(lengths: Any, max_length: int, *, side: str = "right") -> np.ndarray:
    """Padding mask ``(batch, max_length)``, True at real tokens (may attend).

    ``side="right"``: sequence ``b`` occupies positions ``0 .. lengths[b]-1``;
    ``side="left"`` (left padding, common for batched generation): the last
    ``lengths[b]`` positions.  Use as a key mask: ``mask[:, None, None, :]``
    broadcasts against ``(batch, heads, q, k)`` scores.

    Examples
    --------
    >>> import posemb
    >>> posemb.padding_mask([2, 3], 4).astype(int)
    array([[1, 1, 0, 0],
           [1, 1, 1, 0]])
    >>> posemb.padding_mask([2, 3], 4, side="left").astype(int)
    array([[0, 0, 1, 1],
           [0, 1, 1, 1]])
    """
    m = _checks.size(max_length, "max_length")
    if not isinstance(side, str) or side not in ("right", "left"):
        raise ValueError(f"side must be 'right' or 'left', got {side!r}")
    n = _lengths(lengths, m)
    _checks.check_result((n.shape[0], m), np.bool_, "lengths and max_length", copies=2)
    out = np.empty((n.shape[0], m), dtype=np.bool_)
    _core._padding_mask(n, out, side == "left")
    return out


def to_additive(mask: Any, dtype: Any = np.float32) -> np.ndarray:
    """Boolean mask -> additive mask: 0 where True (attend), ``-inf`` where False.

    Add the result to attention scores (PyTorch's float ``attn_mask``).

    Examples
    --------
    >>> import posemb
    >>> posemb.to_additive(posemb.causal_mask(2))
    array([[  0., -inf],
           [  0.,   0.]], dtype=float32)
    """
    m = np.asarray(mask)
    if m.dtype != np.bool_:
        raise TypeError(f"mask must be a boolean array, got dtype {m.dtype}")
    dt = _checks.float_dtype(dtype)
    return np.where(m, dt.type(0.0), dt.type(-np.inf))


def create_causal_mask(seq_len: int) -> np.ndarray:
    """PositionalEmbeddings.jl's ``create_causal_mask`` in NumPy's row-major order.

    Shape ``(1, seq_len, seq_len)``, ``[0, q, k] = (k <= q)``: **True means the
    query may attend to the key** -- this is how the Julia package uses it
    (``ifelse.(mask, scores, -inf)`` on its ``(key, query)`` scores), although
    its docstring says True marks masked positions.  The Julia array is
    ``(seq_len, seq_len, 1)`` indexed ``[key, query, 1]``: the same memory.
    Equal to ``causal_mask(seq_len)[None]``.

    Examples
    --------
    >>> import posemb
    >>> posemb.create_causal_mask(3)[0].astype(int)     # rows: queries, columns: keys
    array([[1, 0, 0],
           [1, 1, 0],
           [1, 1, 1]])
    """
    L = _checks.size(seq_len, "seq_len")
    return causal_mask(L)[None]


def create_padding_mask(lengths: Any, max_len: int) -> np.ndarray:
    """PositionalEmbeddings.jl's ``create_padding_mask`` in NumPy's row-major order.

    Shape ``(batch, max_len, 1)``, ``[b, p, 0] = (p >= lengths[b])``: **True
    marks padding, i.e. positions that must NOT be attended to** -- the
    opposite of :func:`padding_mask` and of PyTorch's boolean ``attn_mask``
    (use ``~create_padding_mask(...)`` or :func:`padding_mask` there).  The
    Julia array is ``(1, max_len, batch)``: the same memory.

    Examples
    --------
    >>> import posemb
    >>> posemb.create_padding_mask([2, 3], 4)[..., 0].astype(int)   # 1 = padding
    array([[0, 0, 1, 1],
           [0, 0, 0, 1]])
    """
    m = _checks.size(max_len, "max_len")
    n = np.asarray(lengths)
    if n.dtype.kind in "iu" and n.ndim == 1 and n.size and (int(n.min()) < 0 or int(n.max()) > m):
        raise ValueError(f"lengths must be in [0, max_len={m}]")
    return ~padding_mask(lengths, m)[..., None]

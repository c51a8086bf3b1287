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

from . import _checks
from . import _native as _core

__all__ = [
    "causal_mask",
    "padding_mask",
    "to_additive",
    "attention_mask",
    "padding_to_attention_mask",
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


def _lengths(lengths: Any, max_length: int, limit: str = "max_length") -> np.ndarray:
    n = _checks.int_vector(lengths, "lengths")      # one length per sequence
    if n.size and (int(n.min()) < 0 or int(n.max()) > max_length):
        raise ValueError(
            f"lengths must be in [0, {limit}={max_length}], got "
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


def padding_to_attention_mask(mask: Any, *, true_means: str = "attend") -> np.ndarray:
    """A per-token padding mask -> a key mask ``(batch, 1, 1, key_length)``.

    Attention masks (PyTorch SDPA, posemb) say **True = may attend** and have
    one axis for queries and one for keys; a padding mask says, per token,
    which tokens are real.  This turns the second into the first, over the key
    axis, so that it broadcasts against ``(batch, heads, q, k)`` scores and
    combines with a causal mask by ``&``.

    Parameters
    ----------
    mask : bool array, ``(batch, key_length)`` or ``(batch, key_length, 1)``
        The latter is what :func:`create_padding_mask` (PositionalEmbeddings.jl)
        returns.
    true_means : {"attend", "padding"}
        What True marks in ``mask``: real tokens (:func:`padding_mask`, HF's
        ``attention_mask``) or padding (:func:`create_padding_mask`, PyTorch's
        ``key_padding_mask``).

    Examples
    --------
    >>> import posemb
    >>> posemb.padding_to_attention_mask(posemb.padding_mask([1, 2], 2)).astype(int)
    array([[[[1, 0]]],
    <BLANKLINE>
    <BLANKLINE>
           [[[1, 1]]]])
    """
    m = np.asarray(mask)
    if m.dtype != np.bool_:
        raise TypeError(f"mask must be a boolean array, got dtype {m.dtype}")
    if m.ndim == 3 and m.shape[2] == 1:
        m = m[..., 0]
    if m.ndim != 2:
        raise ValueError(
            f"mask must have shape (batch, key_length) or (batch, key_length, 1), got {m.shape}")
    if not isinstance(true_means, str) or true_means not in ("attend", "padding"):
        raise ValueError(f"true_means must be 'attend' or 'padding', got {true_means!r}")
    keep = m if true_means == "attend" else ~m
    return keep[:, None, None, :].copy()


def attention_mask(query_length: int, key_length: int | None = None, *,
                   lengths: Any = None, causal: bool = True, window: int | None = None,
                   query_offset: int | None = None, side: str = "right") -> np.ndarray:
    """The one way to build a combined boolean attention mask, True = may attend.

    Combines, by logical AND: a causal mask (:func:`causal_mask`, lower-right
    aligned, optionally with a sliding ``window``) and a key padding mask from
    per-sequence ``lengths`` (:func:`padding_mask` over the key axis).  The
    result is what PyTorch's ``scaled_dot_product_attention`` and
    :func:`scaled_dot_product_attention` take as a boolean ``attn_mask``.

    PositionalEmbeddings.jl's own example, ``causal .| padding``, mixes its
    two conventions (its causal mask is used as True = attend, its padding
    mask says True = padding), so the OR lets queries attend to padding and
    to the future; here ``attention_mask(5, lengths=[3, 4])`` is the mask
    that example means: each query sees past keys that are not padding.

    Parameters
    ----------
    query_length : int
    key_length : int, optional
        Defaults to ``query_length``.
    lengths : sequence of int, optional
        Real tokens per sequence (``0 <= lengths[b] <= key_length``); with
        it the result has shape ``(batch, 1, query_length, key_length)``,
        without it ``(query_length, key_length)``.
    causal : bool
        False: no causal part (only padding, and ``window`` if given).
    window : int, optional
        ``>= 1``. Causal: as in :func:`causal_mask`. With ``causal=False``,
        bidirectional local attention: keys ``|j - p_i| < window``.
    query_offset : int, optional
        As in :func:`causal_mask`.
    side : {"right", "left"}
        Where the padding sits, as in :func:`padding_mask`.

    Examples
    --------
    >>> import posemb
    >>> posemb.attention_mask(3, lengths=[2, 3])[0, 0].astype(int)
    array([[1, 0, 0],
           [1, 1, 0],
           [1, 1, 0]])
    >>> posemb.attention_mask(3, causal=False, lengths=[2])[0, 0].astype(int)
    array([[1, 1, 0],
           [1, 1, 0],
           [1, 1, 0]])
    """
    q = _checks.bounded(query_length, "query_length", _checks.MAX_EXTENT)
    k = q if key_length is None else _checks.bounded(key_length, "key_length", _checks.MAX_EXTENT)
    if _checks.flag(causal, "causal"):
        mask = causal_mask(q, k, window=window, query_offset=query_offset)
    elif window is not None:
        # bidirectional local attention: keys within window - 1 of the query's position
        off = k - q if query_offset is None else _signed(query_offset, "query_offset")
        w = _checks.size(window, "window", minimum=1)
        # int64 distances and their absolute values, then the mask
        _checks.check_result((q, k), np.int64, "query_length and key_length", copies=2,
                             extra=_checks.nbytes((q, k), np.bool_))
        i = np.arange(q, dtype=np.int64)[:, None] + off
        mask = np.abs(np.arange(k, dtype=np.int64)[None, :] - i) < w
    else:
        _checks.check_result((q, k), np.bool_, "query_length and key_length")
        mask = np.ones((q, k), dtype=np.bool_)
    if lengths is None:
        return mask
    n = _lengths(lengths, k, "key_length")      # names key_length when it is too short
    _checks.check_result((n.shape[0], q, k), np.bool_, "lengths, query_length and key_length")
    keys = padding_to_attention_mask(padding_mask(lengths, k, side=side))
    return mask[None, None] & keys


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

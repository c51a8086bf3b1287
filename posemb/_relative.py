"""Relative position biases and embeddings: T5 buckets and Shaw et al.

Conventions (Raffel et al., T5, and Hugging Face ``modeling_t5.py``
``T5Attention._relative_position_bucket``/``compute_bias``; Shaw et al.,
"Self-Attention with Relative Position Representations", arXiv:1803.02155,
and tensor2tensor ``_generate_relative_positions_matrix``):

* ``rp = key_pos - query_pos``.  T5 (Hugging Face ``T5Attention``) maps it to
  one of ``num_buckets`` buckets -- exact buckets near zero, logarithmic ones
  up to ``max_distance`` -- and the bias is ``table[bucket, head]``.
* Shaw et al. (tensor2tensor) clip it to ``[-K, K]`` and look up row
  ``clip(rp, -K, K) + K`` of a ``(2K + 1, dim)`` table.
* Both depend on ``(query, key)`` only through ``rp``: the C kernels compute
  each of the ``q + k - 1`` distinct values once and fill the output, so the
  cost is that of writing it.
"""
from __future__ import annotations

from typing import Any

import numpy as np

from . import _checks
from . import _native as _core

__all__ = [
    "t5_relative_position_bucket",
    "t5_relative_bias",
    "t5_relative_bias_backward",
    "relative_position_index",
    "relative_embeddings",
    "relative_embeddings_backward",
]


def _offset(value: Any, name: str) -> int:
    """A signed integer offset with |value| <= MAX_EXTENT."""
    return _checks.bounded(value, name, _checks.MAX_EXTENT, signed=True)


def _length(value: Any, name: str) -> int:
    return _checks.bounded(value, name, _checks.MAX_EXTENT)


def _t5_params(bidirectional: Any, num_buckets: Any, max_distance: Any) -> tuple[bool, int, int]:
    """Check HF's bucket parameters: at least one exact bucket per direction
    (``num_buckets >= 4`` bidirectional, ``>= 2`` otherwise) and
    ``max_distance`` beyond the exact buckets."""
    bidirectional = _checks.flag(bidirectional, "bidirectional")
    least = 4 if bidirectional else 2
    nbk = _checks.size(num_buckets, "num_buckets", minimum=least)
    if nbk > _checks.MAX_BUCKETS:
        raise ValueError(f"num_buckets must be <= 2**20, got {nbk}")
    nb = nbk // 2 if bidirectional else nbk
    max_exact = nb // 2
    md = _checks.size(max_distance, "max_distance")
    if md <= max_exact or md > _checks.MAX_DISTANCE:
        raise ValueError(
            f"max_distance must be > {max_exact} (the exact buckets) and <= 2**53, got {md}")
    return bidirectional, nbk, md


def _float_array(x: Any, name: str, ndim: int) -> np.ndarray:
    """x as a C-contiguous float16/32/64 ndarray of rank ndim."""
    x = _checks.float_operand(x, name)
    x = _checks.c_array(x)
    if x.ndim != ndim:
        raise ValueError(f"{name} must have {ndim} dimensions, got shape {x.shape}")
    return x


def t5_relative_position_bucket(relative_position: Any, *, bidirectional: bool = True,
                                num_buckets: int = 32, max_distance: int = 128) -> np.ndarray:
    """Hugging Face's ``T5Attention._relative_position_bucket``, bit for bit.

    ``relative_position`` is ``key_pos - query_pos``.  With ``bidirectional``
    half the buckets are for ``rp > 0``; in each direction the first half of
    the buckets are exact (``|rp| < max_exact``) and the rest grow
    logarithmically up to ``max_distance``, beyond which everything shares the
    last bucket.  The boundaries are those of HF's float32 formula (at the
    defaults ``rp = 16, 32, 64`` start buckets 10, 12, 14 exactly as in HF).
    ``|INT64_MIN|``, where HF's ``torch.abs`` overflows, is the farthest bucket.

    Parameters
    ----------
    relative_position : array_like of int
        Any shape.
    bidirectional : bool
    num_buckets : int
        ``>= 4`` bidirectional, ``>= 2`` otherwise, ``<= 2**20``.
    max_distance : int
        ``> num_buckets // 4`` (bidirectional) or ``> num_buckets // 2``.

    Returns
    -------
    numpy.ndarray
        int64 buckets, same shape as ``relative_position``.

    Examples
    --------
    >>> import numpy as np, posemb
    >>> posemb.t5_relative_position_bucket(np.array([-64, -16, -1, 0, 1, 15, 16, 200]))
    array([14, 10,  1,  0, 17, 25, 26, 31])
    >>> posemb.t5_relative_position_bucket([-3, 3], bidirectional=False)
    array([3, 0])
    """
    bidirectional, nbk, md = _t5_params(bidirectional, num_buckets, max_distance)
    rp = np.asarray(relative_position)
    if rp.dtype.kind not in "iu":
        raise TypeError(f"relative_position must be an integer array, got dtype {rp.dtype}")
    if rp.dtype.kind == "u" and rp.size and int(rp.max()) > np.iinfo(np.int64).max:
        raise ValueError("relative_position must fit in int64")
    flat = np.array(rp, dtype=np.int64, order="C").reshape(-1)   # a private copy
    _core._t5_bucket(flat, flat, bidirectional, nbk, md)         # in place
    return flat.reshape(rp.shape)


def t5_relative_bias(table: Any, query_length: int, key_length: int, *,
                     bidirectional: bool = True, num_buckets: int = 32,
                     max_distance: int = 128, query_offset: int = 0,
                     out: np.ndarray | None = None) -> np.ndarray:
    """T5's relative attention bias, ``(heads, query_length, key_length)``.

    ``bias[h, i, j] = table[bucket(j - (query_offset + i)), h]`` -- HF's
    ``T5Attention.compute_bias`` without its leading axis of 1, from
    ``table = relative_attention_bias.weight`` of shape ``(num_buckets, heads)``.
    Each distinct diagonal value is looked up once per head and rows are
    copied, so the cost is writing the output.

    Parameters
    ----------
    table : array_like, float16/32/64, shape ``(num_buckets, heads)``
    query_length, key_length : int
    bidirectional, num_buckets, max_distance
        As :func:`t5_relative_position_bucket`.
    query_offset : int
        Position of the first query (HF's cache position when decoding).
    out : numpy.ndarray, optional
        A C-contiguous ``(heads, query_length, key_length)`` array to write
        into (the table is cast to its dtype; it must not overlap ``table``).

    Returns
    -------
    numpy.ndarray
        Same dtype as ``table`` (or ``out``).

    Examples
    --------
    >>> import numpy as np, posemb
    >>> table = np.arange(32 * 2, dtype=np.float32).reshape(32, 2)
    >>> bias = posemb.t5_relative_bias(table, 3, 4)
    >>> bias.shape
    (2, 3, 4)
    >>> bias[0]
    array([[ 0., 34., 36., 38.],
           [ 2.,  0., 34., 36.],
           [ 4.,  2.,  0., 34.]], dtype=float32)
    """
    bidirectional, nbk, md = _t5_params(bidirectional, num_buckets, max_distance)
    table = _float_array(table, "table", 2)
    if table.shape[0] != nbk:
        raise ValueError(
            f"table must have shape (num_buckets={nbk}, heads), got {table.shape}")
    q = _length(query_length, "query_length")
    k = _length(key_length, "key_length")
    off = _offset(query_offset, "query_offset")
    shape = (table.shape[1], q, k)
    if out is None:
        _checks.check_result(shape, table.dtype, "query_length and key_length")
        out = np.empty(shape, dtype=table.dtype)
    else:
        out = _checks.out_array(out, shape)
        table = table.astype(out.dtype, copy=False)
    _core._t5_bias(table, out, bidirectional, md, off)
    return out


def _t5_backward_args(shape: tuple[int, ...], num_buckets: Any, query_length: Any,
                      key_length: Any, bidirectional: Any, max_distance: Any,
                      query_offset: Any) -> tuple[bool, int, int, int]:
    """t5_relative_bias_backward's arguments checked against grad_bias's
    shape: bidirectional, num_buckets, max_distance, query_offset."""
    bidirectional, nbk, md = _t5_params(bidirectional, num_buckets, max_distance)
    q = _length(query_length, "query_length")
    k = _length(key_length, "key_length")
    off = _offset(query_offset, "query_offset")
    if len(shape) < 3 or tuple(shape[-2:]) != (q, k):
        raise ValueError(
            f"grad_bias must have shape (..., heads, query_length={q}, key_length={k}), "
            f"got {tuple(shape)}")
    return bidirectional, nbk, md, off


def t5_bias_backward_bf16_bits(grad_bias: np.ndarray, *, num_buckets: int, query_length: int,
                               key_length: int, bidirectional: bool = True,
                               max_distance: int = 128, query_offset: int = 0) -> np.ndarray:
    """t5_relative_bias_backward of a (heads, q, k) bfloat16 gradient given as
    bit patterns (uint16, as posemb.torch views it): the float32 table
    gradient (sums in float64, rounded once; torch rounds it to bfloat16)."""
    bidirectional, nbk, md, off = _t5_backward_args(grad_bias.shape, num_buckets, query_length,
                                                    key_length, bidirectional, max_distance,
                                                    query_offset)
    if grad_bias.ndim != 3:
        raise ValueError(f"grad_bias must have shape (heads, query_length, key_length), "
                         f"got {grad_bias.shape}")
    _checks.check_result((nbk, grad_bias.shape[0]), np.float32, "num_buckets", copies=2)
    g = _checks.c_array(grad_bias)
    out = np.empty((nbk, g.shape[0]), dtype=np.float32)
    _core._t5_bias_backward_bf16(g, out, bidirectional, md, off)
    return out


def t5_relative_bias_backward(grad_bias: Any, *, num_buckets: int, query_length: int,
                              key_length: int, bidirectional: bool = True,
                              max_distance: int = 128, query_offset: int = 0) -> np.ndarray:
    """Gradient of :func:`t5_relative_bias` with respect to ``table``.

    A scatter-add: ``grad_table[b, h]`` sums ``grad_bias[..., h, i, j]`` over
    every ``(i, j)`` whose bucket is ``b`` (and over any leading axes, such as
    HF's broadcast batch axis).  Sums are formed in float64 and rounded once;
    float16 gradients are computed in float32.

    Parameters
    ----------
    grad_bias : array_like, float, shape ``(..., heads, query_length, key_length)``
    num_buckets, query_length, key_length : int
    bidirectional, max_distance, query_offset
        As in the forward call.

    Returns
    -------
    numpy.ndarray
        ``(num_buckets, heads)``, dtype of ``grad_bias``.

    Examples
    --------
    >>> import numpy as np, posemb
    >>> g = posemb.t5_relative_bias_backward(np.ones((2, 3, 4), np.float32),
    ...                                      num_buckets=32, query_length=3, key_length=4)
    >>> g.shape, float(g.sum()), g[0].tolist()       # 3 diagonal cells have rp = 0
    ((32, 2), 24.0, [3.0, 3.0])
    """
    g = np.asarray(_checks.float_operand(grad_bias, "grad_bias"))
    bidirectional, nbk, md, off = _t5_backward_args(g.shape, num_buckets, query_length,
                                                    key_length, bidirectional, max_distance,
                                                    query_offset)
    dtype = g.dtype
    if g.ndim > 3:
        g = g.sum(axis=tuple(range(g.ndim - 3)), dtype=np.float64)   # no reshape(-1): size 0
    work = np.float64 if g.dtype == np.float64 else np.float32
    g = _checks.c_array(g)                      # float16: widened by the kernel
    _checks.check_result((nbk, g.shape[0]), work, "num_buckets", copies=2)
    out = np.empty((nbk, g.shape[0]), dtype=work)
    _core._t5_bias_backward(g, out, bidirectional, md, off)
    return out.astype(dtype, copy=False)


def relative_position_index(query_length: int, key_length: int,
                            max_relative_position: int) -> np.ndarray:
    """Shaw et al. / tensor2tensor relative position indices, int64 ``(q, k)``.

    ``index[i, j] = clip(j - q_pos_i, -K, K) + K`` with ``K =
    max_relative_position`` and the queries at the last ``query_length`` key
    positions, ``q_pos_i = key_length - query_length + i``.  Indexes a table of
    ``2K + 1`` rows (Shaw et al.'s clipping; the "Positional Encodings in
    Transformer Models" tutorial's ``RelativePositionalEncoding`` without it).

    Examples
    --------
    >>> import posemb
    >>> posemb.relative_position_index(3, 3, 1)
    array([[1, 2, 2],
           [0, 1, 2],
           [0, 0, 1]])
    >>> posemb.relative_position_index(1, 4, 2)      # one decoding step
    array([[0, 0, 1, 2]])
    """
    q = _length(query_length, "query_length")
    k = _length(key_length, "key_length")
    K = _length(max_relative_position, "max_relative_position")
    _checks.check_result((q, k), np.int64, "query_length and key_length")
    out = np.empty((q, k), dtype=np.int64)
    _core._shaw_index(out, K)
    return out


def relative_embeddings(table: Any, query_length: int, key_length: int) -> np.ndarray:
    """Gather Shaw relative embeddings: ``table[relative_position_index(q, k, K)]``.

    ``table`` has ``2K + 1`` rows (``K = max_relative_position``).  Rows of
    the output are copied as whole runs of consecutive table rows.

    Returns
    -------
    numpy.ndarray
        ``(query_length, key_length, dim)``, dtype of ``table``.

    Examples
    --------
    >>> import numpy as np, posemb
    >>> table = np.arange(5 * 2, dtype=np.float32).reshape(5, 2)   # K = 2
    >>> e = posemb.relative_embeddings(table, 4, 4)
    >>> e.shape, bool((e == table[posemb.relative_position_index(4, 4, 2)]).all())
    ((4, 4, 2), True)
    """
    table = _float_array(table, "table", 2)
    if table.shape[0] % 2 != 1:
        raise ValueError(
            f"table must have 2*max_relative_position + 1 (odd) rows, got {table.shape[0]}")
    q = _length(query_length, "query_length")
    k = _length(key_length, "key_length")
    _checks.check_result((q, k, table.shape[1]), table.dtype, "query_length and key_length")
    out = np.empty((q, k, table.shape[1]), dtype=table.dtype)
    _core._shaw_embed(table, out)
    return out


def _shaw_backward_args(shape: tuple[int, ...], max_relative_position: Any,
                        query_length: Any, key_length: Any) -> int:
    """relative_embeddings_backward's arguments checked against grad's shape: K."""
    K = _length(max_relative_position, "max_relative_position")
    q = _length(query_length, "query_length")
    k = _length(key_length, "key_length")
    if len(shape) != 3 or tuple(shape[:2]) != (q, k):
        raise ValueError(
            f"grad must have shape (query_length={q}, key_length={k}, dim), got {tuple(shape)}")
    return K


def shaw_backward_bf16_bits(grad: np.ndarray, max_relative_position: int, query_length: int,
                            key_length: int) -> np.ndarray:
    """relative_embeddings_backward of a bfloat16 gradient given as bit
    patterns (uint16, as posemb.torch views it): the float32 table gradient
    (sums in float64, rounded once; torch rounds it to bfloat16)."""
    K = _shaw_backward_args(grad.shape, max_relative_position, query_length, key_length)
    _checks.check_result((2 * K + 1, grad.shape[2]), np.float32, "max_relative_position",
                         copies=2)
    g = _checks.c_array(grad)
    out = np.empty((2 * K + 1, g.shape[2]), dtype=np.float32)
    _core._shaw_embed_backward_bf16(g, out)
    return out


def relative_embeddings_backward(grad: Any, max_relative_position: int,
                                 query_length: int, key_length: int) -> np.ndarray:
    """Gradient of :func:`relative_embeddings` with respect to the table.

    A scatter-add of ``grad`` (``(q, k, dim)``) into ``2K + 1`` rows, summed in
    float64 and rounded once (float16 is computed in float32).

    Examples
    --------
    >>> import numpy as np, posemb
    >>> g = posemb.relative_embeddings_backward(np.ones((3, 3, 1)), 1, 3, 3)
    >>> g[:, 0]                                   # 3 cells at each clip, 3 on the diagonal
    array([3., 3., 3.])
    """
    g = np.asarray(_checks.float_operand(grad, "grad"))
    K = _shaw_backward_args(g.shape, max_relative_position, query_length, key_length)
    dtype = g.dtype
    work = np.float64 if dtype == np.float64 else np.float32
    g = _checks.c_array(g)                      # float16: widened by the kernel
    _checks.check_result((2 * K + 1, g.shape[2]), work, "max_relative_position", copies=2)
    out = np.empty((2 * K + 1, g.shape[2]), dtype=work)
    _core._shaw_embed_backward(g, out)
    return out.astype(dtype, copy=False)

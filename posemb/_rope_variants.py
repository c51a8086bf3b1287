"""RoPE variants real checkpoints use: packed (varlen) batches, Meta <-> HF
weight layouts, multimodal (Qwen2-VL mrope) and axial 2-D RoPE, and xPos.

All tables are full width and rounded once from float64 angles, like
:func:`rope_cos_sin`, and every rotation goes through posemb's apply kernels
(half-split pairs ``(i, i + r/2)`` by default, ``interleaved=True`` for pairs
``(2i, 2i+1)``).
"""
from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from . import _checks
from . import _native as _core
from ._rope import _rotate_qk_unsqueezed, _tables, rope_inv_freq
from ._rope_scaling import rope_scaling_parameters
from ._threads import new_output

__all__ = [
    "apply_rope_varlen",
    "convert_rope_layout",
    "mrope_cos_sin",
    "apply_multimodal_rotary_pos_emb",
    "axial_rope_cos_sin",
    "xpos_cos_sin",
]

# ---------------------------------------------------------------- varlen


def _check_varlen(cu: np.ndarray, offsets: np.ndarray | None, total: int, rows: int) -> None:
    """cu_seqlens (nseq + 1,) and offsets (nseq,) or None against x's total
    tokens and the tables' rows (the C function checks again, unnamed)."""
    if cu[0] != 0:
        raise ValueError(f"cu_seqlens must start at 0, got {cu[0]}")
    bad = np.flatnonzero(cu[1:] < cu[:-1])
    if bad.size:
        w = int(bad[0]) + 1
        raise ValueError(f"cu_seqlens must be non-decreasing, got cu_seqlens[{w}] = {cu[w]} "
                         f"after {cu[w - 1]}")
    if cu[-1] != total or cu.max() > total:
        w = int(np.argmax(cu > total)) if cu.max() > total else cu.size - 1
        raise ValueError(f"cu_seqlens must end at total_tokens = x.shape[0] = {total} and "
                         f"never exceed it, got cu_seqlens[{w}] = {cu[w]}")
    if offsets is None:
        offsets = np.zeros(cu.size - 1, np.int64)
    if offsets.size and offsets.min() < 0:
        w = int(np.argmax(offsets < 0))
        raise ValueError(f"offset[{w}] = {offsets[w]} must be >= 0")
    lengths = np.diff(cu)
    # rows needed: offset + length, compared without overflow near 2**63
    over = offsets > rows - lengths
    if over.any():
        w = int(np.argmax(over))
        raise IndexError(f"cu_seqlens and offset: sequence {w} has {lengths[w]} tokens from "
                         f"position offset[{w}] = {offsets[w]} on, but cos/sin have only "
                         f"{rows} rows")


def apply_rope_varlen(x: Any, cu_seqlens: Any, cos: Any, sin: Any, *,
                      interleaved: bool = False, offset: Any = 0,
                      out: np.ndarray | None = None) -> np.ndarray:
    """RoPE on a packed variable-length batch (flash-attn's ``cu_seqlens``).

    ``x`` is ``(total_tokens, heads, dim)``: sequence ``b`` is the tokens
    ``cu_seqlens[b] .. cu_seqlens[b+1]-1`` and its positions restart at
    ``offset`` (an integer, or one per sequence: shape ``(batch,)``), so token
    ``t`` is rotated by table row ``offset[b] + t - cu_seqlens[b]``.  The
    tables are read in place -- no per-token table is gathered.  A token whose
    row is past the end of ``cos``/``sin`` is an IndexError, never a silent
    identity rotation.  The result equals :func:`apply_rope` with gathered
    tables bit for bit; ``out=x`` rotates in place.

    Parameters
    ----------
    x : array_like, float16/32/64, shape ``(total_tokens, heads, dim)``
    cu_seqlens : array_like of int, shape ``(batch + 1,)``
        ``0 = cu_seqlens[0] <= ... <= cu_seqlens[-1] = total_tokens``.
    cos, sin : array_like, shape ``(max_positions, r)``
        Full-width tables (as :func:`rope_cos_sin` of ``np.arange(max_positions)``),
        ``r`` even ``<= dim`` (partial rotary when ``r < dim``).
    interleaved : bool
    offset : int or array_like of int, shape ``(batch,)``
        First position of each sequence (KV-cache decoding of packed batches).
    out : numpy.ndarray, optional
        Same shape as ``x`` and of the result dtype (the promotion of ``x``,
        ``cos`` and ``sin``, as for :func:`apply_rope`).

    Examples
    --------
    >>> import numpy as np, posemb
    >>> x = np.ones((7, 2, 8), np.float32)               # 3 + 4 tokens, 2 heads
    >>> cu = np.array([0, 3, 7])
    >>> cos, sin = posemb.rope_cos_sin(np.arange(16), 8)
    >>> y = posemb.apply_rope_varlen(x, cu, cos, sin)
    >>> bool(np.array_equal(y[3:], posemb.apply_rope(x[3:], cos[:4, None], sin[:4, None])))
    True
    """
    interleaved = _checks.flag(interleaved, "interleaved")
    if not isinstance(x, np.ndarray):
        x = np.asarray(x)
    x = _checks.float_operand(x, "x")
    if x.ndim != 3:
        raise ValueError(f"x must have shape (total_tokens, heads, dim), got {x.shape}")
    tables = []
    for name, t in (("cos", cos), ("sin", sin)):
        t = _checks.float_operand(np.asarray(t), name)
        if t.ndim != 2:
            raise ValueError(f"{name} must have shape (max_positions, rotary_dim), got {t.shape}")
        tables.append(t)
    cos, sin = tables
    if sin.shape != cos.shape:
        raise ValueError(f"cos and sin must have the same shape, got {cos.shape} and {sin.shape}")
    r, d = cos.shape[1], x.shape[2]
    if r % 2:
        raise ValueError(f"cos/sin width must be even (pairs rotate together), got {r}")
    if r > d:
        raise ValueError(f"cos/sin width ({r}) must not exceed x's last axis ({d})")
    cu = _checks.int_vector(cu_seqlens, "cu_seqlens")
    if cu.size == 0:
        raise ValueError("cu_seqlens must have batch + 1 entries, got none")
    nseq = cu.size - 1
    if np.ndim(offset) == 0:
        start = _checks.size(offset, "offset")
        if start > np.iinfo(np.int64).max:
            raise IndexError(f"offset={start} is past the {cos.shape[0]} rows of cos/sin")
        offsets = None if start == 0 else np.full(nseq, start, dtype=np.int64)
    else:
        offsets = _checks.int_vector(offset, "offset")
        if offsets.shape != (nseq,):
            raise ValueError(
                f"offset must be an integer or have shape (batch,) = ({nseq},), got {offsets.shape}")
    _check_varlen(cu, offsets, x.shape[0], cos.shape[0])
    work = np.result_type(x.dtype, cos.dtype, sin.dtype).newbyteorder("=")
    xw = np.require(x, dtype=work, requirements=["A"])
    cw = np.require(cos, dtype=work, requirements=["A"])
    sw = np.require(sin, dtype=work, requirements=["A"])
    if out is None:
        out = new_output(xw, x.shape, work)
        target = out
    else:
        if not isinstance(out, np.ndarray):
            raise TypeError(f"out must be a numpy.ndarray, got {type(out).__name__}")
        if out.dtype.newbyteorder("=") != work:     # byte-swapped: written via a temporary
            raise TypeError(f"out must have the result dtype {work}, got {out.dtype}")
        if out.shape != x.shape:
            raise ValueError(f"out must have x's shape {x.shape}, got {out.shape}")
        if not out.flags.writeable:
            raise ValueError("out must be writeable")
        same_view = (out.ctypes.data == xw.ctypes.data and out.strides == xw.strides)
        if (not out.flags.aligned or not out.dtype.isnative
                or (not same_view and np.may_share_memory(out, xw))
                or np.may_share_memory(out, cw) or np.may_share_memory(out, sw)):
            target = np.empty(x.shape, dtype=work)  # overlap other than exact in-place
        else:
            target = out
    _core._rope_varlen(xw, cu, offsets, cw, sw, bool(interleaved), False, target)
    if target is not out:
        out[...] = target
    return out

# ---------------------------------------------------------------- layouts


def convert_rope_layout(weight: Any, num_heads: int, *, to: str = "half",
                        rotary_dim: int | None = None) -> np.ndarray:
    """Permute a q/k projection's rows between Meta (interleaved) and HF (half-split) order.

    Meta's llama checkpoints rotate pairs ``(2i, 2i+1)`` of each head;
    transformers rotates ``(i, i + head_dim/2)``.  HF's
    ``convert_llama_weights_to_hf.py`` reconciles them by permuting the rows of
    ``wq``/``wk`` within each head (``permute``: ``view(heads, head_dim//2, 2,
    in).transpose(1, 2)``), so that half-split RoPE on ``x @ W_hf.T`` equals
    interleaved RoPE on ``x @ W_meta.T`` with the features of each head
    reordered the same way (and ``q . k`` unchanged).  ``to="half"`` is that
    permutation; ``to="interleaved"`` its inverse.

    Parameters
    ----------
    weight : array_like, shape ``(num_heads * head_dim, ...)``
        A ``(out_features, in_features)`` weight or an ``(out_features,)`` bias.
    num_heads : int
        Heads in this projection (``num_key_value_heads`` for ``wk``).
    to : ``"half"`` or ``"interleaved"``
    rotary_dim : int, optional
        Partial rotary: permute only the first ``rotary_dim`` rows of each head.

    Returns
    -------
    numpy.ndarray
        A new array with the rows permuted.

    Examples
    --------
    >>> import numpy as np, posemb
    >>> w = np.arange(8.0)[:, None]                  # 2 heads of head_dim 4
    >>> posemb.convert_rope_layout(w, 2)[:, 0]
    array([0., 2., 1., 3., 4., 6., 5., 7.])
    >>> back = posemb.convert_rope_layout(posemb.convert_rope_layout(w, 2), 2, to="interleaved")
    >>> bool(np.array_equal(back, w))
    True
    """
    w = np.asarray(weight)
    if w.ndim == 0:
        raise ValueError("weight must have at least one dimension (rows = output features)")
    heads = _checks.size(num_heads, "num_heads", minimum=1)
    if not isinstance(to, str) or to not in ("half", "interleaved"):
        raise ValueError(f"to must be 'half' or 'interleaved', got {to!r}")
    rows = w.shape[0]
    if rows % heads:
        raise ValueError(f"weight's {rows} rows do not split into num_heads={heads} heads")
    head_dim = rows // heads
    if rotary_dim is None:
        if head_dim % 2:
            raise ValueError(f"weight's head_dim ({head_dim}) must be even")
        r = head_dim
    else:
        r = _checks.even_size(rotary_dim, "rotary_dim", minimum=2)
        if r > head_dim:
            raise ValueError(f"rotary_dim ({r}) must not exceed head_dim ({head_dim})")
    half = r // 2
    perm = np.arange(head_dim)
    interleaved_rows = np.arange(r).reshape(half, 2).T.reshape(-1)  # 0, 2, 4, ..., 1, 3, 5, ...
    if to == "half":
        perm[:r] = interleaved_rows
    else:
        perm[:r] = np.argsort(interleaved_rows)
    index = (np.arange(heads)[:, None] * head_dim + perm[None, :]).reshape(-1)
    return w[index]

# ---------------------------------------------------------------- sectioned tables


def _sectioned_tables(positions: Sequence[np.ndarray], inv_freqs: Sequence[np.ndarray],
                      interleaved: bool, dtype: np.dtype,
                      attention: float = 1.0) -> tuple[np.ndarray, np.ndarray]:
    """Full-width tables whose consecutive frequency bands use their own positions.

    Band ``j`` (``inv_freqs[j]``, at ``positions[j]``) fills pairs
    ``sum(len(inv_freqs[:j])) ..``; all positions arrays have one shape.
    """
    h = sum(len(f) for f in inv_freqs)
    shape = positions[0].shape
    n = positions[0].size
    _checks.check_result(shape + (2 * h,), dtype, "positions", copies=2)
    cos = np.empty((n, 2 * h), dtype=dtype)
    sin = np.empty((n, 2 * h), dtype=dtype)
    # row blocks: the per-band tables and position copies are temporaries
    rows = _checks.block_rows(2 * 2 * h * 8 + 8 * len(positions), n)
    for r0 in range(0, n, rows):
        r1 = min(n, r0 + rows)
        a = 0
        for pos, inv in zip(positions, inv_freqs):
            w = len(inv)
            if w == 0:
                continue
            c, s = _tables(np.asarray(pos.flat[r0:r1]), inv, interleaved, dtype, attention)
            if interleaved:
                cos[r0:r1, 2 * a:2 * (a + w)] = c
                sin[r0:r1, 2 * a:2 * (a + w)] = s
            else:
                cos[r0:r1, a:a + w], cos[r0:r1, h + a:h + a + w] = c[:, :w], c[:, w:]
                sin[r0:r1, a:a + w], sin[r0:r1, h + a:h + a + w] = s[:, :w], s[:, w:]
            a += w
    return cos.reshape(shape + (2 * h,)), sin.reshape(shape + (2 * h,))


def _sections(mrope_section: Any, dim: int) -> list[int]:
    if isinstance(mrope_section, (str, bytes)) or not isinstance(mrope_section, Sequence):
        try:
            mrope_section = list(np.asarray(mrope_section).reshape(-1))
        except Exception:
            raise TypeError("mrope_section must be a sequence of integers") from None
    sections = [_checks.size(s, "mrope_section") for s in mrope_section]
    if not sections:
        raise ValueError("mrope_section must have at least one section")
    if sum(sections) != dim // 2:
        raise ValueError(
            f"mrope_section {sections} must sum to dim // 2 = {dim // 2}, got {sum(sections)}")
    return sections


def _mrope_interleaved_axes(sections: list[int]) -> np.ndarray:
    """Qwen3-VL's interleaved M-RoPE: the position axis of each frequency band.

    ``Qwen3VLTextRotaryEmbedding.recomposition_frequencies``: band ``j`` uses
    height when ``j % 3 == 1`` and ``j < 3 * sections[1]``, width when
    ``j % 3 == 2`` and ``j < 3 * sections[2]``, else time.
    """
    if len(sections) != 3:
        raise ValueError(f"interleaved M-RoPE needs 3 sections (t, h, w), got {sections}")
    j = np.arange(sum(sections))
    axes = np.zeros(j.shape, np.intp)
    axes[(j % 3 == 1) & (j < 3 * sections[1])] = 1
    axes[(j % 3 == 2) & (j < 3 * sections[2])] = 2
    return axes


def mrope_cos_sin(positions: Any, dim: int, mrope_section: Any, base: float = 10000.0, *,
                  interleaved: bool = False, dtype: Any = np.float32, scaling: Any = None,
                  max_position_embeddings: int | None = None,
                  mrope_interleaved: bool = False) -> tuple[np.ndarray, np.ndarray]:
    """Multimodal RoPE tables (Qwen2-VL ``mrope_section``).

    ``positions`` has shape ``(3, ..., seq)``: temporal, height and width
    position ids (one row per section; text tokens repeat the same id three
    times).  The ``dim // 2`` frequency bands ``base ** (-2i/dim)`` are split
    into consecutive sections of ``mrope_section`` (e.g. ``[16, 24, 24]`` for
    head_dim 128), section ``j`` rotating at ``positions[j]``; in the
    half-split layout both halves use the same split, exactly what Qwen2-VL's
    ``apply_multimodal_rotary_pos_emb`` selects from its ``(3, batch, seq,
    dim)`` tables.

    Parameters
    ----------
    positions : array_like of int, shape ``(len(mrope_section), ..., seq)``
    dim : int
        head_dim; even.
    mrope_section : sequence of int
        Bands per position axis, summing to ``dim // 2``.
    base, interleaved, dtype, scaling, max_position_embeddings
        As for :func:`rope_cos_sin`.
    mrope_interleaved : bool
        Qwen3-VL's interleaved M-RoPE (``"mrope_interleaved": true``): bands
        cycle t, h, w, t, h, w, ... (h and w only within ``3 * section``),
        instead of consecutive sections.

    Returns
    -------
    (cos, sin) : numpy.ndarray
        Each of shape ``positions.shape[1:] + (dim,)``: broadcast them over
        heads (``cos[:, None]`` for ``(batch, heads, seq, dim)``) and use
        :func:`apply_rope`.

    Examples
    --------
    >>> import numpy as np, posemb
    >>> pos = np.stack([np.zeros(6, int), np.arange(6) // 3, np.arange(6) % 3])[:, None]  # (3, 1, 6)
    >>> cos, sin = posemb.mrope_cos_sin(pos, 128, [16, 24, 24], base=1e6)
    >>> cos.shape
    (1, 6, 128)
    >>> q = np.ones((1, 4, 6, 128), np.float32)
    >>> posemb.apply_rope(q, cos[:, None], sin[:, None]).shape
    (1, 4, 6, 128)
    """
    dim = _checks.even_size(dim, "dim")
    sections = _sections(mrope_section, dim)
    dt = _checks.float_dtype(dtype)
    pos = _checks.integer_array(positions, "positions")
    if pos.ndim < 1 or pos.shape[0] != len(sections):
        raise ValueError(
            f"positions must have shape ({len(sections)}, ..., seq), one row per mrope_section "
            f"entry, got {pos.shape}")
    pos = _checks.positions_array(pos, row_bytes=-(-2 * dim * dt.itemsize // len(sections)))
    seq_len = int(_checks.unique_view(pos).max()) + 1 if pos.size else None
    inv, attn = rope_scaling_parameters(dim, base, scaling,
                                        max_position_embeddings=max_position_embeddings,
                                        seq_len=seq_len)
    interleaved = _checks.flag(interleaved, "interleaved")
    if _checks.flag(mrope_interleaved, "mrope_interleaved"):
        axes = _mrope_interleaved_axes(sections)
        cols = np.repeat(axes, 2) if interleaved else np.concatenate([axes, axes])
        cos = np.empty(pos.shape[1:] + (dim,), dt)
        sin = np.empty(pos.shape[1:] + (dim,), dt)
        for a in range(3):
            c, s_ = _tables(pos[a], inv, interleaved, dt, attn)
            cos[..., cols == a] = c[..., cols == a]
            sin[..., cols == a] = s_[..., cols == a]
        return cos, sin
    bounds = np.cumsum([0] + sections)
    bands = [inv[bounds[j]:bounds[j + 1]] for j in range(len(sections))]
    return _sectioned_tables([pos[j] for j in range(len(sections))], bands,
                             interleaved, dt, attn)


def apply_multimodal_rotary_pos_emb(q: Any, k: Any, cos: Any, sin: Any, mrope_section: Any,
                                    unsqueeze_dim: int = 1) -> tuple[Any, Any]:
    """Drop-in for Qwen2-VL's ``apply_multimodal_rotary_pos_emb``.

    ``cos``/``sin`` are the per-axis tables HF's rotary embedding returns for
    ``(3, batch, seq)`` position ids, shape ``(3, batch, seq, head_dim)``;
    section ``j`` of the frequency bands (in both halves) is taken from
    ``cos[j]``, then a new axis goes in at ``unsqueeze_dim`` and the
    half-split rotation is applied to ``q`` and ``k``.
    :func:`mrope_cos_sin` builds the selected tables directly.

    Examples
    --------
    >>> import numpy as np, posemb
    >>> pos = np.tile(np.arange(5), (3, 1, 1))                   # text: t = h = w
    >>> cos, sin = posemb.rope_cos_sin(pos, 16)                  # (3, 1, 5, 16)
    >>> q = np.ones((1, 2, 5, 16), np.float32)
    >>> qe, ke = posemb.apply_multimodal_rotary_pos_emb(q, q, cos, sin, [2, 3, 3])
    >>> c1, s1 = posemb.rope_cos_sin(np.arange(5), 16)
    >>> bool(np.array_equal(qe, posemb.apply_rope(q, c1, s1)))
    True
    """
    cos = np.asarray(_checks.float_operand(cos, "cos"))
    sin = np.asarray(_checks.float_operand(sin, "sin"))
    if cos.ndim < 2 or cos.shape != sin.shape:
        raise ValueError(
            f"cos and sin must have one shape (sections, ..., head_dim), got {cos.shape} and "
            f"{sin.shape}")
    dim = cos.shape[-1]
    if dim % 2:
        raise ValueError(f"cos/sin width must be even, got {dim}")
    sections = _sections(mrope_section, dim)
    if cos.shape[0] < len(sections):
        raise ValueError(
            f"cos must have at least len(mrope_section) = {len(sections)} tables on axis 0, "
            f"got {cos.shape[0]}")
    h = dim // 2
    cs = np.empty(cos.shape[1:], dtype=cos.dtype)
    sn = np.empty(sin.shape[1:], dtype=sin.dtype)
    a = 0
    for j, w in enumerate(sections):
        for lo in (a, h + a):
            cs[..., lo:lo + w] = cos[j, ..., lo:lo + w]
            sn[..., lo:lo + w] = sin[j, ..., lo:lo + w]
        a += w
    return _rotate_qk_unsqueezed(q, k, cs, sn, unsqueeze_dim)

# ---------------------------------------------------------------- axial


def axial_rope_cos_sin(positions: Any, dim: int, base: float = 10000.0, *,
                       interleaved: bool = False,
                       dtype: Any = np.float32) -> tuple[np.ndarray, np.ndarray]:
    """Axial RoPE tables for image patches: each axis rotates its share of the features.

    ``positions`` is ``(..., n_axes)`` integer coordinates -- ``(row, col)`` for
    2-D patches.  The ``dim // 2`` pairs are split into ``n_axes`` equal
    consecutive groups; group ``j`` rotates at ``positions[..., j]`` with the
    frequencies of a RoPE of width ``dim / n_axes``
    (``base ** (-2i / (dim/n_axes))``).  In the half-split layout with
    ``(row, col)`` this is Qwen2-VL's vision RoPE; in the interleaved layout
    with ``(col, row)`` it is RoPE-Mixer/rope-vit's ``compute_axial_cis``
    (``x`` on the first half of the features, ``y`` on the second).

    Parameters
    ----------
    positions : array_like of int, shape ``(..., n_axes)``
    dim : int
        head_dim; a multiple of ``2 * n_axes``.
    base : float
    interleaved : bool
    dtype : float16, float32 or float64

    Returns
    -------
    (cos, sin) : numpy.ndarray
        Each of shape ``positions.shape[:-1] + (dim,)``; use with :func:`apply_rope`.

    Examples
    --------
    >>> import numpy as np, posemb
    >>> rows, cols = np.indices((4, 6))                           # a 4 x 6 patch grid
    >>> grid = np.stack([rows.ravel(), cols.ravel()], axis=-1)    # (24, 2), row-major
    >>> cos, sin = posemb.axial_rope_cos_sin(grid, 64, base=100.0)
    >>> cos.shape
    (24, 64)
    >>> x = np.ones((12, 24, 64), np.float32)                     # (heads, patches, head_dim)
    >>> posemb.apply_rope(x, cos, sin).shape
    (12, 24, 64)
    """
    dim = _checks.even_size(dim, "dim")
    dt = _checks.float_dtype(dtype)
    pos = _checks.integer_array(positions, "positions")
    if pos.ndim < 1 or pos.shape[-1] < 1:
        raise ValueError(f"positions must have shape (..., n_axes), got {pos.shape}")
    axes = pos.shape[-1]
    pos = _checks.positions_array(pos, row_bytes=-(-2 * dim * dt.itemsize // axes))
    if dim % (2 * axes):
        raise ValueError(
            f"dim ({dim}) must be a multiple of 2 * n_axes = {2 * axes} (each axis rotates "
            f"whole pairs)")
    inv = rope_inv_freq(dim // axes, base)
    return _sectioned_tables([pos[..., j] for j in range(axes)], [inv] * axes,
                             _checks.flag(interleaved, "interleaved"), dt)

# ---------------------------------------------------------------- xPos


def xpos_cos_sin(positions: Any, dim: int, base: float = 10000.0, *,
                 scale_base: float = 512.0, center: float = 0.0,
                 interleaved: bool = False, dtype: Any = np.float32,
                 ) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """xPos tables: RoPE with a per-feature decay on queries and its inverse on keys.

    With ``zeta_i = (2i + 0.4 dim) / (1.4 dim)`` and ``power = (p - center) /
    scale_base``, queries use ``cos * zeta_i ** power`` and ``sin * zeta_i **
    power``, keys the same with ``zeta_i ** -power`` (Sun et al., "A
    Length-Extrapolatable Transformer"; torchscale ``XPOS``, lucidrains'
    ``RotaryEmbedding(use_xpos=True)``).  ``q . k`` then decays as
    ``zeta ** ((p_q - p_k) / scale_base)``, whatever ``center`` is; the center
    only keeps the factors in range (lucidrains: ``seq_len // 2``;
    torchscale: ``-(-(seq_len + offset) // 2)``).  Everything is formed in
    float64 and rounded once.

    Returns
    -------
    (cos_q, sin_q, cos_k, sin_k) : numpy.ndarray
        Each of shape ``positions.shape + (dim,)``; rotate queries with
        ``apply_rope(q, cos_q, sin_q)`` and keys with ``apply_rope(k, cos_k, sin_k)``.

    Examples
    --------
    >>> import numpy as np, posemb
    >>> cq, sq, ck, sk = posemb.xpos_cos_sin(np.arange(8), 16, center=4, interleaved=True)
    >>> q = np.ones((2, 8, 16), np.float32)
    >>> posemb.apply_rope(q, cq, sq, interleaved=True).shape
    (2, 8, 16)
    >>> cos, sin = posemb.rope_cos_sin(np.arange(8), 16, interleaved=True)
    >>> bool(np.allclose(cq * ck, cos * cos))   # the decays cancel at equal positions
    True
    """
    dim = _checks.even_size(dim, "dim", minimum=2)
    dt = _checks.float_dtype(dtype)
    pos = _checks.positions_array(positions, row_bytes=4 * dim * dt.itemsize + 8)
    scale_base = _checks.positive_float(scale_base, "scale_base")
    center = _checks.finite_float(center, "center")
    interleaved = _checks.flag(interleaved, "interleaved")
    inv = rope_inv_freq(dim, base)
    zeta = (np.arange(0, dim, 2, dtype=np.float64) + 0.4 * dim) / (1.4 * dim)
    n = pos.size
    res = tuple(np.empty((n, dim), dtype=dt) for _ in range(4))
    flat = pos.reshape(-1)
    # float64 work in row blocks (about ten (rows, dim) temporaries)
    rows = _checks.block_rows(10 * 8 * dim, n)
    for r0 in range(0, n, rows):
        p = flat[r0:r0 + rows]
        cos, sin = _tables(p, inv, interleaved, np.dtype(np.float64))
        power = (p.astype(np.float64) - center) / scale_base
        with np.errstate(over="ignore", under="ignore"):
            scale = zeta ** power[..., None]
        scale = np.repeat(scale, 2, axis=-1) if interleaved else np.concatenate([scale, scale], -1)
        with np.errstate(over="ignore", under="ignore", invalid="ignore", divide="ignore"):
            out = (cos * scale, sin * scale, cos / scale, sin / scale)
        if not all(np.isfinite(t).all() for t in out):
            raise ValueError(
                f"positions - center reach {np.abs(power).max() * scale_base:.0f}: the xPos "
                f"factors overflow float64; choose center near the middle of the positions "
                f"(scale_base={scale_base})")
        for r, t in zip(res, out):
            with np.errstate(over="ignore"):
                r[r0:r0 + rows] = t
            if dt != np.float64 and not np.isfinite(r[r0:r0 + rows]).all():
                raise ValueError(
                    f"positions - center reach {np.abs(power).max() * scale_base:.0f}: the xPos "
                    f"factors overflow {dt}; choose center near the middle of the positions "
                    f"(scale_base={scale_base}) or a wider dtype")
    return tuple(r.reshape(pos.shape + (dim,)) for r in res)  # type: ignore[return-value]

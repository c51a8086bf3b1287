"""Rotary position embeddings (RoPE): tables, apply, and the RoPE module.

Conventions (see REFERENCE.md of the project):

* ``d`` is the head size, ``r <= d`` the rotary width (partial rotary when
  ``r < d``), ``h = r // 2`` pairs, ``inv_freq[i] = base ** (-2i / r)``.
* Tables are full width (``r`` features): the half-split layout (HF
  ``rotate_half``, GPT-NeoX) repeats the ``h`` values as ``concat(c, c)``,
  the interleaved layout (GPT-J, Meta llama) repeats each value twice.
* Angles are formed in float64 from integer positions and rounded once.
"""
from __future__ import annotations

import functools
import threading
from typing import Any

import numpy as np

from . import _checks, _core
from ._bfloat16 import accepts_bfloat16
from ._rope_scaling import frequency_regime, normalize_scaling, rope_scaling_parameters

__all__ = [
    "rope_inv_freq",
    "rope_cos_sin",
    "apply_rope",
    "apply_rotary_pos_emb",
    "rotate_half",
    "rotate_pairs",
    "neg_half",
    "precompute_freqs_cis",
    "apply_rotary_emb",
    "compute_frequencies",
    "RoPE",
]

# kinds as numbered by _core._rope_grid: half fwd, half back, inter fwd, inter back
_UFUNCS = (_core.rope_half_fwd, _core.rope_half_back, _core.rope_inter_fwd, _core.rope_inter_back)

#: below this many elements of x the gufunc is called directly (lowest overhead)
_GRID_MIN_SIZE = 1 << 15


def _kind(interleaved: bool, backward: bool) -> int:
    return 2 * _checks.flag(interleaved, "interleaved") + bool(backward)


def _grid_views(x: np.ndarray, cos: np.ndarray) -> tuple[Any, Any] | None:
    """How to see x as (B, H, S, d) with tables (B|1, 1, S|1, r), or None.

    Returns a function mapping arrays shaped like x (x itself, out) to the
    4-d view, and one mapping the tables (padded to x's rank) likewise.
    """
    k = x.ndim - 2
    tshape = (1,) * (x.ndim - cos.ndim) + cos.shape
    lead_t = tshape[:k]
    if k == 0:
        return (lambda a: a[None, None]), (lambda t: t[None, None])
    if k == 1:
        if lead_t[0] == 1:
            return (lambda a: a[None]), (lambda t: t[None])
        return (lambda a: a[:, None]), (lambda t: t[:, None])
    if k == 2:
        if lead_t[1] == 1:
            return (lambda a: a), (lambda t: t)
        if lead_t[0] == 1:
            return (lambda a: a.transpose(1, 0, 2, 3)), (lambda t: t.transpose(1, 0, 2, 3))
    return None


def _run(kind: int, x: Any, cos: Any, sin: Any, out: Any, name: str = "x") -> Any:
    """Apply rotary kernel `kind`: position-blocked C path for large plain
    ndarrays of one dtype, NumPy's gufunc machinery for everything else.
    Broadcasting and ``out`` are checked by NumPy; only when it refuses are
    they re-checked to name the argument (no cost on the success path)."""
    # out=x (in place) is checked by NumPy itself unless that could pass
    # silently: an empty x, or tables of higher rank than x
    if out is not None and (out is not x or x.size == 0 or len(cos.shape) > len(x.shape)
                            or len(sin.shape) > len(x.shape)):
        try:
            lead = np.broadcast_shapes(tuple(x.shape[:-1]), tuple(cos.shape[:-1]),
                                       tuple(sin.shape[:-1]))
        except ValueError:
            _explain_failure(x, cos, sin, None, name)
            raise
        out = _checks.out_operand(out, lead + (x.shape[-1],))
    if (type(x) is np.ndarray and x.size >= _GRID_MIN_SIZE and 2 <= x.ndim <= 4
            and type(cos) is np.ndarray and type(sin) is np.ndarray
            and cos.shape == sin.shape and cos.ndim <= x.ndim
            and cos.dtype == x.dtype and sin.dtype == x.dtype and x.dtype.isnative
            and x.flags.aligned and cos.flags.aligned and sin.flags.aligned
            and (out is None or (type(out) is np.ndarray and out.shape == x.shape
                                 and out.dtype == x.dtype and out.flags.writeable
                                 and out.flags.aligned
                                 and (out is x or not np.may_share_memory(out, x))
                                 and not np.may_share_memory(out, cos)
                                 and not np.may_share_memory(out, sin)))):
        try:
            ok = np.broadcast_shapes(cos.shape[:-1], x.shape[:-1]) == x.shape[:-1]
        except ValueError:
            ok = False
        views = _grid_views(x, cos) if ok else None
        if views is not None:
            xv, tv = views
            pad = (1,) * (x.ndim - cos.ndim)
            c4 = tv(cos.reshape(pad + cos.shape))
            s4 = tv(sin.reshape(pad + sin.shape))
            if out is None:
                out = np.empty_like(x)
            _core._rope_grid(kind, xv(x), c4, s4, xv(out))
            return out
    uf = _UFUNCS[kind]
    try:
        return uf(x, cos, sin) if out is None else uf(x, cos, sin, out=out)
    except (ValueError, TypeError):
        _explain_failure(x, cos, sin, out, name)
        raise


_BF16_UFUNCS = (_core.rope_bf16_half_fwd, _core.rope_bf16_half_back,
                _core.rope_bf16_inter_fwd, _core.rope_bf16_inter_back)


def _run_bf16_bits(kind: int, x: np.ndarray, cos: np.ndarray, sin: np.ndarray,
                   out: np.ndarray | None = None) -> np.ndarray:
    """Rotary kernel `kind` on bfloat16 values held as uint16 bit patterns
    (views of torch bfloat16 tensors or ml_dtypes arrays): computed in
    float32, rounded once to nearest even.  Returns a new uint16 array, or
    out."""
    r, d = cos.shape[-1], x.shape[-1]
    if sin.shape[-1] != r:
        raise ValueError(f"cos and sin must have the same width, got {r} and {sin.shape[-1]}")
    if r > d:
        raise ValueError(f"cos/sin width ({r}) must not exceed x's last axis ({d})")
    if r % 2:
        cos, sin = cos[..., :r - 1], sin[..., :r - 1]
    try:
        if out is None:
            return _BF16_UFUNCS[kind](x, cos, sin)
        return _BF16_UFUNCS[kind](x, cos, sin, out=out)
    except ValueError:
        _explain_failure(x, cos, sin, out, "x")
        raise


def _is_bf16(a: Any) -> bool:
    """An ml_dtypes bfloat16 ndarray?"""
    return type(a) is np.ndarray and a.dtype.name == "bfloat16" and a.dtype.itemsize == 2


_BF16_KEYWORDS = frozenset({"interleaved", "seq_axis", "out"})


def _bf16_kernel(backward: bool) -> Any:
    """Outermost wrapper of apply_rope / apply_rope_backward: bfloat16 x with
    bfloat16 tables (and no out, or a bfloat16 out) goes through the
    bfloat16 kernels in one pass -- float32 maths, rounded once, the bits
    of accepts_bfloat16's float32 round trip without its three extra
    passes; anything else goes on to the wrapped function unchanged."""
    def deco(fn: Any) -> Any:
        @functools.wraps(fn)
        def wrapper(*args: Any, **kwargs: Any) -> Any:
            if len(args) == 3 and _is_bf16(args[0]) and kwargs.keys() <= _BF16_KEYWORDS:
                x, cos, sin = args
                out = kwargs.get("out")
                if (_is_bf16(cos) and _is_bf16(sin) and x.ndim and cos.ndim and sin.ndim
                        and (out is None or (_is_bf16(out) and out.flags.writeable))):
                    cos, sin = _tables_along(x, cos, sin, kwargs.get("seq_axis"))
                    u16 = np.dtype(np.uint16)
                    kind = _kind(kwargs.get("interleaved", False), backward)
                    y = _run_bf16_bits(kind, x.view(u16), cos.view(u16), sin.view(u16),
                                       None if out is None else out.view(u16))
                    return out if out is not None else y.view(x.dtype)
            return fn(*args, **kwargs)
        return wrapper
    return deco


def rope_inv_freq(dim: int, base: float = 10000.0, *, scaling: Any = None,
                  max_position_embeddings: int | None = None,
                  seq_len: int | None = None) -> np.ndarray:
    """Inverse frequencies of RoPE, ``base ** (-2i / dim)`` for ``i < dim // 2``.

    Computed in float64 (HF and Meta compute them in float32).  With
    ``scaling`` (a Hugging Face ``rope_scaling`` dict) these are the scaled
    frequencies; see :func:`rope_scaling_parameters`, which also returns the
    attention factor.

    Parameters
    ----------
    dim : int
        Rotary width (head size, or ``rotary_dim`` for partial rotary); even.
    base : float
        The RoPE base (``rope_theta``), > 0.
    scaling : dict, optional
        ``{"rope_type": "linear" | "dynamic" | "yarn" | "longrope" | "llama3", ...}``.
    max_position_embeddings : int, optional
        Needed by ``dynamic``, and by ``yarn``/``longrope`` without
        ``original_max_position_embeddings`` in ``scaling``.
    seq_len : int, optional
        Current sequence length, for ``dynamic`` and ``longrope``.

    Returns
    -------
    numpy.ndarray
        float64, shape ``(dim // 2,)``.

    Examples
    --------
    >>> import posemb
    >>> posemb.rope_inv_freq(4, base=100.0)
    array([1. , 0.1])
    >>> posemb.rope_inv_freq(4, base=100.0, scaling={"type": "linear", "factor": 2.0})
    array([0.5 , 0.05])
    """
    return rope_scaling_parameters(dim, base, scaling,
                                   max_position_embeddings=max_position_embeddings,
                                   seq_len=seq_len)[0]


def _tables(positions: np.ndarray, inv_freq: np.ndarray, interleaved: bool,
            dtype: np.dtype, attention_scale: float = 1.0,
            width: int | None = None) -> tuple[np.ndarray, np.ndarray]:
    """Full-width (cos, sin) for int64 positions of any shape (checked).

    ``width`` odd (``2 * len(inv_freq) + 1``): the last column is cos 1, sin 0,
    the unpaired feature passing through unchanged (TorchLean's total RoPE).
    """
    if width is not None and width % 2:
        cos, sin = _tables(positions, inv_freq, interleaved, dtype, attention_scale)
        one = np.ones(positions.shape + (1,), dtype=cos.dtype)
        return (np.concatenate((cos, one), axis=-1),
                np.concatenate((sin, np.zeros_like(one)), axis=-1))
    flat = _checks.c_array(positions.reshape(-1))
    inv = _checks.c_array(inv_freq, np.float64)
    width = 2 * inv.shape[0]
    work = np.float64 if dtype == np.float16 else dtype
    cos = np.empty((flat.shape[0], width), dtype=work)
    sin = np.empty((flat.shape[0], width), dtype=work)
    _core._rope_table(flat, inv, float(attention_scale), bool(interleaved), cos, sin)
    shape = positions.shape + (width,)
    if work is not dtype:  # float16: round once, from float64
        cos, sin = cos.astype(dtype), sin.astype(dtype)
    return cos.reshape(shape), sin.reshape(shape)


@accepts_bfloat16(dtype_arg="dtype")
def rope_cos_sin(positions: Any, dim: int, base: float = 10000.0, *,
                 interleaved: bool = False, dtype: Any = np.float32,
                 scaling: Any = None, max_position_embeddings: int | None = None,
                 seq_len: int | None = None,
                 precision: str = "exact") -> tuple[np.ndarray, np.ndarray]:
    """Full-width RoPE tables ``(cos, sin)`` for integer positions.

    The angle ``p * inv_freq[i]`` is formed in float64 and cos/sin are rounded
    once to ``dtype``, so the tables agree with float64 truth to within float32
    rounding at any position (HF/Meta's float32 angles drift by ~1e-3 rad
    near p = 32k).

    Parameters
    ----------
    positions : array_like of int
        Positions ``>= 0``, any shape.
    dim : int
        Rotary width, ``>= 0``.  Odd: ``dim // 2`` pairs with frequencies
        ``base ** (-2i / dim)``, and a last column of cos 1, sin 0 (the
        unpaired feature passes through, as TorchLean's RoPE spec defines it).
    base : float
        RoPE base (``rope_theta``).
    interleaved : bool
        False: half-split layout ``concat(c, c)`` (HF ``rotate_half``);
        True: each value repeated twice (GPT-J / Meta).
    dtype : float16, float32 or float64
    scaling : dict, optional
        A Hugging Face ``rope_scaling`` dict (see :func:`rope_scaling_parameters`);
        the yarn/longrope attention factor multiplies cos and sin, as HF does.
    max_position_embeddings : int, optional
        The model's context length, for the scaling types that need it.
    seq_len : int, optional
        Current sequence length for ``dynamic``/``longrope``; default
        ``positions.max() + 1``, which is what HF's ``dynamic_rope_update`` uses.
    precision : {"exact", "float32", "bfloat16"}
        ``"exact"`` (default): float64 angles, rounded once.  ``"float32"``:
        transformers'/Meta's float32 recipe (float32 inverse frequencies and
        angles, bit-equal to theirs; cos/sin within one float32 ulp of
        PyTorch's).  ``"bfloat16"``: the Go walk-through's bfloat16 recipe
        (position 8191 stored as 8160).  See ``posemb._rope_precision``.

    Returns
    -------
    (cos, sin) : numpy.ndarray
        Each of shape ``positions.shape + (dim,)``.

    Examples
    --------
    >>> import numpy as np, posemb
    >>> cos, sin = posemb.rope_cos_sin(np.arange(3), 4)
    >>> cos.shape, cos.dtype
    ((3, 4), dtype('float32'))
    >>> bool(np.allclose(cos[1], np.cos([1.0, 0.01, 1.0, 0.01])))
    True
    >>> yarn = {"rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": 32768}
    >>> cos, sin = posemb.rope_cos_sin(np.arange(3), 128, 1e6, scaling=yarn)
    >>> round(float(cos[0, 0]), 4)                  # attention factor 0.1 ln 4 + 1
    1.1386
    """
    dt = _checks.float_dtype(dtype)
    pos = _checks.positions_array(positions)
    if seq_len is None and pos.size:
        seq_len = int(pos.max()) + 1
    if precision != "exact":
        from . import _rope_precision
        _rope_precision.check_precision(precision)
        rope_scaling_parameters(dim, base, scaling,  # validates every argument
                                max_position_embeddings=max_position_embeddings)
        return _rope_precision.framework_cos_sin(
            pos, dim, float(base), normalize_scaling(scaling),
            interleaved=_checks.flag(interleaved, "interleaved"), dtype=dt, precision=precision,
            max_position_embeddings=max_position_embeddings, seq_len=seq_len)
    inv, attn = rope_scaling_parameters(dim, base, scaling,
                                        max_position_embeddings=max_position_embeddings,
                                        seq_len=seq_len)
    return _tables(pos, inv, _checks.flag(interleaved, "interleaved"), dt, attn, width=dim)


def _rope_operands(x: Any, cos: Any, sin: Any, name: str = "x") -> tuple[Any, Any, Any]:
    # fast path for the common case (a decode step is dominated by this):
    # three ndarrays of float16/32/64 (any byte order), each with an axis
    if not (type(x) is np.ndarray and type(cos) is np.ndarray and type(sin) is np.ndarray
            and x.dtype.char in "efd" and cos.dtype.char in "efd"
            and sin.dtype.char in "efd" and x.ndim and cos.ndim and sin.ndim):
        x = _checks.float_operand(x, name)
        cos = _checks.float_operand(cos, "cos")
        sin = _checks.float_operand(sin, "sin")
        if len(x.shape) == 0:
            raise ValueError(f"{name} must have at least one dimension (features last)")
        for tname, t in (("cos", cos), ("sin", sin)):
            if len(t.shape) == 0:
                raise ValueError(f"{tname} must have at least one dimension (features last)")
    r, d = cos.shape[-1], x.shape[-1]
    if sin.shape[-1] != r:
        raise ValueError(f"cos and sin must have the same width, got {r} and {sin.shape[-1]}")
    if r > d:
        raise ValueError(f"cos/sin width ({r}) must not exceed {name}'s last axis ({d})")
    if r % 2:
        # the unpaired last feature passes through unchanged (TorchLean's
        # total RoPE): rotate the r - 1 paired features, copy the rest
        cos, sin = cos[..., :r - 1], sin[..., :r - 1]
    return x, cos, sin


def _explain_failure(x: Any, cos: Any, sin: Any, out: Any, name: str) -> None:
    """After the gufunc refused its operands: raise an error naming the
    argument at fault, if it is a broadcasting or ``out`` problem."""
    try:
        lead = np.broadcast_shapes(tuple(x.shape[:-1]), tuple(cos.shape[:-1]),
                                   tuple(sin.shape[:-1]))
    except ValueError:
        raise ValueError(
            f"cos {tuple(cos.shape)} and sin {tuple(sin.shape)} must broadcast against "
            f"{name} {tuple(x.shape)} on all but the last axis") from None
    if out is not None:
        _checks.out_operand(out, lead + (x.shape[-1],))


def _tables_along(x: Any, cos: Any, sin: Any, seq_axis: Any) -> tuple[Any, Any]:
    """Tables whose position axis (their second to last) lines up with
    ``x``'s ``seq_axis``: singleton axes go in after it."""
    if seq_axis is None:
        return cos, sin
    ndim = len(x.shape)
    sa = _seq_axis(seq_axis, ndim)
    k = ndim - 2 - sa
    if k == 0:
        return cos, sin
    grow = (lambda t: t.reshape(tuple(t.shape[:-1]) + (1,) * k + tuple(t.shape[-1:]))
            if len(t.shape) >= 2 else t)
    return grow(cos), grow(sin)


def _seq_axis(seq_axis: Any, ndim: int) -> int:
    """``seq_axis`` as a non-negative axis of an ``ndim``-d array, not the
    feature axis (the last)."""
    a = _checks.size(seq_axis, "seq_axis", minimum=-(2**31))
    if not -ndim <= a < ndim:
        raise ValueError(
            f"seq_axis={seq_axis} is out of range for an array of {ndim} dimension(s)")
    a = a % ndim
    if a == ndim - 1:
        raise ValueError(f"seq_axis={seq_axis} is the feature axis (the last); it must differ")
    return a


@_bf16_kernel(backward=False)
@accepts_bfloat16("x", "cos", "sin")
def apply_rope(x: Any, cos: Any, sin: Any, *, interleaved: bool = False,
               seq_axis: int | None = None, out: np.ndarray | None = None) -> Any:
    """Rotate ``x`` by the tables: ``y = x*cos + rotate(x)*sin`` in one pass.

    A NumPy generalized ufunc over ``(d),(r),(r)->(d)``: ``cos``/``sin`` broadcast
    against ``x`` on all but the last axis.  ``r < d`` is partial rotary (the
    first ``r`` features rotate, the rest are copied).  With ``interleaved=False``
    pairs are ``(i, i + r/2)`` (HF ``rotate_half``); with ``True`` they are
    ``(2i, 2i+1)`` (GPT-J, Meta).  ``out=x`` works in place.  float16 is
    computed in float32 and rounded once.  For float32/float64 the result
    equals the PyTorch formula bit for bit given the same tables.

    Parameters
    ----------
    x : array_like, float16/32/64, shape ``(..., d)``
    cos, sin : array_like, shape broadcastable to ``(..., r)``, ``r <= d``
        An odd ``r`` (tables of :func:`rope_cos_sin` with an odd ``dim``):
        feature ``r - 1`` has no partner and passes through unchanged.
    interleaved : bool
    seq_axis : int, optional
        The axis of ``x`` that the tables' position axis (their second to
        last) runs along.  Default: the second to last, i.e. ``x`` is
        ``(..., seq, d)`` as in HF's ``(batch, heads, seq, head_dim)``; pass
        ``seq_axis=1`` for Meta's / flash-attn's ``(batch, seq, heads, head_dim)``.
    out : numpy.ndarray, optional

    Examples
    --------
    >>> import numpy as np, posemb
    >>> x = np.ones((2, 5, 8), np.float32)           # (heads, seq, head_dim)
    >>> cos, sin = posemb.rope_cos_sin(np.arange(5), 8)
    >>> y = posemb.apply_rope(x, cos, sin)
    >>> y.shape, bool(np.allclose(np.linalg.norm(y, axis=-1), np.sqrt(8)))
    ((2, 5, 8), True)
    >>> xb = np.ones((1, 5, 2, 8), np.float32)       # (batch, seq, heads, head_dim)
    >>> bool(np.array_equal(posemb.apply_rope(xb, cos, sin, seq_axis=1)[0, :, 1], y[1]))
    True
    """
    x, cos, sin = _rope_operands(x, cos, sin)
    cos, sin = _tables_along(x, cos, sin, seq_axis)
    return _run(_kind(interleaved, False), x, cos, sin, out)


@_bf16_kernel(backward=True)
@accepts_bfloat16("grad", "cos", "sin")
def apply_rope_backward(grad: Any, cos: Any, sin: Any, *, interleaved: bool = False,
                        seq_axis: int | None = None, out: np.ndarray | None = None) -> Any:
    """Gradient of :func:`apply_rope` with respect to ``x`` (its adjoint).

    For tables made by :func:`rope_cos_sin` this is the inverse rotation
    (the forward formula with ``sin -> -sin``).

    Examples
    --------
    >>> import numpy as np, posemb
    >>> x = np.random.default_rng(0).standard_normal((4, 8))
    >>> cos, sin = posemb.rope_cos_sin(np.arange(4), 8, dtype=np.float64)
    >>> y = posemb.apply_rope(x, cos, sin)
    >>> bool(np.allclose(posemb.apply_rope_backward(y, cos, sin), x))
    True
    """
    grad, cos, sin = _rope_operands(grad, cos, sin, "grad")
    cos, sin = _tables_along(grad, cos, sin, seq_axis)
    return _run(_kind(interleaved, True), grad, cos, sin, out, "grad")


@accepts_bfloat16("q", "k", "cos", "sin")
def apply_rotary_pos_emb(q: Any, k: Any, cos: Any, sin: Any, position_ids: Any = None,
                         unsqueeze_dim: int = 1) -> tuple[Any, Any]:
    """Drop-in for Hugging Face's ``apply_rotary_pos_emb``.

    ``cos``/``sin`` (usually ``(batch, seq, head_dim)``) get a new axis at
    ``unsqueeze_dim`` so they broadcast against ``q``/``k`` of shape
    ``(batch, heads, seq, head_dim)``; then the half-split rotation is applied
    to both.  ``position_ids`` is accepted and unused, as in HF.

    Examples
    --------
    >>> import numpy as np, posemb
    >>> q = np.ones((1, 4, 6, 8), np.float32); k = np.ones((1, 2, 6, 8), np.float32)
    >>> cos, sin = posemb.rope_cos_sin(np.arange(6)[None], 8)   # (1, 6, 8)
    >>> qe, ke = posemb.apply_rotary_pos_emb(q, k, cos, sin)
    >>> qe.shape, ke.shape
    ((1, 4, 6, 8), (1, 2, 6, 8))
    """
    del position_ids  # unused, as in transformers
    q = _checks.float_operand(q, "q")
    k = _checks.float_operand(k, "k")
    cos = _checks.float_operand(cos, "cos")
    sin = _checks.float_operand(sin, "sin")
    return _rotate_qk_unsqueezed(q, k, cos, sin, unsqueeze_dim)


def _rotate_qk_unsqueezed(q: Any, k: Any, cos: Any, sin: Any,
                          unsqueeze_dim: Any) -> tuple[Any, Any]:
    """HF's convention: a new axis at ``unsqueeze_dim`` of cos/sin, then the
    half-split rotation of q and k (shared by the multimodal drop-in)."""
    unsqueeze_dim = _checks.size(unsqueeze_dim, "unsqueeze_dim", minimum=-(2**31))
    if unsqueeze_dim >= 2**31:    # np.expand_dims: OverflowError (C int), naming nothing
        raise ValueError(f"unsqueeze_dim={unsqueeze_dim} is out of range for cos/sin")
    try:
        cos = np.expand_dims(cos, unsqueeze_dim)
        sin = np.expand_dims(sin, unsqueeze_dim)
    except np.exceptions.AxisError as e:
        raise ValueError(f"unsqueeze_dim={unsqueeze_dim} is out of range for cos/sin: {e}") from None
    q, cos, sin = _rope_operands(q, cos, sin, "q")
    k, cos, sin = _rope_operands(k, cos, sin, "k")
    return _run(0, q, cos, sin, None, "q"), _run(0, k, cos, sin, None, "k")


def rotate_half(x: Any) -> Any:
    """HF's ``rotate_half``: ``concat(-x[..., h:], x[..., :h])`` on the last axis.

    Examples
    --------
    >>> import numpy as np, posemb
    >>> posemb.rotate_half(np.array([1.0, 2.0, 3.0, 4.0]))
    array([-3., -4.,  1.,  2.])
    """
    x = _checks.float_operand(x, "x")
    if len(x.shape) == 0:
        raise ValueError("x must have at least one dimension")
    if x.shape[-1] % 2:
        raise ValueError(f"x's last axis must have even length, got {x.shape[-1]}")
    return _core.rotate_half(x)


def rotate_pairs(x: Any) -> np.ndarray:
    """TorchLean's ``rotatePairs``: ``(x0, x1, x2, x3, ...) -> (-x1, x0, -x3, x2, ...)``.

    The interleaved counterpart of :func:`rotate_half` (GPT-J's
    ``rotate_every_two``): each pair ``(x_2i, x_2i+1)`` is multiplied by
    ``[[0, -1], [1, 0]]``.  Total, as the spec defines it: with an odd last
    axis the unpaired last entry is left unchanged.  So
    ``x * cos + rotate_pairs(x) * sin`` with interleaved tables from
    :func:`rope_cos_sin` is :func:`apply_rope` with ``interleaved=True``.

    Examples
    --------
    >>> import numpy as np, posemb
    >>> posemb.rotate_pairs(np.array([1.0, 2.0, 3.0, 4.0, 5.0]))
    array([-2.,  1., -4.,  3.,  5.])
    """
    x = _checks.float_operand(x, "x")
    if len(x.shape) == 0:
        raise ValueError("x must have at least one dimension")
    x = np.asarray(x)
    p = 2 * (x.shape[-1] // 2)
    out = np.empty_like(x)
    np.negative(x[..., 1:p:2], out=out[..., 0:p:2])
    out[..., 1:p:2] = x[..., 0:p:2]
    out[..., p:] = x[..., p:]
    return out


def neg_half(x: Any, axis: int = -1) -> Any:
    """PositionalEmbeddings.jl's ``neg_half``: :func:`rotate_half` along ``axis``.

    The Julia docstring says it "negates the second half"; what it computes
    (and what this computes) is ``concat(-second_half, first_half)``.

    Examples
    --------
    >>> import numpy as np, posemb
    >>> posemb.neg_half(np.array([[1.0, 2.0], [3.0, 4.0]]), axis=0)
    array([[-3., -4.],
           [ 1.,  2.]])
    """
    x = _checks.float_operand(x, "x")
    ndim = len(x.shape)
    axis = _checks.size(axis, "axis", minimum=-(2**31))
    if not -ndim <= axis < ndim:
        raise ValueError(f"axis {axis} is out of range for an array of {ndim} dimension(s)")
    if x.shape[axis] % 2:
        raise ValueError(f"x's axis {axis} must have even length, got {x.shape[axis]}")
    return _core.rotate_half(x, axes=[(axis,), (axis,)])


def precompute_freqs_cis(dim: int, end: int, theta: float = 10000.0) -> np.ndarray:
    """Meta llama's ``precompute_freqs_cis``: ``exp(1j * t * inv_freq)``.

    Angles in float64, rounded once to complex64.

    Returns
    -------
    numpy.ndarray
        complex64, shape ``(end, dim // 2)``.

    Examples
    --------
    >>> import posemb
    >>> f = posemb.precompute_freqs_cis(8, 16)
    >>> f.shape, f.dtype
    ((16, 4), dtype('complex64'))
    """
    theta = _checks.positive_float(theta, "theta")
    inv = rope_inv_freq(dim, theta)
    end = _checks.size(end, "end")
    cos, sin = _tables(np.arange(end, dtype=np.int64), inv, True, np.dtype(np.float64))
    out = np.empty((end, dim // 2), dtype=np.complex64)
    out.real = cos[:, 0::2]
    out.imag = sin[:, 0::2]
    return out


def apply_rotary_emb(xq: Any, xk: Any, freqs_cis: Any) -> tuple[np.ndarray, np.ndarray]:
    """Meta llama's ``apply_rotary_emb`` (interleaved pairs, complex tables).

    ``xq``/``xk`` are ``(batch, seq, heads, head_dim)`` (any rank >= 2 with the
    sequence on axis 1 and features last), ``freqs_cis`` is complex
    ``(seq, head_dim // 2)``.  Results have the dtypes of ``xq`` and ``xk``.

    Examples
    --------
    >>> import numpy as np, posemb
    >>> xq = np.ones((2, 5, 4, 8), np.float32); xk = np.ones((2, 5, 1, 8), np.float32)
    >>> fc = posemb.precompute_freqs_cis(8, 16)[:5]
    >>> yq, yk = posemb.apply_rotary_emb(xq, xk, fc)
    >>> yq.shape, yk.shape
    ((2, 5, 4, 8), (2, 5, 1, 8))
    """
    fc = np.asarray(freqs_cis)
    if fc.dtype.kind != "c":
        raise TypeError(f"freqs_cis must be a complex array, got dtype {fc.dtype}")
    if fc.ndim != 2:
        raise ValueError(f"freqs_cis must have shape (seq, head_dim // 2), got {fc.shape}")
    results = []
    for name, x in (("xq", xq), ("xk", xk)):
        x = _checks.float_operand(x, name)
        if len(x.shape) < 2:
            raise ValueError(f"{name} must have at least 2 dimensions (seq on axis 1), got {x.shape}")
        if x.shape[-1] % 2:
            raise ValueError(f"{name}'s last axis must be even, got {x.shape[-1]}")
        if fc.shape != (x.shape[1], x.shape[-1] // 2):
            raise ValueError(
                f"freqs_cis must have shape (x.shape[1], x.shape[-1] // 2) = "
                f"{(x.shape[1], x.shape[-1] // 2)} for {name} of shape {x.shape}, got {fc.shape}")
        work = np.promote_types(x.dtype, np.float32)
        table_shape = (1, fc.shape[0]) + (1,) * (len(x.shape) - 3) + (x.shape[-1],)
        cos = np.repeat(fc.real.astype(work), 2, axis=-1).reshape(table_shape)
        sin = np.repeat(fc.imag.astype(work), 2, axis=-1).reshape(table_shape)
        y = _run(2, x, cos, sin, None)
        results.append(y.astype(x.dtype, copy=False))
    return results[0], results[1]


def compute_frequencies(dim: int, seq_len: int, base: float = 10000.0) -> np.ndarray:
    """PositionalEmbeddings.jl's angle matrix in NumPy's row-major order.

    ``[p, i] = p * inv_freq[i]``, float64, shape ``(seq_len, dim // 2)`` (the
    Julia function returns the transpose, ``(dim ÷ 2, seq_len)``).

    Examples
    --------
    >>> import posemb
    >>> posemb.compute_frequencies(4, 3, base=100.0)
    array([[0. , 0. ],
           [1. , 0.1],
           [2. , 0.2]])
    """
    # the Julia package's RoPE takes even sizes only (its 0:2:dim-1 would
    # give an odd dim (dim + 1) / 2 frequencies)
    inv = rope_inv_freq(_checks.even_size(dim, "dim"), base)
    seq_len = _checks.size(seq_len, "seq_len")
    return np.outer(np.arange(seq_len, dtype=np.float64), inv)


class RoPE:
    """Rotary position embedding with cached tables (PositionalEmbeddings.jl's ``RoPE``).

    Parameters
    ----------
    head_size : int
        Features per head, ``>= 0``.  Odd: the last feature passes through
        unchanged (TorchLean's total RoPE).
    seq_len : int
        Positions cached up front; later positions extend the cache.
    base : float
        RoPE base (``rope_theta``).
    scale : float
        Multiplies the angle, as in the Julia package.
    interleaved : bool
        Pairs ``(2i, 2i+1)`` (GPT-J, Meta) instead of ``(i, i + r/2)`` (HF, NeoX).
    rotary_dim : int, optional
        Partial rotary: only the first ``rotary_dim`` features rotate, with
        frequencies built over ``rotary_dim`` (odd: its last feature passes through).
    dtype : float16, float32 or float64
        dtype of :attr:`cos_cached`/:attr:`sin_cached`.  Inputs of another
        float dtype use tables of their own dtype (made once and cached).
    scaling : dict, optional
        A Hugging Face ``rope_scaling`` dict (``linear``, ``dynamic``, ``yarn``,
        ``longrope``, ``llama3``; see :func:`rope_scaling_parameters`).  The
        yarn/longrope attention factor multiplies the tables.  ``dynamic`` and
        ``longrope`` pick their frequencies per call from the largest position
        + 1 (for ``dynamic``, transformers' module instead keeps the frequencies
        of the longest sequence it has seen; :class:`posemb.torch.RotaryEmbedding`
        does the same).
    max_position_embeddings : int, optional
        The model's context length, for the scaling types that need it.
    precision : {"exact", "float32", "bfloat16"}
        How the tables are formed (see :func:`rope_cos_sin`): exact by
        default, or transformers'/Meta's float32 recipe, or the Go
        walk-through's bfloat16 one.

    Notes
    -----
    ``rope(x, positions=None, *, offset=0, out=None)`` rotates ``x`` of shape
    ``(..., seq, head_size)`` -- the Julia ``(head_size, seq_len, nheads*batch)``
    in row-major order -- at positions ``offset .. offset+seq-1``, or at
    ``positions`` (integers broadcastable to ``x.shape[:-1]``).  ``offset`` may
    be an integer array of shape ``(batch,)``: sequence ``b`` (axis 0 of ``x``)
    is at ``offset[b] .. offset[b]+seq-1`` (batched decoding with a KV cache).
    The sequence axis is the second to last (HF's ``(batch, heads, seq,
    head_dim)``); for Meta's / flash-attn's ``(batch, seq, heads, head_dim)``
    pass ``seq_axis=1`` (to the call, :meth:`apply_qk` and :meth:`backward`):
    without it such an array would be rotated along its heads axis.

    Examples
    --------
    >>> import numpy as np, posemb
    >>> rope = posemb.RoPE(64, 1024)
    >>> x = np.random.default_rng(0).standard_normal((256, 100, 64), dtype=np.float32)
    >>> y = rope(x)
    >>> bool(np.allclose(rope.backward(y), x, atol=1e-5))
    True
    >>> rope(x[:, -1:], offset=99).shape          # KV-cache decoding step
    (256, 1, 64)
    >>> q = np.ones((3, 8, 1, 64), np.float32)      # (batch, heads, seq, head_size)
    >>> rope(q, offset=np.array([7, 40, 3])).shape  # each sequence at its own position
    (3, 8, 1, 64)
    >>> xm = np.ones((2, 100, 8, 64), np.float32)   # Meta: (batch, seq, heads, head_size)
    >>> rope(xm, seq_axis=1).shape
    (2, 100, 8, 64)
    """

    #: cache no more than this many bytes per table unless seq_len asks for more
    max_cache_bytes = 64 << 20

    def __init__(self, head_size: int, seq_len: int, *, base: float = 10000.0,
                 scale: float = 1.0, interleaved: bool = False,
                 rotary_dim: int | None = None, dtype: Any = np.float32,
                 scaling: Any = None, max_position_embeddings: int | None = None,
                 precision: str = "exact") -> None:
        from ._rope_precision import check_precision
        self.precision = check_precision(precision)
        self.head_size = _checks.size(head_size, "head_size")
        if rotary_dim is None:
            self.rotary_dim = self.head_size
        else:
            self.rotary_dim = _checks.size(rotary_dim, "rotary_dim")
            if self.rotary_dim > self.head_size:
                raise ValueError(
                    f"rotary_dim ({self.rotary_dim}) must not exceed head_size ({self.head_size})")
        self.seq_len = _checks.size(seq_len, "seq_len")
        self.base = _checks.positive_float(base, "base")
        self.scale = _checks.finite_float(scale, "scale")
        if self.precision != "exact" and self.scale != 1.0:
            raise ValueError(f"scale must be 1 with precision={self.precision!r} (the framework "
                             f"recipes have no angle scale), got {self.scale}")
        self.interleaved = _checks.flag(interleaved, "interleaved")
        self.dtype = _checks.float_dtype(dtype)
        if self.seq_len * self.rotary_dim * self.dtype.itemsize > np.iinfo(np.intp).max:
            raise MemoryError(f"a ({self.seq_len}, {self.rotary_dim}) {self.dtype.name} table "
                              "cannot be allocated")      # before a huge inv_freq is made
        self.scaling = normalize_scaling(scaling)
        # frequencies that do not depend on the sequence length (see
        # frequency_regime: only longrope and dynamic NTK switch)
        self._plain_frequencies = self.scaling["rope_type"] not in ("longrope", "dynamic")
        self.max_position_embeddings = (
            None if max_position_embeddings is None
            else _checks.size(max_position_embeddings, "max_position_embeddings", minimum=1))
        inv, attn = rope_scaling_parameters(self.rotary_dim, self.base, self.scaling,
                                            max_position_embeddings=self.max_position_embeddings)
        self.inv_freq = inv * self.scale
        #: multiplies cos and sin (yarn/longrope; 1.0 otherwise)
        self.attention_factor = attn
        self._freqs: dict[Any, tuple[np.ndarray, float]] = {None: (self.inv_freq, attn)}
        self._lock = threading.Lock()
        self._cache: dict[tuple[np.dtype, Any], tuple[np.ndarray, np.ndarray]] = {}
        self._cached_tables(self.dtype, self.seq_len)

    def __getstate__(self) -> dict[str, Any]:
        # The lock cannot be pickled and the tables are cheap to remake: a
        # pickled RoPE carries only its parameters and frequencies, so it
        # travels to multiprocessing (spawn), joblib and dask.distributed
        # workers, where the tables are made again, bit for bit the same.
        state = self.__dict__.copy()
        del state["_lock"], state["_cache"]
        return state

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)
        self._lock = threading.Lock()
        self._cache = {}
        self._cached_tables(self.dtype, self.seq_len)

    def __repr__(self) -> str:
        extra = ""
        if self.scaling["rope_type"] != "default":
            extra = (f", scaling={self.scaling!r}, "
                     f"max_position_embeddings={self.max_position_embeddings}")
        return (f"RoPE(head_size={self.head_size}, seq_len={self.seq_len}, base={self.base}, "
                f"scale={self.scale}, interleaved={self.interleaved}, "
                f"rotary_dim={self.rotary_dim}, dtype={self.dtype.name}{extra}"
                + (f", precision={self.precision!r}" if self.precision != "exact" else "") + ")")

    @property
    def cos_cached(self) -> np.ndarray:
        """The cached cos table, ``(cached_len, rotary_dim)`` (read-only view)."""
        return self._cached_tables(self.dtype, 0)[0]

    @property
    def sin_cached(self) -> np.ndarray:
        """The cached sin table, ``(cached_len, rotary_dim)`` (read-only view)."""
        return self._cached_tables(self.dtype, 0)[1]

    def _regime(self, seq_len: int) -> Any:
        """None, "long" (longrope) or a length (dynamic NTK past the context)."""
        return frequency_regime(self.scaling, self.max_position_embeddings, seq_len)

    @staticmethod
    def _cacheable(key: Any) -> bool:
        return key is None or key == "long"

    def _frequencies(self, key: Any, seq_len: int) -> tuple[np.ndarray, float]:
        got = self._freqs.get(key)
        if got is None:
            inv, attn = rope_scaling_parameters(
                self.rotary_dim, self.base, self.scaling,
                max_position_embeddings=self.max_position_embeddings, seq_len=seq_len)
            got = (inv * self.scale, attn)
            if self._cacheable(key):
                self._freqs[key] = got
        return got

    def _cached_tables(self, dtype: np.dtype, need: int,
                       key: Any = None) -> tuple[np.ndarray, np.ndarray]:
        """Tables of ``dtype`` with at least ``need`` rows (grown geometrically)."""
        tables = self._cache.get((dtype, key))
        if tables is not None and tables[0].shape[0] >= need:
            return tables
        with self._lock:
            tables = self._cache.get((dtype, key))
            have = 0 if tables is None else tables[0].shape[0]
            if have >= need and tables is not None:
                return tables
            rows = max(need, self.seq_len, min(2 * have, self._max_rows(dtype)))
            inv, attn = self._frequencies(key, need)
            cos, sin = self._make(np.arange(rows, dtype=np.int64), inv, attn, dtype, need)
            cos.flags.writeable = False
            sin.flags.writeable = False
            self._cache[(dtype, key)] = (cos, sin)
            return cos, sin

    def _max_rows(self, dtype: np.dtype) -> int:
        return max(self.seq_len,
                   self.max_cache_bytes // (max(self.rotary_dim, 1) * dtype.itemsize))

    def cos_sin(self, positions: Any = None, *, offset: int = 0, seq_len: int | None = None,
                dtype: Any = None) -> tuple[np.ndarray, np.ndarray]:
        """Tables ``(cos, sin)`` for ``positions`` (or ``offset .. offset+seq_len-1``).

        Examples
        --------
        >>> import posemb
        >>> cos, sin = posemb.RoPE(8, 16).cos_sin(offset=4, seq_len=2)
        >>> cos.shape
        (2, 8)
        """
        dt = self.dtype if dtype is None else _checks.float_dtype(dtype)
        if positions is None:
            if seq_len is None:
                raise TypeError("cos_sin needs positions or seq_len")
            n = _checks.size(seq_len, "seq_len")
            start = _checks.size(offset, "offset")
            return self._range_tables(dt, start, n)
        if _checks.size(offset, "offset") != 0 or seq_len is not None:
            raise ValueError("offset and seq_len apply only when positions is not given "
                             "(positions are absolute)")
        pos = _checks.positions_array(positions)
        return self._gather_tables(dt, pos)

    def _range_tables(self, dtype: np.dtype, start: int, n: int) -> tuple[np.ndarray, np.ndarray]:
        stop = start + n
        if stop > _checks.MAX_EXACT_POSITION:
            raise ValueError(f"offset + seq must be <= 2**53, got {stop}")
        key = self._regime(stop)
        if self._cacheable(key) and stop <= self._max_rows(dtype):
            cos, sin = self._cached_tables(dtype, stop, key)
            return cos[start:stop], sin[start:stop]
        # far beyond any sensible cache, or dynamic NTK frequencies of this
        # length: compute just these rows
        inv, attn = self._frequencies(key, stop)
        return self._make(np.arange(start, stop, dtype=np.int64), inv, attn, dtype, stop)

    def _gather_tables(self, dtype: np.dtype, pos: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        top = int(pos.max()) + 1 if pos.size else 0
        key = self._regime(top)
        if self._cacheable(key) and top <= self._max_rows(dtype):
            cos, sin = self._cached_tables(dtype, top, key)
            return cos[pos], sin[pos]
        inv, attn = self._frequencies(key, top)
        return self._make(pos, inv, attn, dtype, top)

    def _make(self, positions: np.ndarray, inv: np.ndarray, attn: float, dtype: np.dtype,
              seq_len: int) -> tuple[np.ndarray, np.ndarray]:
        """Tables for ``positions``: exact, or by the framework recipe of ``precision``."""
        if self.precision == "exact":
            return _tables(positions, inv, self.interleaved, dtype, attn, self.rotary_dim)
        from ._rope_precision import framework_cos_sin
        return framework_cos_sin(positions, self.rotary_dim, self.base, self.scaling,
                                 interleaved=self.interleaved, dtype=dtype,
                                 precision=self.precision,
                                 max_position_embeddings=self.max_position_embeddings,
                                 seq_len=seq_len)

    def _offset_positions(self, shape: tuple[int, ...], offset: Any, name: str) -> np.ndarray:
        """Positions ``offset[b] + s`` of shape ``(batch, 1, ..., seq)`` for ``shape``."""
        off = _checks.positions_array(offset, "offset")
        if off.ndim != 1:
            raise ValueError(
                f"offset must be an integer or an integer array of shape (batch,), "
                f"got shape {off.shape}")
        if len(shape) < 3:
            raise ValueError(
                f"offset of shape (batch,) needs {name} of shape (batch, ..., seq, head_size), "
                f"got {tuple(shape)}")
        if off.shape[0] != shape[0]:
            raise ValueError(
                f"offset has {off.shape[0]} entries but {name} has batch size {shape[0]} (axis 0)")
        seq = shape[-2]
        if off.size and int(off.max()) + seq > _checks.MAX_EXACT_POSITION:
            raise ValueError(f"offset + seq must be <= 2**53, got {int(off.max()) + seq}")
        return off.reshape((-1,) + (1,) * (len(shape) - 2)) + np.arange(seq, dtype=np.int64)

    def _tables_for(self, x: Any, positions: Any, offset: Any, name: str) -> tuple[np.ndarray, np.ndarray]:
        shape = tuple(x.shape)
        if len(shape) == 0 or shape[-1] != self.head_size:
            raise ValueError(
                f"{name}'s last axis must be head_size={self.head_size}, got shape {shape}")
        dt = np.dtype(x.dtype)
        if (positions is None and type(offset) is int and offset >= 0 and len(shape) >= 2
                and self._plain_frequencies):
            # fast path (a decode step): rows offset .. offset+seq of the cache
            stop = offset + shape[-2]
            tables = self._cache.get((dt, None))
            if tables is not None and tables[0].shape[0] >= stop:
                return tables[0][offset:stop], tables[1][offset:stop]
        if positions is None:
            if len(shape) < 2:
                raise ValueError(
                    f"{name} must have shape (..., seq, head_size) when positions is not given, "
                    f"got {shape}")
            if np.ndim(offset) == 0:
                start = _checks.size(offset, "offset")
                return self._range_tables(dt, start, shape[-2])
            return self._gather_tables(dt, self._offset_positions(shape, offset, name))
        if np.ndim(offset) != 0 or _checks.size(offset, "offset") != 0:
            raise ValueError("offset applies only when positions is not given "
                             "(positions are absolute)")
        pos = _checks.positions_array(positions)
        try:
            ok = np.broadcast_shapes(pos.shape, shape[:-1]) == shape[:-1]
        except ValueError:
            ok = False
        if not ok:
            raise ValueError(
                f"positions of shape {pos.shape} must broadcast to {name}.shape[:-1] = "
                f"{shape[:-1]}")
        return self._gather_tables(dt, pos)

    def _along(self, method: Any, x: Any, positions: Any, offset: Any, out: Any,
               seq_axis: Any, name: str) -> Any:
        """Run ``method`` on views of ``x`` (and ``positions``, ``out``) whose
        sequence axis is ``seq_axis`` moved to the second to last place; the
        result has ``x``'s own layout."""
        ndim = len(x.shape)
        sa = _seq_axis(seq_axis, ndim)
        if positions is not None:
            pos = _checks.positions_array(positions)
            try:
                pos = np.broadcast_to(pos, tuple(x.shape[:-1]))
            except ValueError:
                raise ValueError(
                    f"positions of shape {pos.shape} must broadcast to {name}.shape[:-1] = "
                    f"{tuple(x.shape[:-1])}") from None
            positions = np.moveaxis(pos, sa, -1)
        if out is None and isinstance(x, np.ndarray):
            out = np.empty(x.shape, dtype=x.dtype)
        if out is None:      # a ufunc-protocol array (dask): NumPy's moveaxis views
            return np.moveaxis(method(np.moveaxis(x, sa, -2), positions, offset=offset),
                               -2, sa)
        out = _checks.out_operand(out, tuple(x.shape), "out")
        method(np.moveaxis(x, sa, -2), positions, offset=offset, out=np.moveaxis(out, sa, -2))
        return out

    @accepts_bfloat16("x")
    def __call__(self, x: Any, positions: Any = None, *, offset: Any = 0,
                 seq_axis: int | None = None, out: np.ndarray | None = None) -> Any:
        """Rotate ``x`` (``(..., seq, head_size)``); see the class docstring."""
        x = _checks.float_operand(x, "x")
        if seq_axis is not None and _seq_axis(seq_axis, len(x.shape)) != len(x.shape) - 2:
            return self._along(self.__call__, x, positions, offset, out, seq_axis, "x")
        cos, sin = self._tables_for(x, positions, offset, "x")
        return _run(_kind(self.interleaved, False), x, cos, sin, out)

    forward = __call__

    @accepts_bfloat16("q", "k")
    def apply_qk(self, q: Any, k: Any, positions: Any = None, *, offset: Any = 0,
                 seq_axis: int | None = None, inplace: bool = False) -> tuple[Any, Any]:
        """Rotate queries and keys with one set of tables (grouped-query attention).

        ``q`` is ``(..., q_heads, seq, head_size)`` and ``k`` is
        ``(..., kv_heads, seq, head_size)``: the head counts may differ, the
        tables (from ``positions``, or ``offset`` -- an integer or a ``(batch,)``
        array) are made once and broadcast over both.  ``inplace=True`` rotates
        ``q`` and ``k`` in their own memory (no copies, no temporaries) and
        returns them.

        Examples
        --------
        >>> import numpy as np, posemb
        >>> rope = posemb.RoPE(64, 256)
        >>> q = np.ones((2, 32, 10, 64), np.float32)   # 32 query heads
        >>> k = np.ones((2, 8, 10, 64), np.float32)    # 8 key/value heads
        >>> qr, kr = rope.apply_qk(q, k, offset=np.array([0, 100]))
        >>> qr.shape, kr.shape
        ((2, 32, 10, 64), (2, 8, 10, 64))
        >>> qi, ki = rope.apply_qk(q, k, offset=np.array([0, 100]), inplace=True)
        >>> qi is q and bool(np.array_equal(q, qr))
        True
        """
        inplace = _checks.flag(inplace, "inplace")
        if inplace:
            for name, t in (("q", q), ("k", k)):
                if not isinstance(t, np.ndarray):
                    raise TypeError(f"inplace=True needs {name} to be a numpy.ndarray, "
                                    f"got {type(t).__name__}")
                if not t.dtype.isnative:   # float_operand would rotate a native copy
                    raise ValueError(f"inplace=True needs {name} in native byte order, "
                                     f"got {t.dtype}")
        if seq_axis is not None:
            qa = _seq_axis(seq_axis, len(np.shape(q)))
            ka = _seq_axis(seq_axis, len(np.shape(k)))
            if qa != len(np.shape(q)) - 2 or ka != len(np.shape(k)) - 2:
                if positions is not None:
                    pos = _checks.positions_array(positions)
                    try:
                        pos = np.broadcast_to(pos, tuple(np.shape(q)[:-1]))
                    except ValueError:
                        raise ValueError(
                            f"positions of shape {pos.shape} must broadcast to q.shape[:-1] "
                            f"= {tuple(np.shape(q)[:-1])}") from None
                    positions = np.moveaxis(pos, qa, -1)
                qv, kv = self.apply_qk(np.moveaxis(q, qa, -2), np.moveaxis(k, ka, -2),
                                       positions, offset=offset, inplace=inplace)
                if inplace:
                    return q, k
                return np.moveaxis(qv, -2, qa), np.moveaxis(kv, -2, ka)
        q = _checks.float_operand(q, "q")
        k = _checks.float_operand(k, "k")
        if len(k.shape) == 0 or k.shape[-1] != self.head_size:
            raise ValueError(
                f"k's last axis must be head_size={self.head_size}, got shape {tuple(k.shape)}")
        if (positions is None and len(q.shape) >= 2 and len(k.shape) >= 2
                and q.shape[-2] != k.shape[-2]):
            raise ValueError(
                f"q and k must have the same sequence length (axis -2) when positions is not "
                f"given, got q {tuple(q.shape)} and k {tuple(k.shape)}")
        if inplace:
            for name, t in (("q", q), ("k", k)):
                if not t.flags.writeable:
                    raise ValueError(f"inplace=True needs {name} to be writeable")
            try:
                shared = np.shares_memory(q, k, max_work=10**6)  # type: ignore[arg-type]
            except np.exceptions.TooHardError:
                shared = True
            if shared:
                raise ValueError("inplace=True needs q and k in separate memory")
        cos, sin = self._tables_for(q, positions, offset, "q")
        kshape = tuple(k.shape[:-1])
        try:
            ok = np.broadcast_shapes(cos.shape[:-1], kshape) == kshape
        except ValueError:
            ok = False
        if not ok:
            raise ValueError(
                f"the positions of q (tables of shape {cos.shape[:-1]}) must broadcast to "
                f"k.shape[:-1] = {kshape}")
        if np.dtype(k.dtype) == np.dtype(q.dtype):
            kcos, ksin = cos, sin
        else:
            kcos, ksin = self._tables_for(k, positions, offset, "k")
        kind = _kind(self.interleaved, False)
        if inplace:
            _run(kind, q, cos, sin, q)
            _run(kind, k, kcos, ksin, k)
            return q, k
        return _run(kind, q, cos, sin, None), _run(kind, k, kcos, ksin, None)

    def apply_varlen(self, x: Any, cu_seqlens: Any, *, offset: Any = 0,
                     out: np.ndarray | None = None) -> np.ndarray:
        """Rotate a packed ``(total_tokens, heads, head_size)`` batch from the cache.

        :func:`apply_rope_varlen` with this module's tables: positions restart
        at ``offset`` (an integer or one per sequence) at every
        ``cu_seqlens`` boundary; the cache grows to the longest sequence.

        Examples
        --------
        >>> import numpy as np, posemb
        >>> rope = posemb.RoPE(8, 16)
        >>> x = np.ones((7, 2, 8), np.float32)
        >>> y = rope.apply_varlen(x, np.array([0, 3, 7]), offset=np.array([10, 0]))
        >>> bool(np.array_equal(y[:3], rope(x[:3].transpose(1, 0, 2), offset=10).transpose(1, 0, 2)))
        True
        """
        from ._rope_variants import apply_rope_varlen

        if not isinstance(x, np.ndarray):
            x = np.asarray(x)
        x = _checks.float_operand(x, "x")
        if x.ndim != 3 or x.shape[-1] != self.head_size:
            raise ValueError(
                f"x must have shape (total_tokens, heads, head_size={self.head_size}), "
                f"got {x.shape}")
        cu = np.asarray(cu_seqlens)
        off = np.asarray(offset)
        need = 0
        if (cu.dtype.kind in "iu" and cu.ndim == 1 and cu.size > 1 and off.dtype.kind in "iu"
                and off.ndim <= 1 and (off.ndim == 0 or off.size == cu.size - 1)):
            lengths = np.diff(cu.astype(np.int64))
            top = off.astype(np.int64) + lengths
            # a valid cu_seqlens needs at most max(offset) + total_tokens rows; anything
            # else is left for apply_rope_varlen to report
            if lengths.min() >= 0 and off.min() >= 0 and top.max() <= off.max() + x.shape[0]:
                need = int(top.max())
        dt = np.dtype(x.dtype)
        if need > self._max_rows(dt) and cu[0] == 0 and cu[-1] == x.shape[0]:
            # offsets far past the cache: one gathered row per token (the rows
            # apply_rope_varlen would read), never a table from position 0
            if need > _checks.MAX_EXACT_POSITION:
                raise ValueError(f"offset + sequence length must be <= 2**53, got {need}")
            seq_of = np.repeat(np.arange(cu.size - 1), np.asarray(lengths, dtype=np.int64))
            starts = cu[:-1].astype(np.int64)
            pos = np.broadcast_to(off.astype(np.int64), (cu.size - 1,))[seq_of] + (
                np.arange(x.shape[0], dtype=np.int64) - starts[seq_of])
            cos, sin = self._gather_tables(dt, pos)
            return apply_rope_varlen(x, cu_seqlens, cos, sin, interleaved=self.interleaved,
                                     offset=starts, out=out)
        cos, sin = self._range_tables(dt, 0, need)
        return apply_rope_varlen(x, cu_seqlens, cos, sin, interleaved=self.interleaved,
                                 offset=offset, out=out)

    @accepts_bfloat16("grad")
    def backward(self, grad: Any, positions: Any = None, *, offset: Any = 0,
                 seq_axis: int | None = None, out: np.ndarray | None = None) -> Any:
        """Gradient of :meth:`__call__` with respect to ``x``: the inverse rotation.

        (With a yarn/longrope attention factor ``a`` the forward is ``a``
        times a rotation, and this, its adjoint, is ``a`` times the inverse.)

        Examples
        --------
        >>> import numpy as np, posemb
        >>> rope = posemb.RoPE(8, 4, dtype=np.float64)
        >>> g = np.ones((4, 8))
        >>> bool(np.allclose(rope(rope.backward(g)), g))
        True
        """
        grad = _checks.float_operand(grad, "grad")
        if seq_axis is not None and _seq_axis(seq_axis, len(grad.shape)) != len(grad.shape) - 2:
            return self._along(self.backward, grad, positions, offset, out, seq_axis, "grad")
        cos, sin = self._tables_for(grad, positions, offset, "grad")
        return _run(_kind(self.interleaved, True), grad, cos, sin, out, "grad")

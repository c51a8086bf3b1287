"""Rotary position embeddings (RoPE): tables, apply, and the RoPE module.

Conventions (Su et al., "RoFormer", arXiv:2104.09864; Hugging Face
``modeling_llama.py`` ``rotate_half``/``apply_rotary_pos_emb``; Meta llama
``model.py`` ``precompute_freqs_cis``/``apply_rotary_emb``):

* ``d`` is the head size, ``r <= d`` the rotary width (partial rotary when
  ``r < d``), ``h = r // 2`` pairs, ``inv_freq[i] = base ** (-2i / r)``.
* Tables are full width (``r`` features): the half-split layout (HF
  ``rotate_half``, GPT-NeoX) repeats the ``h`` values as ``concat(c, c)``,
  the interleaved layout (GPT-J, Meta llama) repeats each value twice.
* Angles are formed in float64 from integer positions and rounded once.
"""
from __future__ import annotations

import functools
from typing import Any

import numpy as np

from . import _checks
from . import _native as _core
from ._bfloat16 import accepts_bfloat16, is_bfloat16_array
from ._rope_scaling import normalize_scaling, rope_scaling_parameters
from ._threads import cached_output, may_cache, new_output

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
]

# by kind: half fwd, half back, inter fwd, inter back; each the gufunc
# (h,s,d),(s,r),(s,r)->(h,s,d): heads x positions blocked in C, on the pool
_UFUNCS = (_core.rope_half_fwd, _core.rope_half_back, _core.rope_inter_fwd, _core.rope_inter_back)


def _kind(interleaved: bool, backward: bool) -> int:
    return 2 * _checks.flag(interleaved, "interleaved") + bool(backward)


#: interleaved (a bool) -> forward / backward gufunc, for the fast road
_FAST_FWD = {False: _UFUNCS[0], True: _UFUNCS[2]}
_FAST_BACK = {False: _UFUNCS[1], True: _UFUNCS[3]}
_ND = np.ndarray
#: bytes touched below which a kernel runs on one thread (the C walk's rule)
_PARALLEL_MIN = int(_core.PARALLEL_MIN_BYTES)
_U16 = np.dtype(np.uint16)
#: the native float dtypes (NumPy's singletons: an identity test is enough)
_F16, _F32, _F64 = np.dtype(np.float16), np.dtype(np.float32), np.dtype(np.float64)


def _new_result(ufunc: Any, x: np.ndarray, cos: Any, sin: Any) -> np.ndarray:
    """``ufunc(x, cos, sin)``, a RoPE gufunc (x (..., h, s, d), tables
    (..., s, r)), into a new array laid out as x (see cached_output): the
    output cache's when large."""
    if not may_cache(x):
        return ufunc(x, cos, sin)
    shape = (x.shape if cos.ndim == 2
             else np.broadcast_shapes(x.shape[:-3], cos.shape[:-2]) + x.shape[-3:])
    return ufunc(x, cos, sin, out=cached_output(x, shape))


def _fast_road(ufuncs: dict[bool, Any], x: Any, cos: Any, sin: Any, interleaved: Any,
               seq_axis: Any, out: Any) -> Any:
    """The gufunc called directly, or None for the long road.

    A decode step (or a small array) is call overhead.  Plain native float
    ndarrays of one dtype, with no seq_axis or a valid int one, go to
    _fast_call."""
    if not (type(x) is _ND and type(cos) is _ND and type(sin) is _ND
            and (interleaved is False or interleaved is True)):
        return None
    dt = x.dtype
    if not ((dt is _F32 or dt is _F64 or dt is _F16) and cos.dtype is dt and sin.dtype is dt):
        return None
    k = _seq_shift(seq_axis, x.ndim)
    if k < 0:
        return None        # (the long road names what is wrong)
    return _fast_call(ufuncs[interleaved], x, cos, sin, out, k)


def _seq_shift(seq_axis: Any, nd: int) -> int:
    """How many axes before an ``nd``-d x's second to last its ``seq_axis``
    lies (0 for None), or -1 for anything but a plain int naming an axis
    other than the last: the fast roads' test, the long road's _seq_axis
    then names the fault."""
    if seq_axis is None:
        return 0
    if type(seq_axis) is not int or not -nd <= seq_axis < nd:
        return -1
    return nd - 2 - seq_axis % nd


def _fast_call(ufunc: Any, x: np.ndarray, cos: np.ndarray, sin: np.ndarray, out: Any,
               k: int = 0) -> Any:
    """ufunc (a RoPE gufunc, core (h, s, d), (s, r), (s, r)) on ndarrays x
    (..., d) and tables (..., r) with r even, of no more axes than x and
    broadcasting against it (once grown by k singleton axes after their
    position axis: _grow_tables), into a new array, in place (out=x, not
    empty) or into out, an ndarray of x's dtype and shape (x not empty).  x
    is seen as that grid without copying:

    * tables (..., s, r) along x's positions (axis -2), as HF's unsqueezed
      (batch, 1, seq, dim): a size-1 axis -3 is dropped and the gufunc
      broadcasts the leading ones against x's;
    * tables (..., s, 1, r) along x's axis -3, Meta's (batch, seq, heads,
      d) (seq_axis=1): x's last two axes but one swapped;
    * tables (..., 1, r) or (r,), one position for all of x's axis -2 (a
      decode step's tables for one position), where x is small enough for
      one thread: x seen with a new axis of length 1 as its positions (the
      C walk splits work by positions, of which there is then one; larger
      x takes the long road, which broadcasts the tables along x's).

    The caller has checked the dtypes.  Whatever the gufunc refuses
    (shapes, r > d, a read-only out, a result too large to allocate;
    tables that would make the result larger than out) returns None: the
    long road then checks again and names the argument."""
    cs = cos.shape
    if cs != sin.shape:
        return None
    if k == 1 and len(cs) == 2:
        # Meta's (s, r) tables along x's axis -3: cs stands for the grown
        # (s, 1, r), which view 1 would only reshape back
        cs = (cs[0], 1, cs[1])
    elif k:
        cos, sin = _grow_tables(cos, sin, k)
        cs = cos.shape
    n, nx = len(cs), x.ndim
    if not (1 <= n <= nx and nx >= 2 and not cs[-1] & 1):
        return None
    if out is not None and not (x.size and (out is x or (
            type(out) is _ND and out.dtype is x.dtype and out.shape == x.shape))):
        return None
    xs, given = x.shape, out
    if n == 1:
        cos, sin, cs, n = cos.reshape(1, -1), sin.reshape(1, -1), (1, cs[0]), 2
    # the view of x (0: as it is, 1: axes -2 and -3 swapped, 2: a new axis)
    view = (1 if n >= 3 and cs[-2] == 1 and cs[-3] == xs[-3] != 1 else 0 if cs[-2] == xs[-2]
            else 2 if cs[-2] == 1 and 2 * x.nbytes < _PARALLEL_MIN else -1)
    if view < 0 or (view == 0 and (nx < 3 or (n > 2 and cs[-3] != 1))):
        return None
    if view and out is None:
        if 0 in x.strides:      # a broadcast x: the long road asks if its result can be
            return None
        # a new array of x's shape, laid out as x (the gufunc's own, through
        # the views below, would be a view owning no memory); tables that
        # broadcast x up make the gufunc refuse it
        try:
            out = given = new_output(x)
        except MemoryError:
            return None
    if view == 0 and n > 2:
        # (leading axes of length 1 too: tables (s, r) make the result x's shape)
        t = cs[-2:] if cs[:-3].count(1) == n - 3 else cs[:-3] + cs[-2:]
        cos, sin = cos.reshape(t), sin.reshape(t)
    elif view == 1:
        if cos.ndim == n:
            cos, sin = cos.reshape(cs[:-2] + cs[-1:]), sin.reshape(cs[:-2] + cs[-1:])
        x, out = ((x.swapaxes(-2, -3),) * 2 if out is x
                  else (x.swapaxes(-2, -3), out.swapaxes(-2, -3)))
    elif view == 2:
        x, out = x[..., None, :], out[..., None, :]
    try:
        if out is None:
            return _new_result(ufunc, x, cos, sin)
        ufunc(x, cos, sin, out=out)
    except (ValueError, MemoryError):
        return None
    return given


def _apply(kind: int, x: Any, cos: Any, sin: Any, out: Any, name: str = "x",
           ufuncs: tuple[Any, ...] = _UFUNCS) -> Any:
    """Rotate x (..., d) by tables (..., r) broadcasting against it, through
    the gufunc of `kind` in `ufuncs` (_UFUNCS, or _BF16_UFUNCS for bfloat16
    bit patterns), whose core is a (heads, positions, features) grid.

    x is seen as that grid without copying: positions are its axis -2 when
    the tables vary along it, heads its axis -3 when they do not (or axis -2
    for the (batch, seq, heads, d) layout with tables (seq, 1, r)); other
    shapes run vector by vector (a 1 x 1 grid per vector).  NumPy does the
    rest: broadcasting, dtype loops, ``out=`` and copies of overlapping
    operands.  Broadcasting and ``out`` are checked by NumPy; only when it
    refuses are they re-checked to name the argument.
    """
    if out is None and type(cos) is _ND and type(sin) is _ND and may_cache(x):
        # a new output laid out as x, from the output cache when large
        # (cached_output), where shapes and dtypes are plain (else NumPy
        # allocates it, and names any error); bfloat16's bit patterns
        # (uint16) too
        try:
            lead = np.broadcast_shapes(x.shape[:-1], cos.shape[:-1], sin.shape[:-1])
            out = cached_output(x, lead + x.shape[-1:],
                                np.result_type(x.dtype, cos.dtype, sin.dtype))
        except (ValueError, TypeError, IndexError):
            out = None
    return _apply_to(kind, x, cos, sin, out, name, ufuncs)


def _apply_to(kind: int, x: Any, cos: Any, sin: Any, out: Any, name: str,
              ufuncs: tuple[Any, ...]) -> Any:
    # out=x (in place) is checked by NumPy itself unless that could pass
    # silently: an empty x, or tables of higher rank than x
    xs, cs = x.shape, cos.shape
    if out is not None and (out is not x or x.size == 0 or len(cs) > len(xs)
                            or len(sin.shape) > len(xs)):
        try:
            lead = np.broadcast_shapes(tuple(xs[:-1]), tuple(cs[:-1]), tuple(sin.shape[:-1]))
        except ValueError:
            _explain_failure(x, cos, sin, None, name)
            raise
        if ufuncs is _UFUNCS:
            out = _checks.out_operand(out, lead + (xs[-1],))
        else:    # bfloat16 bits (uint16): the same checks, on a float16 view
            _checks.out_operand(out.view(np.float16), lead + (xs[-1],))
    uf = ufuncs[kind]
    nx, nt = len(xs) - 1, len(cs) - 1
    try:
        if type(x) is np.ndarray and cs == sin.shape and nx >= 1:
            if nx >= 2 and nt == 1 and cs[0] == xs[-2]:    # the common case: no views
                return uf(x, cos, sin) if out is None else uf(x, cos, sin, out=out)
            n = max(nx, nt)
            lx = (1,) * (n - nx) + tuple(xs[:-1])
            lt = (1,) * (n - nt) + tuple(cs[:-1])
            xv = x[(None,) * (n - nx)]
            if n >= 2 and lt[-1] == 1 and lt[-2] == lx[-2] != 1 and lx[-1] != 1:
                # (batch, seq, heads, d) with tables (seq, 1, r): heads on -1
                c = cos.reshape(lt[:-1] + cs[-1:])
                s = sin.reshape(lt[:-1] + cs[-1:])
                if out is None:
                    out = np.empty(np.broadcast_shapes(lx, lt) + xs[-1:],
                                   np.result_type(x.dtype, cos.dtype, sin.dtype))
                uf(xv.swapaxes(-2, -3), c, s, out=out.swapaxes(-2, -3))
                return out
            # positions on axis -2 (x or the tables broadcast along it with
            # zero strides); heads on axis -3 if the tables do not vary
            # along it, else a new axis of length 1
            npos = lt[-1] if lx[-1] == 1 else lx[-1]       # broadcast
            heads = n >= 2 and lt[-2] == 1
            tshape = (lt[:-2] if heads else lt[:-1]) + (lt[-1], cs[-1])
            c, s = cos.reshape(tshape), sin.reshape(tshape)
            if not heads:
                xv = xv[..., None, :, :]
            if lt[-1] != npos:
                c = np.broadcast_to(c, tshape[:-2] + (npos, cs[-1]))
                s = np.broadcast_to(s, tshape[:-2] + (npos, cs[-1]))
            if lx[-1] != npos:
                xv = np.broadcast_to(xv, xv.shape[:-2] + (npos, xs[-1]))
            if out is None:
                y = uf(xv, c, s)
                return y if heads else y[..., 0, :, :]
            uf(xv, c, s, out=out if heads else out[..., None, :, :])
            return out
        # anything else (a dask array, tables of two shapes): vector by vector
        x, (cos, sin) = _checks.dask_operands(x, (cos, sin), (-1,))
        if out is None:
            return uf(x[..., None, None, :], cos[..., None, :], sin[..., None, :])[..., 0, 0, :]
        uf(x[..., None, None, :], cos[..., None, :], sin[..., None, :],
           out=out[..., None, None, :])
        return out
    except (ValueError, TypeError):
        _explain_failure(x, cos, sin, out, name)
        raise


_BF16_UFUNCS = (_core.rope_bf16_half_fwd, _core.rope_bf16_half_back,
                _core.rope_bf16_inter_fwd, _core.rope_bf16_inter_back)


def _run_bf16_bits(kind: int, x: np.ndarray, cos: np.ndarray, sin: np.ndarray,
                   out: np.ndarray | None = None) -> np.ndarray:
    """Rotary kernel `kind` on bfloat16 values held as uint16 bit patterns
    (views of torch bfloat16 tensors or ml_dtypes arrays): computed in
    float32, rounded once to nearest even, through the bfloat16 gufuncs
    (h,s,d),(s,r),(s,r)->(h,s,d) laid out by _apply.  Returns a new uint16
    array, or out."""
    cos, sin = _paired_tables(x, cos, sin, "x")
    result: np.ndarray = _apply(kind, x, cos, sin, out, "x", _BF16_UFUNCS)
    return result


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
            if len(args) == 3 and is_bfloat16_array(args[0]) and kwargs.keys() <= _BF16_KEYWORDS:
                x, cos, sin = args
                out = kwargs.get("out")
                if (is_bfloat16_array(cos) and is_bfloat16_array(sin)
                        and x.ndim and cos.ndim and sin.ndim
                        and (out is None or (is_bfloat16_array(out) and out.flags.writeable))):
                    seq_axis = kwargs.get("seq_axis")
                    cos, sin = _tables_along(x, cos, sin, seq_axis)
                    kind = _kind(kwargs.get("interleaved", False), backward)
                    xv, cv, sv = x.view(_U16), cos.view(_U16), sin.view(_U16)
                    ov = None if out is None else xv if out is x else out.view(_U16)
                    y = _fast_call(_BF16_UFUNCS[kind], xv, cv, sv, ov)
                    if y is None:
                        y = _run_bf16_bits(kind, xv, cv, sv, ov)
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
            dtype: np.dtype, attention_scale: float = 1.0, width: int | None = None, *,
            name: str = "positions",
            culprit: str = "base and scaling") -> tuple[np.ndarray, np.ndarray]:
    """Full-width (cos, sin) for int64 positions of any shape (checked >= 0).

    ``width`` odd (``2 * len(inv_freq) + 1``): the last column is cos 1, sin 0,
    the unpaired feature passing through unchanged (TorchLean's total RoPE).
    The result size is checked first (MemoryError naming ``name``);
    float16 tables are made from float64 in row blocks, so temporaries stay
    within ``_checks.BLOCK_BYTES``.
    """
    if width is not None and width % 2:
        n = positions.size
        _checks.check_result((n, width), dtype, name, copies=2, extra=8 * n,
                             what=f"the ({n}, {width}) {np.dtype(dtype).name} cos/sin tables")
        cos = np.empty((n, width), dtype=dtype)
        sin = np.empty((n, width), dtype=dtype)
        cos[:, -1], sin[:, -1] = 1, 0
        flat = positions.reshape(-1)
        rows = _checks.block_rows(2 * width * np.dtype(dtype).itemsize, n)
        for a in range(0, n, rows):     # the even part by row blocks: no full-size copy
            c, s = _tables(flat[a:a + rows], inv_freq, interleaved, dtype, attention_scale,
                           name=name, culprit=culprit)
            cos[a:a + rows, :-1], sin[a:a + rows, :-1] = c, s
        return cos.reshape(positions.shape + (width,)), sin.reshape(positions.shape + (width,))
    inv = _checks.c_array(inv_freq, np.float64)
    width = 2 * inv.shape[0]
    n = positions.size
    shape = positions.shape + (width,)
    _checks.check_result((n, width), dtype, name, copies=2, extra=8 * n,
                         what=f"the ({n}, {width}) {np.dtype(dtype).name} cos/sin tables")
    if n:
        _checks.angle_check(int(_checks.unique_view(positions).max()), inv, culprit)
    if not abs(attention_scale) <= float(np.finfo(dtype).max):
        raise ValueError(
            f"the attention factor {attention_scale!r} (scaling) overflows {np.dtype(dtype).name}")
    flat = _checks.c_array(positions.reshape(-1), np.int64)
    cos = np.empty((n, width), dtype=dtype)
    sin = np.empty((n, width), dtype=dtype)
    if dtype != np.float16:
        _core._rope_table(flat, inv, float(attention_scale), bool(interleaved), cos, sin)
    else:   # round once, from float64 made block by block
        rows = _checks.block_rows(16 * width, n)
        c64 = np.empty((rows, width))
        s64 = np.empty((rows, width))
        for a in range(0, n, rows):
            b = min(n, a + rows)
            _core._rope_table(flat[a:b], inv, float(attention_scale), bool(interleaved),
                              c64[:b - a], s64[:b - a])
            cos[a:b] = c64[:b - a]
            sin[a:b] = s64[:b - a]
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
    width = _checks.size(dim, "dim")
    pos = _checks.positions_array(positions, row_bytes=2 * width * dt.itemsize + 8)
    if seq_len is None and pos.size:
        seq_len = int(_checks.unique_view(pos).max()) + 1
    if pos.size == 0:
        # no rows: no (dim // 2,) frequencies either (dim may be 2**31)
        _checks.positive_float(base, "base")
        normalize_scaling(scaling)
        _checks.flag(interleaved, "interleaved")
        if precision != "exact":
            from . import _rope_precision
            _rope_precision.check_precision(precision)
        return np.empty(pos.shape + (width,), dt), np.empty(pos.shape + (width,), dt)
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
    if type(x) is np.ndarray and 0 in x.strides:     # a broadcast x: is its result possible?
        _checks.check_result(x.shape, x.dtype, name)
    cos, sin = _paired_tables(x, cos, sin, name)
    return x, cos, sin


def _paired_tables(x: Any, cos: Any, sin: Any, name: str) -> tuple[Any, Any]:
    """The tables' width checked against x's, cut to the paired features."""
    r, d = cos.shape[-1], x.shape[-1]
    if sin.shape[-1] != r:
        raise ValueError(f"cos and sin must have the same width, got {r} and {sin.shape[-1]}")
    if r > d:
        raise ValueError(f"cos/sin width ({r}) must not exceed {name}'s last axis ({d})")
    if r % 2:
        # the unpaired last feature passes through unchanged (TorchLean's
        # total RoPE): rotate the r - 1 paired features, copy the rest
        cos, sin = cos[..., :r - 1], sin[..., :r - 1]
    return cos, sin


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
    return _grow_tables(cos, sin, ndim - 2 - _seq_axis(seq_axis, ndim))


def _grow_tables(cos: Any, sin: Any, k: int) -> tuple[Any, Any]:
    """Tables (..., s, r) with k singleton axes after s (their position axis
    k axes before x's second to last); tables of one axis as they are."""
    if k == 0:
        return cos, sin
    ones = (1,) * k
    cs, ss = tuple(cos.shape), tuple(sin.shape)
    return (cos.reshape(cs[:-1] + ones + cs[-1:]) if len(cs) >= 2 else cos,
            sin.reshape(ss[:-1] + ones + ss[-1:]) if len(ss) >= 2 else sin)


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


def apply_rope(x: Any, cos: Any, sin: Any, *, interleaved: bool = False,
               seq_axis: int | None = None, out: np.ndarray | None = None) -> Any:
    """Rotate ``x`` by the tables: ``y = x*cos + rotate(x)*sin`` in one pass.

    ``cos``/``sin`` broadcast against ``x`` on all but the last axis (the
    kernels are NumPy generalized ufuncs over ``(heads, seq, d)`` grids).
    ``r < d`` is partial rotary (the first ``r`` features rotate, the rest
    are copied).  With ``interleaved=False``
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
        Without it, a new array of ``x``'s shape is laid out in memory as
        ``x`` is (NumPy's ``order='K'``; torch's elementwise ops keep the
        input's strides too): HF's ``q.view(b, s, h, d).transpose(1, 2)``
        gets a result of its strides, written as ``x`` is read.

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
    y = _fast_road(_FAST_FWD, x, cos, sin, interleaved, seq_axis, out)
    if y is not None:
        return y
    return _apply_rope_any(x, cos, sin, interleaved=interleaved, seq_axis=seq_axis, out=out)


@_bf16_kernel(backward=False)
@accepts_bfloat16("x", "cos", "sin")
def _apply_rope_any(x: Any, cos: Any, sin: Any, *, interleaved: bool = False,
                    seq_axis: int | None = None, out: np.ndarray | None = None) -> Any:
    """:func:`apply_rope` for any operands: checks, bfloat16, views."""
    x, cos, sin = _rope_operands(x, cos, sin)
    cos, sin = _tables_along(x, cos, sin, seq_axis)
    return _apply(_kind(interleaved, False), x, cos, sin, out)


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
    y = _fast_road(_FAST_BACK, grad, cos, sin, interleaved, seq_axis, out)
    if y is not None:
        return y
    return _apply_rope_backward_any(grad, cos, sin, interleaved=interleaved,
                                    seq_axis=seq_axis, out=out)


@_bf16_kernel(backward=True)
@accepts_bfloat16("grad", "cos", "sin")
def _apply_rope_backward_any(grad: Any, cos: Any, sin: Any, *, interleaved: bool = False,
                             seq_axis: int | None = None,
                             out: np.ndarray | None = None) -> Any:
    """:func:`apply_rope_backward` for any operands: checks, bfloat16, views."""
    grad, cos, sin = _rope_operands(grad, cos, sin, "grad")
    cos, sin = _tables_along(grad, cos, sin, seq_axis)
    return _apply(_kind(interleaved, True), grad, cos, sin, out, "grad")


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
    if type(unsqueeze_dim) is int and type(cos) is _ND and type(sin) is _ND:
        # plain arrays (a decode step is call overhead): the new axis by a
        # reshape, then the fast road for q and k (both, or the long road)
        cs, ss, nd = cos.shape, sin.shape, cos.ndim
        a = unsqueeze_dim if unsqueeze_dim >= 0 else unsqueeze_dim + nd + 1
        if 0 <= a <= nd and cs == ss:
            c, s = cos.reshape(cs[:a] + (1,) + cs[a:]), sin.reshape(cs[:a] + (1,) + cs[a:])
            yq = _fast_road(_FAST_FWD, q, c, s, False, None, None)
            yk = None if yq is None else _fast_road(_FAST_FWD, k, c, s, False, None, None)
            if yk is not None:
                return yq, yk
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
    return _apply(0, q, cos, sin, None, "q"), _apply(0, k, cos, sin, None, "k")


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
    if _checks.is_dask(x):      # dask cannot infer the dtype of a gufunc that checks its input
        x = _checks.dask_operands(x, (), (-1,))[0]
        return x.map_blocks(_core.rotate_half, dtype=x.dtype)
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
    if _checks.is_dask(x):      # as rotate_half
        x = _checks.dask_operands(x, (), (axis,))[0]
        return x.map_blocks(lambda b: _core.rotate_half(b, axes=[(axis,), (axis,)]),
                            dtype=x.dtype)
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
    h = inv.shape[0]
    _checks.check_result((end, h), np.complex64, "end")
    out = np.empty((end, h), dtype=np.complex64)
    if out.size == 0:       # no frequencies (dim < 2): nothing to compute, however long
        return out
    # float64 angles in row blocks (half-split layout: the h values come first)
    rows = _checks.block_rows(4 * 8 * h, end)
    for a in range(0, end, rows):
        b = min(end, a + rows)
        cos, sin = _tables(np.arange(a, b, dtype=np.int64), inv, False, np.dtype(np.float64),
                           name="end", culprit="theta")
        out.real[a:b] = cos[:, :h]
        out.imag[a:b] = sin[:, :h]
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
        y = _apply(2, x, cos, sin, None)
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
    _checks.check_result((seq_len, inv.shape[0]), np.float64, "seq_len", extra=8 * seq_len)
    return np.outer(np.arange(seq_len, dtype=np.float64), inv)

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

import threading
from typing import Any

import numpy as np

from . import _checks, _core

__all__ = [
    "rope_inv_freq",
    "rope_cos_sin",
    "apply_rope",
    "apply_rotary_pos_emb",
    "rotate_half",
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


def _grid_views(x: np.ndarray, cos: np.ndarray):
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


def _run(kind: int, x: Any, cos: Any, sin: Any, out: Any) -> Any:
    """Apply rotary kernel `kind`: position-blocked C path for large plain
    ndarrays of one dtype, NumPy's gufunc machinery for everything else."""
    if out is not None:
        lead = np.broadcast_shapes(tuple(x.shape[:-1]), tuple(cos.shape[:-1]),
                                   tuple(sin.shape[:-1]))
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
    return uf(x, cos, sin) if out is None else uf(x, cos, sin, out=out)


def rope_inv_freq(dim: int, base: float = 10000.0) -> np.ndarray:
    """Inverse frequencies of RoPE, ``base ** (-2i / dim)`` for ``i < dim // 2``.

    Computed in float64 (HF and Meta compute them in float32).

    Parameters
    ----------
    dim : int
        Rotary width (head size, or ``rotary_dim`` for partial rotary); even.
    base : float
        The RoPE base (``rope_theta``), > 0.

    Returns
    -------
    numpy.ndarray
        float64, shape ``(dim // 2,)``.

    Examples
    --------
    >>> import posemb
    >>> posemb.rope_inv_freq(4, base=100.0)
    array([1. , 0.1])
    """
    dim = _checks.even_size(dim, "dim")
    base = _checks.positive_float(base, "base")
    return base ** (-(np.arange(0, dim, 2, dtype=np.float64) / dim))


def _tables(positions: np.ndarray, inv_freq: np.ndarray, interleaved: bool,
            dtype: np.dtype, attention_scale: float = 1.0) -> tuple[np.ndarray, np.ndarray]:
    """Full-width (cos, sin) for int64 positions of any shape (checked)."""
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


def rope_cos_sin(positions: Any, dim: int, base: float = 10000.0, *,
                 interleaved: bool = False,
                 dtype: Any = np.float32) -> tuple[np.ndarray, np.ndarray]:
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
        Rotary width; even.
    base : float
        RoPE base (``rope_theta``).
    interleaved : bool
        False: half-split layout ``concat(c, c)`` (HF ``rotate_half``);
        True: each value repeated twice (GPT-J / Meta).
    dtype : float16, float32 or float64

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
    """
    inv = rope_inv_freq(dim, base)
    dt = _checks.float_dtype(dtype)
    pos = _checks.positions_array(positions)
    return _tables(pos, inv, _checks.flag(interleaved, "interleaved"), dt)


def _rope_operands(x: Any, cos: Any, sin: Any, name: str = "x") -> tuple[Any, Any, Any]:
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
    if r % 2:
        raise ValueError(f"cos/sin width must be even (pairs rotate together), got {r}")
    if r > d:
        raise ValueError(f"cos/sin width ({r}) must not exceed {name}'s last axis ({d})")
    try:
        np.broadcast_shapes(tuple(x.shape[:-1]), tuple(cos.shape[:-1]), tuple(sin.shape[:-1]))
    except ValueError:
        raise ValueError(
            f"cos {tuple(cos.shape)} and sin {tuple(sin.shape)} must broadcast against "
            f"{name} {tuple(x.shape)} on all but the last axis") from None
    return x, cos, sin


def apply_rope(x: Any, cos: Any, sin: Any, *, interleaved: bool = False,
               out: np.ndarray | None = None) -> Any:
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
    cos, sin : array_like, shape broadcastable to ``(..., r)``, ``r`` even ``<= d``
    interleaved : bool
    out : numpy.ndarray, optional

    Examples
    --------
    >>> import numpy as np, posemb
    >>> x = np.ones((2, 5, 8), np.float32)           # (heads, seq, head_dim)
    >>> cos, sin = posemb.rope_cos_sin(np.arange(5), 8)
    >>> y = posemb.apply_rope(x, cos, sin)
    >>> y.shape, bool(np.allclose(np.linalg.norm(y, axis=-1), np.sqrt(8)))
    ((2, 5, 8), True)
    """
    x, cos, sin = _rope_operands(x, cos, sin)
    return _run(_kind(interleaved, False), x, cos, sin, out)


def apply_rope_backward(grad: Any, cos: Any, sin: Any, *, interleaved: bool = False,
                        out: np.ndarray | None = None) -> Any:
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
    return _run(_kind(interleaved, True), grad, cos, sin, out)


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
    unsqueeze_dim = _checks.size(unsqueeze_dim, "unsqueeze_dim", minimum=-(2**31))
    if unsqueeze_dim >= 2**31:
        raise ValueError(f"unsqueeze_dim={unsqueeze_dim} is out of range for cos/sin")
    q = _checks.float_operand(q, "q")
    k = _checks.float_operand(k, "k")
    cos = _checks.float_operand(cos, "cos")
    sin = _checks.float_operand(sin, "sin")
    try:
        cos = np.expand_dims(cos, unsqueeze_dim)
        sin = np.expand_dims(sin, unsqueeze_dim)
    except np.exceptions.AxisError as e:
        raise ValueError(f"unsqueeze_dim={unsqueeze_dim} is out of range for cos/sin: {e}") from None
    q, cos, sin = _rope_operands(q, cos, sin, "q")
    k, cos, sin = _rope_operands(k, cos, sin, "k")
    return _run(0, q, cos, sin, None), _run(0, k, cos, sin, None)


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
    inv = rope_inv_freq(dim, base)
    seq_len = _checks.size(seq_len, "seq_len")
    return np.outer(np.arange(seq_len, dtype=np.float64), inv)


class RoPE:
    """Rotary position embedding with cached tables (PositionalEmbeddings.jl's ``RoPE``).

    Parameters
    ----------
    head_size : int
        Features per head (even, unless ``rotary_dim`` is given).
    seq_len : int
        Positions cached up front; later positions extend the cache.
    base : float
        RoPE base (``rope_theta``).
    scale : float
        Multiplies the angle, as in the Julia package.
    interleaved : bool
        Pairs ``(2i, 2i+1)`` (GPT-J, Meta) instead of ``(i, i + r/2)`` (HF, NeoX).
    rotary_dim : int, optional
        Partial rotary: only the first ``rotary_dim`` (even) features rotate,
        with frequencies built over ``rotary_dim``.
    dtype : float16, float32 or float64
        dtype of :attr:`cos_cached`/:attr:`sin_cached`.  Inputs of another
        float dtype use tables of their own dtype (made once and cached).

    ``rope(x, positions=None, *, offset=0, out=None)`` rotates ``x`` of shape
    ``(..., seq, head_size)`` -- the Julia ``(head_size, seq_len, nheads*batch)``
    in row-major order -- at positions ``offset .. offset+seq-1``, or at
    ``positions`` (integers broadcastable to ``x.shape[:-1]``).

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
    """

    #: cache no more than this many bytes per table unless seq_len asks for more
    max_cache_bytes = 64 << 20

    def __init__(self, head_size: int, seq_len: int, *, base: float = 10000.0,
                 scale: float = 1.0, interleaved: bool = False,
                 rotary_dim: int | None = None, dtype: Any = np.float32) -> None:
        self.head_size = _checks.size(head_size, "head_size", minimum=1)
        if rotary_dim is None:
            self.rotary_dim = _checks.even_size(head_size, "head_size", minimum=2)
        else:
            self.rotary_dim = _checks.even_size(rotary_dim, "rotary_dim", minimum=2)
            if self.rotary_dim > self.head_size:
                raise ValueError(
                    f"rotary_dim ({self.rotary_dim}) must not exceed head_size ({self.head_size})")
        self.seq_len = _checks.size(seq_len, "seq_len")
        self.base = _checks.positive_float(base, "base")
        self.scale = _checks.finite_float(scale, "scale")
        self.interleaved = _checks.flag(interleaved, "interleaved")
        self.dtype = _checks.float_dtype(dtype)
        if self.seq_len * self.rotary_dim * self.dtype.itemsize > np.iinfo(np.intp).max:
            raise MemoryError(f"a ({self.seq_len}, {self.rotary_dim}) {self.dtype.name} table "
                              "cannot be allocated")      # before a huge inv_freq is made
        self.inv_freq = rope_inv_freq(self.rotary_dim, self.base) * self.scale
        self._lock = threading.Lock()
        self._cache: dict[np.dtype, tuple[np.ndarray, np.ndarray]] = {}
        self._cached_tables(self.dtype, self.seq_len)

    def __repr__(self) -> str:
        return (f"RoPE(head_size={self.head_size}, seq_len={self.seq_len}, base={self.base}, "
                f"scale={self.scale}, interleaved={self.interleaved}, "
                f"rotary_dim={self.rotary_dim}, dtype={self.dtype.name})")

    @property
    def cos_cached(self) -> np.ndarray:
        """The cached cos table, ``(cached_len, rotary_dim)`` (read-only view)."""
        return self._cached_tables(self.dtype, 0)[0]

    @property
    def sin_cached(self) -> np.ndarray:
        """The cached sin table, ``(cached_len, rotary_dim)`` (read-only view)."""
        return self._cached_tables(self.dtype, 0)[1]

    def _cached_tables(self, dtype: np.dtype, need: int) -> tuple[np.ndarray, np.ndarray]:
        """Tables of ``dtype`` with at least ``need`` rows (grown geometrically)."""
        tables = self._cache.get(dtype)
        if tables is not None and tables[0].shape[0] >= need:
            return tables
        with self._lock:
            tables = self._cache.get(dtype)
            have = 0 if tables is None else tables[0].shape[0]
            if have >= need and tables is not None:
                return tables
            rows = max(need, self.seq_len, min(2 * have, self._max_rows(dtype)))
            cos, sin = _tables(np.arange(rows, dtype=np.int64), self.inv_freq,
                               self.interleaved, dtype)
            cos.flags.writeable = False
            sin.flags.writeable = False
            self._cache[dtype] = (cos, sin)
            return cos, sin

    def _max_rows(self, dtype: np.dtype) -> int:
        return max(self.seq_len, self.max_cache_bytes // (self.rotary_dim * dtype.itemsize))

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
        if stop <= self._max_rows(dtype):
            cos, sin = self._cached_tables(dtype, stop)
            return cos[start:stop], sin[start:stop]
        # far beyond any sensible cache: compute just these rows
        return _tables(np.arange(start, stop, dtype=np.int64), self.inv_freq,
                       self.interleaved, dtype)

    def _gather_tables(self, dtype: np.dtype, pos: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        top = int(pos.max()) + 1 if pos.size else 0
        if top <= self._max_rows(dtype):
            cos, sin = self._cached_tables(dtype, top)
            return cos[pos], sin[pos]
        return _tables(pos, self.inv_freq, self.interleaved, dtype)

    def _tables_for(self, x: Any, positions: Any, offset: int, name: str) -> tuple[np.ndarray, np.ndarray]:
        shape = x.shape
        if len(shape) == 0 or shape[-1] != self.head_size:
            raise ValueError(
                f"{name}'s last axis must be head_size={self.head_size}, got shape {tuple(shape)}")
        dt = np.dtype(x.dtype)
        if positions is None:
            if len(shape) < 2:
                raise ValueError(
                    f"{name} must have shape (..., seq, head_size) when positions is not given, "
                    f"got {tuple(shape)}")
            start = _checks.size(offset, "offset")
            return self._range_tables(dt, start, shape[-2])
        if _checks.size(offset, "offset") != 0:
            raise ValueError("offset applies only when positions is not given "
                             "(positions are absolute)")
        pos = _checks.positions_array(positions)
        try:
            ok = np.broadcast_shapes(pos.shape, tuple(shape[:-1])) == tuple(shape[:-1])
        except ValueError:
            ok = False
        if not ok:
            raise ValueError(
                f"positions of shape {pos.shape} must broadcast to {name}.shape[:-1] = "
                f"{tuple(shape[:-1])}")
        return self._gather_tables(dt, pos)

    def __call__(self, x: Any, positions: Any = None, *, offset: int = 0,
                 out: np.ndarray | None = None) -> Any:
        """Rotate ``x`` (``(..., seq, head_size)``); see the class docstring."""
        x = _checks.float_operand(x, "x")
        cos, sin = self._tables_for(x, positions, offset, "x")
        return _run(_kind(self.interleaved, False), x, cos, sin, out)

    forward = __call__

    def backward(self, grad: Any, positions: Any = None, *, offset: int = 0,
                 out: np.ndarray | None = None) -> Any:
        """Gradient of :meth:`__call__` with respect to ``x``: the inverse rotation.

        Examples
        --------
        >>> import numpy as np, posemb
        >>> rope = posemb.RoPE(8, 4, dtype=np.float64)
        >>> g = np.ones((4, 8))
        >>> bool(np.allclose(rope(rope.backward(g)), g))
        True
        """
        grad = _checks.float_operand(grad, "grad")
        cos, sin = self._tables_for(grad, positions, offset, "grad")
        return _run(_kind(self.interleaved, True), grad, cos, sin, out)

"""Sinusoidal (absolute) position encodings: the table, x + table, AbsolutePE.

Conventions (Vaswani et al., "Attention Is All You Need", section 3.5;
PositionalEmbeddings.jl ``AbsolutePE``; TorchLean; tensor2tensor
``get_timing_signal_1d`` for the concatenated layout):

* ``PE[p, 2i] = sin(p * w_i)``, ``PE[p, 2i+1] = cos(p * w_i)`` with
  ``w_i = base ** (-2i / dim)`` (Vaswani et al.; PositionalEmbeddings.jl
  ``AbsolutePE``; TorchLean), the ``"interleaved"`` layout.  ``"concat"`` puts
  all sines first: ``[sin(p*w) | cos(p*w)]``, zero-padded for odd ``dim``.
* Total for every ``dim >= 0`` (TorchLean): an odd ``dim`` ends with a sine
  column in the interleaved layout, ``dim = 0`` is an empty table.
* Rows are positions ``start .. start+seq_len-1`` (TorchLean's ``startPos``).
* Angles are formed in float64 from integer positions and every value is
  rounded once, so float32 tables agree with float64 truth to float32
  rounding at any position (the float32 PyTorch formula drifts by about
  ``p * 6e-8`` rad, ~0.06 rad at p = 2**20).
"""
from __future__ import annotations

from typing import Any

import numpy as np

from . import _checks
from . import _native as _core
from ._bfloat16 import accepts_bfloat16
from ._threads import cached_output, instance_lock

__all__ = ["sinusoidal", "add_sinusoidal", "AbsolutePE"]

_LAYOUTS = {"interleaved": False, "concat": True}


def _concat(layout: Any) -> bool:
    if not isinstance(layout, str) or layout not in _LAYOUTS:
        raise ValueError(f"layout must be 'interleaved' or 'concat', got {layout!r}")
    return _LAYOUTS[layout]


def _start(start: Any, count: int) -> int:
    s = _checks.size(start, "start")
    _checks.position_end(s + count, "start + seq_len", f"start={s}, seq_len={count}")
    return s


def _table(seq_len: int, dim: int, base: float, start: int, concat: bool,
           dtype: np.dtype, out: np.ndarray | None = None) -> np.ndarray:
    """The (seq_len, dim) table of dtype, in out if given (of that shape and
    dtype); arguments already checked."""
    if out is None:
        # first: a table too big to exist fails at once
        _checks.check_result((seq_len, dim), dtype, "seq_len and dim")
        out = np.empty((seq_len, dim), dtype=dtype)
    if out.size == 0:
        return out
    inv_freq = base ** (-(2.0 * np.arange((dim + 1) // 2, dtype=np.float64)) / max(dim, 1))
    _checks.angle_check(start + seq_len - 1, inv_freq, "base")
    if out.flags.c_contiguous and out.flags.aligned and out.dtype.isnative:
        _core._sinusoidal_table(start, inv_freq, concat, out)
    else:                       # strided, unaligned or byte-swapped: fill a copy, by blocks
        rows = _checks.block_rows(dim * out.dtype.itemsize, seq_len)
        table = np.empty((rows, dim), dtype=out.dtype.newbyteorder("="))
        for a in range(0, seq_len, rows):
            b = min(seq_len, a + rows)
            _core._sinusoidal_table(start + a, inv_freq, concat, table[:b - a])
            np.copyto(out[a:b], table[:b - a])
    return out


def _table_out(out: Any, shape: tuple[int, int], dtype: Any) -> tuple[np.ndarray, np.dtype]:
    """Check sinusoidal's out= (an ndarray of the table's shape) against dtype."""
    if not isinstance(out, np.ndarray):
        raise TypeError(f"out must be a numpy.ndarray, got {type(out).__name__}")
    out = _checks.out_operand(out, shape)
    if dtype is not None and _checks.float_dtype(dtype) != out.dtype.newbyteorder("="):
        raise TypeError(f"dtype {np.dtype(dtype)} does not match out's dtype {out.dtype}")
    return out, np.dtype(out.dtype)


def _work_dtype(dtype: np.dtype) -> np.dtype:
    """Table dtype for adding to x of dtype: float16 sums are rounded once
    from a float64 table; float32/float64 use their own (x + PE as PyTorch)."""
    return np.dtype(np.float64) if dtype == np.float16 else np.dtype(dtype)


@accepts_bfloat16(dtype_arg="dtype")
def sinusoidal(seq_len: int, dim: int, *, base: float = 10000.0, start: int = 0,
               layout: str = "interleaved", dtype: Any = None,
               out: np.ndarray | None = None) -> np.ndarray:
    """The sinusoidal position-encoding table, shape ``(seq_len, dim)``.

    Row ``k`` encodes position ``start + k``.  With ``layout="interleaved"``
    (Vaswani, PositionalEmbeddings.jl, TorchLean) column ``j`` is
    ``sin(p * base**(-2*(j//2)/dim))`` for even ``j`` and the matching cosine
    for odd ``j``; with ``layout="concat"`` (tensor2tensor/fairseq order) it is
    ``[sin(p*w) | cos(p*w)]`` with ``w_i = base**(-2i/dim)`` and a zero last
    column for odd ``dim``.  (fairseq and tensor2tensor space their
    frequencies as ``base**(-i/(h-1))``; this uses the Vaswani frequencies in
    both layouts.)  Every value is computed in float64 and rounded once to
    ``dtype``.

    Parameters
    ----------
    seq_len : int
        Number of positions (rows), ``>= 0``.
    dim : int
        Features (columns), ``>= 0``; odd and zero are allowed.
    base : float
        Wavelength base, > 0.
    start : int
        First position, ``>= 0`` (cached decoding).
    layout : {"interleaved", "concat"}
    dtype : float16, float32 or float64, optional
        Default float32, or ``out``'s dtype.
    out : numpy.ndarray, optional
        A ``(seq_len, dim)`` float16/32/64 array to fill (any strides); a
        reused buffer saves the page faults of a fresh table, most of the
        time of a large one.

    Returns
    -------
    numpy.ndarray
        Shape ``(seq_len, dim)``; ``out`` if given.

    Examples
    --------
    >>> import numpy as np, posemb
    >>> pe = posemb.sinusoidal(3, 4, dtype=np.float64)
    >>> pe[0]
    array([0., 1., 0., 1.])
    >>> bool(np.allclose(pe[2], [np.sin(2), np.cos(2), np.sin(0.02), np.cos(0.02)]))
    True
    >>> posemb.sinusoidal(2, 3, layout="concat", start=1, base=100.0, dtype=np.float64).round(4)
    array([[ 0.8415,  0.5403,  0.    ],
           [ 0.9093, -0.4161,  0.    ]])
    >>> posemb.sinusoidal(4, 0).shape
    (4, 0)
    >>> buf = np.empty((3, 4))
    >>> posemb.sinusoidal(3, 4, out=buf) is buf
    True
    """
    seq_len = _checks.size(seq_len, "seq_len")
    dim = _checks.size(dim, "dim")
    base = _checks.positive_float(base, "base")
    start = _start(start, seq_len)
    concat = _concat(layout)
    if out is None:
        dt = _checks.float_dtype(np.float32 if dtype is None else dtype)
        return _table(seq_len, dim, base, start, concat, dt)
    out, dt = _table_out(out, (seq_len, dim), dtype)
    return _table(seq_len, dim, base, start, concat, dt, out)


@accepts_bfloat16("x")
def add_sinusoidal(x: Any, *, start: int = 0, base: float = 10000.0,
                   layout: str = "interleaved", out: np.ndarray | None = None) -> Any:
    """``x + PE`` for ``x`` of shape ``(..., seq, dim)``.

    The ``(seq, dim)`` table for positions ``start .. start+seq-1`` is made
    once and broadcast against ``x`` by a NumPy ufunc (no broadcast copy).
    For float32/float64 ``x`` the result is ``x + sinusoidal(..., dtype=x.dtype)``
    bit for bit, as PyTorch's ``x + pe``; for float16 the sum is formed in
    float64 and rounded once.  ``out=x`` works in place.

    Parameters
    ----------
    x : array_like, float16/32/64, shape ``(..., seq, dim)``
    start, base, layout :
        As in :func:`sinusoidal`.
    out : numpy.ndarray, optional

    Examples
    --------
    >>> import numpy as np, posemb
    >>> x = np.zeros((2, 3, 4), np.float32)          # (batch, seq, dim)
    >>> y = posemb.add_sinusoidal(x, start=5)
    >>> bool(np.array_equal(y[1], posemb.sinusoidal(3, 4, start=5)))
    True
    """
    x = _checks.float_operand(x, "x")
    if len(x.shape) < 2:
        raise ValueError(f"x must have shape (..., seq, dim), got {tuple(x.shape)}")
    seq, dim = x.shape[-2], x.shape[-1]
    base = _checks.positive_float(base, "base")
    start = _start(start, seq)
    work = _work_dtype(np.dtype(x.dtype))
    _checks.check_result(x.shape, x.dtype, "x", copies=0 if out is not None else 1,
                         extra=_checks.nbytes((seq, dim), work),
                         what=f"x + the ({seq}, {dim}) {work.name} table")
    table = _table(seq, dim, base, start, _concat(layout), work)
    x = _checks.dask_operands(x, (), (-2, -1))[0]
    if out is None:    # (None when x is small or not a float ndarray: NumPy allocates)
        return _core.sinusoidal_add_rows(x, table, out=cached_output(x))
    return _core.sinusoidal_add_rows(x, table, out=_checks.out_operand(out, x.shape))


def _axis(value: Any, ndim: int, name: str) -> int:
    a = _checks.size(value, name, minimum=-(2**31))
    if not -ndim <= a < ndim:
        raise ValueError(f"{name}={a} is out of range for x with {ndim} dimension(s)")
    return a % ndim


class AbsolutePE:
    """Sinusoidal absolute position embedding (PositionalEmbeddings.jl's ``AbsolutePE``).

    Parameters
    ----------
    embedding_size : int
        Features (``d_model``), ``>= 0``.
    max_length : int
        Positions in the table, ``>= 0``.
    base : float
        Wavelength base, > 0.
    dtype : float16, float32 or float64
        dtype of :attr:`embeddings`.

    Notes
    -----
    ``pe(x, *, start=0, out=None, seq_axis=None, feature_axis=None)`` returns
    ``x`` plus the rows ``start .. start+seq-1`` of the table, added along
    ``seq_axis`` and ``feature_axis`` (default -2 and -1) and broadcast over
    the other axes.  The Julia layout ``(seq_len, features, batch)`` is
    NumPy's ``(batch, features, seq_len)`` (same memory): pass
    ``seq_axis=-1, feature_axis=-2``.  Where the layout cannot be told from
    the shape (both of the last two axes have ``embedding_size`` entries),
    leaving the axes out is a ValueError rather than a guess.  ``seq + start > max_length`` is a ValueError.  For
    float32/float64 ``x`` the table is used in ``x``'s dtype (made once and
    cached); float16 sums are rounded once from float64.

    Examples
    --------
    >>> import numpy as np, posemb
    >>> pe = posemb.AbsolutePE(512, 1000)
    >>> pe.embeddings.shape
    (1000, 512)
    >>> x = np.random.default_rng(0).standard_normal((32, 512, 100), dtype=np.float32)
    >>> y = pe(x, seq_axis=-1, feature_axis=-2)   # Julia's randn(Float32, 100, 512, 32)
    >>> y.shape, bool(np.array_equal(y[3], x[3] + pe.embeddings[:100].T))
    ((32, 512, 100), True)
    >>> pe(np.zeros((4, 10, 512), np.float32), start=990).shape   # (batch, seq, features)
    (4, 10, 512)
    """

    def __init__(self, embedding_size: int, max_length: int, *, base: float = 10000.0,
                 dtype: Any = np.float32) -> None:
        self.embedding_size = _checks.size(embedding_size, "embedding_size")
        self.max_length = _checks.size(max_length, "max_length")
        _checks.position_end(self.max_length, "max_length")
        self.base = _checks.positive_float(base, "base")
        self.dtype = _checks.float_dtype(dtype)
        _checks.check_result((self.max_length, self.embedding_size), self.dtype,
                             "max_length and embedding_size")
        self._lock = instance_lock(self)
        self._tables: dict[np.dtype, np.ndarray] = {}
        self._table(self.dtype)

    def __getstate__(self) -> dict[str, Any]:
        # the lock cannot be pickled; the tables are remade where unpickled
        state = self.__dict__.copy()
        del state["_lock"], state["_tables"]
        return state

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)
        self._lock = instance_lock(self)
        self._tables = {}
        self._table(self.dtype)

    def __repr__(self) -> str:
        return (f"AbsolutePE(embedding_size={self.embedding_size}, max_length={self.max_length}, "
                f"base={self.base}, dtype={self.dtype.name})")

    @property
    def embeddings(self) -> np.ndarray:
        """The ``(max_length, embedding_size)`` table (read-only)."""
        return self._table(self.dtype)

    def _table(self, dtype: np.dtype) -> np.ndarray:
        table = self._tables.get(dtype)
        if table is None:
            with self._lock:
                table = self._tables.get(dtype)
                if table is None:
                    table = _table(self.max_length, self.embedding_size, self.base, 0,
                                   False, dtype)
                    table.flags.writeable = False
                    self._tables[dtype] = table
        return table

    @accepts_bfloat16("x")
    def __call__(self, x: Any, *, start: int = 0, out: np.ndarray | None = None,
                 seq_axis: int | None = None, feature_axis: int | None = None) -> Any:
        """``x`` plus the table rows ``start .. start+seq-1``; see the class docstring."""
        x = _checks.float_operand(x, "x")
        ndim = len(x.shape)
        if ndim < 2:
            raise ValueError(
                f"x must have a sequence and a feature axis, got shape {tuple(x.shape)}")
        if seq_axis is None and feature_axis is None:
            e = self.embedding_size
            if x.shape[-1] == e and x.shape[-2] == e and e > 1:
                # (..., seq, features) and Julia's (..., features, seq) look
                # alike: adding the table transposed would be silent
                raise ValueError(
                    f"x of shape {tuple(x.shape)} has embedding_size={e} entries on both "
                    "of its last two axes: pass seq_axis= and feature_axis= (-2, -1 for "
                    "(..., seq, features); -1, -2 for the Julia layout (..., features, seq))")
            if x.shape[-1] != e and x.shape[-2] == e:
                raise ValueError(
                    f"x's last axis must have embedding_size={e} entries, got shape "
                    f"{tuple(x.shape)}; for the Julia layout (..., features, seq) pass "
                    "seq_axis=-1, feature_axis=-2")
        sa = _axis(-2 if seq_axis is None else seq_axis, ndim, "seq_axis")
        fa = _axis(-1 if feature_axis is None else feature_axis, ndim, "feature_axis")
        if sa == fa:
            raise ValueError(f"seq_axis and feature_axis must differ, both are axis {sa}")
        if x.shape[fa] != self.embedding_size:
            raise ValueError(
                f"x's feature axis ({fa}) must have embedding_size={self.embedding_size} "
                f"entries, got {x.shape[fa]}")
        seq = x.shape[sa]
        start = _checks.size(start, "start")
        if seq + start > self.max_length:
            raise ValueError(
                f"seq ({seq}) + start ({start}) must not exceed max_length ({self.max_length})")
        rows = self._table(_work_dtype(np.dtype(x.dtype)))[start:start + seq]
        out = cached_output(x) if out is None else _checks.out_operand(out, x.shape)
        x = _checks.dask_operands(x, (), (sa, fa))[0]
        # (seq, features) core axes, broadcast over the others; the kernel
        # walks position blocks with every batch inside (one table read)
        if sa == ndim - 2 and fa == ndim - 1:
            return _core.sinusoidal_add_rows(x, rows, out=out)
        return _core.sinusoidal_add_rows(x, rows, out=out, axes=[(sa, fa), (0, 1), (sa, fa)])

    forward = __call__

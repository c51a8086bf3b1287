"""The RoPE module (cached tables, per-call scaling regimes) and
:func:`rope_config`, which builds one from a model's ``config.json``.

The top of the rotary stack: it uses the tables and kernels of ``_rope``,
the scaling math of ``_rope_scaling`` and ``apply_rope_varlen`` of
``_rope_variants``; none of those import this module, so nothing imports in
a circle (``_rope_scaling`` <- ``_rope`` <- ``_rope_variants`` <- here).
"""
from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np

from . import _checks
from ._bfloat16 import accepts_bfloat16
from ._rope import (_F16, _F32, _F64, _FAST_FWD, _apply, _fast_call, _kind, _seq_axis,
                    _seq_shift, _tables)

_NO_TABLES = ((), ())
from ._conventions import rope_convention
from ._rope_scaling import (_get, frequency_regime, layer_rope_parameters, normalize_scaling,
                            rope_scaling_parameters)
from ._rope_variants import apply_rope_varlen
from ._threads import instance_lock, new_output

__all__ = ["RoPE", "rope_config"]


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
        # before a huge inv_freq is made
        # (and the positions they are made from)
        _checks.check_result((self.seq_len, self.rotary_dim), self.dtype, "seq_len", copies=2,
                             extra=8 * self.seq_len,
                             what=f"the ({self.seq_len}, {self.rotary_dim}) {self.dtype.name} "
                                  f"cos/sin cache")
        self.scaling = normalize_scaling(scaling)
        # frequencies that do not depend on the sequence length (see
        # frequency_regime: only longrope and dynamic NTK switch)
        self._plain_frequencies = self.scaling["rope_type"] not in ("longrope", "dynamic")
        self.max_position_embeddings = (
            None if max_position_embeddings is None
            else _checks.size(max_position_embeddings, "max_position_embeddings", minimum=1))
        inv, attn = rope_scaling_parameters(self.rotary_dim, self.base, self.scaling,
                                            max_position_embeddings=self.max_position_embeddings)
        with np.errstate(over="ignore"):
            self.inv_freq = inv * self.scale
        if not np.isfinite(self.inv_freq).all():
            raise ValueError(f"scale={self.scale!r} times the inverse frequencies overflows "
                             f"float64")
        #: multiplies cos and sin (yarn/longrope; 1.0 otherwise)
        self.attention_factor = attn
        self._freqs: dict[Any, tuple[np.ndarray, float]] = {None: (self.inv_freq, attn)}
        self._lock = instance_lock(self)
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
        self._lock = instance_lock(self)
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
            cos, sin = self._make(np.arange(rows, dtype=np.int64), inv, attn, dtype, need,
                                  name="seq_len")
            cos.flags.writeable = False
            sin.flags.writeable = False
            self._cache[(dtype, key)] = (cos, sin)
            return cos, sin

    @property
    def _culprit(self) -> str:
        return "base, scale and scaling" if self.scale != 1.0 else "base and scaling"

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
        pos = _checks.positions_array(positions, row_bytes=2 * self.rotary_dim * dt.itemsize + 8)
        return self._gather_tables(dt, pos)

    def _range_tables(self, dtype: np.dtype, start: int, n: int) -> tuple[np.ndarray, np.ndarray]:
        stop = start + n
        _checks.position_end(stop, "offset + seq")
        _checks.check_result((n, self.rotary_dim), dtype, "seq_len", copies=2, extra=8 * n,
                             what=f"the ({n}, {self.rotary_dim}) {dtype.name} cos/sin tables")
        key = self._regime(stop)
        if self._cacheable(key) and stop <= self._max_rows(dtype):
            cos, sin = self._cached_tables(dtype, stop, key)
            return cos[start:stop], sin[start:stop]
        # far beyond any sensible cache, or dynamic NTK frequencies of this
        # length: compute just these rows
        inv, attn = self._frequencies(key, stop)
        return self._make(np.arange(start, stop, dtype=np.int64), inv, attn, dtype, stop,
                          name="seq_len")

    def _gather_tables(self, dtype: np.dtype, pos: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        top = int(_checks.unique_view(pos).max()) + 1 if pos.size else 0
        key = self._regime(top)
        if self._cacheable(key) and top <= self._max_rows(dtype):
            cos, sin = self._cached_tables(dtype, top, key)
            return cos[pos], sin[pos]
        inv, attn = self._frequencies(key, top)
        return self._make(pos, inv, attn, dtype, top)

    def _make(self, positions: np.ndarray, inv: np.ndarray, attn: float, dtype: np.dtype,
              seq_len: int, name: str = "positions") -> tuple[np.ndarray, np.ndarray]:
        """Tables for ``positions``: exact, or by the framework recipe of ``precision``."""
        if self.precision == "exact":
            return _tables(positions, inv, self.interleaved, dtype, attn, self.rotary_dim,
                           name=name, culprit=self._culprit)
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
        if off.size:
            _checks.position_end(int(off.max()) + seq, "offset + seq")
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
        pos = _checks.integer_array(positions, "positions")
        try:
            ok = np.broadcast_shapes(pos.shape, shape[:-1]) == shape[:-1]
        except ValueError:
            ok = False
        if not ok:
            raise ValueError(
                f"positions of shape {pos.shape} must broadcast to {name}.shape[:-1] = "
                f"{shape[:-1]}")
        pos = _checks.positions_array(pos, row_bytes=2 * self.rotary_dim * dt.itemsize + 8)
        return self._gather_tables(dt, pos)

    def _along(self, method: Any, x: Any, positions: Any, offset: Any, out: Any,
               seq_axis: Any, name: str) -> Any:
        """Run ``method`` on views of ``x`` (and ``positions``, ``out``) whose
        sequence axis is ``seq_axis`` moved to the second to last place; the
        result has ``x``'s own layout."""
        ndim = len(x.shape)
        sa = _seq_axis(seq_axis, ndim)
        if positions is not None:
            pos = _checks.integer_array(positions, "positions")
            try:
                pos = np.broadcast_to(pos, tuple(x.shape[:-1]))
            except ValueError:
                raise ValueError(
                    f"positions of shape {pos.shape} must broadcast to {name}.shape[:-1] = "
                    f"{tuple(x.shape[:-1])}") from None
            positions = np.moveaxis(pos, sa, -1)
        if out is None and isinstance(x, np.ndarray):
            out = new_output(x)
        if out is None:      # a ufunc-protocol array (dask): NumPy's moveaxis views
            return np.moveaxis(method(np.moveaxis(x, sa, -2), positions, offset=offset),
                               -2, sa)
        out = _checks.out_operand(out, tuple(x.shape), "out")
        method(np.moveaxis(x, sa, -2), positions, offset=offset, out=np.moveaxis(out, sa, -2))
        return out

    def _fast(self, x: Any, offset: Any, seq_axis: Any, out: Any) -> Any:
        """A decode step (or in place, out=x, x not empty): the cached rows
        offset .. offset+seq straight to the gufunc (what the long road does,
        without its checks), for x's sequence on axis -2 (the default) or -3
        (Meta's (batch, seq, heads, d), seq_axis=1); None for the long road
        (which also names what a plain call refuses: a read-only out, a
        broadcast x)."""
        if not (type(x) is np.ndarray and type(offset) is int and offset >= 0
                and self._plain_frequencies and not self.rotary_dim & 1):
            return None
        dt, xs = x.dtype, x.shape
        k = _seq_shift(seq_axis, len(xs))
        if not ((dt is _F32 or dt is _F64 or dt is _F16) and len(xs) >= 3 and 0 <= k <= 1
                and xs[-1] == self.head_size):
            return None
        tables: Any = self._cache.get((dt, None), _NO_TABLES)
        cos, sin = tables
        stop = offset + xs[-2 - k]
        if len(cos) < stop or not len(cos):     # (no tables made yet: _NO_TABLES)
            return None
        c, s = cos[offset:stop], sin[offset:stop]
        return _fast_call(_FAST_FWD[self.interleaved], x, c, s, out, k)

    def __call__(self, x: Any, positions: Any = None, *, offset: Any = 0,
                 seq_axis: int | None = None, out: np.ndarray | None = None) -> Any:
        """Rotate ``x`` (``(..., seq, head_size)``); see the class docstring."""
        if positions is None and (out is None or (out is x and x.size)):
            y = self._fast(x, offset, seq_axis, out)
            if y is not None:
                return y
        return self._call_any(x, positions, offset=offset, seq_axis=seq_axis, out=out)

    @accepts_bfloat16("x")
    def _call_any(self, x: Any, positions: Any = None, *, offset: Any = 0,
                  seq_axis: int | None = None, out: np.ndarray | None = None) -> Any:
        """:meth:`__call__` for any operands: checks, bfloat16, views."""
        x = _checks.float_operand(x, "x")
        if seq_axis is not None and _seq_axis(seq_axis, len(x.shape)) != len(x.shape) - 2:
            return self._along(self.__call__, x, positions, offset, out, seq_axis, "x")
        cos, sin = self._tables_for(x, positions, offset, "x")
        if type(x) is np.ndarray and 0 in x.strides:   # a broadcast x: can its result be?
            _checks.check_result(x.shape, x.dtype, "x")
        return _apply(_kind(self.interleaved, False), x, cos, sin, out)

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
        sk = _seq_shift(seq_axis, np.ndim(q))
        if (positions is None and sk >= 0 and type(q) is np.ndarray and type(k) is np.ndarray
                and q.dtype is k.dtype and q.ndim == k.ndim >= 2
                and q.shape[-1] == k.shape[-1] and q.shape[-2 - sk] == k.shape[-2 - sk]
                and (not inplace or (q.size and k.size and q.flags.writeable and k.flags.writeable
                                     and 0 not in q.strides and 0 not in k.strides
                                     and not np.may_share_memory(q, k)))):
            # a decode step: each through the fast road (both, or neither:
            # what could refuse k alone is asked above -- its head size,
            # sequence length, dtype, memory -- and the views differ only by
            # heads: one kv head, or k too large for the new-axis view,
            # takes k alone on the long road)
            yq = self._fast(q, offset, seq_axis, q if inplace else None)
            if yq is not None:
                yk = self._fast(k, offset, seq_axis, k if inplace else None)
                if yk is not None:
                    return yq, yk
                if inplace:     # (q is rotated already) k alone
                    return q, self._call_any(k, offset=offset, seq_axis=seq_axis, out=k)
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
                    pos = _checks.integer_array(positions, "positions")
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
            _apply(kind, q, cos, sin, q)
            _apply(kind, k, kcos, ksin, k)
            return q, k
        return _apply(kind, q, cos, sin, None), _apply(kind, k, kcos, ksin, None)

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
            _checks.position_end(need, "offset + sequence length")
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
        return _apply(_kind(self.interleaved, True), grad, cos, sin, out, "grad")


def rope_config(config: Mapping[str, Any], *, seq_len: int | None = None,
                dtype: Any = np.float32, layer_type: str | None = None,
                interleaved: bool | None = None, precision: str = "exact") -> Any:
    """A :class:`RoPE` that reproduces a model's rotary embedding from its ``config.json``.

    Reads (as transformers does): ``head_dim`` or ``hidden_size //
    num_attention_heads`` (``qk_rope_head_dim`` for DeepSeek's MLA, GPT-J's
    ``n_embd``/``n_head``), ``rope_theta`` (GPT-NeoX ``rotary_emb_base``;
    default 10000), ``partial_rotary_factor`` (GPT-NeoX ``rotary_pct``; GPT-J
    ``rotary_dim``; the family's default when absent, e.g. 0.5 for GLM),
    ``rope_scaling`` (or transformers v5 ``rope_parameters``),
    ``max_position_embeddings`` and a top-level
    ``original_max_position_embeddings`` (Phi-3).  The pair layout is the
    model family's (:func:`rope_convention`: interleaved for GPT-J, CodeGen,
    Cohere, GLM, DeepSeek-V2/V3; half-split otherwise), unless
    ``interleaved`` says otherwise.  DeepSeek-V3's transformers module
    returns its rotated features de-interleaved (``0, 2, 4, ..., 1, 3, 5,
    ...``); this RoPE keeps them in place (``q . k`` is the same).  A
    multimodal config whose rotary settings live in ``text_config`` is read
    from there.

    Per-layer-type RoPE (Gemma 3's ``rope_local_base_freq``, ModernBERT's
    global/local theta, transformers v5's nested ``rope_parameters``, see
    :func:`layer_rope_parameters`) needs ``layer_type`` (e.g.
    ``"sliding_attention"``); a NoPE layer type gives None.

    Parameters
    ----------
    config : dict
        The parsed ``config.json``.
    seq_len : int, optional
        Rows of the table cache made up front (default ``min(max_position_embeddings,
        4096)``); later positions extend it.
    dtype : float16, float32 or float64
        dtype of the cached tables.
    layer_type : str, optional
        Which layers' RoPE, for configs that set it per layer type.
    interleaved : bool, optional
        Override the family's pair layout.
    precision : {"exact", "float32", "bfloat16"}
        The tables' recipe (see :func:`rope_cos_sin`); ``"float32"`` is the
        model's transformers computation.

    Examples
    --------
    >>> import numpy as np, posemb
    >>> llama31 = {"hidden_size": 4096, "num_attention_heads": 32, "rope_theta": 500000.0,
    ...            "max_position_embeddings": 131072,
    ...            "rope_scaling": {"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0,
    ...                             "high_freq_factor": 4.0,
    ...                             "original_max_position_embeddings": 8192}}
    >>> rope = posemb.rope_config(llama31)
    >>> rope.head_size, rope.rotary_dim, rope.scaling["rope_type"]
    (128, 128, 'llama3')
    >>> q = np.ones((1, 32, 5, 128), np.float32)
    >>> rope(q, offset=100000).shape
    (1, 32, 5, 128)
    >>> gemma3 = {"model_type": "gemma3_text", "head_dim": 256, "hidden_size": 2560,
    ...           "num_attention_heads": 8, "rope_theta": 1000000.0,
    ...           "rope_local_base_freq": 10000.0, "max_position_embeddings": 131072,
    ...           "rope_scaling": {"rope_type": "linear", "factor": 8.0}}
    >>> posemb.rope_config(gemma3, layer_type="sliding_attention").base
    10000.0
    >>> posemb.rope_config({"model_type": "glm4", "hidden_size": 64, "num_attention_heads": 2,
    ...                     "max_position_embeddings": 128}).interleaved
    True
    """

    if not isinstance(config, Mapping):
        raise TypeError(f"config must be a dict (a parsed config.json), got {type(config).__name__}")
    cfg: Mapping[str, Any] = config
    size_keys = ("head_dim", "hidden_size", "n_embd", "qk_rope_head_dim")
    text = cfg.get("text_config")
    if isinstance(text, Mapping) and not any(cfg.get(k) is not None for k in size_keys):
        cfg = dict(text, model_type=text.get("model_type", cfg.get("model_type")))
    conv = rope_convention(cfg)

    layers = layer_rope_parameters(cfg)
    if layers is not None:
        if layer_type is None:
            raise ValueError(
                f"config sets RoPE per layer type ({', '.join(map(repr, layers))}): pass "
                f"layer_type= one of them")
        if layer_type not in layers:
            raise ValueError(f"layer_type {layer_type!r} is not one of the config's layer types "
                             f"{list(layers)}")
        if layers[layer_type] is None:
            return None     # a NoPE layer type
        params = dict(layers[layer_type] or {})
    else:
        declared = cfg.get("layer_types")
        if (layer_type is not None and isinstance(declared, (list, tuple))
                and layer_type not in declared):
            raise ValueError(f"layer_type {layer_type!r} is not one of the config's layer_types "
                             f"{sorted(set(declared))}")
        params = _get(cfg, "rope_scaling", "rope_parameters")
        if params is not None and not isinstance(params, Mapping):
            raise TypeError(
                f"config['rope_scaling'] must be a dict or None, got {type(params).__name__}")
        params = dict(params or {})

    if params and params.get("rope_type") is None and params.get("type") is None:
        params["rope_type"] = "default"   # e.g. {"rope_theta": ...} alone
    rope_dim_key = conv.rotary_dim_key
    if rope_dim_key == "qk_rope_head_dim" or cfg.get("qk_rope_head_dim") is not None:
        if cfg.get("qk_rope_head_dim") is None:
            raise ValueError("config of a DeepSeek MLA model needs 'qk_rope_head_dim'")
        # DeepSeek MLA: RoPE on the rope slice only
        head_size = _checks.size(cfg["qk_rope_head_dim"], "config['qk_rope_head_dim']", minimum=2)
    elif cfg.get("head_dim") is not None:
        head_size = _checks.size(cfg["head_dim"], "config['head_dim']", minimum=2)
    else:
        hidden = _get(cfg, "hidden_size", "n_embd")
        heads = _get(cfg, "num_attention_heads", "n_head")
        if hidden is None or heads is None:
            raise ValueError(
                "config needs 'head_dim', or 'hidden_size' and 'num_attention_heads' "
                "(or 'qk_rope_head_dim' for DeepSeek MLA)")
        hidden = _checks.size(hidden, "config['hidden_size']", minimum=1)
        heads = _checks.size(heads, "config['num_attention_heads']", minimum=1)
        head_size = hidden // heads

    if layers is not None:
        theta = params.get("rope_theta", 10000.0)
    else:
        theta = _get(cfg, "rope_theta", "rotary_emb_base")
        if theta is None:
            theta = params.get("rope_theta", 10000.0)
    base = _checks.positive_float(theta, "config['rope_theta']")

    fraction = _get(cfg, "partial_rotary_factor", "rotary_pct")
    if fraction is None:
        fraction = params.get("partial_rotary_factor", conv.partial_rotary_factor)
    if params.get("rope_type", params.get("type")) == "proportional":
        # the partial factor shapes the frequencies; the whole head "rotates"
        params.setdefault("partial_rotary_factor", fraction)
        rotary_dim = head_size
    elif cfg.get("rotary_dim") is not None:  # GPT-J, CodeGen
        rotary_dim = _checks.size(cfg["rotary_dim"], "config['rotary_dim']", minimum=2)
        n_ctx, n_head = cfg.get("n_ctx"), _get(cfg, "n_head", "num_attention_heads")
        if rope_dim_key == "rotary_dim" and cfg.get("model_type") == "codegen" \
                and n_ctx is not None and n_head:
            rotary_dim = min(rotary_dim, int(n_ctx) // int(n_head))  # CodeGenModel.__init__
    else:
        fraction = _checks.positive_float(fraction, "config['partial_rotary_factor']")
        if fraction > 1.0:
            raise ValueError(f"config['partial_rotary_factor'] must be <= 1, got {fraction}")
        rotary_dim = int(head_size * fraction)
    if rotary_dim % 2 or rotary_dim < 2:
        raise ValueError(
            f"config gives a rotary width of {rotary_dim} (head_dim {head_size} times "
            f"partial_rotary_factor); it must be even and >= 2")

    max_pos = _get(cfg, "max_position_embeddings", "n_positions")
    if max_pos is not None:
        max_pos = _checks.size(max_pos, "config['max_position_embeddings']", minimum=1)
    if (cfg.get("original_max_position_embeddings") is not None
            and params.get("original_max_position_embeddings") is None and params):
        params["original_max_position_embeddings"] = cfg["original_max_position_embeddings"]
    if params and params.get("rope_type", params.get("type")) in ("yarn", "longrope", "llama3") \
            and params.get("original_max_position_embeddings") is None and max_pos is not None:
        # transformers' standardize_rope_params: the pretraining length defaults to max_pos
        params["original_max_position_embeddings"] = max_pos

    if interleaved is None:
        interleaved = conv.interleaved
    else:
        interleaved = _checks.flag(interleaved, "interleaved")
    if seq_len is None:
        seq_len = min(max_pos or 4096, 4096)
    return RoPE(head_size, seq_len, base=base, interleaved=interleaved, rotary_dim=rotary_dim,
                dtype=dtype, scaling=params or None, max_position_embeddings=max_pos,
                precision=precision)

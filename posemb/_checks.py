"""Argument checks shared by the public API: the one validation module.

Every public function validates its arguments here before any C kernel runs,
so a bad argument is a TypeError/ValueError/IndexError/MemoryError that names
it.  Every numeric limit of the package is defined once, below; the C kernels
check only what protects memory.  Array-likes that implement
``__array_ufunc__`` (dask, xarray, ...) are passed through untouched so that
NumPy's ufunc protocol can dispatch to them.
"""
from __future__ import annotations

import functools
import operator
import os
from typing import Any

import numpy as np

FLOAT_DTYPES = (np.dtype(np.float16), np.dtype(np.float32), np.dtype(np.float64))

# ---------------------------------------------------------------- limits
#: positions (and start + length) must stay below this: integers up to 2**53
#: are exact in float64, where every angle is formed
MAX_EXACT_POSITION = 2**53
#: ALiBi distances are formed in float64 and must stay exact there
MAX_ALIBI_EXTENT = 2**52
#: largest size or |offset| the relative-bias and mask kernels accept (their
#: int64 arithmetic on sums of two such values cannot overflow)
MAX_EXTENT = 2**61
#: a causal window wider than any extent is no window (the kernel's int64
#: sums of an extent and a window cannot overflow)
MAX_WINDOW = 2**62
#: T5 buckets: one boundary per bucket is precomputed
MAX_BUCKETS = 2**20
#: largest T5 max_distance (an exact float64 integer)
MAX_DISTANCE = 2**53
#: float64 scratch a call may allocate at once for blocked work (the rest of
#: a large table is made block by block, so temporaries stay a small
#: fraction of the result)
BLOCK_BYTES = 8 << 20


def masked(x: Any, name: str) -> None:
    """Refuse a masked array: the kernels would read its hidden values."""
    if isinstance(x, np.ma.MaskedArray):
        raise TypeError(
            f"{name} is a numpy.ma.MaskedArray; posemb does not apply masks: pass "
            f"{name}.filled(value) or {name}.data")


def float_operand(x: Any, name: str) -> Any:
    """Return x as an array (or a ufunc-protocol array-like) of float16/32/64.

    Byte-swapped arrays are returned as native-order copies: the C kernels,
    and the tables made in x's dtype for them, are native-order only.
    """
    masked(x, name)
    if isinstance(x, np.ndarray) and x.dtype.kind == "f" and not x.dtype.isnative:
        x = x.astype(x.dtype.newbyteorder("="))
    if not isinstance(x, np.ndarray):
        if hasattr(x, "__array_ufunc__") and hasattr(x, "dtype") and hasattr(x, "shape"):
            dtype = np.dtype(x.dtype)
        else:
            x = np.asarray(x)
            dtype = x.dtype
    else:
        dtype = x.dtype
    if dtype.kind != "f" or dtype.itemsize not in (2, 4, 8):
        raise TypeError(
            f"{name} must be a float16, float32 or float64 array, got dtype {dtype}"
        )
    return x


def c_array(x: Any, dtype: Any = None) -> np.ndarray:
    """x as a C-contiguous, aligned ndarray of dtype (copied only if needed).

    The C functions accept nothing else; ``np.ascontiguousarray`` alone
    keeps an unaligned buffer unaligned.
    """
    return np.require(np.asarray(x), dtype=dtype, requirements=["C", "A"])


def flag(value: Any, name: str) -> bool:
    """A boolean switch: bool, numpy.bool_ or the integers 0 and 1.

    Anything else (a string such as "no", an array) is a TypeError rather
    than its truth value, which would silently pick a branch.
    """
    if isinstance(value, (bool, np.bool_)):
        return bool(value)
    if isinstance(value, (int, np.integer)) and value in (0, 1):
        return bool(value)
    raise TypeError(f"{name} must be a bool, got {value!r}")


def out_operand(out: Any, shape: tuple, name: str = "out") -> Any:
    """Check an ``out=`` array: None, or a writeable float16/32/64 ndarray of
    exactly the result's shape (ufunc-protocol array-likes pass through).

    Left to NumPy, a list is "return arrays must be of ArrayType" and a
    wrong shape a broadcasting message that does not say which operand.
    """
    if out is None:
        return None
    if not isinstance(out, np.ndarray):
        if hasattr(out, "__array_ufunc__") and hasattr(out, "shape"):
            return out
        raise TypeError(f"{name} must be a numpy.ndarray, got {type(out).__name__}")
    if out.dtype.kind != "f" or out.dtype.itemsize not in (2, 4, 8):
        raise TypeError(f"{name} must be a float16, float32 or float64 array, got dtype {out.dtype}")
    if out.shape != tuple(shape):
        raise ValueError(f"{name} must have the result's shape {tuple(shape)}, got {out.shape}")
    return writeable(out, name)


def writeable(out: np.ndarray, name: str = "out") -> np.ndarray:
    """``out`` itself, if it may be written (else a ValueError naming it)."""
    if not out.flags.writeable:
        raise ValueError(f"{name} must be writeable (it is read-only)")
    return out


def float_dtype(dtype: Any, name: str = "dtype") -> np.dtype:
    """Check a requested output dtype: float16, float32 or float64."""
    try:
        dt = np.dtype(dtype)
    except TypeError:
        raise TypeError(f"{name} must be a NumPy float dtype, got {dtype!r}") from None
    if dt not in FLOAT_DTYPES:
        raise TypeError(f"{name} must be float16, float32 or float64, got {dt}")
    return dt


def size(value: Any, name: str, *, minimum: int = 0) -> int:
    """An integer size or count >= minimum (bools and floats are refused)."""
    if isinstance(value, (bool, np.bool_)):
        raise TypeError(f"{name} must be an integer, got {value!r}")
    try:
        v = operator.index(value)
    except TypeError:
        raise TypeError(f"{name} must be an integer, got {type(value).__name__}") from None
    if v < minimum:
        raise ValueError(f"{name} must be >= {minimum}, got {v}")
    return v


def even_size(value: Any, name: str, *, minimum: int = 0) -> int:
    v = size(value, name, minimum=minimum)
    if v % 2:
        raise ValueError(f"{name} must be even (features are rotated in pairs), got {v}")
    return v


def _real(value: Any, name: str) -> float:
    """A real number as a Python float.  Arrays of one or more axes are
    refused here, as NumPy 2.4 refuses them; older NumPy (2.2 on Python
    3.10) converted a one-element array with a DeprecationWarning."""
    if isinstance(value, np.ndarray) and value.ndim:
        raise TypeError(f"{name} must be a real number, got an array of shape {value.shape}")
    try:
        return float(value)
    except (TypeError, ValueError):
        raise TypeError(f"{name} must be a real number, got {value!r}") from None
    except OverflowError:       # an int beyond float64
        raise ValueError(f"{name} must be a finite float64 number, got {value!r}") from None


def positive_float(value: Any, name: str) -> float:
    v = _real(value, name)
    if not np.isfinite(v) or v <= 0.0:
        raise ValueError(f"{name} must be a finite number > 0, got {value!r}")
    return v


def finite_float(value: Any, name: str) -> float:
    v = _real(value, name)
    if not np.isfinite(v):
        raise ValueError(f"{name} must be finite, got {value!r}")
    return v


def integer_array(value: Any, name: str) -> np.ndarray:
    """``value`` as an integer ndarray (not scanned, not copied if it is one)."""
    masked(value, name)
    p = np.asarray(value)
    if p.dtype.kind not in "iu":
        raise TypeError(f"{name} must be an integer array, got dtype {p.dtype}")
    return p


def positions_array(positions: Any, name: str = "positions", *,
                    limit: int | None = None, row_bytes: int = 0) -> np.ndarray:
    """Integer positions as an int64 array: >= 0, and < limit when given.

    Non-integer arrays are a TypeError; negative or too-large values an
    IndexError (for a bounded table, ``limit``) or a ValueError.  With
    ``row_bytes`` (the bytes of result and temporaries a call needs per
    position) the result size is checked first (MemoryError naming
    ``name``), before anything is scanned.  Only the distinct memory of a
    broadcast view is scanned.
    """
    p = integer_array(positions, name)
    if row_bytes:
        check_memory(p.size * int(row_bytes), name,
                     f"the tables for {name} of shape {p.shape}")
    if p.size:
        u = unique_view(p)
        lo, hi = int(u.min()), int(u.max())
        if lo < 0:
            err = IndexError if limit is not None else ValueError
            raise err(f"{name} must be >= 0, got {lo}")
        bound = MAX_EXACT_POSITION if limit is None else limit
        if hi >= bound:
            err = IndexError if limit is not None else ValueError
            raise err(f"{name} must be < {_power(bound)}, got {hi}")
    return p.astype(np.int64, copy=False)


def out_array(out: Any, shape: tuple[int, ...], name: str = "out") -> np.ndarray:
    """A caller's ``out=`` for a C kernel that writes a whole C-contiguous
    array: an ndarray of ``shape``, float16/32/64 in native byte order,
    writeable, C-contiguous and aligned."""
    if not isinstance(out, np.ndarray):
        raise TypeError(f"{name} must be a numpy.ndarray, got {type(out).__name__}")
    if out.shape != tuple(shape):
        raise ValueError(f"{name} must have shape {tuple(shape)}, got {out.shape}")
    if out.dtype.kind != "f" or out.dtype.itemsize not in (2, 4, 8) or not out.dtype.isnative:
        raise TypeError(f"{name} must be float16, float32 or float64 in native byte order, "
                        f"got {out.dtype}")
    if not out.flags.writeable:
        raise ValueError(f"{name} is read-only")
    if not (out.flags.c_contiguous and out.flags.aligned):
        raise ValueError(f"{name} must be C-contiguous and aligned")
    return out


def int_vector(value: Any, name: str) -> np.ndarray:
    """A 1-D integer array as a private C-contiguous int64 copy (C loops read
    it without the GIL, so the caller's array may change meanwhile)."""
    masked(value, name)
    a = np.asarray(value)
    if a.dtype.kind not in "iu":
        raise TypeError(f"{name} must be an integer array, got dtype {a.dtype}")
    if a.ndim != 1:
        raise ValueError(f"{name} must be 1-D, got shape {a.shape}")
    if a.dtype == np.uint64 and a.size and int(a.max()) > np.iinfo(np.int64).max:
        raise ValueError(f"{name} has values beyond int64")
    return np.array(a, dtype=np.int64)


def bounded(value: Any, name: str, limit: int, *, signed: bool = False) -> int:
    """An integer in ``[0, limit]`` (``[-limit, limit]`` when ``signed``)."""
    v = size(value, name, minimum=-limit if signed else 0)
    if v > limit:
        got = v if v.bit_length() <= 128 else f"an integer of {v.bit_length()} bits"
        raise ValueError(f"{name} must be <= {_power(limit)}, got {got}")
    return v


def _power(n: int) -> str:
    """2**k for a power of two, else the number."""
    return f"2**{n.bit_length() - 1}" if n > 0 and n & (n - 1) == 0 else str(n)


# ---------------------------------------------------------------- memory

@functools.lru_cache(maxsize=None)
def _physical_memory() -> int | None:
    try:
        return os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    except (AttributeError, ValueError, OSError):
        return None


def memory_limit() -> int | None:
    """Bytes one allocation can at most get: the machine's RAM, and what is
    left of the address-space limit (``RLIMIT_AS``) when one is set; None
    when neither is known."""
    limits = []
    ram = _physical_memory()
    if ram:
        limits.append(ram)
    try:
        import resource
        soft = resource.getrlimit(resource.RLIMIT_AS)[0]
        unlimited = soft == resource.RLIM_INFINITY
    except (ImportError, OSError, ValueError):     # not POSIX
        soft, unlimited = 0, True
    if not unlimited and soft > 0:
        used = 0
        try:
            with open("/proc/self/statm") as f:
                used = int(f.read().split()[0]) * os.sysconf("SC_PAGE_SIZE")
        except (OSError, ValueError, IndexError):
            pass
        limits.append(max(soft - used, 0))
    return min(limits) if limits else None


def _human(n: int) -> str:
    for unit, scale in (("TiB", 1 << 40), ("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if n >= scale:
            return f"{n / scale:.1f} {unit}"
    return f"{n} bytes"


def check_memory(nbytes: int, name: str, what: str = "the result") -> None:
    """Raise MemoryError, naming ``name`` and the bytes needed, when a call
    needs ``nbytes`` (result and temporaries) beyond what can be allocated.

    Called before anything large is allocated or scanned, so a call that
    cannot succeed fails at once instead of being killed by the kernel.
    """
    nbytes = int(nbytes)
    if nbytes > np.iinfo(np.intp).max:
        raise MemoryError(
            f"{name}: {what} would need {nbytes} bytes ({_human(nbytes)}), more than any "
            f"array can hold")
    limit = memory_limit()
    if limit is not None and nbytes > limit:
        raise MemoryError(
            f"{name}: {what} would need {nbytes} bytes ({_human(nbytes)}), more than the "
            f"{limit} bytes ({_human(limit)}) this process can allocate")


def nbytes(shape: Any, dtype: Any, copies: int = 1) -> int:
    """Bytes of ``copies`` arrays of ``shape`` and ``dtype`` (Python ints: no overflow)."""
    n = 1
    for s in shape:
        n *= int(s)
    return n * np.dtype(dtype).itemsize * copies


def check_result(shape: Any, dtype: Any, name: str, *, copies: int = 1,
                 extra: int = 0, what: str | None = None) -> None:
    """:func:`check_memory` for ``copies`` results of ``shape`` and ``dtype``
    plus ``extra`` bytes of temporaries."""
    need = nbytes(shape, dtype, copies) + int(extra)
    if what is None:
        shape_s = "(" + ", ".join(str(int(s)) for s in shape) + ("," if len(shape) == 1 else "") + ")"
        what = (f"a {shape_s} {np.dtype(dtype).name} result" if copies == 1 else
                f"{copies} {shape_s} {np.dtype(dtype).name} results")
    check_memory(need, name, what)


def block_rows(row_bytes: int, rows: int) -> int:
    """Rows per block so that one block of float64 scratch stays within
    :data:`BLOCK_BYTES` (at least one row)."""
    return max(1, min(rows, BLOCK_BYTES // max(int(row_bytes), 1)))


# ---------------------------------------------------------------- unique memory

def unique_view(a: np.ndarray) -> np.ndarray:
    """The part of ``a`` that holds distinct memory: every zero-stride
    (broadcast) axis cut to length 1.  Scanning it (min, max, isfinite)
    answers for the whole of ``a`` at the cost of its real data."""
    if a.ndim == 0 or a.size == 0 or all(st != 0 for st in a.strides):
        return a
    return a[tuple(slice(0, 1) if st == 0 else slice(None) for st in a.strides)]


def position_end(stop: int, what: str, detail: str = "") -> int:
    """``stop`` (one past the last position a call makes) checked against
    :data:`MAX_EXACT_POSITION`; ``what`` names the arguments that sum to it."""
    if stop > MAX_EXACT_POSITION:
        raise ValueError(f"{what} must be <= 2**53, got {detail or stop}")
    return stop


def angle_check(top: int, inv: np.ndarray, culprit: str) -> None:
    """The largest angle ``top * max(inv)`` must be finite in float64: an
    infinite angle has no cosine (NaN tables).  ``culprit`` names the
    parameters that made the frequencies ``inv``."""
    if inv.size == 0 or top == 0:
        return
    w = float(np.max(np.abs(inv))) if np.isfinite(inv).all() else np.inf
    if not np.isfinite(w) or top * w > np.finfo(np.float64).max:
        raise ValueError(
            f"the inverse frequency {w:g} (from {culprit}) times position {top} is not a "
            f"finite float64 number (cos/sin would be NaN)")


# ---------------------------------------------------------------- dask

def is_dask(x: Any) -> bool:
    return type(x).__module__.split(".")[0] == "dask" and hasattr(x, "chunks")


def dask_operands(x: Any, others: tuple, core_axes: tuple[int, ...],
                  others_core: int = 1) -> tuple[Any, list]:
    """Make a dask ``x`` and NumPy operands acceptable to dask's gufunc road.

    The axes the kernel needs whole (its core axes, e.g. the features, or
    the sequence of a table added row by row) are rechunked into one chunk
    (dask would refuse them otherwise); NumPy operands that broadcast along
    ``x``'s other axes get ``x``'s chunks there, so a dask array chunked along
    the sequence works without being gathered (``others_core``: how many
    trailing axes of each of them are core axes, aligned with ``x``'s last
    ones).  Non-dask ``x`` is returned untouched.
    """
    if not is_dask(x):
        return x, list(others)
    import dask.array as da

    nd = len(x.shape)
    core = {a % nd for a in core_axes}
    if any(len(x.chunks[a]) > 1 for a in core):
        x = x.rechunk({a: -1 for a in core})
    out = []
    for t in others:
        if isinstance(t, np.ndarray) and t.ndim:
            chunks = []
            loop = t.ndim - others_core
            for i, n in enumerate(t.shape):
                ax = nd - len(core) - loop + i if i < loop else -1
                same = ax >= 0 and ax not in core and n == x.shape[ax] and n != 1
                chunks.append(x.chunks[ax] if same else (n,))
            t = da.from_array(t, chunks=tuple(chunks))
        out.append(t)
    return x, out

"""Argument checks shared by the public API.

Every public function validates its arguments here before any C kernel runs,
so a bad argument is a TypeError/ValueError/IndexError that names it.
Array-likes that implement ``__array_ufunc__`` (dask, xarray, ...) are passed
through untouched so that NumPy's ufunc protocol can dispatch to them.
"""
from __future__ import annotations

import operator
from typing import Any

import numpy as np

FLOAT_DTYPES = (np.dtype(np.float16), np.dtype(np.float32), np.dtype(np.float64))
MAX_EXACT_POSITION = 2**53  # positions beyond this are not exact in float64


def float_operand(x: Any, name: str) -> Any:
    """Return x as an array (or a ufunc-protocol array-like) of float16/32/64.

    Byte-swapped arrays are returned as native-order copies: the C kernels,
    and the tables made in x's dtype for them, are native-order only.
    """
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


def positive_float(value: Any, name: str) -> float:
    try:
        v = float(value)
    except (TypeError, ValueError):
        raise TypeError(f"{name} must be a real number, got {value!r}") from None
    if not np.isfinite(v) or v <= 0.0:
        raise ValueError(f"{name} must be a finite number > 0, got {value!r}")
    return v


def finite_float(value: Any, name: str) -> float:
    try:
        v = float(value)
    except (TypeError, ValueError):
        raise TypeError(f"{name} must be a real number, got {value!r}") from None
    if not np.isfinite(v):
        raise ValueError(f"{name} must be finite, got {value!r}")
    return v


def positions_array(positions: Any, name: str = "positions", *,
                    limit: int | None = None) -> np.ndarray:
    """Integer positions as an int64 array: >= 0, and < limit when given.

    Non-integer arrays are a TypeError; negative or too-large values an
    IndexError (for a bounded table, ``limit``) or a ValueError.
    """
    p = np.asarray(positions)
    if p.dtype.kind not in "iu":
        raise TypeError(f"{name} must be an integer array, got dtype {p.dtype}")
    if p.size:
        lo, hi = int(p.min()), int(p.max())
        if lo < 0:
            err = IndexError if limit is not None else ValueError
            raise err(f"{name} must be >= 0, got {lo}")
        bound = MAX_EXACT_POSITION if limit is None else limit
        if hi >= bound:
            err = IndexError if limit is not None else ValueError
            raise err(f"{name} must be < {bound}, got {hi}")
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
    a = np.asarray(value)
    if a.dtype.kind not in "iu":
        raise TypeError(f"{name} must be an integer array, got dtype {a.dtype}")
    if a.ndim != 1:
        raise ValueError(f"{name} must be 1-D, got shape {a.shape}")
    if a.dtype == np.uint64 and a.size and int(a.max()) > np.iinfo(np.int64).max:
        raise ValueError(f"{name} has values beyond int64")
    return np.array(a, dtype=np.int64)

"""bfloat16 NumPy arrays (``ml_dtypes.bfloat16``, what JAX hands out).

The C kernels have float16/32/64 loops.  A bfloat16 operand is computed in
float32 (every bfloat16 is exactly a float32) and the result is rounded once
to bfloat16, round-to-nearest-even, as float16 is; a bfloat16 ``dtype=`` for
a table rounds the float64-exact table once.  ``ml_dtypes`` is not imported
here: an array or dtype whose name is ``bfloat16`` is recognised as such.

:func:`accepts_bfloat16` wraps a public function so that this happens in one
place, before the function's own checks see float32.
"""
from __future__ import annotations

import functools
import inspect
from typing import Any, Callable, TypeVar

import numpy as np

from . import _checks

F = TypeVar("F", bound=Callable[..., Any])


#: the bfloat16 dtype once it has been seen (ml_dtypes registers one
#: descriptor): after that, an identity test instead of reading the
#: dtype's name (about 0.4 us) on every call
_SEEN_BF16: list[np.dtype] = []


def is_bfloat16(dtype: Any) -> bool:
    """True for the dtype (or the dtype of an array-like) ``ml_dtypes.bfloat16``."""
    if dtype is None:
        return False
    try:
        return _is_bf16_dtype(np.dtype(getattr(dtype, "dtype", dtype)))
    except TypeError:
        return False


def is_bfloat16_array(a: Any) -> bool:
    """True for a plain ndarray of ``ml_dtypes.bfloat16`` (tested on every
    call of the RoPE functions' bfloat16 road)."""
    return type(a) is np.ndarray and _is_bf16_dtype(a.dtype)


def _is_bf16_dtype(dt: np.dtype) -> bool:
    if _SEEN_BF16 and dt is _SEEN_BF16[0]:
        return True
    if dt.kind == "V" and dt.itemsize == 2 and dt.name == "bfloat16":
        _SEEN_BF16[:] = [dt]
        return True
    return False


def round_to_bfloat16(a: np.ndarray, bfloat16: np.dtype) -> np.ndarray:
    """float32 or float64 ``a`` rounded once to bfloat16 (nearest, ties to even).

    float32 -> bfloat16 is one rounding.  float64 -> bfloat16 through float32
    would round twice (``1 + 2**-8 + 2**-30`` would become 1, not ``1 + 2**-7``),
    so float64 first goes to float32 rounding to odd: truncated toward zero,
    its last bit set when anything was cut off.  With 16 bits to spare below
    bfloat16's precision, the final rounding then sees the true tie or not.
    """
    a = np.asarray(a)
    if a.dtype == np.float64:
        f = a.astype(np.float32)
        back = f.astype(np.float64)
        inexact = np.isfinite(a) & (back != a)
        away = inexact & (np.abs(back) > np.abs(a))
        f = np.where(away, np.nextafter(f, np.float32(0)), f)   # truncate toward zero
        bits = f.view(np.uint32)
        bits = np.where(inexact & np.isfinite(f), bits | np.uint32(1), bits)
        a = bits.astype(np.uint32).view(np.float32)
    return a.astype(bfloat16)


def _to_float32(value: Any) -> Any:
    return np.asarray(value).astype(np.float32)


def _any_void(values: Any) -> bool:
    """Is one of values an ndarray of a non-NumPy dtype (bfloat16's kind is
    "V")?  (A loop: a generator costs microseconds per call here.)"""
    for v in values:
        if isinstance(v, np.ndarray) and v.dtype.kind == "V":
            return True
    return False


def accepts_bfloat16(*operands: str, dtype_arg: str | None = None,
                     table_dtype: str | None = None) -> Callable[[F], F]:
    """Let a float-only public function take bfloat16.

    ``operands`` name the float array arguments; the first is the primary one,
    whose dtype the result takes.  ``out`` (if the function has it) may be
    bfloat16 too: the float32 result is rounded into it.  ``dtype_arg`` names
    a ``dtype=`` argument: bfloat16 there computes the table in ``table_dtype``
    (float64 for the exact tables, float32 where the function computes in
    float32) and rounds it once.  Results that are tuples are rounded element
    by element.  Calls without bfloat16 go straight through.
    """
    def deco(fn: F) -> F:
        sig = inspect.signature(fn)
        has_out = "out" in sig.parameters

        @functools.wraps(fn)
        def wrapper(*args: Any, **kwargs: Any) -> Any:
            # fast path (a decode step is dominated by call overhead): no
            # dtype= argument and no array of a non-NumPy dtype (bfloat16's
            # kind is "V")
            if dtype_arg is None and not _any_void(args) and not _any_void(kwargs.values()):
                return fn(*args, **kwargs)
            bf = None
            found = False
            try:
                bound = sig.bind(*args, **kwargs)
            except TypeError:
                return fn(*args, **kwargs)    # the function reports its own misuse
            given = bound.arguments
            bound_in = dict(given)
            for i, name in enumerate(operands):
                value = given.get(name)
                if isinstance(value, np.ndarray) and is_bfloat16(value.dtype):
                    if i == 0:
                        bf = value.dtype
                    given[name] = _to_float32(value)
                    found = True
            out = given.get("out") if has_out else None
            out_bf = None
            if isinstance(out, np.ndarray) and is_bfloat16(out.dtype):
                out_bf = _checks.writeable(out)
                given["out"] = None
                found = True
            if dtype_arg is not None and is_bfloat16(given.get(dtype_arg)):
                bf = np.dtype(given[dtype_arg])
                given[dtype_arg] = np.dtype(table_dtype or np.float64)
                found = True
            if not found:
                return fn(*args, **kwargs)
            result = fn(*bound.args, **bound.kwargs)
            target = bf if bf is not None else (out_bf.dtype if out_bf is not None else None)
            if target is None:
                return result

            def cast(r: Any) -> Any:
                if isinstance(r, np.ndarray) and r.dtype.kind == "f":
                    return round_to_bfloat16(r, target)
                return r

            result = tuple(cast(r) for r in result) if isinstance(result, tuple) else cast(result)
            if given.get("inplace") is True and isinstance(result, tuple):
                # rotated in place: into the caller's own bfloat16 arrays
                originals = [bound_in.get(name) for name in operands[:len(result)]]
                for orig, r in zip(originals, result):
                    if isinstance(orig, np.ndarray) and is_bfloat16(orig.dtype):
                        np.copyto(orig, r, casting="unsafe")
                return tuple(o if isinstance(o, np.ndarray) and is_bfloat16(o.dtype) else r
                             for o, r in zip(originals, result))
            if out_bf is not None:
                if out_bf.shape != np.shape(result):
                    raise ValueError(
                        f"out must have the result's shape {np.shape(result)}, got {out_bf.shape}")
                np.copyto(out_bf, result, casting="unsafe")
                return out_bf
            return result

        return wrapper  # type: ignore[return-value]

    return deco

"""posemb's runtime: the thread count of its internal pool (C kernels split
large work), the CPU level its SIMD kernels were dispatched to, and the
output cache (freed large outputs kept for the next output of their size)."""
from __future__ import annotations

import os
import threading
import warnings
import weakref
from typing import Any

import numpy as np

from . import _checks
from . import _native as _core

__all__ = ["set_num_threads", "get_num_threads", "show_config", "set_output_cache",
           "empty_cache"]


def set_num_threads(n: int) -> int:
    """Use ``n`` threads (>= 1, at most 64) in posemb's kernels; returns the count set.

    Work below a size threshold always runs on the calling thread, and work
    below four times it too when the pool's threads have been idle (no job
    in the last 0.1 ms): waking them would cost more than they save.  Safe to
    call while other threads are computing: a running job finishes with the
    count it started with.  The environment variable ``POSEMB_NUM_THREADS``
    sets the initial value (default: the number of online CPUs).

    Examples
    --------
    >>> import posemb
    >>> old = posemb.get_num_threads()
    >>> posemb.set_num_threads(1)
    1
    >>> posemb.set_num_threads(old) == old
    True
    """
    n = _checks.size(n, "n", minimum=1)
    return int(_core.set_num_threads(min(n, 64)))


def get_num_threads() -> int:
    """The number of threads posemb's kernels use.

    Examples
    --------
    >>> import posemb
    >>> posemb.get_num_threads() >= 1
    True
    """
    return int(_core.get_num_threads())


# Outputs at least this large come from (and return to) the output cache.
_OUT_CACHE_MIN = int(_core.OUT_CACHE_MIN_BYTES)
# (uint16: bfloat16 bit patterns, the bfloat16 kernels' outputs)
_CACHED_DTYPES = (np.dtype(np.float16), np.dtype(np.float32), np.dtype(np.float64),
                  np.dtype(np.uint16))


def _strides_order(x: np.ndarray) -> tuple[int, ...] | None:
    """x's axes from the largest stride to the smallest (NumPy's order='K'),
    or None where that is C order (x C-contiguous, or its axes already in
    that order)."""
    if x.flags.c_contiguous:
        return None
    st = x.strides
    perm = tuple(sorted(range(x.ndim), key=lambda i: -abs(st[i])))
    return None if perm == tuple(range(x.ndim)) else perm


def may_cache(x: Any) -> bool:
    """Can cached_output return an array for x?  Not for a small C-contiguous
    ndarray (NumPy's own allocation is that array: decode steps ask this
    first), nor for anything but a plain ndarray."""
    return type(x) is np.ndarray and (x.nbytes >= _OUT_CACHE_MIN or not x.flags.c_contiguous)


def cached_output(x: Any, shape: Any = None, dtype: Any = None) -> np.ndarray | None:
    """A new empty array of ``shape`` and ``dtype`` (default: ``x``'s; a
    tuple of dtypes: their promotion) for a posemb output computed from
    ``x`` -- or None, and NumPy allocates the output as usual (C order).

    An output of ``x``'s shape is laid out in memory as ``x`` is (NumPy's
    order='K' for elementwise ufuncs, and what torch's elementwise ops do):
    HF's ``q.view(b, s, h, d).transpose(1, 2)`` gets a result of the same
    strides, written front to back as ``x`` is read, not a transposing
    write.  A large output (see set_output_cache) comes from the output
    cache.  None where neither applies (see may_cache)."""
    if not may_cache(x):
        return None
    shape = x.shape if shape is None else tuple(shape)
    dtype = (x.dtype if dtype is None else np.result_type(*dtype) if isinstance(dtype, tuple)
             else np.dtype(dtype))
    if x.nbytes < _OUT_CACHE_MIN:
        # (x is not C-contiguous, see may_cache) NumPy's own order='K'
        # allocation: the layout below in a fraction of its Python steps
        return np.empty_like(x, dtype) if shape == x.shape else None
    perm = _strides_order(x) if shape == x.shape else None
    cached = dtype in _CACHED_DTYPES and x.dtype in _CACHED_DTYPES
    if perm is None:
        return _core._out_cache_empty(shape, dtype) if cached else None
    inner = tuple(shape[i] for i in perm)
    buf = _core._out_cache_empty(inner, dtype) if cached else np.empty(inner, dtype)
    return buf.transpose(np.argsort(perm))


def new_output(x: np.ndarray, shape: Any = None, dtype: Any = None) -> np.ndarray:
    """cached_output's array, else np.empty(shape, dtype) (default: x's)."""
    out = cached_output(x, shape, dtype)
    return np.empty(x.shape if shape is None else shape,
                    x.dtype if dtype is None else dtype) if out is None else out


def set_output_cache(max_bytes: int) -> int:
    """Keep up to ``max_bytes`` of freed large outputs for reuse; returns the previous limit.

    A new array of tens of MiB is fresh memory, which the operating system
    zeroes page by page on first touch: ``y = posemb.apply_rope(x, cos,
    sin)`` into a new 128 MiB array costs about twice a call with ``out=``.
    So when an output of at least 4 MiB that posemb allocated is freed, its
    memory is kept, and the next posemb output of the same size reuses it,
    as a loop over same-shaped batches does.  At most 8 blocks and
    ``max_bytes`` in all are kept, the oldest released first; the default
    is 1 GiB, or 1/16 of physical memory if that is less, and the
    environment variable ``POSEMB_OUTPUT_CACHE`` (bytes) sets the initial
    value.  ``0`` turns the cache off and frees what it holds.  Only
    posemb's own outputs (float16/32/64 ndarrays) use it: no other array,
    and nothing NumPy allocates inside a posemb call, is affected.  Kept
    memory stays resident (``tracemalloc`` counts it as freed), and the
    default limit counts a container's memory limit (cgroups) as its RAM.

    Examples
    --------
    >>> import posemb
    >>> old = posemb.set_output_cache(0)
    >>> posemb.set_output_cache(old)
    0
    """
    n = _checks.size(max_bytes, "max_bytes")
    old = _core._out_cache(None)[0]
    _core._out_cache(n)
    return int(old)


def empty_cache() -> None:
    """Free the memory the output cache holds (see set_output_cache); the
    limit stays.

    Examples
    --------
    >>> import posemb
    >>> posemb.empty_cache()
    >>> posemb.show_config(print_=False)["output_cache"].startswith("0 MiB held")
    True
    """
    limit = _core._out_cache(None)[0]
    _core._out_cache(0)
    _core._out_cache(limit)


def _measured_choice(*parts: int) -> str:
    """show_config's account of RoPE's measured choices (pe_choice_way in
    C), kinds in three parts of 8 (one per dtype, in place or not): part 0
    (prefetch ahead), 1 (one head per call, positions lying together) and 2
    (the same where positions have gaps between them: sliced heads)."""
    setting, kinds = _core._choice(None)
    if setting >= 0:
        return f"{'yes' if setting else 'no'} (set)"
    dtypes = ("float16", "float32", "float64", "bfloat16")
    n = len(kinds) // 3
    seen = []
    for part in parts:
        for kind, (without, with_) in enumerate(kinds[part * n:(part + 1) * n]):
            if without or with_:
                where = ("in place" if kind >= 4 else "out=") + (
                    ", positions with gaps" if part == 2 else "")
                # (as pe_choice_way: the lower time, or "measuring" while one is missing)
                pick = "measuring" if not (without and with_) else "yes" if with_ < without else "no"
                times = "/".join(f"{p} ps" if p else "-" for p in (with_, without))
                seen.append(f"{dtypes[kind % 4]} {where} {pick} ({times} per byte with/without)")
    return "; ".join(seen) if seen else (
        "measured on calls beyond the last-level cache (none yet; builds without a "
        "monotonic clock, such as Windows', do not measure and take 'yes')")


def show_config(*, print_: bool = True) -> dict[str, str]:
    """The CPU level posemb's kernels run at, and what each family uses.

    The CPU is probed once, when posemb is imported, and every SIMD kernel
    afterwards uses that level: the best this CPU (and build) runs, or the
    one set by the environment variable ``POSEMB_CPU`` (``baseline``,
    ``sse2``, ``avx2``, ``avx512`` or ``avx512bf16``, which adds AVX512_BF16
    rounding to bfloat16 RoPE; a level above the CPU's is lowered to it with
    a ``RuntimeWarning``).  Every level gives the same bits.

    Returns (and, with ``print_=True``, prints) a dict: ``level`` (in use),
    ``supported`` (the best this CPU and build run), the instruction set of
    the ``rope``, ``sinusoidal`` and ``learned`` kernels, and
    ``streaming_stores`` (the widest non-temporal stores used, or ``none``),
    ``streaming_partial_lines`` (``yes`` where a probe, run once at first
    use, found this CPU streams as fast into lines left partly written as
    into whole ones; ``no (whole lines only)``: large outputs not on
    64-byte lines take plain stores, or for RoPE are written in L1 first and
    streamed in whole lines), ``streaming_from`` (the smallest output
    that takes streaming stores, which skip the cache: 3/4 of the last-level
    cache, within 4 and 24 MiB, so that an output the cache would hold stays
    there for what reads it next),
    ``l2_cache`` and ``last_level_cache`` (the sizes one core sees, which
    the kernels size their blocks from: sysfs on Linux, else ``sysconf``),
    ``rope_prefetch_ahead`` and ``rope_one_head_per_call`` (whether RoPE
    over arrays larger than the last-level cache prefetches rows ahead in
    software, in the ``(b, h, s, d)`` layout (half-split rows of 1 KiB or
    more are prefetched position by position instead, and take no part),
    and takes one head per kernel
    call, in the ``(b, s, h, d)`` one: something the cache sizes do not
    tell, so such calls measure both ways, per dtype and in place or not
    (and for one head per call, whether positions have gaps between them,
    as heads sliced from a fused projection do),
    and keep the faster, rechecking the other now and then; the best times
    per byte so far; Windows builds do not measure and take ``yes``),
    plus ``threads`` and ``output_cache`` (what set_output_cache keeps).

    Examples
    --------
    >>> import posemb
    >>> cfg = posemb.show_config(print_=False)
    >>> cfg["level"] in ("baseline", "sse2", "avx2", "avx512", "avx512bf16")
    True
    """
    print_ = _checks.flag(print_, "print_")
    cfg = dict(_core._dispatch())
    cfg["rope_prefetch_ahead"] = _measured_choice(0)
    cfg["rope_one_head_per_call"] = _measured_choice(1, 2)
    cfg["threads"] = str(get_num_threads())
    limit, held, blocks = _core._out_cache(None)
    cfg["output_cache"] = f"{held >> 20} MiB held in {blocks} blocks, limit {limit >> 20} MiB"
    if print_:
        for key, value in cfg.items():
            print(f"{key + ':':25}{value}")
    return cfg


def _init_from_env() -> None:
    for name, setter, what in (("POSEMB_NUM_THREADS", set_num_threads, "an integer >= 1"),
                               ("POSEMB_OUTPUT_CACHE", set_output_cache, "an integer >= 0")):
        value = os.environ.get(name)
        if not value:
            continue
        try:
            setter(int(value))
        except (TypeError, ValueError):
            warnings.warn(f"ignoring {name}={value!r}: not {what}", RuntimeWarning,
                          stacklevel=2)


_init_from_env()


# ---------------------------------------------------------------- fork safety
# The RoPE cache and the AbsolutePE tables are grown under a per-object
# threading.Lock.  A fork() while another thread holds one copies it locked
# into a child that has no thread to release it: the child's next call on
# that object would wait forever.  Every such lock is made by instance_lock
# and replaced by a fresh one in the child (the state it guards is changed by
# single, GIL-atomic dict assignments, so it is consistent at any fork).

_lock_owners: "weakref.WeakValueDictionary[int, Any]" = weakref.WeakValueDictionary()


def instance_lock(owner: Any) -> threading.Lock:
    """A new lock for ``owner._lock``, reset in a forked child."""
    _lock_owners[id(owner)] = owner
    return threading.Lock()


def _reset_locks_in_child() -> None:
    for owner in list(_lock_owners.values()):
        owner._lock = threading.Lock()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_reset_locks_in_child)

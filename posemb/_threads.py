"""posemb's runtime: the thread count of its internal pool (C kernels split
large work) and the CPU level its SIMD kernels were dispatched to."""
from __future__ import annotations

import os
import threading
import warnings
import weakref
from typing import Any

from . import _checks
from . import _native as _core

__all__ = ["set_num_threads", "get_num_threads", "show_config"]


def set_num_threads(n: int) -> int:
    """Use ``n`` threads (>= 1, at most 64) in posemb's kernels; returns the count set.

    Work below a size threshold always runs on the calling thread.  Safe to
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


def show_config(*, print_: bool = True) -> dict[str, str]:
    """The CPU level posemb's kernels run at, and what each family uses.

    The CPU is probed once, when posemb is imported, and every SIMD kernel
    afterwards uses that level: the best this CPU (and build) runs, or the
    one set by the environment variable ``POSEMB_CPU`` (``baseline``,
    ``sse2``, ``avx2`` or ``avx512``; a level above the CPU's is lowered to
    it with a ``RuntimeWarning``).  Every level gives the same bits.

    Returns (and, with ``print_=True``, prints) a dict: ``level`` (in use),
    ``supported`` (the best this CPU and build run), the instruction set of
    the ``rope``, ``sinusoidal`` and ``learned`` kernels, and
    ``streaming_stores`` (the widest non-temporal stores used, or ``none``),
    ``l2_cache`` and ``last_level_cache`` (the sizes one core sees, which
    the kernels size their blocks from: sysfs on Linux, else ``sysconf``),
    plus ``threads``.

    Examples
    --------
    >>> import posemb
    >>> cfg = posemb.show_config(print_=False)
    >>> cfg["level"] in ("baseline", "sse2", "avx2", "avx512")
    True
    """
    print_ = _checks.flag(print_, "print_")
    cfg = dict(_core._dispatch())
    cfg["threads"] = str(get_num_threads())
    if print_:
        for key, value in cfg.items():
            print(f"{key + ':':18}{value}")
    return cfg


def _init_from_env() -> None:
    value = os.environ.get("POSEMB_NUM_THREADS")
    if not value:
        return
    try:
        set_num_threads(int(value))
    except (TypeError, ValueError):
        warnings.warn(f"ignoring POSEMB_NUM_THREADS={value!r}: not an integer >= 1",
                      RuntimeWarning, stacklevel=2)


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

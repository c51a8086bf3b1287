"""Thread count of posemb's internal pool (C kernels split large work)."""
from __future__ import annotations

import os
import warnings

from . import _checks, _core

__all__ = ["set_num_threads", "get_num_threads"]


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

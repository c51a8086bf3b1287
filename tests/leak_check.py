"""Call every public function 10,000 times (python tests/leak_check.py [n]) and
print one JSON line per call: refcount change of each input and growth of the
process's RSS and peak RSS (VmRSS/VmHWM, kB) over the calls after a warm-up.
Run in a fresh process by tests/test_refcounts.py.  Inputs are small, and a
few calls take the error path (error paths are where references leak)."""
import json
import sys

import numpy as np

import posemb  # noqa: F401
from registry import ERROR_CALLS, REGISTRY  # tests/ is this script's path

#: every registered call (tests/registry.py) and the error paths
CALLS = [(name, fn, args, kwargs) for name, fn, args, kwargs, _ in REGISTRY] + ERROR_CALLS


def _status(key):
    with open("/proc/self/status") as f:
        return next(int(line.split()[1]) for line in f if line.startswith(key))


def run(fn, args, kwargs, n):
    for _ in range(n):
        try:
            fn(*args, **kwargs)
        except (TypeError, ValueError, IndexError):
            pass


def refcounts(arrays):
    return [sys.getrefcount(a) for a in arrays]


def main(n):
    for name, fn, args, kwargs in CALLS:
        inputs = [a for a in list(args) + list(kwargs.values()) if isinstance(a, np.ndarray)]
        run(fn, args, kwargs, 1000)                        # warm caches and the allocator
        refs = refcounts(inputs)
        rss, hwm = _status("VmRSS"), _status("VmHWM")
        run(fn, args, kwargs, n)
        drefs = [after - before for after, before in zip(refcounts(inputs), refs)]
        print(json.dumps({"name": name, "calls": n, "refcount_delta": drefs,
                          "rss_kb": _status("VmRSS") - rss, "hwm_kb": _status("VmHWM") - hwm}),
              flush=True)


if __name__ == "__main__":
    main(int(sys.argv[1]) if len(sys.argv) > 1 else 10_000)

"""Run the API fuzzer (tests/fuzz_api.py) and the differential fuzzer
(tests/fuzz_diff.py) in subprocesses, so that a crash (segfault, abort)
shows as a signal instead of killing the test run.

A short run here (2,000 API cases, 1,000 differential cases); the long CI
run (100,000+ cases each, memory-capped, hangs and kills counted) is
.ci/fuzz.sh.  POSEMB_FUZZ_SEED picks another seed, POSEMB_FUZZ_CASES another
count.
"""
import os
import re
import signal
import subprocess
import sys

import pytest

import posemb

HERE = os.path.dirname(os.path.abspath(__file__))


def _run_fuzzer(script, default_cases, extra_env=None):
    """Run tests/<script> in a subprocess on POSEMB_FUZZ_CASES (else
    default_cases) cases from POSEMB_FUZZ_SEED (else 0), importing the posemb
    under test.  Returned: (cases, its stdout, the tail of its output); a
    crash (a signal) fails here, naming the signal."""
    cases = int(os.environ.get("POSEMB_FUZZ_CASES", str(default_cases)))
    seed = int(os.environ.get("POSEMB_FUZZ_SEED", "0"))
    root = os.path.dirname(os.path.dirname(os.path.abspath(posemb.__file__)))
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([root] + [p for p in [env.get("PYTHONPATH")] if p])
    env.update(extra_env or {})
    proc = subprocess.run([sys.executable, os.path.join(HERE, script), str(cases), str(seed)],
                          env=env, capture_output=True, text=True, timeout=1800)
    tail = (proc.stdout[-4000:] + proc.stderr[-4000:])
    if proc.returncode < 0:
        raise AssertionError(f"{script} crashed with {signal.Signals(-proc.returncode).name}:\n"
                             f"{tail}")
    assert proc.returncode == 0, tail
    return cases, proc.stdout, tail


def test_fuzz_public_api_never_crashes():
    extra = {}
    if "asan" in os.environ.get("LD_PRELOAD", ""):
        # The fuzzer caps its address space, except under ASan (whose shadow
        # memory is reserved up front); there, fail allocations above 4 GB
        # instead, or a fuzzed size of 2**31 rows pages the machine to death.
        extra["ASAN_OPTIONS"] = os.environ.get("ASAN_OPTIONS", "") + \
            ":allocator_may_return_null=1:max_allocation_size_mb=4096"
    cases, out, tail = _run_fuzzer("fuzz_api.py", 2000, extra)
    print(out.strip().splitlines()[-1] if out.strip() else tail)
    m = re.search(r"fuzz cases: (\d+) returned: (\d+) raised: (\d+) failures: (\d+)", out)
    assert m, tail
    n, returned, raised, failures = map(int, m.groups())
    assert n == cases
    assert returned + raised + failures == n
    assert failures == 0, tail
    assert returned > n // 4      # the plausible arguments do reach the kernels


def test_differential_fuzz_matches_the_oracle():
    cases, out, tail = _run_fuzzer("fuzz_diff.py", 1000)
    m = re.search(r"diff cases: (\d+) failures: (\d+)", out)
    assert m, tail
    assert int(m.group(1)) == cases
    assert int(m.group(2)) == 0, tail

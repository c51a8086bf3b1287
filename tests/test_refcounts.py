"""10,000 calls of each public function (and a few error paths) leave the
reference counts of the inputs and the process's RSS and peak RSS unchanged.

tests/leak_check.py does the calls in a fresh process (so earlier tests'
memory does not hide growth) and reports per call; each is checked here.
"""
import json
import os
import subprocess
import sys

import pytest

import posemb

HERE = os.path.dirname(os.path.abspath(__file__))
CALLS = 10_000
#: RSS growth allowed over 10,000 calls: a leak of 52 bytes a call exceeds it,
#: a leaked 16 KB input or result exceeds it on the 32nd call.
TOLERANCE_KB = 512

# the leak check runs every public function in a child process: a later CI step
pytestmark = pytest.mark.slow

sys.path.insert(0, HERE)
import leak_check  # noqa: E402

NAMES = [name for name, *_ in leak_check.CALLS]


@pytest.fixture(scope="module")
def report():
    root = os.path.dirname(os.path.dirname(os.path.abspath(posemb.__file__)))
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([root] + [p for p in [env.get("PYTHONPATH")] if p])
    proc = subprocess.run([sys.executable, os.path.join(HERE, "leak_check.py"), str(CALLS)],
                          env=env, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    return {d["name"]: d for d in map(json.loads, proc.stdout.splitlines())}


def test_every_public_callable_is_covered():
    import registry           # the one list of public calls (tests/registry.py)

    covered = {n.split("-")[0] for n in NAMES}
    assert registry.public_names() <= covered, registry.public_names() - covered


@pytest.mark.parametrize("name", NAMES)
def test_no_leak(report, name):
    r = report[name]
    assert r["calls"] == CALLS
    assert not any(r["refcount_delta"]), f"{name}: input refcounts changed {r['refcount_delta']}"
    if "asan" in os.environ.get("LD_PRELOAD", ""):
        return                       # ASan's quarantine holds freed memory on purpose
    assert r["rss_kb"] <= TOLERANCE_KB, f"{name}: RSS grew {r['rss_kb']} kB"
    assert r["hwm_kb"] <= TOLERANCE_KB, f"{name}: peak RSS grew {r['hwm_kb']} kB"

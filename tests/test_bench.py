"""`python -m posemb bench`: the harness runs and reports what it says it
does (timings themselves are never asserted: they belong to the bench)."""
import json
import subprocess
import sys
import time

import pytest

from posemb import _bench


def test_median_times_interleaves_rounds():
    calls = []
    fns = [lambda: calls.append("a"), lambda: calls.append("b")]
    times = _bench.median_times(fns, repeat=7, calls=2, rounds=3, warm_s=0)
    assert len(times) == 2 and all(t >= 0 for t in times)
    # 3 rounds, each: one warm-up call (warm_s=0), then that round's samples
    # of 2 calls (7 samples split 3 + 2 + 2), a's before b's
    want = []
    for n in [3, 2, 2]:
        want += ["a"] * (1 + 2 * n) + ["b"] * (1 + 2 * n)
    assert calls == want
    calls.clear()           # a warm-up period: calls repeat until it has passed
    t0 = time.perf_counter()
    _bench.median_times(fns, repeat=1, rounds=1, warm_s=0.02)
    assert time.perf_counter() - t0 >= 0.04
    assert calls.count("a") > 2 and calls.count("b") > 2


@pytest.mark.slow
def test_bench_json_has_every_family_and_ratio():
    out = subprocess.run(
        [sys.executable, "-m", "posemb", "bench", "--quick", "--repeat", "3", "--json",
         "--family", "rope", "--family", "sinusoidal", "--family", "learned",
         "--family", "bias"],
        capture_output=True, text=True, check=True, timeout=600).stdout
    result = json.loads(out)
    fams = {r["family"] for r in result["rows"]}
    assert fams == {"rope", "sinusoidal", "learned", "bias"}
    for r in result["rows"]:
        assert r["posemb_s"] > 0
        if r["limit_s"]:
            assert abs(r["posemb_over_limit"] - r["posemb_s"] / r["limit_s"]) < 1e-12
        if r["torch_s"]:
            assert abs(r["torch_over_posemb"] - r["torch_s"] / r["posemb_s"]) < 1e-12
    sc = result["thread_scaling"]
    assert sc["threads"] >= 2 and sc["speedup"] == sc["t1_ms"] / sc["tn_ms"]


def test_stream_limits_do_what_they_say():
    """The limit passes: read leaves its input, scale multiplies by 1, fill
    writes zeros, copy copies (sizes with vector tails; big enough to split
    over the pool)."""
    import numpy as np
    assert _bench._stream is not None      # the benchmark extension is built
    rng = np.random.default_rng(0)
    for n in (37, 1 << 20 | 5):
        x = rng.standard_normal(n, dtype=np.float32)
        keep = x.copy()
        _bench._limit("read", x)
        _bench._limit("scale", x)
        np.testing.assert_array_equal(x, keep)
        y = np.full_like(x, np.nan)
        _bench._limit("copy", x, y)
        np.testing.assert_array_equal(y, keep)
        _bench._limit("fill", y)
        np.testing.assert_array_equal(y, 0)

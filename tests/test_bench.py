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
    assert sc["threads"] >= 2
    assert abs(sc["speedup"] - sc["t1_ms"] / sc["tn_ms"]) < 1e-12 * sc["speedup"]


def test_stream_limits_do_what_they_say(monkeypatch):
    """The posemb._stream limit variants (1 and 2 threads): read leaves its
    input, scale multiplies by 1, fill writes zeros, copy copies, into a
    given or a new array (sizes with vector tails; big enough to split over
    the pool)."""
    import numpy as np
    assert _bench._stream is not None      # the benchmark extension is built
    monkeypatch.setattr(_bench, "CFG", _bench.Config(False, 2, 1 << 20, False, False, None))

    def run(*args, **kw):
        fns = {k: f for k, f in _bench._limit(*args, **kw).fns.items() if k.startswith("ext/")}
        assert sorted(fns) == ["ext/1t", "ext/2t"]
        return [f() for f in fns.values()]
    rng = np.random.default_rng(0)
    for n in (37, 1 << 20 | 5):
        x = rng.standard_normal(n, dtype=np.float32)
        keep = x.copy()
        run("read", x)
        run("scale", x)
        np.testing.assert_array_equal(x, keep)
        y = np.full_like(x, np.nan)
        run("copy", x, y)
        np.testing.assert_array_equal(y, keep)
        for z in run("copy", x, fresh=True):
            np.testing.assert_array_equal(z, keep)
        run("fill", y)
        np.testing.assert_array_equal(y, 0)
        for z in run("fill", shape=(n,)):
            np.testing.assert_array_equal(z, 0)


def test_bench_stream_passes_do_what_they_say():
    """The bench's own compiled passes (every variant, 1 and 2 threads,
    sizes with vector tails and unaligned starts) leave scale's and read's
    input, copy exactly, fill with zeros."""
    import numpy as np
    from posemb import _bench_stream
    st = _bench_stream.load()
    if st is None:
        pytest.skip("no C compiler for the bench's passes")
    rng = np.random.default_rng(1)
    for n in (37, (1 << 18) + 5):
        base = rng.standard_normal(n + 1, dtype=np.float32)
        for x in (base[:n], base[1:]):            # 64-byte aligned and not
            keep = x.copy()
            for variant in ("plain", "nt", "libc"):
                for threads in (1, 2):
                    st.run("scale", variant, threads, x)
                    st.run("read", variant, threads, x)
                    np.testing.assert_array_equal(x, keep)
                    y = np.full_like(x, np.nan)
                    st.run("copy", variant, threads, y, x)
                    np.testing.assert_array_equal(y, keep)
                    st.run("fill", variant, threads, y)
                    np.testing.assert_array_equal(y, 0)


def test_llc_is_read_and_big_cases_are_sized_from_it():
    from posemb import _bench
    llc, source = _bench.llc_bytes()
    assert llc >= 1 << 16 and source
    cfg = _bench.Config(False, 1, llc, False, False, None)
    s = cfg.big_seq(32, 128, 4)
    assert 32 * s * 128 * 4 >= 4 * llc and s >= 4096
    assert 32 * (s // 2) * 128 * 4 < 4 * llc or s == 4096


def test_ort_column_runs_the_same_rotation():
    """The ONNX Runtime column computes the RoPE posemb computes (3-d and
    4-d inputs, both layouts, and into a bound output)."""
    import numpy as np
    pytest.importorskip("onnxruntime")
    import posemb
    from posemb._bench_ort import OrtRope
    rng = np.random.default_rng(2)
    B, H, S, D = 2, 3, 5, 8
    x = rng.standard_normal((B, S, H, D)).astype(np.float32)
    pos = np.tile(np.arange(S, dtype=np.int64), (B, 1))
    for inter in (False, True):
        c, s = posemb.rope_cos_sin(np.arange(S), D, interleaved=inter)
        ch = np.ascontiguousarray(c[:, ::2] if inter else c[:, :D // 2])
        sh = np.ascontiguousarray(s[:, ::2] if inter else s[:, :D // 2])
        want = posemb.apply_rope(x.transpose(0, 2, 1, 3), c, s, interleaved=inter)
        got3 = OrtRope(x.reshape(B, S, H * D), H, ch, sh, pos, interleaved=inter)()
        np.testing.assert_allclose(got3.reshape(B, S, H, D).transpose(0, 2, 1, 3), want,
                                   rtol=1e-6, atol=1e-6)
        x4 = np.ascontiguousarray(x.transpose(0, 2, 1, 3))
        out = np.full_like(x4, np.nan)
        OrtRope(x4, H, ch, sh, pos, interleaved=inter, out=out)()
        np.testing.assert_allclose(out, want, rtol=1e-6, atol=1e-6)

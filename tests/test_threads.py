"""The thread pool: counts, env var, results independent of thread count,
concurrent callers, set_num_threads while computing, and fork."""
import multiprocessing as mp
import os
import subprocess
import sys
import threading

import numpy as np
import pytest

import posemb


@pytest.fixture
def restore_threads():
    old = posemb.get_num_threads()
    yield
    posemb.set_num_threads(old)


def _big_case(seed=0):
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((4, 8, 256, 64), dtype=np.float32)
    cos, sin = posemb.rope_cos_sin(np.arange(256), 64)
    return x, cos, sin


def test_set_get(restore_threads):
    assert posemb.set_num_threads(3) == 3
    assert posemb.get_num_threads() == 3
    assert posemb.set_num_threads(1000) == 64
    with pytest.raises(ValueError, match="n"):
        posemb.set_num_threads(0)
    with pytest.raises(TypeError, match="n"):
        posemb.set_num_threads(2.5)


def test_env_var():
    code = "import posemb; print(posemb.get_num_threads())"
    env = dict(os.environ, POSEMB_NUM_THREADS="3")
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True)
    assert out.stdout.strip() == "3", out.stderr
    env["POSEMB_NUM_THREADS"] = "lots"
    out = subprocess.run([sys.executable, "-W", "error::RuntimeWarning", "-c", code],
                         env=env, capture_output=True, text=True)
    assert out.returncode != 0 and "POSEMB_NUM_THREADS" in out.stderr


@pytest.mark.parametrize("threads", [1, 2, 3, 7])
def test_results_do_not_depend_on_threads(restore_threads, threads):
    x, cos, sin = _big_case()
    posemb.set_num_threads(1)
    want = posemb.apply_rope(x, cos, sin)
    want_guf = posemb._core.rope_half_fwd(x, cos, sin)
    posemb.set_num_threads(threads)
    np.testing.assert_array_equal(posemb.apply_rope(x, cos, sin), want)
    np.testing.assert_array_equal(posemb._core.rope_half_fwd(x, cos, sin), want_guf)
    np.testing.assert_array_equal(want, want_guf)


def test_concurrent_callers_and_set_num_threads(restore_threads):
    x, cos, sin = _big_case()
    want = posemb.apply_rope(x, cos, sin)
    errors = []
    stop = threading.Event()

    def worker(i):
        try:
            for _ in range(20):
                y = posemb.apply_rope(x, cos, sin) if i % 2 else \
                    posemb._core.rope_half_fwd(x, cos, sin)
                if not np.array_equal(y, want):
                    errors.append(f"thread {i}: wrong result")
        except Exception as e:  # pragma: no cover - reported below
            errors.append(repr(e))

    def flipper():
        k = 0
        while not stop.is_set():
            posemb.set_num_threads(1 + k % 3)
            k += 1

    threads = [threading.Thread(target=worker, args=(i,)) for i in range(8)]
    f = threading.Thread(target=flipper)
    f.start()
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    stop.set()
    f.join()
    assert not errors


def _child(q):
    x, cos, sin = _big_case()
    q.put(posemb.apply_rope(x, cos, sin).sum(dtype=np.float64))


def test_fork_after_pool_used(restore_threads):
    posemb.set_num_threads(2)
    x, cos, sin = _big_case()
    want = posemb.apply_rope(x, cos, sin).sum(dtype=np.float64)   # pool has run
    ctx = mp.get_context("fork")
    q = ctx.Queue()
    p = ctx.Process(target=_child, args=(q,))
    p.start()
    got = q.get(timeout=60)
    p.join(timeout=60)
    assert p.exitcode == 0
    assert got == want

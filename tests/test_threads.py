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


@pytest.mark.parametrize("seq", [64, 192, 384, 768])
def test_idle_pool_and_loops_give_the_formula(restore_threads, seq):
    """2 threads, arrays of 1-12 MiB (around the sizes that go parallel,
    and the larger ones that go parallel even with the pool's threads
    asleep): each call after the pool has been idle (which runs mid-size
    work on the caller and wakes nobody), then calls in a loop (the first
    wakes the threads, the next find them awake), in place and into a new
    array: every result is the float32 formula's bits."""
    import time
    rng = np.random.default_rng(seq)
    x0 = rng.standard_normal((1, 32, seq, 128), dtype=np.float32)
    cos, sin = posemb.rope_cos_sin(np.arange(seq), 128)
    a, b, c, s = x0[..., :64], x0[..., 64:], cos[:, :64], sin[:, :64]
    want = np.concatenate([a * c - b * s, b * c + a * s], axis=-1)
    posemb.set_num_threads(2)
    for idle in (True, True, False, False, False):
        if idle:
            time.sleep(0.01)
        np.testing.assert_array_equal(posemb.apply_rope(x0, cos, sin), want)
        x = x0.copy()
        if idle:
            time.sleep(0.01)
        assert posemb.apply_rope(x, cos, sin, out=x) is x
        np.testing.assert_array_equal(x, want)


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


def _in_forked_child(target):
    """Run target(queue) in a fork()ed child; return what it put, after
    checking the child exited cleanly."""
    ctx = mp.get_context("fork")
    q = ctx.Queue()
    p = ctx.Process(target=target, args=(q,))
    p.start()
    got = q.get(timeout=120)
    p.join(timeout=60)
    assert p.exitcode == 0
    return got


def _child(q):
    x, cos, sin = _big_case()
    q.put(posemb.apply_rope(x, cos, sin))


def test_fork_after_pool_used(restore_threads):
    posemb.set_num_threads(2)
    x, cos, sin = _big_case()
    want = posemb.apply_rope(x, cos, sin)   # pool has run
    got = _in_forked_child(_child)
    assert got.dtype == want.dtype and np.array_equal(got, want)


# ---------------------------------------------------------------- every family

def _family_calls():
    """(name, thunk) pairs over shared inputs, one or more per kernel family;
    sizes large enough that the pool splits the work."""
    rng = np.random.default_rng(7)
    x = rng.standard_normal((4, 8, 256, 64), dtype=np.float32)
    cos, sin = posemb.rope_cos_sin(np.arange(256), 64)
    xs = rng.standard_normal((8, 512, 128), dtype=np.float32)
    w = rng.standard_normal((1024, 128), dtype=np.float32)
    pos = rng.integers(0, 1024, 512)
    t5 = rng.standard_normal((32, 8), dtype=np.float32)
    g5 = rng.standard_normal((8, 256, 256), dtype=np.float32)
    sht = rng.standard_normal((33, 64), dtype=np.float32)
    rope = posemb.RoPE(64, 16)            # shared; its cache grows under the threads
    ape = posemb.AbsolutePE(128, 4096)
    return [
        ("apply_rope", lambda: posemb.apply_rope(x, cos, sin, interleaved=True)),
        ("RoPE", lambda: rope(x, offset=1000)),
        ("RoPE.backward", lambda: rope.backward(x[:, :, :100], np.arange(3000, 3100))),
        ("sinusoidal", lambda: posemb.sinusoidal(2048, 128, start=12345)),
        ("add_sinusoidal", lambda: posemb.add_sinusoidal(xs, start=7)),
        ("AbsolutePE", lambda: ape(xs, start=100)),
        ("learned_pe_forward", lambda: posemb.learned_pe_forward(xs, w, pos)),
        ("learned_pe_backward", lambda: posemb.learned_pe_backward(xs, pos,
                                                                   num_positions=1024)),
        ("t5_relative_bias", lambda: posemb.t5_relative_bias(t5, 512, 512, query_offset=3)),
        ("t5_relative_bias_backward", lambda: posemb.t5_relative_bias_backward(
            g5, num_buckets=32, query_length=256, key_length=256)),
        ("relative_embeddings", lambda: posemb.relative_embeddings(sht, 128, 256)),
        ("alibi_bias", lambda: posemb.alibi_bias(12, 512, 512)),
        ("causal_mask", lambda: posemb.causal_mask(1024, 2048, window=100)),
    ]


def test_eight_threads_every_family_match_serial(restore_threads):
    """8 Python threads on shared inputs, while another changes the thread
    count, give the serial results for every kernel family."""
    posemb.set_num_threads(1)
    calls = _family_calls()
    want = {name: fn() for name, fn in calls}
    posemb.set_num_threads(2)
    errors, stop = [], threading.Event()

    def worker(i):
        try:
            for k in range(3):
                for j, (name, fn) in enumerate(calls):
                    if (i + j + k) % 2:
                        continue
                    got = fn()
                    if not np.array_equal(got, want[name]):
                        errors.append(f"thread {i}: {name} differs from serial")
        except Exception as e:  # pragma: no cover - reported below
            errors.append(f"thread {i}: {e!r}")

    def flipper():
        k = 0
        while not stop.is_set():
            posemb.set_num_threads(1 + k % 4)
            k += 1

    f = threading.Thread(target=flipper)
    threads = [threading.Thread(target=worker, args=(i,)) for i in range(8)]
    f.start()
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    stop.set()
    f.join()
    assert not errors, errors[:5]


def _child_families(q):
    q.put({name: fn() for name, fn in _family_calls()})


def test_fork_child_every_family(restore_threads):
    """A fork()ed child computes every family correctly (whole arrays, bit for
    bit) after the parent used the pool with several threads."""
    posemb.set_num_threads(3)
    want = {name: fn() for name, fn in _family_calls()}
    got = _in_forked_child(_child_families)
    assert sorted(got) == sorted(want)
    for name in want:
        assert got[name].dtype == want[name].dtype, name
        assert np.array_equal(got[name], want[name]), name


# ---------------------------------------------------------------- fork while a lock is held

def _fork_while_inside(monkeypatch, module, hook_name, hold, child_call):
    """Thread A runs ``hold()``, which enters a locked section whose table
    work (``module.hook_name``) is made to wait; the main thread forks
    while A is inside.  The child runs ``child_call()`` (which needs the same
    lock) and sends the result back; it must finish within 60 s."""
    import os
    import pickle
    import time

    real = getattr(module, hook_name)
    inside, release = threading.Event(), threading.Event()

    def waiting(*args, **kwargs):
        if threading.current_thread().name == "holder":
            inside.set()
            release.wait(60)
        return real(*args, **kwargs)

    monkeypatch.setattr(module, hook_name, waiting)
    holder = threading.Thread(target=hold, name="holder")
    holder.start()
    try:
        assert inside.wait(60)
        r, w = os.pipe()
        pid = os.fork()
        if pid == 0:                                       # child
            try:
                os.close(r)
                data = pickle.dumps(child_call())
                with os.fdopen(w, "wb") as f:
                    f.write(data)
                os._exit(0)
            except BaseException:
                os._exit(3)
        os.close(w)
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            done, status = os.waitpid(pid, os.WNOHANG)
            if done:
                break
            time.sleep(0.05)
        else:
            os.kill(pid, 9)
            os.waitpid(pid, 0)
            pytest.fail("the forked child hung on a lock held by another thread at fork()")
        with os.fdopen(r, "rb") as f:
            got = pickle.loads(f.read())
        assert os.WIFEXITED(status) and os.WEXITSTATUS(status) == 0
        return got
    finally:
        release.set()
        holder.join(60)


def test_fork_while_rope_cache_grows(monkeypatch):
    import posemb._rope_module as rope_mod

    rope = posemb.RoPE(8, 4, dtype=np.float64)
    x = np.random.default_rng(3).standard_normal((2, 5, 8))
    got = _fork_while_inside(monkeypatch, rope_mod, "_tables",
                             lambda: rope(x, offset=100),     # grows the cache under the lock
                             lambda: rope(x, offset=50))      # needs the lock in the child
    want = posemb.apply_rope(x, *posemb.rope_cos_sin(np.arange(50, 55), 8, dtype=np.float64))
    assert got.dtype == want.dtype and np.array_equal(got, want)


def test_fork_while_absolute_pe_makes_a_table(monkeypatch):
    import posemb._sinusoidal as sin_mod

    pe = posemb.AbsolutePE(6, 10, dtype=np.float32)
    x64 = np.random.default_rng(4).standard_normal((2, 10, 6))
    x16 = x64.astype(np.float16)
    got = _fork_while_inside(monkeypatch, sin_mod, "_table",
                             lambda: pe(x64),                 # makes the float64 table locked
                             lambda: pe(x16))                 # the same table, in the child
    want = (x16.astype(np.float64) + posemb.sinusoidal(10, 6, dtype=np.float64)).astype(np.float16)
    assert got.dtype == np.float16 and np.array_equal(got, want)


_FORK_IN_SIGNAL_HANDLER = r"""
import os, signal, threading
import numpy as np
import posemb
posemb.set_num_threads(2)
kids = []
def handler(signum, frame):
    pid = os.fork()
    if pid == 0:
        os._exit(0)
    kids.append(pid)
signal.signal(signal.SIGUSR1, handler)
# over a second of work: float16 with a rotary width of 62 (the scalar loop),
# position 0 (cos 1, sin 0), so y is x
x = np.broadcast_to(np.ones(64, np.float16), (2**21, 64))
c, s = posemb.rope_cos_sin(np.arange(1), 62, dtype=np.float16)
out = np.zeros(x.shape, np.float16)
timer = threading.Timer(0.2, os.kill, (os.getpid(), signal.SIGUSR1))
timer.start()
posemb.apply_rope(x, c, s, out=out)
timer.join()
for pid in kids:
    os.waitpid(pid, 0)
print(len(kids), bool((out == 1).all()))
"""


def test_signal_handler_that_forks_during_a_threaded_call():
    """A long call on 2 threads asks stop() (which runs Python's signal
    handlers) every ~100 ms with its pool job paused: a handler that forks
    (pthread_atfork waits for any job in flight) must not find the pool
    locked by the very thread it runs on -- that deadlocks.  The call then
    goes on to its end and writes every row."""
    r = subprocess.run([sys.executable, "-c", _FORK_IN_SIGNAL_HANDLER],
                       capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    assert r.stdout.split() == ["1", "True"]

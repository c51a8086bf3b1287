"""The output cache (posemb.set_output_cache): freed large outputs come back
for the next output of their size, with the right values, and nothing else
changes: NumPy's own allocator outside posemb's calls, limits, resizes,
views, threads and forks."""
import multiprocessing
import os
import subprocess
import sys
import threading

import numpy as np
import pytest

import posemb
from posemb import _native
from posemb import _reference as R

MIN = int(_native.OUT_CACHE_MIN_BYTES)
handler_name = np._core.multiarray.get_handler_name   # (NumPy >= 2; no public name)


def kept():
    """(limit, bytes kept, blocks kept)"""
    return tuple(int(v) for v in _native._out_cache(None))


@pytest.fixture(autouse=True)
def fresh_cache():
    """Each test starts with an empty cache of the default limit and leaves it so."""
    limit = kept()[0]
    posemb.empty_cache()
    yield
    posemb.set_output_cache(limit)
    posemb.empty_cache()


def big(seq=2048, heads=4, dim=128, dtype=np.float32, seed=0):
    """x (1, heads, seq, dim) of at least MIN bytes, tables, and the float64 oracle"""
    x = np.random.default_rng(seed).standard_normal((1, heads, seq, dim)).astype(dtype)
    assert x.nbytes >= MIN
    cos, sin = posemb.rope_cos_sin(np.arange(seq), dim, dtype=dtype)
    return x, cos, sin


def address(a):
    return a.__array_interface__["data"][0]


def test_a_freed_output_is_reused_with_the_right_values():
    x, cos, sin = big()
    expected = R.apply_rope(x.astype(np.float64), cos.astype(np.float64),
                            sin.astype(np.float64))
    y = posemb.apply_rope(x, cos, sin)
    assert handler_name(y) == "posemb_output_cache"
    np.testing.assert_allclose(y, expected, rtol=1e-5, atol=1e-5)
    where = address(y)
    y[...] = np.nan                     # a dirty block: every value must be written again
    del y
    assert kept()[1:] == (x.nbytes, 1)
    z = posemb.apply_rope(x, cos, sin)
    assert address(z) == where and kept()[1:] == (0, 0)
    np.testing.assert_allclose(z, expected, rtol=1e-5, atol=1e-5)
    assert np.array_equal(z, posemb.apply_rope(x, cos, sin, out=np.empty_like(x)))


@pytest.mark.skipif(not sys.platform.startswith(("linux", "darwin")),
                    reason="posix_memalign: elsewhere blocks come from malloc")
def test_new_outputs_start_a_page():
    """posemb's large outputs start a page (NumPy's own start 16 bytes past
    one), fresh and reused: on a 64-byte line, so the kernels' streaming
    stores write whole aligned vectors, and not just past the inputs'
    offset within a page (at 64, their stores' low address bits met the
    loads of x and the tables at 16 just after them, which waited: see
    large_block in src/runtime/memory.c); the values are the out= call's."""
    x, cos, sin = big()
    for _ in range(2):                               # fresh, then from the cache
        y = posemb.apply_rope(x, cos, sin)
        assert handler_name(y) == "posemb_output_cache" and address(y) % 4096 == 0
        assert np.array_equal(y, posemb.apply_rope(x, cos, sin, out=np.empty_like(x)))
        del y
    assert kept()[1:] == (x.nbytes, 1)


def test_numpy_allocator_is_untouched_outside_posemb_calls():
    x, cos, sin = big()
    y = posemb.apply_rope(x, cos, sin)
    assert handler_name() == "default_allocator"
    assert handler_name(np.empty(MIN * 2, np.uint8)) == "default_allocator"
    with pytest.raises(ValueError, match="cos"):    # a failed call leaves it too
        posemb.apply_rope(x, cos[:5], sin)
    assert handler_name() == "default_allocator"
    small = posemb.apply_rope(x[:, :1, :16], cos[:16], sin[:16])
    assert handler_name(small) == "default_allocator"    # below MIN: NumPy's own
    del y


@pytest.mark.parametrize("call", [
    lambda x, c, s: posemb.apply_rope(x, c, s),                         # the fast road
    lambda x, c, s: posemb.apply_rope(x, c[None, None], s[None, None]),   # HF's 4-d tables
    lambda x, c, s: posemb.apply_rope(np.swapaxes(x, 1, 2).copy(), c[:, None], s[:, None]),
    lambda x, c, s: posemb.apply_rope_backward(x, c, s),
    lambda x, c, s: posemb.apply_rope(x[:, :, ::2], c[::2], s[::2]),    # the long road
    lambda x, c, s: posemb.RoPE(128, 4096)(x),
    lambda x, c, s: posemb.RoPE(128, 4096)(x, positions=np.arange(x.shape[2])),
    lambda x, c, s: posemb.add_sinusoidal(x),
    lambda x, c, s: posemb.AbsolutePE(128, 4096)(x),
    lambda x, c, s: posemb.learned_pe_forward(x, c),
    lambda x, c, s: posemb.learned_pe_forward(x, c.astype(np.float64)),  # a promoted dtype
    lambda x, c, s: posemb.apply_rope_varlen(x.reshape(4096, 4, 128), np.array([0, 1000, 4096]),
                                             c, s),
], ids=["apply_rope", "hf-tables", "bshd", "backward", "long-road", "RoPE", "RoPE-positions",
        "add_sinusoidal", "AbsolutePE", "learned", "learned-float64", "varlen"])
def test_each_family_new_output_comes_from_the_cache_and_is_right(call):
    x, cos, sin = big(seq=4096)
    first = call(x, cos, sin)
    want = first.copy()
    assert handler_name(first) == "posemb_output_cache"
    first[...] = np.nan
    del first
    again = call(x, cos, sin)
    assert handler_name(again) == "posemb_output_cache"
    assert np.array_equal(again, want)


def test_bfloat16_new_output_comes_from_the_cache_and_is_right():
    """ml_dtypes bfloat16 (the bfloat16 kernels write uint16 bit patterns,
    returned as a bfloat16 view of them): a large new output is a cache block
    too, and the next call of the size gets it back with the right values."""
    bf16 = pytest.importorskip("ml_dtypes").bfloat16
    x, cos, sin = big(seq=4096)
    x, cos, sin = x.astype(bf16), cos.astype(bf16), sin.astype(bf16)
    first = posemb.apply_rope(x, cos, sin)
    assert first.dtype == bf16
    want = first.copy()
    assert handler_name(first.base) == "posemb_output_cache"
    first[...] = np.nan
    del first
    again = posemb.apply_rope(x, cos, sin)
    assert handler_name(again.base) == "posemb_output_cache"
    assert np.array_equal(again.view(np.uint16), want.view(np.uint16))
    want32 = R.apply_rope(x.astype(np.float64), cos.astype(np.float64), sin.astype(np.float64))
    np.testing.assert_allclose(again.astype(np.float64), want32, rtol=2**-7, atol=1e-6)


def test_only_the_output_is_cached():
    """NumPy's own allocations inside a call (a cast copy of x) are not
    cached, and a caller's out= takes nothing from the cache."""
    x, cos, sin = big(dtype=np.float16, seq=4096)
    c32, s32 = cos.astype(np.float32), sin.astype(np.float32)
    y = posemb.apply_rope(x, c32, s32)           # float32 out; x cast to float32 inside
    assert y.dtype == np.float32 and handler_name(y) == "posemb_output_cache"
    del y
    assert kept()[1:] == (x.nbytes * 2, 1)       # the output only
    posemb.empty_cache()
    xa = x.astype(np.float32)
    out = np.empty_like(xa)
    assert posemb.AbsolutePE(128, 4096)(xa, out=out) is out
    assert posemb.add_sinusoidal(xa, out=out) is out
    assert kept()[1:] == (0, 0) and handler_name(out) == "default_allocator"


class Recorder(np.ndarray):
    """Records NumPy's allocator whenever Python code runs inside a call."""
    seen: list = []

    def __array_finalize__(self, obj):
        Recorder.seen.append(handler_name())


def test_no_python_code_runs_under_the_cache():
    x, cos, sin = big()
    xs = x.view(Recorder)
    Recorder.seen.clear()
    for call in (lambda: posemb.apply_rope(xs, cos, sin), lambda: posemb.add_sinusoidal(xs),
                 lambda: posemb.RoPE(128, 4096)(xs), lambda: posemb.apply_rope(x, cos, sin)):
        call()
    assert Recorder.seen and set(Recorder.seen) == {"default_allocator"}
    assert handler_name() == "default_allocator"


def test_a_view_keeps_its_block():
    x, cos, sin = big()
    y = posemb.apply_rope(x, cos, sin)
    view = y[0, 0, :8]
    want = view.copy()
    del y                                # the block lives on in view's base
    assert kept()[1:] == (0, 0)
    z = posemb.apply_rope(x, cos, sin)
    z[...] = 0
    assert np.array_equal(view, want)
    del view
    assert kept()[1:] == (x.nbytes, 1)
    del z
    assert kept()[1:] == (x.nbytes * 2, 2)


def test_limits_and_empty_cache():
    x, cos, sin = big()
    n = x.nbytes
    ys = [posemb.apply_rope(x, cos, sin) for _ in range(3)]
    del ys
    assert kept()[1:] == (3 * n, 3)
    assert posemb.set_output_cache(2 * n) == 2**30 or kept()[0] < 2**30   # (1/16 of RAM)
    assert kept() == (2 * n, 2 * n, 2)              # the oldest released
    assert posemb.show_config(print_=False)["output_cache"] == \
        f"{2 * n >> 20} MiB held in 2 blocks, limit {2 * n >> 20} MiB"
    posemb.empty_cache()
    assert kept() == (2 * n, 0, 0)
    y = posemb.apply_rope(x, cos, sin)
    posemb.set_output_cache(n - 1)                  # smaller than the block: freed
    del y
    assert kept() == (n - 1, 0, 0)
    assert posemb.set_output_cache(0) == n - 1
    y = posemb.apply_rope(x, cos, sin)
    del y
    assert kept() == (0, 0, 0)


def test_at_most_eight_blocks_oldest_released_first():
    x, cos, sin = big(seq=2048 + 80)
    sizes = [x[:, :, :s] for s in range(2048 + 80, 2048, -8)]     # ten sizes >= MIN
    outs = [posemb.apply_rope(v, cos[:v.shape[2]], sin[:v.shape[2]]) for v in sizes]
    nbytes = [o.nbytes for o in outs]
    for i in range(10):                             # freed in this order
        outs[i] = None
    assert kept()[1:] == (sum(nbytes[2:]), 8)
    y = posemb.apply_rope(sizes[0], cos, sin)       # released: a new block
    assert kept()[1:] == (sum(nbytes[2:]), 8)
    z = posemb.apply_rope(sizes[9], cos[:sizes[9].shape[2]], sin[:sizes[9].shape[2]])
    assert kept()[1:] == (sum(nbytes[2:9]), 7)      # kept: taken
    del y, z


def test_a_resized_output_is_not_kept_as_its_old_size():
    x, cos, sin = big()
    y = posemb.apply_rope(x, cos, sin)
    y.resize((x.size // 2,), refcheck=False)        # NumPy reallocs through the cache
    y[...] = 1
    del y
    assert kept()[1:] == (0, 0)
    z = posemb.apply_rope(x, cos, sin)
    assert np.array_equal(z, posemb.apply_rope(x, cos, sin, out=np.empty_like(x)))


def test_threads_share_the_cache():
    x, cos, sin = big()
    want = posemb.apply_rope(x, cos, sin, out=np.empty_like(x))
    bad = []

    def work():
        for _ in range(6):
            y = posemb.apply_rope(x, cos, sin)
            if not np.array_equal(y, want):
                bad.append(1)
            y[...] = np.nan
    threads = [threading.Thread(target=work) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert bad == [] and kept()[1] == kept()[2] * x.nbytes


def _child(conn):
    x, cos, sin = big()
    y = posemb.apply_rope(x, cos, sin)
    conn.send(bool(np.array_equal(y, posemb.apply_rope(x, cos, sin, out=np.empty_like(x)))))


@pytest.mark.skipif(not hasattr(os, "fork"), reason="no fork")
def test_a_forked_child_uses_the_inherited_cache():
    x, cos, sin = big()
    y = posemb.apply_rope(x, cos, sin)
    del y                                           # a block kept before the fork
    ctx = multiprocessing.get_context("fork")
    a, b = ctx.Pipe()
    p = ctx.Process(target=_child, args=(b,))
    p.start()
    assert a.poll(60) and a.recv() is True
    p.join(60)
    assert p.exitcode == 0


@pytest.mark.parametrize("value, limit, warns", [("0", 0, False), ("12345", 12345, False),
                                                 ("lots", None, True), ("-1", None, True)])
def test_environment_sets_the_initial_limit(value, limit, warns):
    code = ("import warnings; warnings.simplefilter('always'); import posemb; "
            "print(posemb.set_output_cache(0))")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                       env={**os.environ, "POSEMB_OUTPUT_CACHE": value}, timeout=120)
    assert r.returncode == 0, r.stderr
    if limit is not None:
        assert int(r.stdout) == limit
    assert ("POSEMB_OUTPUT_CACHE" in r.stderr) == warns

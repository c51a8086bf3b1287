"""RoPE on operands that overlap themselves or each other, and long calls.

Every RoPE call goes through NumPy's gufunc machinery, which copies an
operand that overlaps another (or an output that overlaps itself) before the
C loop runs, so these calls give NumPy's answer.  The oracle here is the
rotation formula in float64, written out with NumPy (no posemb code).
"""
import _thread
import threading
import time
import warnings

import numpy as np
import pytest
from numpy.lib.stride_tricks import as_strided

import posemb


def oracle_rotate(x, pos, dim, backward=False, interleaved=False, base=10000.0):
    """float64 rotation of the vectors x (..., dim) at integer positions pos."""
    x = np.asarray(x, np.float64)
    inv = base ** (-(np.arange(0, dim, 2, dtype=np.float64) / dim))
    ang = np.asarray(pos, np.float64)[..., None] * inv
    c, s = np.cos(ang), np.sin(ang)
    if backward:
        s = -s
    if interleaved:
        a, b = x[..., 0::2], x[..., 1::2]
    else:
        a, b = x[..., : dim // 2], x[..., dim // 2:]
    ya, yb = a * c - b * s, b * c + a * s
    y = np.empty(np.broadcast_shapes(x.shape, ya.shape[:-1] + (dim,)))
    if interleaved:
        y[..., 0::2], y[..., 1::2] = ya, yb
    else:
        y[..., : dim // 2], y[..., dim // 2:] = ya, yb
    return y


def overlapping(shape=(16, 4096, 8)):
    """Every vector of the view is the same 8 floats of one buffer."""
    buf = np.arange(1, 9, dtype=np.float32)
    return buf, as_strided(buf, shape, (0,) * (len(shape) - 1) + (4,))


def constant_tables(n, dim, p, interleaved):
    """cos/sin for n positions, all equal to position p."""
    return posemb.rope_cos_sin(np.full(n, p), dim, interleaved=interleaved)


@pytest.mark.parametrize("backward", [False, True])
@pytest.mark.parametrize("interleaved", [False, True])
def test_self_overlapping_in_place_constant_tables(backward, interleaved):
    """All 16 x 4096 vectors alias one 8-float row and all rotate by the same
    angle: the row must be rotated once (a kernel writing in place would
    rotate it 65536 times)."""
    buf, x = overlapping()
    want = oracle_rotate(np.arange(1, 9), 7, 8, backward, interleaved)
    c, s = constant_tables(4096, 8, 7, interleaved)
    fn = posemb.apply_rope_backward if backward else posemb.apply_rope
    y = fn(x, c, s, interleaved=interleaved, out=x)
    assert y is x
    np.testing.assert_allclose(buf, want, rtol=1e-6, atol=1e-6)


@pytest.mark.parametrize("backward", [False, True])
def test_self_overlapping_in_place_issue_example(backward):
    """The example from the report: positions 0..4095 over one aliased row.
    NumPy computes every vector from the unmodified input and writes them
    back in order, so the row ends as the last position's rotation."""
    buf, x = overlapping()
    c, s = posemb.rope_cos_sin(np.arange(4096), 8)
    fn = posemb.apply_rope_backward if backward else posemb.apply_rope
    fn(x, c, s, out=x)
    want = oracle_rotate(np.arange(1, 9), 4095, 8, backward)
    np.testing.assert_allclose(buf, want, rtol=1e-5, atol=1e-5)


def test_self_overlapping_rope_module_out_and_apply_qk():
    rope = posemb.RoPE(8, 4096)
    buf, x = overlapping()
    rope(x, out=x)
    np.testing.assert_allclose(buf, oracle_rotate(np.arange(1, 9), 4095, 8), rtol=1e-5, atol=1e-5)
    buf, x = overlapping()
    rope.backward(x, out=x)
    np.testing.assert_allclose(buf, oracle_rotate(np.arange(1, 9), 4095, 8, True),
                               rtol=1e-5, atol=1e-5)
    # q and k alias their own rows (k: 2 heads of 4096 positions)
    qbuf, q = overlapping((1, 4, 4096, 8))
    kbuf, k = overlapping((1, 2, 4096, 8))
    qr, kr = rope.apply_qk(q, k, inplace=True)
    assert qr is q and kr is k
    for b in (qbuf, kbuf):
        np.testing.assert_allclose(b, oracle_rotate(np.arange(1, 9), 4095, 8), rtol=1e-5, atol=1e-5)


def test_out_overlapping_x_partially():
    """out shifted by one vector inside x's buffer: NumPy copies first."""
    rng = np.random.default_rng(0)
    buf = rng.standard_normal((3, 65, 64)).astype(np.float32)
    x, out = buf[:, :64], buf[:, 1:]
    x0 = x.copy()
    c, s = posemb.rope_cos_sin(np.arange(64), 64)
    posemb.apply_rope(x, c, s, out=out)
    np.testing.assert_allclose(out, oracle_rotate(x0, np.arange(64), 64), rtol=1e-5, atol=1e-5)


def test_tables_overlapping_out():
    """out is the cos table's own memory."""
    c, s = posemb.rope_cos_sin(np.arange(32), 16)
    x = np.ones((32, 16), np.float32)
    want = oracle_rotate(x, np.arange(32), 16)
    posemb.apply_rope(x, c, s, out=c)
    np.testing.assert_allclose(c, want, rtol=1e-5, atol=1e-5)


def test_huge_zero_stride_view_refused_quickly():
    """2**40 aliased rows: in place needs NumPy's copy, out of place a new
    array; both are refused at once (MemoryError), never a loop in C."""
    buf = np.arange(1, 9, dtype=np.float32)
    x = as_strided(buf, (2**40, 8), (0, 4))
    c, s = posemb.rope_cos_sin(np.arange(1), 8)
    for out in (x, None):
        t0 = time.monotonic()
        with pytest.raises(MemoryError):
            posemb.apply_rope(x, c, s, out=out)
        assert time.monotonic() - t0 < 5.0
    np.testing.assert_array_equal(buf, np.arange(1, 9))


def _interrupt(call, seconds=0.1):
    """Run call() with Ctrl-C (_thread.interrupt_main) `seconds` into it.
    Returns (seconds until the call returned, or None if it raised
    KeyboardInterrupt, seconds until KeyboardInterrupt).  A call that
    returns waits in a busy loop for the interrupt (the timer thread gets
    the GIL, the eval loop sees the signal) for up to 10 s."""
    timer = threading.Timer(seconds, _thread.interrupt_main)
    t0 = time.monotonic()
    timer.start()
    returned = None
    try:
        with pytest.raises(KeyboardInterrupt):
            call()
            returned = time.monotonic() - t0
            while time.monotonic() - t0 < 10:
                pass
        elapsed = time.monotonic() - t0
    finally:
        timer.cancel()
    return returned, elapsed


def test_long_call_is_interruptible():
    """A call of over a second (float16: 2**27 values, computed in float32
    by the scalar loop: a rotary width of 62 has halves of 31 values, which
    the F16C kernels, 8 values at a time, do not take) stops within a
    fraction of a second of Ctrl-C, raising KeyboardInterrupt from the call
    itself, with the end of the output not yet written."""
    x = np.broadcast_to(np.ones(64, np.float16), (2**21, 64))
    c, s = posemb.rope_cos_sin(np.arange(1), 62, dtype=np.float16)
    out = np.full(x.shape, np.nan, np.float16)
    returned, elapsed = _interrupt(lambda: posemb.apply_rope(x, c, s, out=out))
    assert returned is None, f"the call ran to its end ({returned:.2f} s) through Ctrl-C"
    assert elapsed < 3.0
    assert np.isnan(out[-1]).all()


@pytest.mark.parametrize("handling", ["log", "call", "warn"])
def test_interrupt_survives_floating_point_handling(handling):
    """inf * 0 raises the invalid flag in every chunk, so after the stopped
    loop NumPy's floating-point check would call Python (a log object's
    write, an errstate call= function, warnings.warn) with the
    KeyboardInterrupt pending: the log object used to swallow it (the
    half-written output returned, the Ctrl-C lost: "DID NOT RAISE"), the
    others turned it into SystemError."""
    x = np.broadcast_to(np.full(64, np.inf, np.float16), (2**21, 64))
    c, s = posemb.rope_cos_sin(np.arange(1), 62, dtype=np.float16)
    out = np.full(x.shape, np.nan, np.float16)
    seen = []

    class Log:
        def write(self, msg):
            try:
                seen.append(msg)
            except Exception:
                pass

    kw = {"log": dict(call=Log()), "call": dict(call=lambda *a: seen.append(a)),
          "warn": {}}[handling]
    with np.errstate(invalid=handling, **kw), warnings.catch_warnings(record=True) as w:
        warnings.simplefilter("always")
        # a first warning from the same line gives its module the
        # __warningregistry__ that takes warnings.warn all the way
        posemb.apply_rope(x[:8], c, s, out=out[:8])
        assert len(seen) + len(w) == 1
        seen.clear()
        out[:8] = np.nan
        warm = len(w)
        returned, elapsed = _interrupt(lambda: posemb.apply_rope(x, c, s, out=out))
    assert returned is None, f"the call ran to its end ({returned:.2f} s) through Ctrl-C"
    assert elapsed < 3.0
    assert np.isnan(out[-1]).all()
    assert seen == [] and len(w) == warm    # a stopped call reports no floating-point error


def test_interrupt_stops_every_outer_iteration():
    """out's outer axes (4, 2) do not merge (strides 3 and 1 rows of grids),
    so NumPy calls the loop 4 times, 2 grids (~0.1-0.3 s) each.  Once one
    call stops (the first whose stop check comes after the timer), the rest
    must not run; they used to, in full (the signal already consumed, nothing
    told them to stop), so the last grids were always written."""
    S = 2**18
    x = np.broadcast_to(np.ones(64, np.float16), (4, 2, 1, S, 64))
    c, s = posemb.rope_cos_sin(np.zeros(S, np.int64), 62, dtype=np.float16)
    out = np.full((4, 3, 1, S, 64), np.nan, np.float16)[:, :2]
    returned, elapsed = _interrupt(lambda: posemb.apply_rope(x, c, s, out=out))
    assert returned is None, f"the call ran to its end ({returned:.2f} s) through Ctrl-C"
    assert elapsed < 3.0
    assert np.isnan(out[-1]).all()


def test_call_after_an_interrupted_call_runs():
    """The stop is per call: the next call on the thread runs in full."""
    x = np.broadcast_to(np.ones(64, np.float16), (4, 2, 1, 2**18, 64))
    c, s = posemb.rope_cos_sin(np.zeros(2**18, np.int64), 62, dtype=np.float16)
    out = np.full((4, 3, 1, 2**18, 64), np.nan, np.float16)[:, :2]
    _interrupt(lambda: posemb.apply_rope(x, c, s, out=out))
    small = np.ones((3, 2, 8, 64), np.float32)
    cs, ss = posemb.rope_cos_sin(np.arange(8), 64)
    y = posemb.apply_rope(small, cs, ss)
    np.testing.assert_allclose(y, oracle_rotate(small, np.arange(8), 64), rtol=1e-5, atol=1e-5)
    # and a grid of 2**23 values: all of it written
    xs = np.broadcast_to(np.ones(64, np.float16), (2, 1, 2**16, 64))
    cz, sz = posemb.rope_cos_sin(np.zeros(2**16, np.int64), 62, dtype=np.float16)
    o = posemb.apply_rope(xs, cz, sz)
    assert np.array_equal(o, np.ones_like(o))

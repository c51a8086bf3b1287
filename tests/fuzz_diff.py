"""Differential fuzz: every kernel on random valid inputs of random shapes,
strides (negative, zero, overlapping reads), dtypes and byte orders,
compared with the float64 oracle of posemb._reference.

    python tests/fuzz_diff.py [cases] [seed]

Each case picks a kernel, builds well-formed arguments whose arrays are
laid out at random (C, F, every-other element, reversed, transposed,
broadcast with zero strides, read through overlapping as_strided windows,
unaligned, byte-swapped, read-only), calls posemb and the oracle, and
compares within the tolerance of the result dtype (float16/32 results are
the float64 value rounded once, so they are compared at their own
precision).  ``out=`` is given in some cases, also as a strided view.  The
last line printed is ``diff cases: N failures: F``; failures name the call.
"""
from __future__ import annotations

import os
import random
import sys
import traceback

import numpy as np
from numpy.lib.stride_tricks import as_strided

import posemb
from posemb import _reference as R

TOL = {np.dtype("f2"): 2e-3, np.dtype("f4"): 4e-6, np.dtype("f8"): 1e-12}
LAYOUTS = ["C", "F", "strided", "reversed", "transposed", "zero", "unaligned",
           "swapped", "readonly"]


class Gen:
    def __init__(self, seed: int) -> None:
        self.r = random.Random(seed)
        self.n = np.random.default_rng(seed)

    def pick(self, seq):
        return seq[self.r.randrange(len(seq))]

    def dtype(self):
        return np.dtype(self.pick(["f2", "f4", "f8", "f4", "f8"]))

    def lay(self, a: np.ndarray, layout: str | None = None) -> np.ndarray:
        """a (C-contiguous) re-laid out; the values are unchanged."""
        layout = layout or self.pick(LAYOUTS)
        if a.ndim == 0 or a.size == 0:
            return a
        if layout == "F":
            return np.asfortranarray(a)
        if layout == "strided":
            big = np.zeros(tuple(2 * n for n in a.shape), a.dtype)
            v = big[tuple(slice(None, None, 2) for _ in a.shape)]
            v[...] = a
            return v
        if layout == "reversed":
            rev = tuple(slice(None, None, -1) for _ in a.shape)
            return np.ascontiguousarray(a[rev])[rev]
        if layout == "transposed":
            return np.ascontiguousarray(a.T).T
        if layout == "zero":
            # the same values along every axis of length 1 broadcast out:
            # only meaningful where a already repeats; use axis 0 when it does
            if a.shape[0] > 1 and np.array_equal(a, np.broadcast_to(a[:1], a.shape)):
                return np.broadcast_to(a[:1], a.shape)
            return a
        if layout == "unaligned" and a.dtype.itemsize > 1:
            buf = np.zeros(a.nbytes + 1, np.uint8)
            u = buf[1:].view(a.dtype).reshape(a.shape)
            u[...] = a
            return u
        if layout == "swapped":
            return a.astype(a.dtype.newbyteorder())
        if layout == "readonly":
            a = a.copy()
            a.flags.writeable = False
            return a
        return a

    def floats(self, shape, dtype):
        return self.n.standard_normal(shape).astype(dtype)

    def windowed(self, rows: int, width: int, dtype) -> np.ndarray:
        """(rows, width) whose rows overlap in memory: row i = buf[i*s: i*s+width]."""
        s = self.r.randint(0, max(width - 1, 0))
        buf = self.floats((rows - 1) * s + width, dtype)
        it = buf.itemsize
        return as_strided(buf, (rows, width), (s * it, it), writeable=False)


def close(got, want, dtype, what):
    got = np.asarray(got)
    assert got.shape == np.shape(want), f"{what}: shape {got.shape} != {np.shape(want)}"
    tol = TOL[np.dtype(dtype).newbyteorder("=")]
    w = np.asarray(want, np.float64)
    g = got.astype(np.float64)
    bad = ~(np.abs(g - w) <= tol * (1 + np.abs(w)))
    assert not bad.any(), (f"{what}: {int(bad.sum())} of {bad.size} differ, e.g. got "
                           f"{g[bad][:3]} want {w[bad][:3]}")


# ---------------------------------------------------------------- kernels

def k_apply_rope(g: Gen):
    dt = g.dtype()
    backward = g.r.random() < 0.3
    inter = g.r.random() < 0.5
    d = 2 * g.r.randint(1, 8)
    r = 2 * g.r.randint(1, d // 2)
    lead = tuple(g.r.randint(1, 4) for _ in range(g.r.randint(0, 2)))
    seq = g.r.randint(1, 9)
    if g.r.random() < 0.2:
        x = g.windowed(seq, d, dt).reshape(lead[:0] + (seq, d))
        lead = ()
    else:
        x = g.lay(g.floats(lead + (seq, d), dt))
    pos = g.n.integers(0, 5000, seq)
    cos, sin = posemb.rope_cos_sin(pos, r, interleaved=inter, dtype=dt)
    cos, sin = g.lay(cos), g.lay(sin)
    fn = posemb.apply_rope_backward if backward else posemb.apply_rope
    out = None
    if g.r.random() < 0.3:
        out = g.lay(np.zeros(x.shape, x.dtype.newbyteorder("=")), g.pick(["C", "strided",
                                                                         "reversed", "F"]))
    got = fn(x, cos, sin, interleaved=inter) if out is None else fn(x, cos, sin,
                                                                   interleaved=inter, out=out)
    if out is not None:
        assert got is out
    ref = (R.apply_rope_backward if backward else R.apply_rope)(
        np.asarray(x, np.float64), np.asarray(cos, np.float64), np.asarray(sin, np.float64),
        interleaved=inter)
    close(got, ref, x.dtype, f"{fn.__name__}(x {x.shape} {x.dtype} strides {x.strides}, "
                             f"r={r}, interleaved={inter}, out={out is not None})")


def k_rope_module(g: Gen):
    dt = g.dtype()
    d = 2 * g.r.randint(1, 8)
    inter = g.r.random() < 0.5
    rope = posemb.RoPE(d, g.r.randint(0, 8), interleaved=inter, dtype=dt,
                       base=g.pick([10000.0, 500000.0, 100.0]))
    x = g.lay(g.floats((g.r.randint(1, 3), g.r.randint(1, 9), d), dt))
    off = g.r.randint(0, 3000)
    got = rope(x, offset=off)
    pos = np.arange(off, off + x.shape[1])
    cos, sin = R.rope_cos_sin(pos, d, rope.base, interleaved=inter)
    close(got, R.apply_rope(np.asarray(x, np.float64), cos, sin, interleaved=inter), dt,
          f"RoPE({d}, interleaved={inter}, base={rope.base})(x {x.shape} {x.dtype} "
          f"strides {x.strides}, offset={off})")


def k_rotate_half(g: Gen):
    dt = g.dtype()
    shape = tuple(g.r.randint(1, 4) for _ in range(g.r.randint(0, 2))) + (2 * g.r.randint(1, 6),)
    x = g.lay(g.floats(shape, dt))
    axis = g.r.randrange(len(shape)) if g.r.random() < 0.3 else -1
    if shape[axis] % 2:
        axis = -1
    got = posemb.neg_half(x, axis=axis) if axis != -1 else posemb.rotate_half(x)
    close(got, R.rotate_half(np.asarray(x, np.float64), axis), dt,
          f"rotate_half(x {x.shape} {x.dtype} strides {x.strides}, axis={axis})")


def k_sinusoidal(g: Gen):
    dt = g.dtype()
    n, d = g.r.randint(0, 40), g.r.randint(0, 40)
    start = g.pick([0, 7, 1000, 2**20 + 3])
    layout = g.pick(["interleaved", "concat"])
    out = None
    if g.r.random() < 0.4 and n and d:
        out = g.lay(np.zeros((n, d), dt), g.pick(["C", "F", "strided", "reversed", "swapped",
                                                 "unaligned"]))
    got = posemb.sinusoidal(n, d, start=start, layout=layout, dtype=None if out is not None
                            else dt, out=out)
    ref = R.sinusoidal(n, d, start=start, layout=layout)
    tol_dt = dt if dt != np.float64 else np.dtype("f8")
    # float64 angles of large positions: the oracle's own rounding is ~p*eps
    if dt == np.float64 and start > 1000:
        tol_dt = np.dtype("f4")
    close(got, ref, tol_dt, f"sinusoidal({n}, {d}, start={start}, layout={layout!r}, "
                            f"dtype={dt}, out={None if out is None else out.strides})")


def k_add_sinusoidal(g: Gen):
    dt = g.dtype()
    x = g.lay(g.floats((g.r.randint(1, 3), g.r.randint(1, 12), g.r.randint(1, 12)), dt))
    start = g.pick([0, 5, 999])
    got = posemb.add_sinusoidal(x, start=start)
    ref = np.asarray(x, np.float64) + R.sinusoidal(x.shape[1], x.shape[2], start=start)
    close(got, ref, dt, f"add_sinusoidal(x {x.shape} {x.dtype} strides {x.strides}, "
                        f"start={start})")


def k_learned(g: Gen):
    dt = g.dtype()
    m, d = g.r.randint(1, 12), g.r.randint(1, 8)
    w = g.lay(g.floats((m, d), dt))
    seq = g.r.randint(1, 10)
    x = g.lay(g.floats((g.r.randint(1, 3), seq, d), dt))
    pos = g.lay(g.n.integers(0, m, seq))
    got = posemb.learned_pe_forward(x, w, pos)
    close(got, R.learned_forward(np.asarray(x, np.float64), np.asarray(w, np.float64), pos), dt,
          f"learned_pe_forward(x {x.shape} {x.dtype} {x.strides}, w {w.strides}, pos)")
    gb = posemb.learned_pe_backward(x, pos, num_positions=m)
    # sums of up to len(x)*seq terms in the working precision
    close(gb, R.learned_backward(np.asarray(x, np.float64), pos, m),
          np.dtype("f2") if dt == np.float16 else np.dtype("f4"),
          f"learned_pe_backward(grad {x.shape} {x.dtype} {x.strides}, num_positions={m})")


def k_t5(g: Gen):
    dt = g.dtype()
    bidir = g.r.random() < 0.5
    nb = g.pick([8, 32]) if bidir else g.pick([4, 32])
    md = g.pick([64, 128])
    heads = g.r.randint(1, 3)
    table = g.lay(g.floats((nb, heads), dt))
    q, k = g.r.randint(0, 12), g.r.randint(0, 12)
    off = g.pick([0, 5, -3, 1000])
    kw = dict(bidirectional=bidir, num_buckets=nb, max_distance=md)
    got = posemb.t5_relative_bias(table, q, k, query_offset=off, **kw)
    ref = R.t5_bias(np.asarray(table, np.float64), q, k, query_offset=off, **kw)
    close(got, ref, dt, f"t5_relative_bias(table {table.shape} {table.dtype} {table.strides}, "
                        f"{q}, {k}, query_offset={off}, {kw})")


def k_shaw(g: Gen):
    dt = g.dtype()
    K = g.r.randint(0, 4)
    table = g.lay(g.floats((2 * K + 1, g.r.randint(1, 5)), dt))
    q, k = g.r.randint(0, 8), g.r.randint(0, 8)
    got = posemb.relative_embeddings(table, q, k)
    close(got, R.shaw_embeddings(np.asarray(table, np.float64), q, k), dt,
          f"relative_embeddings(table {table.shape} {table.dtype} {table.strides}, {q}, {k})")


def k_alibi(g: Gen):
    dt = g.dtype()
    heads = g.r.randint(1, 9)
    q, k = g.r.randint(0, 10), g.r.randint(0, 10)
    sym = g.r.random() < 0.3
    got = posemb.alibi_bias(heads, q, k, symmetric=sym, dtype=dt)
    ref = R.alibi_bias(R.alibi_slopes(heads), q, k, symmetric=sym)
    close(got, ref, dt, f"alibi_bias({heads}, {q}, {k}, symmetric={sym}, dtype={dt})")


KERNELS = [k_apply_rope, k_apply_rope, k_apply_rope, k_rope_module, k_rotate_half, k_sinusoidal,
           k_add_sinusoidal, k_learned, k_t5, k_shaw, k_alibi]


def main(cases: int = 10_000, seed: int = 0) -> int:
    np.seterr(all="ignore")
    g = Gen(seed)
    failures = []
    for i in range(cases):
        kernel = g.pick(KERNELS)
        try:
            kernel(g)
        except AssertionError as e:
            failures.append(f"case {i} ({kernel.__name__}): {e}")
        except Exception as e:  # noqa: BLE001 - valid inputs must not raise
            failures.append(f"case {i} ({kernel.__name__}): raised {type(e).__name__}: {e}")
    for f in failures[:30]:
        print(f)
    print(f"diff cases: {cases} failures: {len(failures)} (seed {seed})")
    return 1 if failures else 0


if __name__ == "__main__":
    n = int(sys.argv[1]) if len(sys.argv) > 1 else 10_000
    s = int(sys.argv[2]) if len(sys.argv) > 2 else 0
    try:
        sys.exit(main(n, s))
    except Exception:
        traceback.print_exc()
        sys.exit(2)

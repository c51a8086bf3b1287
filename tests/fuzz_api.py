"""A seeded random fuzzer over posemb's public API and its C entry points.

    python tests/fuzz_api.py [cases] [seed]

Each case calls a random public function, method or constructor (and, one
case in four, a private ``posemb._core`` function) with random arguments:
mostly plausible ones (so the call gets past the first check and into the
kernels), mixed with values drawn from a universe of wrong types, extreme
integers, NaN/inf, and small arrays of every dtype and layout (strided,
reversed, transposed, F-order, zero-stride, byte-swapped, read-only,
unaligned, size 0).  A case passes when the call returns, or raises
TypeError, ValueError, IndexError or OverflowError, or a MemoryError from
posemb's size check (one that names the argument and the bytes needed); any
other exception (a NumPy "Unable to allocate", a bare MemoryError), an input
(other than ``out``) that changed, or a result that differs from the float64
oracle where that is cheap, is a failure naming the call.

The process runs under an address-space cap (``RLIMIT_AS``: what it uses
after import plus ``POSEMB_FUZZ_MEMORY`` bytes, default 4 GiB), so a
blow-up is a MemoryError here instead of an out-of-memory kill.  A case that
runs longer than ``POSEMB_FUZZ_CASE_TIMEOUT`` seconds (default 60) is a hang:
the process exits with code 3 after printing the case (from
``POSEMB_FUZZ_CURRENT``, a file the case is written to before it runs) and
every thread's traceback.  A crash kills the process: tests/test_fuzz.py and
.ci/fuzz.sh run this script in a subprocess and see the signal.  The last
line printed is ``fuzz cases: N ... failures: F``.
"""
import faulthandler
import os
import re
import random
import resource
import sys
import traceback

import numpy as np

import posemb
from posemb import _core
from posemb import _reference as R

ALLOWED = (TypeError, ValueError, IndexError, OverflowError, MemoryError)
#: what posemb's size check says (posemb._checks.check_memory)
NAMED_MEMORY_ERROR = re.compile(r"^[\w\[\]'., ]+: .* would need \d+ bytes")

INTS = [0, 1, 2, 3, 4, 5, 6, 7, 8, 16, 33, -1, -2, -7, 2**31, 2**40, 2**53, 2**53 + 1,
        2**61, 2**62, 2**63 - 1, -2**63, 2**64, 2**100, -2**100]
FLOATS = [0.0, 1.0, -1.0, 0.5, 2.5, 1e4, 1e-300, 5e-324, 1e308, float("nan"), float("inf"),
          float("-inf"), -0.0]
MISC = [None, True, False, "a", "", "interleaved", "concat", "left", "right", "float32",
        b"x", [], [1, 2], [[1.5]], (1,), {}, 1j, object(), np.float32, np.int8, np.bool_(True),
        np.int64(3), np.uint64(2**63), np.float64("nan"), np.array(2.0), np.array(3),
        np.array([]), slice(1), Ellipsis]
DTYPES = ["f2", "f4", "f8", ">f4", ">f8", "i8", "i4", "u1", "u8", "?", "c8", "O", "U1", "g",
          ">i8"]
LAYOUTS = ["C", "C", "C", "F", "strided", "reversed", "transposed", "zero", "readonly",
           "unaligned", "swapped"]


class Gen:
    def __init__(self, seed):
        self.r = random.Random(seed)
        self.n = np.random.default_rng(seed)

    # ---------------------------------------------------------- primitives
    def chance(self, p):
        return self.r.random() < p

    def pick(self, seq):
        return seq[self.r.randrange(len(seq))]

    def small(self, lo=0, hi=6):
        return self.r.randint(lo, hi)

    def anything(self):
        k = self.r.random()
        if k < 0.3:
            return self.pick(INTS)
        if k < 0.45:
            return self.pick(FLOATS)
        if k < 0.65:
            return self.pick(MISC)
        return self.array(self.shape(), self.pick(DTYPES))

    def shape(self, ndim=None):
        ndim = self.r.randint(0, 4) if ndim is None else ndim
        return tuple(self.r.randint(0, 4) for _ in range(ndim))

    def values(self, shape, kind):
        if kind in "iu":
            v = self.n.integers(-3, 10, size=shape)
            if v.size and self.chance(0.1):
                v.flat[0] = self.pick([2**31, 2**40, 2**62, -2**62])
            return v
        v = self.n.standard_normal(shape)
        if v.size and self.chance(0.15):
            v.flat[self.r.randrange(v.size)] = self.pick([np.nan, np.inf, -np.inf, 1e300])
        return v

    def array(self, shape, dtype, layout=None):
        dt = np.dtype(dtype)
        vals = self.values(shape, dt.kind)
        if dt.kind == "U":
            a = np.full(shape, "a")
        elif dt.kind == "O":
            a = vals.astype(object)
        else:
            with np.errstate(all="ignore"):
                if dt.kind in "iub":
                    a = np.clip(np.nan_to_num(vals), -2**62, 2**62).astype(dt)
                else:
                    a = vals.astype(dt)
        layout = layout or self.pick(LAYOUTS)
        return self.layout(a, layout)

    def layout(self, a, layout):
        if layout == "F":
            return np.asfortranarray(a)
        if layout == "strided" and a.ndim:
            big = np.zeros(tuple(2 * n for n in a.shape), a.dtype)
            v = big[tuple(slice(None, None, 2) for _ in a.shape)]
            v[...] = a
            return v
        if layout == "reversed" and a.ndim:
            rev = tuple(slice(None, None, -1) for _ in a.shape)
            return np.ascontiguousarray(a[rev])[rev]
        if layout == "transposed":
            return np.ascontiguousarray(a.T).T
        if layout == "zero" and a.ndim and a.shape[0]:
            return np.broadcast_to(a[:1], a.shape)
        if layout == "readonly":
            a = np.array(a)
            a.flags.writeable = False
            return a
        if layout == "unaligned" and a.dtype.kind != "O" and a.dtype.itemsize > 1 and a.size:
            buf = np.zeros(a.nbytes + 1, np.uint8)
            u = buf[1:].view(a.dtype).reshape(a.shape)
            u[...] = a
            return u
        if layout == "swapped" and a.dtype.kind in "fiuc":
            return a.astype(a.dtype.newbyteorder())
        return a

    # ---------------------------------------------------------- plausible
    def maybe(self, plausible, p=0.8):
        """A plausible value with probability p, else anything."""
        return plausible() if self.chance(p) else self.anything()

    def size(self, lo=0, hi=6):
        return self.maybe(lambda: self.small(lo, hi))

    def even(self):
        return self.maybe(lambda: 2 * self.small(0, 4))

    def fdt(self):
        return self.pick(["f2", "f4", "f8", "f4", "f8", ">f4"])

    def farr(self, shape):
        """A float array of about this shape (sometimes a dim off by one)."""
        def make():
            s = list(shape)
            if s and self.chance(0.1):
                i = self.r.randrange(len(s))
                s[i] = max(0, s[i] + self.pick([-1, 1]))
            return self.array(tuple(s), self.fdt())
        return self.maybe(make, 0.85)

    def positions(self, shape, top):
        def make():
            a = self.n.integers(0, max(top, 1), size=shape)
            if a.size and self.chance(0.1):
                a.flat[0] = self.pick([-1, top, 2**53, 2**63 - 1])
            return self.layout(a.astype(self.pick(["i8", "i4", "u2", "i8", ">i8"])),
                               self.pick(LAYOUTS))
        return self.maybe(make, 0.85)

    def flag(self):
        return self.maybe(lambda: self.chance(0.5), 0.9)

    def real(self):
        return self.maybe(lambda: self.pick([10000.0, 2.0, 0.5, 100.0, 1.0]), 0.85)

    def dtype(self):
        return self.maybe(lambda: self.pick([np.float16, np.float32, np.float64, "f8"]), 0.85)

    def out(self, shape, dtype="f4"):
        def make():
            if self.chance(0.3):
                return None
            return self.array(shape, self.pick([dtype, dtype, "f8", "f2", ">f4"]),
                              self.pick(["C", "C", "F", "strided", "reversed", "unaligned",
                                         "swapped", "readonly"]))
        return self.maybe(make, 0.9)


# -------------------------------------------------------------------- calls
# Each maker returns (callable, args tuple, kwargs dict, oracle-or-None).

def mk_apply_rope(g, backward=False):
    b, s, h = g.small(0, 3), g.small(0, 4), g.small(0, 3)
    d = 2 * h + g.small(0, 2)
    x = g.farr((b, s, d))
    cos = g.farr((s, 2 * h))
    sin = g.farr((s, 2 * h)) if g.chance(0.9) else cos
    il = g.flag()
    out = g.out((b, s, d))
    if isinstance(out, np.ndarray) and g.chance(0.2) and isinstance(x, np.ndarray) \
            and x.flags.writeable:
        out = x                                              # in place
    fn = posemb.apply_rope_backward if backward else posemb.apply_rope
    ref = R.apply_rope_backward if backward else R.apply_rope

    try:                                  # copies now: out may be x itself
        xf, cf, sf = (np.array(a, float) for a in (x, cos, sin))
        dts = [np.asarray(a).dtype for a in (x, cos, sin)]
    except (TypeError, ValueError):
        xf = None

    def oracle(res):
        if not isinstance(il, bool) or xf is None:
            return
        want = ref(xf, cf, sf, interleaved=il)
        check(res, want, *(np.zeros(0, dt) for dt in dts))
    kw = dict(interleaved=il)
    if out is not None:
        kw["out"] = out
    return fn, (x, cos, sin), kw, oracle


def check(res, want, *inputs):
    """res equals the float64 oracle to the rounding of the dtypes involved.

    Values beyond 1e4 (the fuzzer plants 1e300) overflow differently in
    float32 and float64 intermediates, so those calls are not compared."""
    with np.errstate(all="ignore"):
        if np.nanmax(np.abs(np.where(np.isinf(want), 0, want)), initial=0) > 1e4:
            return
    dts = [np.asarray(a).dtype for a in inputs] + [np.asarray(res).dtype]
    half = any(dt.kind == "f" and dt.itemsize == 2 for dt in dts)
    tol = 2e-2 if half else 1e-4
    with np.errstate(all="ignore"):
        scale = max(1.0, float(np.nanmax(np.abs(np.where(np.isfinite(want), want, 0)),
                                         initial=0)))
        if half:
            want = want.astype(np.float16).astype(float)     # overflow to inf as float16
    np.testing.assert_allclose(np.asarray(res, float), want, rtol=tol, atol=tol * scale,
                               equal_nan=True)


def mk_rope_cos_sin(g):
    shape = g.shape(g.small(0, 2))
    return posemb.rope_cos_sin, (g.positions(shape, 50), g.even()), dict(
        base=g.real(), interleaved=g.flag(), dtype=g.dtype()), None


def mk_rope_module(g):
    h = g.small(1, 3)
    head = 2 * h + g.small(0, 1)
    kw = dict(base=g.real(), scale=g.maybe(lambda: g.pick([1.0, 0.5, 4.0])),
              interleaved=g.flag(), dtype=g.dtype())
    if g.chance(0.5) or head % 2:
        kw["rotary_dim"] = g.maybe(lambda: 2 * h)
    try:
        rope = posemb.RoPE(g.size(0, 8) if g.chance(0.1) else head, g.size(0, 8), **kw)
    except ALLOWED:
        return posemb.RoPE, (g.anything(), g.anything()), {}, None
    s, b = g.small(0, 4), g.small(0, 2)
    x = g.farr((b, s, head))
    which = g.r.random()
    if which < 0.4:
        args = (x,)
        kw = {"offset": g.maybe(lambda: g.pick([0, 3, 2**40, 2**53 - 2]))}
        if g.chance(0.4):
            kw = {"positions": g.positions((s,), 60)}
        if g.chance(0.3):
            kw["out"] = g.out((b, s, head))
        return (rope if g.chance(0.5) else rope.backward), args, kw, None
    if which < 0.7:
        if g.chance(0.5):
            return rope.cos_sin, (), dict(offset=g.size(0, 9), seq_len=g.size(0, 5),
                                          dtype=g.maybe(lambda: None)), None
        return rope.cos_sin, (g.positions(g.shape(g.small(0, 2)), 40),), {}, None
    return (lambda: (rope.cos_cached, rope.sin_cached, repr(rope))), (), {}, None


def mk_rotate(g):
    x = g.farr(g.shape(g.small(1, 3)))
    if g.chance(0.5):
        def oracle(res, x=x):
            check(res, R.rotate_half(np.array(x, float)), x)
        return posemb.rotate_half, (x,), {}, oracle
    return posemb.neg_half, (x,), dict(axis=g.maybe(lambda: g.small(-3, 2))), None


def mk_hf(g):
    b, s, h = g.small(1, 2), g.small(0, 3), g.small(0, 3)
    return posemb.apply_rotary_pos_emb, (g.farr((b, 2, s, 2 * h)), g.farr((b, 1, s, 2 * h)),
                                         g.farr((b, s, 2 * h)), g.farr((b, s, 2 * h))), dict(
        position_ids=g.anything() if g.chance(0.2) else None,
        unsqueeze_dim=g.maybe(lambda: g.small(-4, 3))), None


def mk_meta(g):
    s, h = g.small(0, 3), g.small(0, 3)
    fc = g.maybe(lambda: posemb.precompute_freqs_cis(2 * h, s + 2)[2:], 0.8)
    return posemb.apply_rotary_emb, (g.farr((1, s, 2, 2 * h)), g.farr((1, s, 1, 2 * h)), fc), \
        {}, None


def mk_tables(g):
    k = g.r.random()
    if k < 0.25:
        return posemb.rope_inv_freq, (g.even(),), dict(base=g.real()), None
    if k < 0.5:
        return posemb.compute_frequencies, (g.even(), g.size()), dict(base=g.real()), None
    if k < 0.75:
        return posemb.precompute_freqs_cis, (g.even(), g.size()), dict(theta=g.real()), None
    return posemb.set_num_threads, (g.maybe(lambda: g.small(1, 4)),), {}, None


def mk_sinusoidal(g):
    k = g.r.random()
    layout = g.maybe(lambda: g.pick(["interleaved", "concat"]))
    if k < 0.35:
        seq, dim = g.size(0, 5), g.size(0, 7)
        start = g.maybe(lambda: g.pick([0, 1, 100, 2**40, 2**53 - 5]))

        base = g.real()

        def oracle(res, seq=seq, dim=dim, start=start, layout=layout, base=base):
            if isinstance(seq, int) and isinstance(dim, int) and isinstance(start, int) \
                    and start < 2**20 and res.dtype != np.float16:
                check(res, R.sinusoidal(seq, dim, start=start, layout=layout, base=base))
        return posemb.sinusoidal, (seq, dim), dict(start=start, layout=layout,
                                                   dtype=g.dtype(), base=base), oracle
    s, d = g.small(0, 4), g.small(0, 5)
    x = g.farr((2, s, d))
    kw = dict(start=g.size(0, 3))
    if g.chance(0.3):
        kw["out"] = g.out((2, s, d))
    if k < 0.7:
        kw.update(layout=layout, base=g.real())
        return posemb.add_sinusoidal, (x,), kw, None
    try:
        pe = posemb.AbsolutePE(g.maybe(lambda: d), g.size(0, 8), dtype=g.dtype())
    except ALLOWED:
        return posemb.AbsolutePE, (g.anything(), g.anything()), {}, None
    kw.update(seq_axis=g.maybe(lambda: g.pick([-2, 1, -1])),
              feature_axis=g.maybe(lambda: g.pick([-1, 2, -2])))
    return pe, (x,), kw, None


def mk_learned(g):
    s, d, m = g.small(0, 4), g.small(0, 4), g.small(0, 6)
    x = g.farr((2, s, d))
    w = g.farr((m, d))
    pos = g.positions((s,), m) if g.chance(0.6) else None
    off = g.maybe(lambda: g.small(0, 3)) if pos is None else 0
    k = g.r.random()
    if k < 0.4:
        kw = dict(offset=off)
        if g.chance(0.3):
            kw["out"] = g.out((2, s, d))

        def oracle(res, x=x, w=w, pos=pos, off=off):
            p = off + np.arange(np.shape(x)[-2]) if pos is None else pos
            check(res, R.learned_forward(np.array(x, float), np.array(w, float), p), x, w)
        return posemb.learned_pe_forward, (x, w, pos), kw, oracle
    if k < 0.7:
        return posemb.learned_pe_backward, (x, pos), dict(num_positions=g.size(0, 8),
                                                          offset=off), None
    try:
        pe = posemb.LearnedPE(g.size(0, 8), g.maybe(lambda: d), dtype=g.dtype(),
                              std=g.maybe(lambda: 0.02), seed=g.maybe(lambda: 1))
    except ALLOWED:
        return posemb.LearnedPE, (g.anything(), g.anything()), {}, None
    return (pe if g.chance(0.5) else pe.backward), (x, pos), dict(offset=off), None


T5 = [(True, 32, 128), (False, 32, 128), (True, 4, 3), (False, 2, 2), (True, 33, 100)]


def mk_t5(g):
    bd, nb, md = g.pick(T5)
    bd, nb, md = g.maybe(lambda: bd, 0.9), g.maybe(lambda: nb, 0.9), g.maybe(lambda: md, 0.9)
    k = g.r.random()
    q, kk, h = g.small(0, 4), g.small(0, 4), g.small(0, 2)
    off = g.maybe(lambda: g.pick([0, 3, -5, 2**40, -2**61]))
    kw = dict(bidirectional=bd, num_buckets=nb, max_distance=md)
    if k < 0.35:
        rp = g.maybe(lambda: g.layout(g.n.integers(-300, 300, size=g.shape(g.small(0, 2))),
                                      g.pick(LAYOUTS)))

        def oracle(res, rp=rp, bd=bd, nb=nb, md=md):
            want = R.t5_buckets(np.asarray(rp), bidirectional=bd, num_buckets=nb,
                                max_distance=md)
            np.testing.assert_array_equal(res, want)
        return posemb.t5_relative_position_bucket, (rp,), kw, oracle
    if k < 0.7:
        t = g.farr((nb if isinstance(nb, int) and 0 <= nb < 64 else 32, h))
        qc, kc = g.size(0, 4) if g.chance(0.1) else q, g.maybe(lambda: kk)

        def oracle(res, t=t, q=qc, kk=kc, off=off, bd=bd, nb=nb, md=md):
            check(res, R.t5_bias(np.array(t, float), q, kk, bidirectional=bd, num_buckets=nb,
                                 max_distance=md, query_offset=off), t)
        return posemb.t5_relative_bias, (t, qc, kc), dict(query_offset=off, **kw), oracle
    return posemb.t5_relative_bias_backward, (g.farr((2, h, q, kk)),), dict(
        query_length=g.maybe(lambda: q), key_length=g.maybe(lambda: kk), query_offset=off,
        **kw), None


def mk_shaw(g):
    q, k, K, d = g.small(0, 4), g.small(0, 4), g.small(0, 3), g.small(0, 3)
    r = g.r.random()
    if r < 0.3:
        def oracle(res, q=q, k=k, K=K):
            np.testing.assert_array_equal(res, R.shaw_index(q, k, K))
        q2, k2, K2 = g.maybe(lambda: q, 0.9), g.maybe(lambda: k, 0.9), g.maybe(lambda: K, 0.9)
        ok = (q2, k2, K2) == (q, k, K) and all(type(v) is int for v in (q2, k2, K2))
        return posemb.relative_position_index, (q2, k2, K2), {}, oracle if ok else None
    if r < 0.65:
        t = g.farr((2 * K + 1, d))
        return posemb.relative_embeddings, (t, g.maybe(lambda: q), g.maybe(lambda: k)), {}, None
    return posemb.relative_embeddings_backward, (g.farr((q, k, d)), g.maybe(lambda: K),
                                                 g.maybe(lambda: q), g.maybe(lambda: k)), {}, None


def mk_alibi(g):
    if g.chance(0.3):
        return posemb.alibi_slopes, (g.size(1, 12),), dict(dtype=g.dtype()), None
    sl = g.maybe(lambda: g.small(1, 5) if g.chance(0.5) else g.farr((g.small(0, 3),)))
    q, k = g.size(0, 4), g.size(0, 4)
    off = g.maybe(lambda: g.pick([None, 0, 2, -3, 2**40]))
    sym = g.flag()
    return posemb.alibi_bias, (sl, q, k), dict(symmetric=sym, query_offset=off,
                                               dtype=g.dtype()), None


def mk_masks(g):
    r = g.r.random()
    if r < 0.3:
        q, k = g.small(0, 5), g.maybe(lambda: g.pick([None, g.small(0, 5)]))
        w = g.maybe(lambda: g.pick([None, 1, 2, 5, 2**62]))
        off = g.maybe(lambda: g.pick([None, 0, 2, -3, 2**61]))

        def oracle(res, q=q, k=k, w=w, off=off):
            if all(v is None or type(v) is int for v in (k, w, off)):
                np.testing.assert_array_equal(res, R.causal_mask(q, k, window=w,
                                                                 query_offset=off))
        return posemb.causal_mask, (q, k), dict(window=w, query_offset=off), oracle
    if r < 0.6:
        m = g.small(0, 5)
        lengths = g.positions((g.small(0, 3),), m + 1)
        side = g.maybe(lambda: g.pick(["left", "right"]))
        fn = posemb.padding_mask if g.chance(0.6) else posemb.create_padding_mask
        kw = dict(side=side) if fn is posemb.padding_mask else {}
        return fn, (lengths, g.maybe(lambda: m)), kw, None
    if r < 0.8:
        return posemb.to_additive, (g.maybe(lambda: g.array(g.shape(), "?")),), dict(
            dtype=g.dtype()), None
    return posemb.create_causal_mask, (g.size(0, 5),), {}, None


def mk_attention(g):
    L, S, E = g.small(0, 3), g.small(0, 3), g.small(0, 3)
    kw = {}
    if g.chance(0.4):
        kw["mask"] = g.maybe(lambda: g.array((L, S), g.pick(["?", "f4"])))
    if g.chance(0.3):
        kw["bias"] = g.farr((1, L, S))
    if g.chance(0.2):
        kw["scale"] = g.real()
    return posemb.scaled_dot_product_attention, (g.farr((1, L, E)), g.farr((1, S, E)),
                                                 g.farr((1, S, 2))), kw, None


# ------------------------------------------------------------------ RoPE scaling and variants

def scaling_dict(g, h):
    kind = g.pick(["default", "linear", "dynamic", "yarn", "longrope", "llama3", "mrope", "bogus"])
    d = {g.pick(["rope_type", "type"]): kind}
    num = lambda: g.maybe(lambda: g.pick([0.5, 1.0, 2.0, 4.0, 8, 40.0]), 0.85)   # noqa: E731
    if kind in ("linear", "dynamic", "yarn", "llama3") and g.chance(0.95):
        d["factor"] = num()
    if kind in ("yarn", "longrope", "llama3") and g.chance(0.8):
        d["original_max_position_embeddings"] = g.maybe(lambda: g.pick([1, 2, 8, 4096]), 0.85)
    if kind == "yarn":
        for k in ("beta_fast", "beta_slow", "mscale", "mscale_all_dim", "attention_factor",
                  "truncate"):
            if g.chance(0.2):
                d[k] = g.flag() if k == "truncate" else num()
    if kind == "longrope":
        for k in ("short_factor", "long_factor"):
            if g.chance(0.95):
                d[k] = g.maybe(lambda: [g.pick([1.0, 2.0, 0.5]) for _ in range(h)], 0.85)
        if g.chance(0.3):
            d["factor"] = num()
    if kind == "llama3":
        d["low_freq_factor"] = num()
        if g.chance(0.95):
            d["high_freq_factor"] = num()
    if kind == "mrope":
        d["mrope_section"] = [h]
    return g.maybe(lambda: d, 0.9) if g.chance(0.9) else None


def mk_scaling(g):
    h = g.small(1, 4)
    dim = g.maybe(lambda: 2 * h, 0.9)
    sc = scaling_dict(g, h)
    kw = dict(max_position_embeddings=g.maybe(lambda: g.pick([None, 1, 16, 64]), 0.9),
              seq_len=g.maybe(lambda: g.pick([None, 0, 8, 100, 2**40]), 0.9))
    base = g.maybe(lambda: g.pick([10000.0, 1.0, 2.0, 0.5]), 0.9)
    k = g.r.random()
    if k < 0.35:
        def oracle(res, dim=dim, base=base, sc=sc, kw=kw):
            want = R.rope_scaling(dim, base, sc, **kw)
            np.testing.assert_allclose(res[0], want[0], rtol=1e-12)
            np.testing.assert_allclose(res[1], want[1], rtol=1e-12)
        return posemb.rope_scaling_parameters, (dim, base, sc), kw, oracle
    if k < 0.5:
        return posemb.rope_inv_freq, (dim, base), dict(scaling=sc, **kw), None
    if k < 0.7:
        return posemb.rope_cos_sin, (g.positions(g.shape(g.small(0, 2)), 200), dim, base), dict(
            scaling=sc, interleaved=g.flag(), dtype=g.dtype(),
            max_position_embeddings=kw["max_position_embeddings"]), None
    if k < 0.85:
        try:
            rope = posemb.RoPE(dim, g.size(0, 8), base=base, scaling=sc,
                               max_position_embeddings=kw["max_position_embeddings"],
                               interleaved=g.flag(), dtype=g.dtype())
        except ALLOWED:
            return posemb.RoPE, (dim, 4), dict(scaling=sc), None
        x = g.farr((2, g.small(0, 3), 2 * h))
        return rope, (x,), {"offset": g.maybe(lambda: g.pick([0, 5, 200, 2**40]))}, None
    cfg = {g.pick(["head_dim", "qk_rope_head_dim"]): g.maybe(lambda: 2 * h + g.small(0, 1), 0.9)}
    for key, val in (("rope_theta", base), ("rope_scaling", sc),
                     ("max_position_embeddings", kw["max_position_embeddings"]),
                     ("partial_rotary_factor", g.maybe(lambda: g.pick([1.0, 0.5, 0.25]))),
                     ("rope_interleave", g.flag()), ("original_max_position_embeddings",
                                                     g.maybe(lambda: 8))):
        if g.chance(0.4):
            cfg[key] = val
    if g.chance(0.1):
        cfg = {"text_config": cfg}
    return posemb.rope_config, (g.maybe(lambda: cfg, 0.95),), dict(
        seq_len=g.maybe(lambda: g.pick([None, 0, 4, 16])), dtype=g.dtype()), None


def mk_varlen(g):
    lengths = [g.small(0, 3) for _ in range(g.small(0, 3))]
    cu = np.concatenate([[0], np.cumsum(lengths)]).astype(np.int64)
    total, heads, h = int(cu[-1]), g.small(0, 2), g.small(0, 3)
    d = 2 * h + g.small(0, 1)
    if g.chance(0.15):                              # a broken cu_seqlens
        cu = cu.copy()
        if cu.size:
            cu[g.r.randrange(cu.size)] += g.pick([-1, 1, 2**40, -2**62])
    cu_arg = g.maybe(lambda: g.layout(cu.astype(g.pick(["i8", "i4", "u8", ">i8", "i2"])),
                                      g.pick(LAYOUTS)) if g.chance(0.9) else cu.tolist(), 0.9)
    off_kind = g.r.random()
    if off_kind < 0.4:
        off = 0
    elif off_kind < 0.6:
        off = g.maybe(lambda: g.pick([1, 3, 2**40, 2**63 - 1, 2**63]))
    else:
        off = g.maybe(lambda: g.layout(np.array([g.pick([0, 1, 2, 5, -1, 2**62])
                                                 for _ in lengths], np.int64),
                                       g.pick(LAYOUTS)), 0.9)
    x = g.farr((total, heads, d))
    il = g.flag()
    if g.chance(0.6):
        rows = g.small(0, 8)
        cos = g.farr((rows, 2 * h))
        sin = g.farr((rows, 2 * h)) if g.chance(0.9) else cos
        out = g.out((total, heads, d))
        if isinstance(out, np.ndarray) and g.chance(0.2) and isinstance(x, np.ndarray) \
                and x.flags.writeable:
            out = x
        kw = dict(interleaved=il, offset=off)
        if out is not None:
            kw["out"] = out
        try:
            xf, cf, sf = (np.array(a, float) for a in (x, cos, sin))
            dts = [np.asarray(a).dtype for a in (x, cos, sin)]
            cuf, of = np.array(cu_arg), np.array(off)
        except (TypeError, ValueError):
            xf = None

        def oracle(res):
            if xf is None or not isinstance(il, bool):
                return
            want = R.apply_rope_varlen(xf, cuf, cf, sf, interleaved=il, offset=of)
            check(res, want, *(np.zeros(0, dt) for dt in dts))
        return posemb.apply_rope_varlen, (x, cu_arg, cos, sin), kw, oracle
    try:
        rope = posemb.RoPE(d if d % 2 == 0 else d + 1, g.small(0, 6), interleaved=il,
                           rotary_dim=g.maybe(lambda: 2 * max(h, 1)), dtype=g.dtype())
    except ALLOWED:
        return posemb.RoPE, (g.anything(), 3), {}, None
    kw = {"offset": off}
    if g.chance(0.3):
        kw["out"] = g.out((total, heads, rope.head_size))
    return rope.apply_varlen, (g.farr((total, heads, rope.head_size)), cu_arg), kw, None


def mk_rope_batched(g):
    """RoPE with an offset per sequence, apply_qk (grouped-query, in place)."""
    h = g.small(1, 3)
    rope = posemb.RoPE(2 * h, g.small(0, 8), interleaved=g.chance(0.5),
                       dtype=g.pick([np.float16, np.float32, np.float64]))
    b, s = g.small(0, 3), g.small(0, 3)
    off = g.maybe(lambda: g.layout(np.array([g.pick([0, 1, 7, 2**40, -1, 2**53])
                                             for _ in range(b)]), g.pick(LAYOUTS)), 0.85)
    q = g.farr((b, 2, s, 2 * h))
    if g.chance(0.5):
        return (rope if g.chance(0.5) else rope.backward), (q,), {"offset": off}, None
    k = g.farr((b, 1, s, 2 * h))
    kw = {"inplace": g.flag() if g.chance(0.5) else False}
    if g.chance(0.3):
        kw["positions"] = g.positions((s,), 50)
    else:
        kw["offset"] = off
    return rope.apply_qk, (q, k), kw, None


def mk_variants(g):
    r = g.r.random()
    sections = [g.small(0, 3) for _ in range(g.small(1, 3))]
    dim = 2 * sum(sections)
    if r < 0.2:
        pos = g.positions((len(sections), g.small(0, 2), g.small(0, 3)), 100)
        dim2 = g.maybe(lambda: dim, 0.9)
        sec = g.maybe(lambda: sections, 0.85)
        il = g.flag()

        def oracle(res, pos=pos, dim=dim2, sec=sec, il=il):
            if not isinstance(il, bool):
                return
            want = R.mrope_cos_sin(np.asarray(pos), dim, [int(v) for v in sec], interleaved=il)
            check(res[0], want[0], res[0])
            check(res[1], want[1], res[1])
        return posemb.mrope_cos_sin, (pos, dim2, sec), dict(interleaved=il, dtype=g.dtype()), \
            oracle if isinstance(sec, list) and isinstance(dim2, int) else None
    if r < 0.4:
        n, s = len(sections), g.small(0, 3)
        return posemb.apply_multimodal_rotary_pos_emb, (
            g.farr((1, 2, s, dim)), g.farr((1, 1, s, dim)), g.farr((n, 1, s, dim)),
            g.farr((n, 1, s, dim)), g.maybe(lambda: sections, 0.85)), dict(
            unsqueeze_dim=g.maybe(lambda: g.pick([1, 0, -3, 9, 2**40]), 0.9)), None
    if r < 0.55:
        axes = g.small(1, 3)
        return posemb.axial_rope_cos_sin, (g.positions((g.small(0, 4), axes), 30),
                                           g.maybe(lambda: 2 * axes * g.small(0, 3))), dict(
            base=g.real(), interleaved=g.flag(), dtype=g.dtype()), None
    if r < 0.75:
        return posemb.xpos_cos_sin, (g.positions((g.small(0, 5),), 3000), g.even()), dict(
            scale_base=g.maybe(lambda: g.pick([512.0, 8.0, 1.0])), center=g.maybe(
                lambda: g.pick([0.0, 4.0, -1e6])), interleaved=g.flag(), dtype=g.dtype()), None
    heads, hd = g.small(1, 3), 2 * g.small(0, 3)
    w = g.maybe(lambda: g.array((heads * hd, g.small(0, 2)), g.pick(["f4", "f8", "i8", "f2"])))
    to = g.maybe(lambda: g.pick(["half", "interleaved"]), 0.9)
    rd = g.maybe(lambda: g.pick([None, 2, hd]), 0.9)

    def oracle(res, w=w, heads=heads, to=to, rd=rd):
        np.testing.assert_array_equal(res, R.convert_rope_layout(np.array(w), heads, to=to,
                                                                 rotary_dim=rd))
    return posemb.convert_rope_layout, (w, g.maybe(lambda: heads, 0.9)), dict(
        to=to, rotary_dim=rd), oracle if isinstance(w, np.ndarray) else None


def mk_bias_out(g):
    """alibi_bias and t5_relative_bias with out=."""
    q, k, h = g.small(0, 3), g.small(0, 3), g.small(1, 3)
    out = g.out((h, q, k)) if g.chance(0.9) else g.anything()
    if isinstance(out, np.ndarray) and g.chance(0.3):
        out = np.ascontiguousarray(out) if out.dtype.isnative else out
    if g.chance(0.5):
        return posemb.alibi_bias, (g.maybe(lambda: h), q, k), dict(
            symmetric=g.flag(), out=out), None
    t = g.farr((32, h))
    if isinstance(t, np.ndarray) and isinstance(out, np.ndarray) and g.chance(0.1) \
            and t.size >= out.size and t.flags.writeable and t.flags.c_contiguous:
        out = t.reshape(-1)[:out.size].reshape(out.shape)        # out overlapping table
    return posemb.t5_relative_bias, (t, q, k), dict(query_offset=g.small(-3, 3), out=out), None


# ------------------------------------------------------------------ private _core

GUFUNCS = [_core.rope_half_fwd, _core.rope_half_back, _core.rope_inter_fwd,
           _core.rope_inter_back]


def mk_core(g):
    r = g.r.random()
    fdt = g.pick(["f2", "f4", "f8"])
    if r < 0.2:
        d, rr = g.small(0, 5), g.small(0, 5)
        uf = g.pick(GUFUNCS)
        args = (g.array((2, d), fdt), g.array((2, rr), fdt), g.array((2, rr), fdt))
        kw = {"out": g.array((2, d), fdt)} if g.chance(0.3) else {}
        return uf, args, kw, None
    if r < 0.3:
        return g.pick([_core.rotate_half, _core.sinusoidal_add, _core.learned_pe_fwd]), tuple(
            g.array(g.shape(), g.pick([fdt, "i8"])) for _ in range(g.small(1, 3))), {}, None
    if r < 0.4:
        B, H, S, d = g.small(0, 2), g.small(0, 2), g.small(0, 3), 2 * g.small(0, 2)
        x = g.array((B, H, S, d), fdt, g.pick(["C", "strided", "reversed", "unaligned"]))
        out = x if g.chance(0.3) else g.array((B, H, S, d), fdt, g.pick(["C", "reversed"]))
        return _core._rope_grid, (g.maybe(lambda: g.small(0, 3)), x,
                                  g.array((1, 1, S, d), fdt), g.array((1, 1, S, d), fdt),
                                  out), {}, None
    n, h = g.small(0, 4), g.small(0, 3)
    edt = g.pick(["f4", "f8"])
    makers = [
        lambda: (_core._rope_table, (g.array((n,), "i8", "C"), g.array((h,), "f8", "C"), 1.0,
                                     g.flag(), g.array((n, 2 * h), edt, "C"),
                                     g.array((n, 2 * h), edt, "C"))),
        lambda: (_core._sinusoidal_table, (g.maybe(lambda: g.small(0, 4)),
                                           g.array(((h + 1) // 2,), "f8", "C"), g.flag(),
                                           g.array((n, h), fdt, "C"))),
        lambda: (_core._learned_back, (g.array((n, h), fdt, "C"),
                                       np.abs(g.array((n,), "i8", "C")),
                                       g.array((4, h), "f8" if fdt == "f8" else "f4", "C"),
                                       g.flag())),
        lambda: (_core._t5_bucket, (g.array((n,), "i8", "C"), g.array((n,), "i8", "C"),
                                    g.flag(), g.pick([32, 4, 2, 3, -1]), g.pick([128, 3, 0]))),
        lambda: (_core._t5_bias, (g.array((32, h), fdt, "C"), g.array((h, n, 2), fdt, "C"),
                                  g.flag(), g.pick([128, 8, 2**60]), g.pick([0, 5, -2**62]))),
        lambda: (_core._t5_bias_backward, (g.array((h, n, 2), edt, "C"),
                                           g.array((32, h), edt, "C"), g.flag(), 128,
                                           g.pick([0, 2**61]))),
        lambda: (_core._shaw_index, (g.array((n, h), "i8", "C"), g.pick([0, 2, -1, 2**62]))),
        lambda: (_core._shaw_embed, (g.array((2 * h + 1, 2), fdt, "C"),
                                     g.array((n, 3, 2), fdt, "C"))),
        lambda: (_core._shaw_embed_backward, (g.array((n, 3, 2), edt, "C"),
                                              g.array((2 * h + 1, 2), edt, "C"))),
        lambda: (_core._alibi_bias, (g.array((h,), "f8", "C"), g.array((h, n, 2), edt, "C"),
                                     g.pick([0, 3, 2**53]), g.flag())),
        lambda: (_core._causal_mask, (g.array((n, h), "?", "C"), g.pick([0, -2, 2**62]),
                                      g.pick([-1, 0, 2, 2**62]))),
        lambda: (_core._padding_mask, (np.abs(g.array((n,), "i8", "C")),
                                       g.array((n, h), "?", "C"), g.flag())),
        lambda: (_core._stream, (g.pick(["scale", "fill", "copy", "x"]),
                                 g.array((n,), "f4", "C"), g.array((n,), "f4", "C"))),
        lambda: (_core._rope_varlen, (g.array((n, 2, 2 * h), edt, "C"),
                                      np.array(sorted(g.r.randint(0, n) for _ in range(h))
                                               + [n], np.int64) if g.chance(0.7)
                                      else g.array((h + 1,), "i8", "C"),
                                      None if g.chance(0.5) else g.array((h,), "i8", "C"),
                                      g.array((g.small(0, 5), 2 * h), edt, "C"),
                                      g.array((g.small(0, 5), 2 * h), edt, "C"), g.flag(),
                                      g.flag(), g.array((n, 2, 2 * h), edt,
                                                        g.pick(["C", "strided", "reversed"])))),
    ]
    fn, args = g.pick(makers)()
    args = tuple(g.anything() if g.chance(0.08) else a for a in args)
    return fn, args, {}, None


def mk_registry(g):
    """A registered call (tests/registry.py) with one argument, sometimes,
    replaced by anything: every public function is fuzzed, including ones
    added after the makers above were written."""
    import registry

    name, fn, args, kwargs, _ = g.pick(registry.REGISTRY)
    args, kwargs = list(args), dict(kwargs)
    if kwargs.get("out") is not None or "apply_qk" in name:
        kwargs.pop("out", None)          # shared buffers of the registry stay untouched
    slots = [("a", i) for i in range(len(args))] + [("k", k) for k in kwargs]
    if slots and g.chance(0.7):
        kind, key = g.pick(slots)
        if kind == "a":
            args[key] = g.anything()
        else:
            kwargs[key] = g.anything()
    return fn, tuple(args), kwargs, None


MAKERS = [(mk_registry, 6), (mk_apply_rope, 8), (lambda g: mk_apply_rope(g, True), 4), (mk_rope_cos_sin, 3),
          (mk_rope_module, 6), (mk_rotate, 2), (mk_hf, 2), (mk_meta, 2), (mk_tables, 2),
          (mk_sinusoidal, 5), (mk_learned, 6), (mk_t5, 5), (mk_shaw, 4), (mk_alibi, 3),
          (mk_masks, 4), (mk_attention, 2), (mk_scaling, 4), (mk_varlen, 5),
          (mk_rope_batched, 3), (mk_variants, 4), (mk_bias_out, 2)]
PUBLIC = [m for m, w in MAKERS for _ in range(w)]


# ------------------------------------------------------------------ driver

def cap_address_space(extra=int(os.environ.get("POSEMB_FUZZ_MEMORY", 4 << 30))):
    """Make an allocation the size checks miss fail instead of paging (not under ASan)."""
    if "asan" in os.environ.get("LD_PRELOAD", ""):
        return
    with open("/proc/self/status") as f:
        vm = next(int(line.split()[1]) * 1024 for line in f if line.startswith("VmSize"))
    resource.setrlimit(resource.RLIMIT_AS, (vm + extra, resource.RLIM_INFINITY))


#: positional output arguments of the private C functions
CORE_OUTS = {"_rope_table": (4, 5), "_sinusoidal_table": (3,), "_learned_back": (2,),
             "_t5_bucket": (1,), "_t5_bias": (1,), "_t5_bias_backward": (1,),
             "_shaw_index": (0,), "_shaw_embed": (1,), "_shaw_embed_backward": (1,),
             "_alibi_bias": (1,), "_causal_mask": (0,), "_padding_mask": (1,),
             "_stream": (1, 2), "_rope_grid": (4,), "_rope_varlen": (7,)}


def snapshot(fn, args, kw):
    """Copies of every array argument that the call must not write."""
    outs = [kw["out"]] if isinstance(kw.get("out"), np.ndarray) else []
    outs += [args[i] for i in CORE_OUTS.get(getattr(fn, "__name__", ""), ())
             if i < len(args) and isinstance(args[i], np.ndarray)]
    inplace = kw.get("inplace")
    if getattr(fn, "__name__", "") == "apply_qk" and isinstance(inplace, (bool, np.bool_, int)) \
            and kw["inplace"]:
        outs += [a for a in args[:2] if isinstance(a, np.ndarray)]   # rotated in place
    if isinstance(fn, np.ufunc):                 # positional outputs of a ufunc
        outs += [a for a in args[fn.nin:] if isinstance(a, np.ndarray)]
    items = [(i, a) for i, a in enumerate(args)] + [(k, v) for k, v in kw.items() if k != "out"]
    snap = []
    for key, a in items:
        if isinstance(a, np.ndarray) and a.dtype.kind != "O":
            if any(a is o or np.may_share_memory(a, o) for o in outs):
                continue
            snap.append((key, a, a.copy()))
    return snap


class Watchdog:
    """Per-case hang detection that works inside C loops: faulthandler's
    timer thread dumps every traceback and exits with code 3; the case is in
    the POSEMB_FUZZ_CURRENT file (if set), written before the call."""

    def __init__(self):
        self.timeout = float(os.environ.get("POSEMB_FUZZ_CASE_TIMEOUT", "60"))
        path = os.environ.get("POSEMB_FUZZ_CURRENT")
        self.fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644) if path else None

    def start(self, describe):
        if self.fd is not None:
            data = describe().encode("utf-8", "replace")
            os.ftruncate(self.fd, 0)
            os.pwrite(self.fd, data, 0)
        faulthandler.dump_traceback_later(self.timeout, exit=True)

    def stop(self):
        faulthandler.cancel_dump_traceback_later()


def main(cases=100_000, seed=0):
    cap_address_space()
    np.seterr(all="ignore")
    dog = Watchdog()
    g = Gen(seed)
    stats = {"returned": 0, "raised": 0, "failures": 0}
    failures = []
    threads = posemb.get_num_threads()
    for i in range(cases):
        maker = mk_core if g.chance(0.25) else g.pick(PUBLIC)
        try:
            fn, args, kw, oracle = maker(g)
        except ALLOWED:
            stats["raised"] += 1
            continue
        snap = snapshot(fn, args, kw)
        dog.start(lambda: describe(i, fn, args, kw))
        try:
            try:
                res = fn(*args, **kw)
            finally:
                dog.stop()
        except MemoryError as e:
            res = None
            ok = bool(NAMED_MEMORY_ERROR.match(str(e)))
            if ok:
                stats["raised"] += 1
            else:
                why = f"MemoryError not from posemb's size check: {str(e)[:200]!r}"
        except ALLOWED:
            stats["raised"] += 1
            res = None
            ok = True
        except Exception as e:  # noqa: BLE001 - anything else is a finding
            ok = False
            why = f"{type(e).__name__}: {e}"
        else:
            stats["returned"] += 1
            ok = True
            shapes = [np.shape(r) for r in (res if isinstance(res, tuple) else (res,))]
            if oracle is not None and all(max(s, default=0) <= 64 for s in shapes):
                try:
                    oracle(res)
                except AssertionError as e:
                    ok, why = False, f"oracle mismatch: {str(e)[:300]}"
                except ALLOWED:
                    pass
        if ok:
            for key, a, copy in snap:
                if not np.array_equal(a, copy, equal_nan=a.dtype.kind in "fc"):
                    ok, why = False, f"input {key} was modified"
                    break
        if not ok:
            stats["failures"] += 1
            if len(failures) < 50:
                failures.append(f"{describe(i, fn, args, kw)}\n    {why}")
    posemb.set_num_threads(threads)
    for f in failures:
        print(f)
    print(f"fuzz cases: {cases} returned: {stats['returned']} raised: {stats['raised']} "
          f"failures: {stats['failures']} (seed {seed})")
    return 1 if stats["failures"] else 0


def describe(i, fn, args, kw):
    return (f"case {i}: {getattr(fn, '__qualname__', getattr(fn, '__name__', fn))!s} args="
            f"{[short(a) for a in args]} kw={ {k: short(v) for k, v in kw.items()} }")


def short(a):
    if isinstance(a, np.ndarray):
        return f"array(shape={a.shape}, dtype={a.dtype}, strides={a.strides}, " \
               f"writeable={a.flags.writeable}, aligned={a.flags.aligned})"
    r = repr(a)
    return r if len(r) < 60 else r[:57] + "..."


if __name__ == "__main__":
    n = int(sys.argv[1]) if len(sys.argv) > 1 else 100_000
    s = int(sys.argv[2]) if len(sys.argv) > 2 else 0
    try:
        sys.exit(main(n, s))
    except Exception:
        traceback.print_exc()
        sys.exit(2)

"""Property tests: every public kernel equals its slow float64 oracle
(posemb._reference) over shapes, strides, dtypes, positions and offsets.

Values come from a hypothesis-drawn seed; shapes, layouts (C, F, strided,
reversed, transposed, byte-swapped, read-only, unaligned), dtypes and
positions are drawn by hypothesis.  Integer outputs (buckets, indices,
masks) must be exact; float outputs agree to a few units of the dtype's
rounding (and of float64's at large angles).
"""
import numpy as np
import pytest

pytest.importorskip("hypothesis")
from hypothesis import HealthCheck, example, given, settings, strategies as st  # noqa: E402

import posemb
from posemb import _reference as R

from _layouts import LAYOUTS, eps, f64, lay

FAST = settings(max_examples=150, deadline=None, derandomize=True,
                suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])

floats = st.sampled_from([np.float16, np.float32, np.float64])
layouts = st.sampled_from(LAYOUTS)
seeds = st.integers(0, 2**32 - 1)
lead_shapes = st.lists(st.integers(0, 4), min_size=0, max_size=3).map(tuple)


def close(got, want, atol, rtol=0.0, exact_dtype=None):
    if exact_dtype is not None:
        assert got.dtype == np.dtype(exact_dtype), got.dtype
    np.testing.assert_allclose(f64(got), want, atol=atol, rtol=rtol)


def rot_tol(dtype, x, c, s):
    """Two products and a sum, rounded once (float16: computed in float32)."""
    m = max(1.0, float(np.abs(x).max(initial=0))) * max(
        1.0, float(np.abs(c).max(initial=0)), float(np.abs(s).max(initial=0)))
    return 4 * eps(dtype) * m


def table_tol(dtype, top_position):
    """cos/sin rounded once to dtype; float64 angles carry ~p * 2**-52 error."""
    return 2 * eps(dtype) + 8 * 2.0**-52 * max(1.0, float(top_position))


# ------------------------------------------------------------------ RoPE apply

@st.composite
def rope_case(draw):
    lead = draw(lead_shapes)
    h = draw(st.integers(0, 5))
    r = 2 * h
    d = r + draw(st.integers(0, 3))
    # tables broadcast: each leading axis either kept or 1, some axes dropped
    keep = [draw(st.booleans()) for _ in lead]
    tlead = tuple(n if k else 1 for n, k in zip(lead, keep))
    tlead = tlead[draw(st.integers(0, len(tlead))):]
    return lead + (d,), tlead + (r,)


@FAST
@given(rope_case(), floats, layouts, layouts, st.booleans(), st.booleans(),
       st.sampled_from(["none", "fresh", "inplace"]), seeds)
def test_apply_rope(shapes, dt, xl, tl, interleaved, backward, out_mode, seed):
    xshape, tshape = shapes
    rng = np.random.default_rng(seed)
    xv = rng.standard_normal(xshape)
    cv, sv = rng.uniform(-1, 1, tshape), rng.uniform(-1, 1, tshape)
    x, cos, sin = lay(xv, dt, xl), lay(cv, dt, tl), lay(sv, dt, tl)
    x0 = x.copy()
    fn = posemb.apply_rope_backward if backward else posemb.apply_rope
    want = (R.apply_rope_backward if backward else R.apply_rope)(
        f64(x), f64(cos), f64(sin), interleaved=interleaved)
    if out_mode == "fresh":
        out = np.full(xshape, np.nan, dt)
        got = fn(x, cos, sin, interleaved=interleaved, out=out)
        assert got is out
    elif out_mode == "inplace" and x.flags.writeable and x.dtype.isnative:
        got = fn(x, cos, sin, interleaved=interleaved, out=x)
    else:
        got = fn(x, cos, sin, interleaved=interleaved)
        np.testing.assert_array_equal(x, x0)
    close(got, want, rot_tol(dt, want, f64(cos), f64(sin)))


@FAST
@given(st.sampled_from([(2, 4, 64, 64), (1, 3, 128, 96), (64, 2, 8, 64), (300, 128)]),
       st.sampled_from([np.float32, np.float64, np.float16]), st.booleans(), st.booleans(),
       st.sampled_from(["C", "strided", "reversed", "transposed"]), st.booleans(), seeds)
def test_apply_rope_grid_path(shape, dt, interleaved, backward, xl, inplace, seed):
    """Large arrays take the position-blocked C path; same oracle."""
    rng = np.random.default_rng(seed)
    S, d = shape[-2], shape[-1]
    r = d if seed % 2 else d // 2
    xv = rng.standard_normal(shape)
    cos, sin = posemb.rope_cos_sin(np.arange(S), r, interleaved=interleaved, dtype=dt)
    x = lay(xv, dt, xl) if xl != "transposed" else np.ascontiguousarray(
        np.swapaxes(xv.astype(dt), -2, -3) if len(shape) > 2 else xv.astype(dt))
    if xl == "transposed" and len(shape) > 2:
        x = np.swapaxes(x, -2, -3)
    fn = posemb.apply_rope_backward if backward else posemb.apply_rope
    want = (R.apply_rope_backward if backward else R.apply_rope)(
        f64(x), f64(cos), f64(sin), interleaved=interleaved)
    got = fn(x, cos, sin, interleaved=interleaved, out=x if inplace else None)
    close(got, want, rot_tol(dt, want, 1.0, 1.0))


@FAST
@given(st.integers(1, 6), st.integers(0, 3), st.integers(0, 12),
       st.sampled_from([0, 1, 7, 1000, 2**40]),
       st.booleans(), floats, st.sampled_from([1.0, 0.5, 2.5]),
       st.sampled_from([10000.0, 500000.0, 10.0]), lead_shapes, layouts, st.booleans(), seeds)
def test_rope_module(h, extra, seq, offset, interleaved, dt, scale, base, lead, xl,
                     with_positions, seed):
    r = 2 * h
    d = r + extra
    rope = posemb.RoPE(d, 8, base=base, scale=scale, interleaved=interleaved,
                       rotary_dim=r, dtype=dt)
    rng = np.random.default_rng(seed)
    x = lay(rng.standard_normal(lead + (seq, d)), dt, xl)
    if with_positions:
        pos = rng.integers(0, max(offset, 16), size=lead[-1:] + (seq,))
        got, back = rope(x, pos), rope.backward(x, pos)
    else:
        pos = offset + np.arange(seq)
        got, back = rope(x, offset=offset), rope.backward(x, offset=offset)
    cos, sin = R.rope_cos_sin(pos, r, base, interleaved=interleaved, scale=scale)
    tol = rot_tol(dt, f64(x), 1.0, 1.0) + 4 * table_tol(np.float64, scale * (offset + seq)) \
        * max(1.0, float(np.abs(f64(x)).max(initial=0)))
    tol += 4 * table_tol(dt, 0) * max(1.0, float(np.abs(f64(x)).max(initial=0)))
    close(got, R.apply_rope(f64(x), cos, sin, interleaved=interleaved), tol)
    close(back, R.apply_rope_backward(f64(x), cos, sin, interleaved=interleaved), tol)
    assert got.dtype == x.dtype.newbyteorder("=") and got.shape == x.shape


# ------------------------------------------------------------------ RoPE tables

@FAST
@given(st.lists(st.integers(0, 6), max_size=2).map(tuple), st.integers(0, 8),
       st.sampled_from([10000.0, 1e6, 3.0]), st.booleans(), floats, seeds,
       st.sampled_from([2**10, 2**24, 2**40]), st.sampled_from(["int64", "int32", "uint16"]))
def test_rope_cos_sin(pshape, h, base, interleaved, dt, seed, top, pdt):
    rng = np.random.default_rng(seed)
    top = min(top, np.iinfo(pdt).max)
    pos = rng.integers(0, top, size=pshape).astype(pdt)
    cos, sin = posemb.rope_cos_sin(pos, 2 * h, base, interleaved=interleaved, dtype=dt)
    wc, ws = R.rope_cos_sin(pos, 2 * h, base, interleaved=interleaved)
    tol = table_tol(dt, top)
    close(cos, wc, tol, exact_dtype=dt)
    close(sin, ws, tol, exact_dtype=dt)


@FAST
@given(st.integers(0, 20), st.integers(0, 20), st.sampled_from([10000.0, 2.0, 1e5, 0.5]))
def test_rope_freq_tables(h, end, base):
    dim = 2 * h
    close(posemb.rope_inv_freq(dim, base), R.inv_freq(dim, base), 0, 1e-15)
    cf = posemb.compute_frequencies(dim, end, base)
    close(cf, np.arange(end)[:, None] * R.inv_freq(dim, base)[None, :], 0, 1e-15)
    fc = posemb.precompute_freqs_cis(dim, end, base)
    assert fc.dtype == np.complex64 and fc.shape == (end, h)
    np.testing.assert_allclose(fc, R.precompute_freqs_cis(dim, end, base), atol=2e-7)


@FAST
@given(lead_shapes, st.integers(0, 6), floats, layouts, seeds, st.integers(-4, 3))
def test_rotate_half_and_neg_half(lead, h, dt, xl, seed, axis):
    rng = np.random.default_rng(seed)
    x = lay(rng.standard_normal(lead + (2 * h,)), dt, xl)
    close(posemb.rotate_half(x), R.rotate_half(f64(x)), 0, exact_dtype=dt)
    ndim = x.ndim
    if -ndim <= axis < ndim and x.shape[axis] % 2 == 0:
        close(posemb.neg_half(x, axis), R.rotate_half(f64(x), axis), 0)


@FAST
@given(st.integers(1, 3), st.integers(1, 3), st.integers(1, 3), st.integers(0, 5),
       st.integers(0, 4), floats, layouts, seeds)
def test_hf_and_meta_drop_ins(b, hq, hk, seq, h, dt, xl, seed):
    rng = np.random.default_rng(seed)
    d = 2 * h
    q = lay(rng.standard_normal((b, hq, seq, d)), dt, xl)
    k = lay(rng.standard_normal((b, hk, seq, d)), dt, xl)
    cos = lay(rng.uniform(-1, 1, (b, seq, d)), dt, xl)
    sin = lay(rng.uniform(-1, 1, (b, seq, d)), dt, xl)
    qe, ke = posemb.apply_rotary_pos_emb(q, k, cos, sin)
    c4, s4 = f64(cos)[:, None], f64(sin)[:, None]
    close(qe, R.apply_rope(f64(q), c4, s4), rot_tol(dt, f64(q), 1, 1))
    close(ke, R.apply_rope(f64(k), c4, s4), rot_tol(dt, f64(k), 1, 1))
    # Meta: (batch, seq, heads, d) with complex (seq, d/2)
    xq = lay(rng.standard_normal((b, seq, hq, d)), dt, xl)
    xk = lay(rng.standard_normal((b, seq, hk, d)), dt, xl)
    fc = posemb.precompute_freqs_cis(d, seq + 3)[3:]
    yq, yk = posemb.apply_rotary_emb(xq, xk, fc)
    wq, wk = R.apply_rotary_emb(f64(xq), f64(xk), fc)
    tol = 4 * max(eps(dt), eps(np.float32)) * max(1.0, float(np.abs(f64(xq)).max(initial=0)),
                                                  float(np.abs(f64(xk)).max(initial=0)))
    close(yq, wq, tol, exact_dtype=dt)
    close(yk, wk, tol, exact_dtype=dt)


# ------------------------------------------------------------------ sinusoidal

@FAST
@given(st.integers(0, 12), st.integers(0, 9), st.sampled_from([0, 1, 77, 2**20, 2**40]),
       st.sampled_from(["interleaved", "concat"]), floats,
       st.sampled_from([10000.0, 100.0, 1.5]))
def test_sinusoidal(seq, dim, start, layout, dt, base):
    got = posemb.sinusoidal(seq, dim, base=base, start=start, layout=layout, dtype=dt)
    close(got, R.sinusoidal(seq, dim, base=base, start=start, layout=layout),
          table_tol(dt, start + seq), exact_dtype=dt)


@FAST
@given(lead_shapes, st.integers(0, 6), st.integers(0, 7), st.sampled_from([0, 3, 2**30]),
       st.sampled_from(["interleaved", "concat"]), floats, layouts, st.booleans(), seeds)
def test_add_sinusoidal(lead, seq, dim, start, layout, dt, xl, use_out, seed):
    rng = np.random.default_rng(seed)
    x = lay(rng.standard_normal(lead + (seq, dim)), dt, xl)
    x0 = x.copy()
    out = np.empty(x.shape, dt) if use_out else None
    got = posemb.add_sinusoidal(x, start=start, layout=layout, out=out)
    want = f64(x) + R.sinusoidal(seq, dim, start=start, layout=layout)
    tol = 4 * eps(dt) * max(1.0, float(np.abs(want).max(initial=0))) + table_tol(dt, start + seq)
    close(got, want, tol, exact_dtype=dt)
    np.testing.assert_array_equal(x, x0)


@FAST
@given(st.integers(0, 6), st.integers(0, 6), st.integers(0, 4), st.integers(0, 3), floats,
       layouts, st.sampled_from([(-2, -1), (-1, -2), (0, 2), (2, 0), (1, 0)]), seeds)
def test_absolute_pe(dim, seq, extra, start, dt, xl, axes, seed):
    pe = posemb.AbsolutePE(dim, seq + start + extra, dtype=dt)
    close(pe.embeddings, R.sinusoidal(seq + start + extra, dim), table_tol(dt, seq + start + extra))
    rng = np.random.default_rng(seed)
    sa, fa = axes
    shape = [2, 2, 2]
    shape[sa], shape[fa] = seq, dim
    x = lay(rng.standard_normal(shape), dt, xl)
    got = pe(x, start=start, seq_axis=sa, feature_axis=fa)
    table = R.sinusoidal(seq, dim, start=start)
    view = table if (sa % 3) < (fa % 3) else table.T
    view = np.expand_dims(view, tuple(i for i in range(3) if i not in (sa % 3, fa % 3)))
    want = f64(x) + view
    close(got, want, 4 * eps(dt) * max(1.0, float(np.abs(want).max(initial=0))), exact_dtype=dt)


# ------------------------------------------------------------------ learned

@FAST
@given(lead_shapes, st.integers(0, 6), st.integers(0, 5), st.integers(1, 9), floats, floats,
       layouts, layouts, st.booleans(), st.sampled_from(["int64", "int32", "uint8"]), seeds)
def test_learned(lead, seq, d, m, dt, wdt, xl, wl, with_positions, pdt, seed):
    rng = np.random.default_rng(seed)
    x = lay(rng.standard_normal(lead + (seq, d)), dt, xl)
    w = lay(rng.standard_normal((m + seq, d)), wdt, wl)
    if with_positions:
        pos = rng.integers(0, m + seq, size=lead[-1:] + (seq,)).astype(pdt)
        got = posemb.learned_pe_forward(x, w, pos)
    else:
        off = int(rng.integers(0, m + 1))
        pos = off + np.arange(seq)
        got = posemb.learned_pe_forward(x, w, offset=off)
    want = R.learned_forward(f64(x), f64(w), pos)
    tol = 4 * max(eps(dt), eps(wdt)) * max(1.0, float(np.abs(want).max(initial=0)))
    close(got, want, tol)
    g = x
    if with_positions:
        gw = posemb.learned_pe_backward(g, pos, num_positions=m + seq)
    else:
        gw = posemb.learned_pe_backward(g, num_positions=m + seq, offset=off)
    wgw = R.learned_backward(f64(g), pos, m + seq)
    n = max(1, int(np.prod(lead + (seq,))))
    close(gw, wgw, 4 * eps(dt) * n * max(1.0, float(np.abs(f64(g)).max(initial=0))),
          exact_dtype=dt)
    lpe = posemb.LearnedPE(m + seq, d, dtype=wdt, seed=seed)
    close(lpe(x, pos) if with_positions else lpe(x, offset=off),
          R.learned_forward(f64(x), f64(lpe.weight), pos), tol)


# ------------------------------------------------------------------ T5 / Shaw

t5_configs = st.sampled_from([(True, 32, 128), (False, 32, 128), (True, 4, 3), (False, 2, 2),
                              (True, 33, 100), (False, 7, 13), (True, 128, 512)])


@FAST
@given(t5_configs, st.lists(st.integers(-2**63, 2**63 - 1), max_size=20),
       st.lists(st.integers(-600, 600), max_size=40), st.sampled_from(["int64", "int32", "C"]))
def test_t5_bucket_exact(cfg, wide, near, kind):
    bd, nb, md = cfg
    rp = np.array(wide + near, dtype=np.int64)
    if kind == "int32":
        rp = np.clip(rp, -2**31, 2**31 - 1).astype(np.int32)
    elif kind == "C":
        rp = rp[::-1]
    got = posemb.t5_relative_position_bucket(rp, bidirectional=bd, num_buckets=nb,
                                             max_distance=md)
    want = R.t5_buckets(rp, bidirectional=bd, num_buckets=nb, max_distance=md)
    assert got.dtype == np.int64
    np.testing.assert_array_equal(got, want)


@FAST
@given(t5_configs, st.integers(0, 7), st.integers(0, 7), st.integers(0, 3),
       st.sampled_from([0, 5, -9, 2**40, -2**40]), floats, layouts, seeds)
def test_t5_bias_and_backward(cfg, q, k, heads, off, dt, tl, seed):
    bd, nb, md = cfg
    rng = np.random.default_rng(seed)
    table = lay(rng.standard_normal((nb, heads)), dt, tl)
    got = posemb.t5_relative_bias(table, q, k, bidirectional=bd, num_buckets=nb,
                                  max_distance=md, query_offset=off)
    want = R.t5_bias(f64(table), q, k, bidirectional=bd, num_buckets=nb, max_distance=md,
                     query_offset=off)
    close(got, want, 0, exact_dtype=dt)
    g = lay(rng.standard_normal((2, heads, q, k)), dt, tl)
    gt = posemb.t5_relative_bias_backward(g, num_buckets=nb, query_length=q, key_length=k,
                                          bidirectional=bd, max_distance=md, query_offset=off)
    wg = R.t5_bias_backward(f64(g), num_buckets=nb, bidirectional=bd, max_distance=md,
                            query_offset=off)
    close(gt, wg, 4 * eps(dt) * max(1.0, float(np.abs(wg).max(initial=0))) +
          1e-12 * q * k, exact_dtype=dt)


@FAST
@given(st.integers(0, 8), st.integers(0, 8), st.integers(0, 10), st.integers(0, 4), floats,
       layouts, seeds)
def test_shaw(q, k, K, dim, dt, tl, seed):
    np.testing.assert_array_equal(posemb.relative_position_index(q, k, K), R.shaw_index(q, k, K))
    rng = np.random.default_rng(seed)
    table = lay(rng.standard_normal((2 * K + 1, dim)), dt, tl)
    close(posemb.relative_embeddings(table, q, k), R.shaw_embeddings(f64(table), q, k), 0,
          exact_dtype=dt)
    g = lay(rng.standard_normal((q, k, dim)), dt, tl)
    wg = R.shaw_embeddings_backward(f64(g), K)
    close(posemb.relative_embeddings_backward(g, K, q, k), wg,
          4 * eps(dt) * max(1.0, float(np.abs(wg).max(initial=0))), exact_dtype=dt)


# ------------------------------------------------------------------ ALiBi

@FAST
@given(st.integers(1, 40), floats)
def test_alibi_slopes(n, dt):
    close(posemb.alibi_slopes(n, dtype=dt), R.alibi_slopes(n), 0, 2 * eps(dt) + 4e-16,
          exact_dtype=dt)


@FAST
@given(st.one_of(st.integers(1, 9), st.lists(st.floats(-4, 4), min_size=0, max_size=4)),
       st.integers(0, 7), st.integers(0, 7), st.booleans(),
       st.one_of(st.none(), st.integers(-10, 10), st.sampled_from([2**40, -2**40])), floats)
def test_alibi_bias(slopes, q, k, symmetric, off, dt):
    if isinstance(slopes, list) and not slopes:
        slopes = np.zeros(0)
    got = posemb.alibi_bias(slopes, q, k, symmetric=symmetric, query_offset=off, dtype=dt)
    m = R.alibi_slopes(slopes) if isinstance(slopes, int) else np.asarray(slopes, float)
    want = R.alibi_bias(m, q, k, symmetric=symmetric, query_offset=off)
    with np.errstate(over="ignore"):
        want = f64(want.astype(dt))          # float16 overflows to -inf at 2**40
    close(got, want, float(np.finfo(dt).smallest_subnormal), 2 * eps(dt) + 1e-15,
          exact_dtype=dt)


# ------------------------------------------------------------------ masks

@FAST
@given(st.integers(0, 9), st.one_of(st.none(), st.integers(0, 9)),
       st.one_of(st.none(), st.integers(1, 12), st.just(2**62)),
       st.one_of(st.none(), st.integers(-12, 12), st.sampled_from([2**61, -2**61])))
def test_causal_mask(q, k, window, off):
    got = posemb.causal_mask(q, k, window=window, query_offset=off)
    assert got.dtype == np.bool_
    np.testing.assert_array_equal(got, R.causal_mask(q, k, window=window, query_offset=off))
    if k is None and window is None and off is None:
        np.testing.assert_array_equal(posemb.create_causal_mask(q), got[None])


@FAST
@given(st.integers(0, 9).flatmap(lambda m: st.tuples(
    st.just(m), st.lists(st.integers(0, m), max_size=5))), st.sampled_from(["right", "left"]),
    st.sampled_from(["int64", "int8", "uint32"]), floats)
def test_padding_masks(case, side, ldt, dt):
    m, lengths = case
    n = np.array(lengths, dtype=ldt)
    got = posemb.padding_mask(n, m, side=side)
    want = R.padding_mask(n, m, side=side)
    np.testing.assert_array_equal(got, want)
    np.testing.assert_array_equal(posemb.create_padding_mask(n, m), ~R.padding_mask(n, m)[..., None])
    add = posemb.to_additive(got, dt)
    assert add.dtype == np.dtype(dt)
    np.testing.assert_array_equal(add, np.where(want, 0.0, -np.inf))


# ------------------------------------------------------------------ attention

@FAST
@given(st.integers(1, 2), st.integers(0, 4), st.integers(0, 4), st.integers(0, 3), floats,
       st.booleans(), st.booleans(), seeds)
def test_attention(heads, L, S, E, dt, with_mask, with_bias, seed):
    rng = np.random.default_rng(seed)
    q = rng.standard_normal((heads, L, E)).astype(dt)
    k = rng.standard_normal((heads, S, E)).astype(dt)
    v = rng.standard_normal((heads, S, 2)).astype(dt)
    mask = rng.random((L, S)) < 0.7 if with_mask else None
    bias = rng.standard_normal((heads, L, S)) if with_bias else None
    got = posemb.scaled_dot_product_attention(q, k, v, mask=mask, bias=bias)
    want = R.attention(f64(q), f64(k), f64(v), mask=mask, bias=bias)
    close(got, want, 8 * max(eps(dt), eps(np.float32)) * 10, exact_dtype=dt)


# ------------------------------------------------------------------ RoPE scaling and variants

@st.composite
def scaling_dicts(draw, h):
    kind = draw(st.sampled_from(["none", "default", "linear", "dynamic", "yarn", "longrope",
                                 "llama3", "mrope"]))
    key = draw(st.sampled_from(["rope_type", "type"]))
    factor = draw(st.sampled_from([0.5, 1.0, 2.0, 4.0, 8.0, 32.0]))
    orig = draw(st.sampled_from([16, 64, 4096]))
    if kind == "none":
        return None
    if kind in ("default", "mrope"):
        return {key: kind}
    if kind in ("linear", "dynamic"):
        return {key: kind, "factor": factor}
    if kind == "yarn":
        d = {key: kind, "factor": factor, "original_max_position_embeddings": orig}
        for opt, vals in (("beta_fast", [16.0, 64.0]), ("beta_slow", [2.0, 0.5]),
                          ("mscale", [0.707, 1.0]), ("mscale_all_dim", [0.707, 1.0]),
                          ("attention_factor", [0.5, 1.3]), ("truncate", [False, True])):
            if draw(st.booleans()):
                d[opt] = draw(st.sampled_from(vals))
        return d
    if kind == "longrope":
        fl = st.lists(st.sampled_from([1.0, 1.5, 3.0, 40.0]), min_size=h, max_size=h)
        d = {key: kind, "short_factor": draw(fl), "long_factor": draw(fl),
             "original_max_position_embeddings": orig}
        if draw(st.booleans()):
            d["factor"] = factor
        return d
    low = draw(st.sampled_from([0.5, 1.0, 2.0]))
    return {key: kind, "factor": factor, "low_freq_factor": low,
            "high_freq_factor": low * draw(st.sampled_from([2.0, 4.0])),
            "original_max_position_embeddings": orig}


@FAST
@given(st.integers(2, 40).map(lambda h: 2 * h).flatmap(
    lambda d: st.tuples(st.just(d), scaling_dicts(d // 2))),
    st.sampled_from([10000.0, 500000.0, 2.0]), st.sampled_from([None, 16, 64, 8192]),
    st.one_of(st.none(), st.integers(0, 20000)))
def test_rope_scaling_parameters(case, base, max_pos, seq_len):
    dim, scaling = case
    kind = (scaling or {}).get("rope_type", (scaling or {}).get("type"))
    if kind == "dynamic" and max_pos is None:
        max_pos = 16
    inv, attn = posemb.rope_scaling_parameters(dim, base, scaling, max_position_embeddings=max_pos,
                                               seq_len=seq_len)
    winv, wattn = R.rope_scaling(dim, base, scaling, max_position_embeddings=max_pos,
                                 seq_len=seq_len)
    assert inv.dtype == np.float64 and inv.shape == (dim // 2,)
    np.testing.assert_allclose(inv, winv, rtol=1e-13, atol=0)
    assert attn == pytest.approx(wattn, rel=1e-14)
    np.testing.assert_array_equal(
        posemb.rope_inv_freq(dim, base, scaling=scaling, max_position_embeddings=max_pos,
                             seq_len=seq_len), inv)


@FAST
@given(st.integers(2, 6).map(lambda h: 2 * h).flatmap(
    lambda d: st.tuples(st.just(d), scaling_dicts(d // 2))),
    st.lists(st.integers(0, 300), max_size=8), st.booleans(), floats)
def test_scaled_tables_and_module(case, positions, interleaved, dt):
    """rope_cos_sin(scaling=) and RoPE(scaling=) use the frequencies and attention
    factor of the largest position + 1 (HF's dynamic_rope_update)."""
    dim, scaling = case
    kw = dict(max_position_embeddings=64)
    pos = np.array(positions, dtype=np.int64)
    seq = int(pos.max()) + 1 if pos.size else None
    inv, attn = R.rope_scaling(dim, 10000.0, scaling, seq_len=seq, **kw)
    cos, sin = posemb.rope_cos_sin(pos, dim, scaling=scaling, interleaved=interleaved,
                                   dtype=dt, **kw)
    wc, ws = R._band_tables([pos], [inv], interleaved)
    tol = table_tol(dt, 300) * max(1.0, attn)
    close(cos, wc * attn, tol, exact_dtype=dt)
    close(sin, ws * attn, tol, exact_dtype=dt)
    rope = posemb.RoPE(dim, 4, scaling=scaling, interleaved=interleaved, dtype=dt, **kw)
    c2, s2 = rope.cos_sin(pos)
    close(c2, wc * attn, tol, exact_dtype=dt)
    close(s2, ws * attn, tol, exact_dtype=dt)


@st.composite
def varlen_case(draw):
    lengths = draw(st.lists(st.integers(0, 5), min_size=0, max_size=4))
    heads = draw(st.integers(0, 3))
    r = 2 * draw(st.integers(0, 4))
    d = r + draw(st.integers(0, 3))
    per_seq = draw(st.booleans())
    offsets = [draw(st.integers(0, 6)) for _ in lengths] if per_seq else draw(st.integers(0, 6))
    return lengths, heads, d, r, offsets


@FAST
@given(varlen_case(), floats, floats, layouts, layouts, st.booleans(), st.booleans(),
       st.sampled_from(["none", "fresh", "inplace"]), seeds)
def test_apply_rope_varlen(case, dt, tdt, xl, tl, interleaved, backward_via_module, out_mode,
                           seed):
    lengths, heads, d, r, offsets = case
    cu = np.concatenate([[0], np.cumsum(lengths, dtype=np.int64)]).astype(np.int64)
    total = int(cu[-1])
    rows = int(np.max(np.asarray(offsets) + (max(lengths) if lengths else 0), initial=0)) + 1
    rng = np.random.default_rng(seed)
    x = lay(rng.standard_normal((total, heads, d)), dt, xl)
    cos = lay(rng.uniform(-1, 1, (rows, r)), tdt, tl)
    sin = lay(rng.uniform(-1, 1, (rows, r)), tdt, tl)
    off = np.array(offsets, np.int64) if isinstance(offsets, list) else offsets
    x0 = x.copy()
    want = R.apply_rope_varlen(f64(x), cu, f64(cos), f64(sin), interleaved=interleaved,
                               offset=off)
    work = np.result_type(x.dtype, cos.dtype, sin.dtype).newbyteorder("=")
    if out_mode == "fresh":
        out = np.full(x.shape, np.nan, work)
        got = posemb.apply_rope_varlen(x, cu, cos, sin, interleaved=interleaved, offset=off,
                                       out=out)
        assert got is out
    elif out_mode == "inplace" and x.flags.writeable and x.dtype == work:
        got = posemb.apply_rope_varlen(x, cu, cos, sin, interleaved=interleaved, offset=off,
                                       out=x)
        assert got is x
    else:
        got = posemb.apply_rope_varlen(x, cu, cos, sin, interleaved=interleaved, offset=off)
        np.testing.assert_array_equal(x, x0)
    assert got.dtype == work
    close(got, want, rot_tol(work, want, f64(cos), f64(sin)))
    # the gathered-table apply_rope it documents, bit for bit
    if total:
        seq_of = np.repeat(np.arange(len(lengths)), lengths)
        pos = np.broadcast_to(off, (len(lengths),))[seq_of] + np.arange(total) - cu[seq_of]
        same = posemb.apply_rope(x0, cos[pos][:, None], sin[pos][:, None],
                                 interleaved=interleaved)
        np.testing.assert_array_equal(got, same)


@FAST
@given(varlen_case(), floats, st.booleans(), st.sampled_from([0, 1, 2**20, 2**40]),
       st.sampled_from(["default", "dynamic", "longrope"]), seeds)
@example(([3, 0, 2], 1, 6, 4, [0, 5, 1]), np.float32, False, 2**40, "default", 0)
@example(([3, 0, 2], 2, 8, 8, 3), np.float64, True, 2**40, "dynamic", 1)
def test_rope_apply_varlen_and_offset_arrays(case, dt, interleaved, big, kind, seed):
    """RoPE.apply_varlen, RoPE(x, offset=array) and apply_qk equal the oracle at
    each sequence's own positions (including offsets far beyond the cache)."""
    lengths, heads, d, r, offsets = case
    r = max(r, 4)
    d = max(d, r)
    scaling = {"default": None, "dynamic": {"rope_type": "dynamic", "factor": 2.0},
               "longrope": {"rope_type": "longrope", "short_factor": [1.0] * (r // 2),
                            "long_factor": [2.0] * (r // 2)}}[kind]
    rope = posemb.RoPE(d, 8, rotary_dim=r, interleaved=interleaved, dtype=dt, scaling=scaling,
                       max_position_embeddings=16)
    rng = np.random.default_rng(seed)
    off = (np.array(offsets, np.int64) if isinstance(offsets, list)
           else np.full(len(lengths), offsets, np.int64))
    off = off + big
    cu = np.concatenate([[0], np.cumsum(lengths, dtype=np.int64)]).astype(np.int64)
    x = rng.standard_normal((int(cu[-1]), heads, d)).astype(dt)
    got = rope.apply_varlen(x, cu, offset=off)
    seq_of = np.repeat(np.arange(len(lengths)), lengths)
    pos = off[seq_of] + np.arange(int(cu[-1])) - cu[seq_of]
    top = int(pos.max()) + 1 if pos.size else 0
    inv, attn = R.rope_scaling(r, 10000.0, scaling, max_position_embeddings=16, seq_len=top)
    wc, ws = R._band_tables([pos], [inv], interleaved)
    want = R.apply_rope(f64(x), (wc * attn)[:, None], (ws * attn)[:, None],
                        interleaved=interleaved)
    tol = (rot_tol(dt, want, 1.5, 1.5) + 8 * table_tol(dt, top)) * max(1.0, float(
        np.abs(f64(x)).max(initial=0)))
    close(got, want, tol, exact_dtype=dt)
    # batched decoding: x (batch, heads, seq, d) with one offset per sequence
    b, s = len(lengths), max(lengths, default=0)
    xb = rng.standard_normal((b, heads, s, d)).astype(dt)
    pb = off[:, None] + np.arange(s)
    topb = int(pb.max()) + 1 if pb.size else 0
    inv, attn = R.rope_scaling(r, 10000.0, scaling, max_position_embeddings=16, seq_len=topb)
    wc, ws = R._band_tables([pb], [inv], interleaved)
    wantb = R.apply_rope(f64(xb), (wc * attn)[:, None], (ws * attn)[:, None],
                         interleaved=interleaved)
    tolb = (rot_tol(dt, wantb, 1.5, 1.5) + 8 * table_tol(dt, topb)) * max(1.0, float(
        np.abs(f64(xb)).max(initial=0)))
    close(rope(xb, offset=off), wantb, tolb, exact_dtype=dt)
    qr, kr = rope.apply_qk(xb, xb[:, :1], offset=off)
    close(qr, wantb, tolb, exact_dtype=dt)
    close(kr, wantb[:, :1], tolb, exact_dtype=dt)
    back = R.apply_rope_backward(f64(xb), (wc * attn)[:, None], (ws * attn)[:, None],
                                 interleaved=interleaved)
    close(rope.backward(xb, offset=off), back, tolb, exact_dtype=dt)


@FAST
@given(st.integers(1, 4), st.integers(1, 4), st.integers(0, 3), st.booleans(),
       st.sampled_from(["half", "interleaved"]), st.sampled_from(["f8", "i4", "f2"]), layouts,
       seeds)
def test_convert_rope_layout(heads, h, extra, partial, to, wdt, wl, seed):
    head_dim = 2 * h + (extra if partial else 0)
    rotary = 2 * h if partial else None
    rng = np.random.default_rng(seed)
    w = lay(rng.integers(-100, 100, (heads * head_dim, 3)), wdt, wl)
    w0 = w.copy()
    got = posemb.convert_rope_layout(w, heads, to=to, rotary_dim=rotary)
    np.testing.assert_array_equal(got, R.convert_rope_layout(np.array(w), heads, to=to,
                                                             rotary_dim=rotary))
    np.testing.assert_array_equal(w, w0)
    back = posemb.convert_rope_layout(got, heads, rotary_dim=rotary,
                                      to="interleaved" if to == "half" else "half")
    np.testing.assert_array_equal(back, w0)


@FAST
@given(st.lists(st.integers(0, 4), min_size=1, max_size=4), st.lists(st.integers(0, 3),
       max_size=2).map(tuple), st.sampled_from([10000.0, 1e6, 7.0]), st.booleans(), floats,
       st.integers(0, 2**40), seeds)
def test_mrope_tables_and_hf_selection(sections, lead, base, interleaved, dt, top, seed):
    dim = 2 * sum(sections)
    rng = np.random.default_rng(seed)
    pos = rng.integers(0, max(1, top % 5000), size=(len(sections),) + lead)
    if pos.size and top > 2**39:
        pos.flat[0] = top
    cos, sin = posemb.mrope_cos_sin(pos, dim, sections, base, interleaved=interleaved, dtype=dt)
    wc, ws = R.mrope_cos_sin(pos, dim, sections, base, interleaved=interleaved)
    tol = table_tol(dt, int(pos.max(initial=0)))
    close(cos, wc, tol, exact_dtype=dt)
    close(sin, ws, tol, exact_dtype=dt)
    if interleaved or not lead or dim == 0:
        return
    # Qwen2-VL: per-axis full tables (3, batch, seq, dim), sections selected by the drop-in
    full_c, full_s = R.rope_cos_sin(pos, dim, base)
    q = rng.standard_normal((lead[0], 2) + lead[1:] + (dim,)) if len(lead) == 2 else \
        rng.standard_normal((2,) + lead + (dim,))
    ud = 1 if len(lead) == 2 else 0
    qe, ke = posemb.apply_multimodal_rotary_pos_emb(q, q[:1] if ud == 0 else q[:, :1],
                                                    full_c, full_s, sections, unsqueeze_dim=ud)
    wc64, ws64 = np.expand_dims(wc, ud), np.expand_dims(ws, ud)
    want = R.apply_rope(q, wc64, ws64)
    close(qe, want, rot_tol(np.float64, want, 1.0, 1.0) + 1e-9)
    close(ke, want[:1] if ud == 0 else want[:, :1], rot_tol(np.float64, want, 1.0, 1.0) + 1e-9)


@FAST
@given(st.lists(st.integers(0, 4), max_size=2).map(tuple), st.integers(1, 3),
       st.integers(0, 3), st.sampled_from([10000.0, 100.0]), st.booleans(), floats, seeds)
def test_axial_tables(lead, axes, per_axis, base, interleaved, dt, seed):
    dim = 2 * axes * per_axis
    pos = np.random.default_rng(seed).integers(0, 64, size=lead + (axes,))
    cos, sin = posemb.axial_rope_cos_sin(pos, dim, base, interleaved=interleaved, dtype=dt)
    wc, ws = R.axial_rope_cos_sin(pos, dim, base, interleaved=interleaved)
    close(cos, wc, table_tol(dt, 64), exact_dtype=dt)
    close(sin, ws, table_tol(dt, 64), exact_dtype=dt)


@FAST
@given(st.lists(st.integers(0, 40), max_size=8), st.integers(1, 6),
       st.sampled_from([512.0, 64.0, 8.0]), st.sampled_from([0.0, 20.0, -7.5]), st.booleans(),
       floats)
def test_xpos_tables(positions, h, scale_base, center, interleaved, dt):
    pos = np.array(positions, dtype=np.int64)
    got = posemb.xpos_cos_sin(pos, 2 * h, scale_base=scale_base, center=center,
                              interleaved=interleaved, dtype=dt)
    want = R.xpos_cos_sin(pos, 2 * h, scale_base=scale_base, center=center,
                          interleaved=interleaved)
    for g, w in zip(got, want):
        close(g, w, 0, 4 * eps(dt), exact_dtype=dt)

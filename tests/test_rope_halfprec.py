"""float16 RoPE (vector conversion where the CPU has F16C) and bfloat16
through posemb.torch: every result equals the float32 computation rounded
once to nearest even, checked bit for bit against NumPy's own float16
conversion, ml_dtypes.bfloat16 and torch's bfloat16 rounding."""
import numpy as np
import pytest

import posemb


def _rot_half(v):
    h = v.shape[-1] // 2
    return np.concatenate((-v[..., h:], v[..., :h]), -1)


def _rot_inter(v):
    p = v.reshape(v.shape[:-1] + (-1, 2))
    return np.stack((-p[..., 1], p[..., 0]), -1).reshape(v.shape)


def oracle32(x, cos, sin, interleaved=False, backward=False):
    """HF's formula in float32 (NumPy: separate products, no FMA) on the
    first r features, the rest copied; backward is the adjoint."""
    x, cos, sin = (np.asarray(a, np.float32) for a in (x, cos, sin))
    r = cos.shape[-1]
    rot = _rot_inter if interleaved else _rot_half
    xr = x[..., :r]
    if not backward:
        y = xr * cos + rot(xr) * sin
    else:
        # adjoint: y = x*cos - rot(x*sin) as separate products, per pair
        #   half: y[a] = xa*ca + xb*sb,  y[b] = xb*cb - xa*sa
        h = r // 2
        if interleaved:
            a, b = np.s_[..., 0:r:2], np.s_[..., 1:r:2]
        else:
            a, b = np.s_[..., :h], np.s_[..., h:r]
        y = np.empty_like(xr)
        y[a] = xr[a] * cos[a] + xr[b] * sin[b]
        y[b] = xr[b] * cos[b] - xr[a] * sin[a]
    return np.concatenate((y, np.broadcast_to(x[..., r:], y.shape[:-1] + (x.shape[-1] - r,))),
                          -1)


def _bits_equal(a, b):
    a, b = np.asarray(a), np.asarray(b)
    assert a.dtype == b.dtype and a.shape == b.shape
    ua, ub = a.view(np.uint16), b.view(np.uint16)
    nan = np.isnan(a.astype(np.float32))
    np.testing.assert_array_equal(nan, np.isnan(b.astype(np.float32)))
    np.testing.assert_array_equal(np.where(nan, 0, ua), np.where(nan, 0, ub))


def _hard_values(rng, shape):
    """Normal values plus float16's hard cases: subnormals, values whose
    float32 results sit at rounding ties, overflow to inf, zeros, inf, NaN."""
    x = rng.standard_normal(shape).astype(np.float16)
    flat = x.reshape(-1)
    special = np.array([0.0, -0.0, 6e-8, -6e-8, 1e-5, 65504, -65504, 60000, np.inf, -np.inf,
                        np.nan, 2049.0, 0.000123, 3.0e-7], np.float16)
    idx = rng.choice(flat.size, size=min(flat.size, 4 * special.size), replace=False)
    flat[idx] = np.resize(special, idx.size)
    return x


@pytest.mark.parametrize("interleaved", [False, True])
@pytest.mark.parametrize("backward", [False, True])
@pytest.mark.parametrize("shape,r", [((2, 4, 9, 128), 128), ((1, 32, 300, 128), 128),
                                     ((3, 5, 64), 48), ((2, 7, 24), 24), ((2, 3, 20), 12),
                                     ((4, 6), 6)])
def test_float16_is_float32_rounded_once(rng, interleaved, backward, shape, r):
    x = _hard_values(rng, shape)
    cos, sin = posemb.rope_cos_sin(np.arange(shape[-2]), r, dtype=np.float16,
                                   interleaved=interleaved)
    fn = posemb.apply_rope_backward if backward else posemb.apply_rope
    with np.errstate(all="ignore"):
        want = oracle32(x, cos, sin, interleaved, backward).astype(np.float16)
        got = fn(x, cos, sin, interleaved=interleaved)
        _bits_equal(got, want)
        # in place, the same bits
        xi = x.copy()
        fn(xi, cos, sin, interleaved=interleaved, out=xi)
    _bits_equal(xi, want)


@pytest.mark.parametrize("interleaved", [False, True])
def test_float16_strided_rows_and_tables(rng, interleaved):
    """HF's transposed q, negative strides, tables broadcast over heads."""
    b, s, h, d = 2, 33, 4, 64
    base = rng.standard_normal((b, s, h, d)).astype(np.float16)
    cos, sin = posemb.rope_cos_sin(np.arange(s), d, dtype=np.float16, interleaved=interleaved)
    for x in (base.transpose(0, 2, 1, 3), base.transpose(0, 2, 1, 3)[:, ::-1],
              base.transpose(0, 2, 1, 3)[:, :, ::-1]):
        c = cos if x.strides[2] > 0 else cos[::-1]
        sn = sin if x.strides[2] > 0 else sin[::-1]
        want = oracle32(x, c, sn, interleaved).astype(np.float16)
        _bits_equal(posemb.apply_rope(x, c, sn, interleaved=interleaved), want)
    # an element-strided vector (every other feature) takes the scalar loop
    x = rng.standard_normal((3, 5, 2 * d)).astype(np.float16)[..., ::2]
    want = oracle32(x, cos[:5], sin[:5], interleaved).astype(np.float16)
    _bits_equal(posemb.apply_rope(x, cos[:5], sin[:5], interleaved=interleaved), want)


def test_float16_rounding_agrees_with_numpy_everywhere():
    """Every float16 value times a table value: the kernel's rounding is
    NumPy's float32 -> float16 rounding (ties to even) on all 65536 inputs."""
    x = np.arange(1 << 16, dtype=np.uint32).astype(np.uint16).view(np.float16)
    x = x.reshape(-1, 16)
    pos = np.arange(x.shape[0]) % 97
    cos, sin = posemb.rope_cos_sin(pos, 16, dtype=np.float16)
    with np.errstate(all="ignore"):
        want = oracle32(x, cos, sin).astype(np.float16)
        got = posemb.apply_rope(x, cos, sin)
    _bits_equal(got, want)


# ---------------------------------------------------------------- bfloat16


def _bf16_round(a32):
    """float32 -> bfloat16 bits, nearest even (NaN kept NaN)."""
    u = np.asarray(a32, np.float32).view(np.uint32).astype(np.uint64)
    r = ((u + 0x7FFF + ((u >> 16) & 1)) >> 16).astype(np.uint16)
    nan = np.isnan(a32)
    return np.where(nan, np.uint16(0x7FC0), r)


@pytest.mark.parametrize("interleaved", [False, True])
@pytest.mark.parametrize("d,r", [(64, 64), (48, 32), (24, 24), (16, 16), (20, 12), (10, 10)])
def test_bfloat16_through_torch_rounds_once(rng, interleaved, d, r):
    """Every bit pattern class (random bits: subnormals, huge values that
    overflow, inf, NaN), vector and scalar widths, partial rotary, a
    transposed q: torch's, ml_dtypes' and the ties-to-even rule's rounding
    of the float32 result, bit for bit."""
    torch = pytest.importorskip("torch")
    ml_dtypes = pytest.importorskip("ml_dtypes")
    import posemb.torch as pt
    b, h, s = 2, 3, 37
    bits = rng.integers(0, 1 << 16, (b, s, h, d), dtype=np.uint16)
    bits[0, :5] = (rng.standard_normal((5, h, d)).astype(np.float32).view(np.uint32)
                   >> 16).astype(np.uint16)
    xb = torch.from_numpy(bits.view(np.int16)).view(torch.bfloat16).transpose(1, 2)
    tb = rng.integers(0, 1 << 16, (s, r), dtype=np.uint16)
    cos = torch.from_numpy(tb.view(np.int16)).view(torch.bfloat16)
    cos_ok, sin_ok = posemb.rope_cos_sin(np.arange(s), r, interleaved=interleaved)
    sin = torch.from_numpy(sin_ok).to(torch.bfloat16)
    for c in (cos, torch.from_numpy(cos_ok).to(torch.bfloat16)):
        with np.errstate(all="ignore"):
            got = pt.apply_rope(xb, c, sin, interleaved=interleaved)
        assert got.dtype == torch.bfloat16 and got.shape == xb.shape
        with np.errstate(all="ignore"):
            want32 = oracle32(xb.float().numpy(), c.float().numpy(), sin.float().numpy(),
                              interleaved)
        g = got.contiguous().view(torch.int16).numpy().view(np.uint16)
        nan = np.isnan(want32)
        np.testing.assert_array_equal(np.isnan(got.float().numpy()), nan)
        with np.errstate(all="ignore"):         # (NaN bits copied past the rotated part)
            refs = (torch.from_numpy(want32).to(torch.bfloat16).view(torch.int16).numpy()
                    .view(np.uint16),
                    want32.astype(ml_dtypes.bfloat16).view(np.uint16),
                    _bf16_round(want32))
        for ref in refs:
            np.testing.assert_array_equal(np.where(nan, 0, g), np.where(nan, 0, ref))


def test_bfloat16_drop_in_and_autograd(rng):
    torch = pytest.importorskip("torch")
    import posemb.torch as pt
    x = torch.from_numpy(rng.standard_normal((2, 4, 9, 32)).astype(np.float32))
    xb = x.to(torch.bfloat16)
    cos, sin = pt.RotaryEmbedding(dim=32)(xb, torch.arange(9)[None])
    want = pt.apply_rope(xb, cos[:, None], sin[:, None])
    with torch.no_grad():
        q, k = pt.apply_rotary_pos_emb(xb, xb[:, :2], cos, sin)
    assert torch.equal(q.view(torch.int16), want.view(torch.int16))
    assert torch.equal(k.view(torch.int16), want[:, :2].view(torch.int16))
    # with autograd: the same forward bits, and a gradient
    xg = xb.clone().requires_grad_()
    y = pt.apply_rope(xg, cos[:, None], sin[:, None])
    assert torch.equal(y.detach().view(torch.int16), want.view(torch.int16))
    y.float().sum().backward()
    assert xg.grad is not None and xg.grad.dtype == torch.bfloat16


@pytest.mark.parametrize("interleaved", [False, True])
def test_bfloat16_numpy_ml_dtypes(rng, interleaved):
    """ml_dtypes.bfloat16 arrays: apply_rope and its backward, new output,
    out=, in place and seq_axis, rounded once from the float32 result."""
    ml_dtypes = pytest.importorskip("ml_dtypes")
    bf = ml_dtypes.bfloat16
    x = (rng.standard_normal((2, 9, 3, 32)) * 4).astype(bf)        # (b, s, h, d)
    c32, s32 = posemb.rope_cos_sin(np.arange(9), 32, interleaved=interleaved)
    cos, sin = c32.astype(bf), s32.astype(bf)
    xs = x.transpose(0, 2, 1, 3)                                    # (b, h, s, d) view
    for backward in (False, True):
        fn = posemb.apply_rope_backward if backward else posemb.apply_rope
        want = oracle32(xs.astype(np.float32), cos.astype(np.float32), sin.astype(np.float32),
                        interleaved, backward).astype(bf)
        got = fn(xs, cos, sin, interleaved=interleaved)
        assert got.dtype == bf
        np.testing.assert_array_equal(got.view(np.uint16), want.view(np.uint16))
        got2 = fn(x, cos, sin, interleaved=interleaved, seq_axis=1)
        np.testing.assert_array_equal(got2.transpose(0, 2, 1, 3).view(np.uint16),
                                      want.view(np.uint16))
        xm = x.copy()                                  # (b, s, h, d) in place, seq_axis
        assert fn(xm, cos, sin, interleaved=interleaved, seq_axis=1, out=xm) is xm
        np.testing.assert_array_equal(xm.view(np.uint16), got2.view(np.uint16))
        # one position's tables (r,) for every position
        one = oracle32(xs.astype(np.float32), np.broadcast_to(cos[4], cos.shape).astype(np.float32),
                       np.broadcast_to(sin[4], sin.shape).astype(np.float32),
                       interleaved, backward).astype(bf)
        np.testing.assert_array_equal(
            fn(xs, cos[4], sin[4], interleaved=interleaved).view(np.uint16), one.view(np.uint16))
        out = np.empty_like(xs)
        assert fn(xs, cos, sin, interleaved=interleaved, out=out) is out
        np.testing.assert_array_equal(out.view(np.uint16), want.view(np.uint16))
        xi = xs.copy()
        fn(xi, cos, sin, interleaved=interleaved, out=xi)
        np.testing.assert_array_equal(xi.view(np.uint16), want.view(np.uint16))
    # float32 tables with a bfloat16 x: computed in float32, rounded once
    got = posemb.apply_rope(xs, c32, s32, interleaved=interleaved)
    want = oracle32(xs.astype(np.float32), c32, s32, interleaved).astype(bf)
    assert got.dtype == bf
    np.testing.assert_array_equal(got.view(np.uint16), want.view(np.uint16))
    with pytest.raises(ValueError):
        posemb.apply_rope(xs, cos[:4], sin[:4])


@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
@pytest.mark.parametrize("interleaved", [False, True])
@pytest.mark.parametrize("backward", [False, True])
@pytest.mark.parametrize("r", [128, 64, 96, 32, 48, 16, 24, 8, 6])
def test_halfprec_tables_of_any_values_at_every_width(rng, dtype, interleaved, backward, r):
    """Tables whose every entry differs (neither HF's duplicated halves nor
    a pair's equal entries), so a kernel that takes one entry for another
    shows; r picks the vector width: runs that are multiples of 32, 16 and
    8 values and the scalar loop.  x holds normal values and random bit
    patterns (subnormals, inf, NaN); every bit is the float32 formula
    rounded once, new output and in place."""
    if dtype == "bfloat16":
        dt = pytest.importorskip("ml_dtypes").bfloat16
    else:
        dt = np.dtype(np.float16)
    x = (rng.standard_normal((2, 3, 5, r + 4)) * 3).astype(dt)
    bits = x.view(np.uint16).reshape(-1)
    idx = rng.choice(bits.size, size=bits.size // 8, replace=False)
    bits[idx] = rng.integers(0, 1 << 16, idx.size, dtype=np.uint16)
    cos = rng.uniform(-1, 1, (5, r)).astype(dt)
    sin = rng.uniform(-1, 1, (5, r)).astype(dt)
    fn = posemb.apply_rope_backward if backward else posemb.apply_rope
    with np.errstate(all="ignore"):
        want = oracle32(x.astype(np.float32), cos.astype(np.float32), sin.astype(np.float32),
                        interleaved, backward).astype(dt)
        got = fn(x, cos, sin, interleaved=interleaved)
        xi = x.copy()
        fn(xi, cos, sin, interleaved=interleaved, out=xi)
        # the scalar loop (every other feature of a wider array: no vector
        # kernel takes it)
        wide = np.zeros(x.shape[:-1] + (2 * x.shape[-1],), dt)
        wide[..., ::2] = x
        scalar = fn(wide[..., ::2], cos, sin, interleaved=interleaved)
    _bits_equal(got, want)
    _bits_equal(xi, want)
    _bits_equal(scalar, want)
    if dtype == "bfloat16" and r % 32 == 0:
        # bfloat16's 16- and 32-wide kernels keep a NaN's sign and payload
        # as the scalar loop does (the 8-wide interleaved ones negate by a
        # sign flip, float16's conversions drop payload bits: a NaN stays
        # a NaN, not the same one)
        np.testing.assert_array_equal(got.view(np.uint16), scalar.view(np.uint16))


@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
@pytest.mark.parametrize("backward", [False, True])
@pytest.mark.parametrize("case", ["dup", "mixed", "partial", "r120", "r112", "r40"])
@pytest.mark.parametrize("offset", [0, 16, 2])
def test_halfprec_large_out_of_place_and_in_place(rng, dtype, backward, case, offset,
                                                  partial_lines):
    """float16 and ml_dtypes bfloat16 beyond 4 MiB into a reused output (its
    pages in memory): streaming stores where out's rows lie on 16 bytes
    (offset 0, 16: NumPy's own arrays start 16 bytes past a line) and h is a
    multiple of 8 (not for r = 120, 40), plain stores otherwise; the
    duplicated-table kernels (16 wide where h allows, 8 (r = 112: h = 56),
    or one value at a time; float16 in place from float32 copies of the
    tables), and half-split blocks whose tables are not duplicated take the
    full kernel.  Every value the float32 formula rounded once, 3 heads (a
    pair sharing each table row and one more), nothing written past out;
    in place the same bits."""
    if dtype == "bfloat16":
        dt = np.dtype(pytest.importorskip("ml_dtypes").bfloat16)
    else:
        dt = np.dtype(np.float16)
    x = _hard_values(rng, (1, 3, 8192, 128)).astype(np.float32).astype(dt)   # 6 MiB
    r = {"partial": 64, "r120": 120, "r112": 112, "r40": 40}.get(case, 128)
    cos, sin = posemb.rope_cos_sin(np.arange(8192), r, dtype=dt)
    if case == "mixed":
        cos[5000, 0] = 0.5                                          # one block not duplicated
    fn = posemb.apply_rope_backward if backward else posemb.apply_rope
    buf = np.empty(x.size * 2 + 256, np.uint8)
    start = (-buf.ctypes.data) % 64 + offset
    buf[:] = 0x55
    out = buf[start:start + x.size * 2].view(dt).reshape(x.shape)
    with np.errstate(all="ignore"):
        want = oracle32(x, cos, sin, backward=backward).astype(dt)
        fn(x, cos, sin, out=out)
        _bits_equal(out, want)
        assert (buf[:start] == 0x55).all() and (buf[start + x.size * 2:] == 0x55).all()
        fn(x, cos, sin, out=x)
    _bits_equal(x, want)


@pytest.mark.parametrize("backward", [False, True])
def test_bfloat16_in_place_beyond_the_last_level_cache(rng, backward):
    """bfloat16 in place with HF's duplicated tables on an array 1.5x the
    last-level cache (read at run time), with random bit patterns among x
    and pairs (x[i], x[i + h]) both subnormal, so that some results are
    (at level avx512bf16 such vectors leave AVX512_BF16's rounding, which
    reads them as 0, for the integer rounding); every value the float32
    formula rounded once."""
    dt = np.dtype(pytest.importorskip("ml_dtypes").bfloat16)
    llc = int(posemb.show_config(print_=False)["last_level_cache"].split()[0]) << 10
    heads = -(-3 * llc // (2 * 8192 * 128 * 2))
    if heads > 64:
        pytest.skip(f"a last-level cache of {llc >> 20} MiB: over 128 MiB of bfloat16")
    x = _hard_values(rng, (1, heads, 8192, 128)).astype(np.float32).astype(dt)
    bits = x.view(np.uint16).reshape(-1)
    idx = rng.choice(bits.size, size=bits.size // 64, replace=False)
    bits[idx] = rng.integers(0, 1 << 16, idx.size, dtype=np.uint16)
    # and pairs (x[i], x[i + 64]) both subnormal, so that results are too
    rows = x.view(np.uint16).reshape(-1, 128)
    r = rng.choice(rows.shape[0], 4000, replace=False)
    i = rng.integers(0, 64, r.size)
    for j in (i, i + 64):
        rows[r, j] = rng.integers(1, 128, r.size, dtype=np.uint16) | (
            rng.integers(0, 2, r.size, dtype=np.uint16) << 15)
    cos, sin = posemb.rope_cos_sin(np.arange(8192), 128, dtype=dt)
    fn = posemb.apply_rope_backward if backward else posemb.apply_rope
    with np.errstate(all="ignore"):
        want = oracle32(x, cos, sin, backward=backward).astype(dt)
        fn(x, cos, sin, out=x)
    _bits_equal(x, want)


@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
@pytest.mark.parametrize("backward", [False, True])
@pytest.mark.parametrize("heads, d", [(5, 512), (3, 1024)])
def test_halfprec_long_rows_beyond_the_last_level_cache(rng, dtype, backward, heads, d):
    """Half-split rows of 1 KiB (d = 512: a group of 4 heads and one alone)
    and 2 KiB (d = 1024: a group of 2 and one) beyond the last-level cache
    (read at run time), each position's rows of x and table rows prefetched
    first: into y 16 bytes past a line (realigned in registers, each head a
    row behind the one before), into y 2 bytes off (plain stores, or staged
    where streaming needs whole lines) and in place (float16: from float32
    copies of the tables).  Every value the
    float32 formula rounded once, x unchanged out of place, nothing written
    past y."""
    if dtype == "bfloat16":
        dt = np.dtype(pytest.importorskip("ml_dtypes").bfloat16)
    else:
        dt = np.dtype(np.float16)
    llc = int(posemb.show_config(print_=False)["last_level_cache"].split()[0]) << 10
    seq = llc // (heads * d * 2) + 64
    if heads * seq * d * 2 > 160 << 20:
        pytest.skip(f"a last-level cache of {llc >> 20} MiB: x would be too large here")
    x = _hard_values(rng, (1, heads, seq, d)).astype(np.float32).astype(dt)
    x0 = x.copy()
    cos, sin = posemb.rope_cos_sin(np.arange(seq), d, dtype=dt)
    fn = posemb.apply_rope_backward if backward else posemb.apply_rope
    with np.errstate(all="ignore"):
        want = oracle32(x, cos, sin, backward=backward).astype(dt)
        for offset in (16, 2):
            buf = np.empty(x.nbytes + 256, np.uint8)
            start = (-buf.ctypes.data) % 64 + offset
            buf[:] = 0x55
            out = buf[start:start + x.nbytes].view(dt).reshape(x.shape)
            fn(x, cos, sin, out=out)
            _bits_equal(out, want)
            assert (buf[:start] == 0x55).all() and (buf[start + x.nbytes:] == 0x55).all()
        _bits_equal(x, x0)
        fn(x, cos, sin, out=x)
    _bits_equal(x, want)

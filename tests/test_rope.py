"""RoPE against PyTorch transcriptions of HF ``rotate_half``/``apply_rotary_pos_emb``
(``modeling_llama.py``) and Meta llama ``precompute_freqs_cis``/``apply_rotary_emb``.

References written here, in PyTorch:
- HF transformers: rotate_half, apply_rotary_pos_emb, LlamaRotaryEmbedding's
  float32 inv_freq/angles.
- Meta llama: precompute_freqs_cis, apply_rotary_emb (complex multiply).
- GPT-J / torchtune interleaved formula on pairs (2i, 2i+1).
- GPT-NeoX partial rotary.
"""
import numpy as np
import pytest
from _torch import torch

import posemb
from posemb import _core
from posemb._bench import llc_bytes

# ---------------------------------------------------------------- references


def hf_rotate_half(x):
    x1 = x[..., : x.shape[-1] // 2]
    x2 = x[..., x.shape[-1] // 2:]
    return torch.cat((-x2, x1), dim=-1)


def hf_apply_rotary_pos_emb(q, k, cos, sin, position_ids=None, unsqueeze_dim=1):
    cos = cos.unsqueeze(unsqueeze_dim)
    sin = sin.unsqueeze(unsqueeze_dim)
    return (q * cos) + (hf_rotate_half(q) * sin), (k * cos) + (hf_rotate_half(k) * sin)


def hf_cos_sin_float32(positions, dim, base=10000.0):
    """LlamaRotaryEmbedding: float32 inv_freq and float32 angles."""
    inv_freq = 1.0 / (base ** (torch.arange(0, dim, 2, dtype=torch.int64).float() / dim))
    freqs = positions.float()[..., None] * inv_freq
    emb = torch.cat((freqs, freqs), dim=-1)
    return emb.cos(), emb.sin()


def meta_precompute_freqs_cis(dim, end, theta=10000.0):
    freqs = 1.0 / (theta ** (torch.arange(0, dim, 2)[: (dim // 2)].float() / dim))
    t = torch.arange(end, device=freqs.device)
    freqs = torch.outer(t, freqs).float()
    return torch.polar(torch.ones_like(freqs), freqs)


def meta_apply_rotary_emb(xq, xk, freqs_cis):
    xq_ = torch.view_as_complex(xq.float().reshape(*xq.shape[:-1], -1, 2))
    xk_ = torch.view_as_complex(xk.float().reshape(*xk.shape[:-1], -1, 2))
    ndim = xq_.ndim
    shape = [d if i == 1 or i == ndim - 1 else 1 for i, d in enumerate(xq_.shape)]
    fc = freqs_cis.view(*shape)
    xq_out = torch.view_as_real(xq_ * fc).flatten(3)
    xk_out = torch.view_as_real(xk_ * fc).flatten(3)
    return xq_out.type_as(xq), xk_out.type_as(xk)


def interleaved_rope(x, cos_h, sin_h):
    """GPT-J / torchtune: pairs (2i, 2i+1), half-width tables (..., d/2)."""
    xs = x.reshape(*x.shape[:-1], -1, 2)
    x0, x1 = xs[..., 0], xs[..., 1]
    out = torch.stack((x0 * cos_h - x1 * sin_h, x1 * cos_h + x0 * sin_h), dim=-1)
    return out.flatten(-2)


def neox_partial(x, cos, sin, rot):
    """GPT-NeoX rotary_pct: rotate the first `rot` features, pass the rest."""
    x_rot, x_pass = x[..., :rot], x[..., rot:]
    return torch.cat((x_rot * cos + hf_rotate_half(x_rot) * sin, x_pass), dim=-1)


def truth_angles(positions, dim, base=10000.0):
    inv = base ** (-(np.arange(0, dim, 2, dtype=np.float64) / dim))
    return np.asarray(positions, dtype=np.float64)[..., None] * inv


def T(a):
    return torch.from_numpy(a)


def formula_bits(x, cos, sin, interleaved=False, backward=False):
    """The kernels' formula in NumPy, in x's dtype (float32/float64): each
    value is two exactly rounded products and one rounded sum or
    difference, so these are the kernels' bits at every CPU level."""
    lead = np.broadcast_shapes(x.shape[:-1], cos.shape[:-1], sin.shape[:-1])
    r = cos.shape[-1]
    x = np.broadcast_to(x, lead + x.shape[-1:])
    cos, sin = np.broadcast_to(cos, lead + (r,)), np.broadcast_to(sin, lead + (r,))
    if interleaved:
        a, b = np.arange(0, r, 2), np.arange(1, r, 2)
    else:
        a, b = np.arange(r // 2), np.arange(r // 2, r)
    xa, xb = x[..., a], x[..., b]
    y = x.copy()
    if backward:
        y[..., a] = xa * cos[..., a] + xb * sin[..., b]
        y[..., b] = xb * cos[..., b] - xa * sin[..., a]
    else:
        y[..., a] = xa * cos[..., a] - xb * sin[..., a]
        y[..., b] = xb * cos[..., b] + xa * sin[..., b]
    return y


@pytest.mark.parametrize("tshape", [(5, 16), (1, 5, 16), (2, 1, 5, 16), (1, 3, 5, 16),
                                    (2, 3, 5, 16), (1, 1, 1, 16), (3, 1, 16), (16,),
                                    (2, 1, 1, 16)])
@pytest.mark.parametrize("interleaved", [False, True])
def test_table_broadcast_layouts(rng, tshape, interleaved):
    """Every way tables can broadcast against (B, H, S, d) gives the formula."""
    x = rng.standard_normal((2, 3, 5, 16)).astype(np.float32)
    cos = rng.standard_normal(tshape).astype(np.float32)
    sin = rng.standard_normal(tshape).astype(np.float32)
    y = posemb.apply_rope(x, cos, sin, interleaved=interleaved)
    cb, sb = np.broadcast_to(cos, x.shape), np.broadcast_to(sin, x.shape)
    if interleaved:
        rot = T(x).reshape(2, 3, 5, 8, 2)
        r = torch.stack((-rot[..., 1], rot[..., 0]), -1).flatten(-2)
        ref = T(x) * T(cb.copy()) + r * T(sb.copy())
    else:
        ref = T(x) * T(cb.copy()) + hf_rotate_half(T(x)) * T(sb.copy())
    np.testing.assert_array_equal(y, ref.numpy())
    yb = posemb.apply_rope_backward(x, cos, sin, interleaved=interleaved)
    assert yb.shape == x.shape

# ---------------------------------------------------------------- tables


def test_inv_freq_values():
    inv = posemb.rope_inv_freq(8, base=10000.0)
    assert inv.dtype == np.float64 and inv.shape == (4,)
    np.testing.assert_allclose(inv, [1.0, 0.1, 0.01, 0.001], rtol=1e-15)
    np.testing.assert_allclose(posemb.rope_inv_freq(128, 500000.0),
                               500000.0 ** (-np.arange(0, 128, 2) / 128), rtol=1e-15)


@pytest.mark.parametrize("interleaved", [False, True])
def test_cos_sin_layouts(interleaved):
    pos = np.array([[0, 3], [7, 100]])
    cos, sin = posemb.rope_cos_sin(pos, 8, interleaved=interleaved, dtype=np.float64)
    assert cos.shape == sin.shape == (2, 2, 8)
    ang = truth_angles(pos, 8)
    want_c = np.repeat(np.cos(ang), 2, -1) if interleaved else np.concatenate([np.cos(ang)] * 2, -1)
    want_s = np.repeat(np.sin(ang), 2, -1) if interleaved else np.concatenate([np.sin(ang)] * 2, -1)
    np.testing.assert_allclose(cos, want_c, rtol=0, atol=1e-15)
    np.testing.assert_allclose(sin, want_s, rtol=0, atol=1e-15)


def test_cos_sin_float32_exact_at_long_positions():
    """float64 angles rounded once: |err| <= 1.2e-7 up to 2**20; HF float32 is far off."""
    dim = 128
    pos = np.concatenate([np.arange(0, 4096), np.arange(2**20 - 4096, 2**20 + 1)])
    cos, sin = posemb.rope_cos_sin(pos, dim)
    ang = truth_angles(pos, dim)
    tc = np.concatenate([np.cos(ang)] * 2, -1)
    ts = np.concatenate([np.sin(ang)] * 2, -1)
    assert cos.dtype == np.float32
    assert np.abs(cos - tc).max() <= 1.2e-7
    assert np.abs(sin - ts).max() <= 1.2e-7
    # the PyTorch float32 formula drifts by orders of magnitude more
    hc, hs = hf_cos_sin_float32(T(pos), dim)
    assert np.abs(hc.numpy() - tc).max() > 1e-3
    assert np.abs(hs.numpy() - ts).max() > 1e-3


@pytest.mark.parametrize("dtype", [np.float16, np.float32, np.float64])
def test_cos_sin_dtypes_round_once(dtype):
    pos = np.arange(0, 3000, 7)
    cos, sin = posemb.rope_cos_sin(pos, 16, dtype=dtype)
    assert cos.dtype == dtype
    ang = truth_angles(pos, 16)
    # rounded once from float64: equal to float64 truth cast to dtype
    np.testing.assert_array_equal(cos, np.concatenate([np.cos(ang)] * 2, -1).astype(dtype))
    np.testing.assert_array_equal(sin, np.concatenate([np.sin(ang)] * 2, -1).astype(dtype))


def test_compute_frequencies_julia():
    f = posemb.compute_frequencies(64, 1024)
    assert f.shape == (1024, 32) and f.dtype == np.float64
    # Julia: θ = 1 ./ (base .^ (0:2:dim-1 ./ dim)); θ * positions'  (transposed here)
    theta = 1.0 / (10000.0 ** (np.arange(0, 64, 2) / 64))
    np.testing.assert_allclose(f, np.outer(np.arange(1024), theta), rtol=1e-14)


def test_precompute_freqs_cis_matches_meta():
    ours = posemb.precompute_freqs_cis(128, 256)
    ref = meta_precompute_freqs_cis(128, 256).numpy()
    assert ours.dtype == np.complex64 and ours.shape == (256, 64)
    np.testing.assert_allclose(ours, ref, rtol=0, atol=3e-5)  # Meta's float32 angles drift
    # ours is float64-exact
    ang = truth_angles(np.arange(256), 128)
    np.testing.assert_array_equal(ours, np.exp(1j * ang).astype(np.complex64).real +
                                  1j * np.exp(1j * ang).astype(np.complex64).imag)

# ---------------------------------------------------------------- apply


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_apply_rope_equals_hf_bitwise(rng, dtype):
    x = rng.standard_normal((2, 4, 10, 64)).astype(dtype)
    cos, sin = posemb.rope_cos_sin(np.arange(10), 64, dtype=dtype)
    y = posemb.apply_rope(x, cos, sin)
    ref = T(x) * T(cos) + hf_rotate_half(T(x)) * T(sin)
    np.testing.assert_array_equal(y, ref.numpy())


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_apply_rotary_pos_emb_drop_in(rng, dtype):
    q = rng.standard_normal((2, 8, 12, 32)).astype(dtype)
    k = rng.standard_normal((2, 2, 12, 32)).astype(dtype)
    position_ids = np.stack([np.arange(12), np.arange(5, 17)])
    cos, sin = posemb.rope_cos_sin(position_ids, 32, dtype=dtype)  # (batch, seq, dim)
    qe, ke = posemb.apply_rotary_pos_emb(q, k, cos, sin, position_ids)
    rq, rk = hf_apply_rotary_pos_emb(T(q), T(k), T(cos), T(sin))
    np.testing.assert_array_equal(qe, rq.numpy())
    np.testing.assert_array_equal(ke, rk.numpy())
    # unsqueeze_dim=2 for (batch, seq, heads, dim) inputs
    qt = np.ascontiguousarray(q.transpose(0, 2, 1, 3))
    kt = np.ascontiguousarray(k.transpose(0, 2, 1, 3))
    qe2, ke2 = posemb.apply_rotary_pos_emb(qt, kt, cos, sin, unsqueeze_dim=2)
    rq2, rk2 = hf_apply_rotary_pos_emb(T(qt), T(kt), T(cos), T(sin), unsqueeze_dim=2)
    np.testing.assert_array_equal(qe2, rq2.numpy())
    np.testing.assert_array_equal(ke2, rk2.numpy())


def test_hf_float32_tables_plugged_in(rng):
    """With HF's own float32 tables the result is HF's, bit for bit."""
    q = rng.standard_normal((1, 4, 7, 16)).astype(np.float32)
    k = rng.standard_normal((1, 4, 7, 16)).astype(np.float32)
    cos, sin = hf_cos_sin_float32(torch.arange(7)[None], 16)
    qe, ke = posemb.apply_rotary_pos_emb(q, k, cos.numpy(), sin.numpy())
    rq, rk = hf_apply_rotary_pos_emb(T(q), T(k), cos, sin)
    np.testing.assert_array_equal(qe, rq.numpy())
    np.testing.assert_array_equal(ke, rk.numpy())


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_interleaved_equals_gptj(rng, dtype):
    x = rng.standard_normal((3, 9, 2, 16)).astype(dtype)   # (batch, seq, heads, dim)
    pos = np.arange(9)
    cos, sin = posemb.rope_cos_sin(pos, 16, interleaved=True, dtype=dtype)
    y = posemb.apply_rope(x, cos[:, None, :], sin[:, None, :], interleaved=True)
    ch, sh = T(cos[:, None, 0::2]), T(sin[:, None, 0::2])
    np.testing.assert_array_equal(y, interleaved_rope(T(x), ch, sh).numpy())


def test_meta_apply_rotary_emb(rng):
    xq = rng.standard_normal((2, 6, 4, 32)).astype(np.float32)
    xk = rng.standard_normal((2, 6, 1, 32)).astype(np.float32)
    fc = posemb.precompute_freqs_cis(32, 12)[3:9]
    yq, yk = posemb.apply_rotary_emb(xq, xk, fc)
    rq, rk = meta_apply_rotary_emb(T(xq), T(xk), T(fc))
    assert yq.dtype == np.float32 and yk.shape == xk.shape
    np.testing.assert_allclose(yq, rq.numpy(), rtol=0, atol=2e-6)
    np.testing.assert_allclose(yk, rk.numpy(), rtol=0, atol=2e-6)
    # float16 inputs come back float16, computed in float32
    yq16, _ = posemb.apply_rotary_emb(xq.astype(np.float16), xk.astype(np.float16), fc)
    rq16, _ = meta_apply_rotary_emb(T(xq.astype(np.float16)), T(xk.astype(np.float16)), T(fc))
    assert yq16.dtype == np.float16
    np.testing.assert_array_equal(yq16, rq16.numpy())


def test_meta_layout_equals_interleaved_rope(rng):
    """Meta's complex form and posemb's interleaved RoPE class agree."""
    xq = rng.standard_normal((1, 10, 3, 64)).astype(np.float64)
    rope = posemb.RoPE(64, 10, interleaved=True, dtype=np.float64)
    ours = rope(xq.transpose(0, 2, 1, 3)).transpose(0, 2, 1, 3)
    fc = torch.polar(torch.ones(10, 32, dtype=torch.float64), T(truth_angles(np.arange(10), 64)))
    # Meta's complex multiply, kept in float64 (Meta itself casts to float32)
    xc = torch.view_as_complex(T(xq).reshape(1, 10, 3, 32, 2))
    ref = torch.view_as_real(xc * fc[None, :, None, :]).flatten(3)
    np.testing.assert_allclose(ours, ref.numpy(), rtol=0, atol=1e-14)


@pytest.mark.parametrize("interleaved", [False, True])
def test_partial_rotary(rng, interleaved):
    x = rng.standard_normal((2, 5, 24)).astype(np.float32)
    cos, sin = posemb.rope_cos_sin(np.arange(5), 8, interleaved=interleaved)
    y = posemb.apply_rope(x, cos, sin, interleaved=interleaved)
    if interleaved:
        rot = interleaved_rope(T(x[..., :8]), T(cos[..., 0::2]), T(sin[..., 0::2]))
        ref = torch.cat((rot, T(x[..., 8:])), -1)
    else:
        ref = neox_partial(T(x), T(cos), T(sin), 8)
    np.testing.assert_array_equal(y, ref.numpy())
    np.testing.assert_array_equal(y[..., 8:], x[..., 8:])


def test_rope_class_partial_matches_neox(rng):
    x = rng.standard_normal((4, 20, 64)).astype(np.float64)
    rope = posemb.RoPE(64, 32, rotary_dim=16, dtype=np.float64)
    y = rope(x)
    ang = truth_angles(np.arange(20), 16)
    cos = np.concatenate([np.cos(ang)] * 2, -1)
    sin = np.concatenate([np.sin(ang)] * 2, -1)
    np.testing.assert_allclose(y, neox_partial(T(x), T(cos), T(sin), 16).numpy(), atol=1e-14)


def test_rope_offset_and_positions(rng):
    rope = posemb.RoPE(32, 16)
    x = rng.standard_normal((3, 4, 32)).astype(np.float32)
    y_off = rope(x, offset=10)                 # positions 10..13
    y_pos = rope(x, positions=np.arange(10, 14))
    np.testing.assert_array_equal(y_off, y_pos)
    cos, sin = posemb.rope_cos_sin(np.arange(10, 14), 32)
    np.testing.assert_array_equal(y_off, (T(x) * T(cos) + hf_rotate_half(T(x)) * T(sin)).numpy())
    # arbitrary position ids per batch row, broadcast over heads
    pos = np.array([[5, 1, 9, 2]])[:, None, :].repeat(2, 0)   # (2, 1, 4)
    x4 = rng.standard_normal((2, 3, 4, 32)).astype(np.float32)
    c, s = posemb.rope_cos_sin(pos, 32)
    np.testing.assert_array_equal(rope(x4, pos), (T(x4) * T(c) + hf_rotate_half(T(x4)) * T(s)).numpy())


def test_rope_extends_cache_never_identity(rng):
    rope = posemb.RoPE(16, 4)
    x = rng.standard_normal((1, 3, 16)).astype(np.float32)
    y = rope(x, offset=100)                    # far past seq_len=4
    cos, sin = posemb.rope_cos_sin(np.arange(100, 103), 16)
    np.testing.assert_array_equal(y, posemb.apply_rope(x, cos, sin))
    assert not np.allclose(y, x)
    assert rope.cos_cached.shape[0] >= 103
    # huge positions are computed directly, not cached
    y = rope(x, positions=np.array([2**40, 2**40 + 1, 3]))
    c, s = posemb.rope_cos_sin(np.array([2**40, 2**40 + 1, 3]), 16)
    np.testing.assert_array_equal(y, posemb.apply_rope(x, c, s))
    assert rope.cos_cached.shape[0] < 2**20


def test_rope_scale_multiplies_angle(rng):
    x = rng.standard_normal((2, 6, 8))
    rope = posemb.RoPE(8, 6, scale=0.5, dtype=np.float64)
    ang = 0.5 * truth_angles(np.arange(6), 8)
    cos = np.concatenate([np.cos(ang)] * 2, -1)
    sin = np.concatenate([np.sin(ang)] * 2, -1)
    np.testing.assert_allclose(rope(x), (T(x) * T(cos) + hf_rotate_half(T(x)) * T(sin)).numpy(),
                               atol=1e-14)


@pytest.mark.parametrize("interleaved", [False, True])
@pytest.mark.parametrize("rot", [16, 8])
def test_backward_is_autograd_gradient(rng, interleaved, rot):
    x = rng.standard_normal((2, 7, 16))
    g = rng.standard_normal((2, 7, 16))
    # arbitrary (not rotation) tables: the adjoint must still be exact
    cos = rng.standard_normal((7, rot))
    sin = rng.standard_normal((7, rot))
    xt = T(x).requires_grad_(True)
    if interleaved:
        xr = xt[..., :rot].reshape(2, 7, rot // 2, 2)
        x0, x1 = xr[..., 0], xr[..., 1]
        c0, c1 = T(cos[:, 0::2]), T(cos[:, 1::2])
        s0, s1 = T(sin[:, 0::2]), T(sin[:, 1::2])
        y = torch.cat((torch.stack((x0 * c0 - x1 * s0, x1 * c1 + x0 * s1), -1).flatten(-2),
                       xt[..., rot:]), -1)
    else:
        y = neox_partial(xt, T(cos), T(sin), rot)
    np.testing.assert_allclose(posemb.apply_rope(x, cos, sin, interleaved=interleaved),
                               y.detach().numpy(), atol=1e-14)
    y.backward(T(g))
    got = posemb.apply_rope_backward(g, cos, sin, interleaved=interleaved)
    np.testing.assert_allclose(got, xt.grad.numpy(), atol=1e-14)


@pytest.mark.parametrize("interleaved", [False, True])
def test_rope_class_backward_inverts(rng, interleaved):
    rope = posemb.RoPE(32, 50, interleaved=interleaved, dtype=np.float64)
    x = rng.standard_normal((4, 50, 32))
    np.testing.assert_allclose(rope.backward(rope(x)), x, atol=1e-13)
    # and it is the autograd gradient of the forward
    xt = T(x).requires_grad_(True)
    cos, sin = posemb.rope_cos_sin(np.arange(50), 32, interleaved=interleaved, dtype=np.float64)
    if interleaved:
        y = interleaved_rope(xt, T(cos[:, 0::2]), T(sin[:, 0::2]))
    else:
        y = xt * T(cos) + hf_rotate_half(xt) * T(sin)
    g = rng.standard_normal(x.shape)
    y.backward(T(g))
    np.testing.assert_allclose(rope.backward(g), xt.grad.numpy(), atol=1e-14)


def test_out_and_in_place(rng):
    x = rng.standard_normal((2, 3, 5, 16)).astype(np.float32)
    cos, sin = posemb.rope_cos_sin(np.arange(5), 16)
    want = posemb.apply_rope(x, cos, sin)
    out = np.empty_like(x)
    res = posemb.apply_rope(x, cos, sin, out=out)
    assert res is out
    np.testing.assert_array_equal(out, want)
    x2 = x.copy()
    posemb.apply_rope(x2, cos, sin, out=x2)
    np.testing.assert_array_equal(x2, want)
    rope = posemb.RoPE(16, 5)
    x3 = x.copy()
    assert rope(x3, out=x3) is x3
    np.testing.assert_array_equal(x3, want)
    # an out that partially overlaps x is handled by NumPy (copy), still right
    buf = np.concatenate([x.reshape(-1), np.zeros(16, np.float32)])
    src = buf[16:].reshape(x.shape)   # shifted by one vector
    srcv = src.copy()
    dst = buf[:-16].reshape(x.shape)
    posemb.apply_rope(src, cos, sin, out=dst)
    np.testing.assert_array_equal(dst, posemb.apply_rope(srcv, cos, sin))


@pytest.mark.parametrize("dtype", ["float32", "float16", "bfloat16"])
def test_out_of_exactly_the_result_and_the_outs_refused(rng, dtype):
    """out= of x's dtype and shape takes the direct gufunc call (a decode
    step's cost); every out that call must not accept still gets the
    error naming out: one larger than the result (NumPy would broadcast
    into it), one smaller than what the tables make, a read-only one."""
    dt = pytest.importorskip("ml_dtypes").bfloat16 if dtype == "bfloat16" else np.dtype(dtype)
    x = rng.standard_normal((1, 3, 5, 16)).astype(dt)
    cos, sin = (t.astype(dt) for t in posemb.rope_cos_sin(np.arange(5), 16))
    want = posemb.apply_rope(x, cos, sin)
    ref = posemb.apply_rope(x.astype(np.float32), cos.astype(np.float32),
                            sin.astype(np.float32)).astype(dt)
    np.testing.assert_array_equal(want.view(np.uint8), ref.view(np.uint8))
    out = np.empty_like(x)
    assert posemb.apply_rope(x, cos, sin, out=out) is out
    np.testing.assert_array_equal(out.view(np.uint8), want.view(np.uint8))
    for fn in (posemb.apply_rope, posemb.apply_rope_backward):
        with pytest.raises(ValueError, match="out"):
            fn(x, cos, sin, out=np.empty((2,) + x.shape, dt))
        with pytest.raises(ValueError, match="out"):     # tables (2, 1, s, r): result (2, 3, 5, 16)
            fn(x, np.stack([cos, cos])[:, None], np.stack([sin, sin])[:, None],
               out=np.empty_like(x))
        ro = np.empty_like(x)
        ro.flags.writeable = False
        with pytest.raises(ValueError, match="out"):
            fn(x, cos, sin, out=ro)


def test_noncontiguous_broadcast_and_f_order(rng):
    base = rng.standard_normal((4, 6, 10, 32))
    x = base[::2, :, ::-1, ::2]         # strided, reversed, inner stride 2
    cos, sin = posemb.rope_cos_sin(np.arange(10), 16, dtype=np.float64)
    ref = (T(x.copy()) * T(cos) + hf_rotate_half(T(x.copy())) * T(sin)).numpy()
    np.testing.assert_array_equal(posemb.apply_rope(x, cos, sin), ref)
    xf = np.asfortranarray(base[0])
    cf, sf = posemb.rope_cos_sin(np.arange(10), 32, dtype=np.float64)
    np.testing.assert_array_equal(posemb.apply_rope(xf, cf, sf),
                                  posemb.apply_rope(np.ascontiguousarray(xf), cf, sf))
    # tables broadcast with zero strides
    c1 = np.broadcast_to(cf[3], (6, 10, 32))
    s1 = np.broadcast_to(sf[3], (6, 10, 32))
    np.testing.assert_array_equal(posemb.apply_rope(base[0], c1, s1),
                                  posemb.apply_rope(base[0], cf[3], sf[3]))
    # byte-swapped input
    xs = base[0].astype(">f8")
    np.testing.assert_array_equal(posemb.apply_rope(xs, cf, sf), posemb.apply_rope(base[0], cf, sf))


def test_axes_keyword_via_ufunc(rng):
    """The raw gufunc (h,s,d),(s,r),(s,r)->(h,s,d) takes axes=: features on
    axis 0 of a (d, s, h) array."""
    x = rng.standard_normal((16, 5, 3))
    cos, sin = posemb.rope_cos_sin(np.arange(5), 16, dtype=np.float64)
    y = posemb._core.rope_half_fwd(x, cos, sin, axes=[(2, 1, 0), (-2, -1), (-2, -1), (2, 1, 0)])
    want = posemb.apply_rope(x.transpose(2, 1, 0), cos, sin).transpose(2, 1, 0)
    np.testing.assert_array_equal(y, want)
    np.testing.assert_array_equal(want, formula_bits(x.transpose(2, 1, 0), cos, sin).transpose(2, 1, 0))


def test_float16(rng):
    x = rng.standard_normal((3, 8, 32)).astype(np.float16)
    cos, sin = posemb.rope_cos_sin(np.arange(8), 32, dtype=np.float16)
    y = posemb.apply_rope(x, cos, sin)
    assert y.dtype == np.float16
    # computed in float32 from the float16 values, rounded once
    x32, c32, s32 = x.astype(np.float32), cos.astype(np.float32), sin.astype(np.float32)
    want = (T(x32) * T(c32) + hf_rotate_half(T(x32)) * T(s32)).numpy().astype(np.float16)
    np.testing.assert_array_equal(y, want)
    # and agrees with PyTorch's float16 formula to float16 precision
    ref = T(x) * T(cos) + hf_rotate_half(T(x)) * T(sin)
    np.testing.assert_allclose(y.astype(np.float32), ref.float().numpy(), atol=4e-3, rtol=2e-3)
    rope = posemb.RoPE(32, 8)
    assert rope(x).dtype == np.float16


def test_rotate_half_and_neg_half(rng):
    x = rng.standard_normal((3, 4, 8)).astype(np.float32)
    np.testing.assert_array_equal(posemb.rotate_half(x), hf_rotate_half(T(x)).numpy())
    # Julia neg_half along the first (feature) axis of a (features, seq, batch) array
    xj = rng.standard_normal((8, 5, 2))
    want = np.concatenate([-xj[4:], xj[:4]], axis=0)
    np.testing.assert_array_equal(posemb.neg_half(xj, 0), want)
    np.testing.assert_array_equal(posemb.neg_half(x), posemb.rotate_half(x))
    x16 = x.astype(np.float16)
    np.testing.assert_array_equal(posemb.rotate_half(x16), hf_rotate_half(T(x16)).numpy())


@pytest.mark.parametrize("shape,head", [((256, 100, 64), 64), ((32, 100, 512), 512)])
def test_julia_documented_examples(rng, shape, head):
    """RoPE(64, 1024) on randn(64, 100, 256); RoPE(512, 1024) on (512, 100, 32) (Julia order)."""
    rope = posemb.RoPE(head, 1024)
    x_julia = rng.standard_normal(shape[::-1]).astype(np.float32)   # (head, seq, nheads*batch)
    x = np.ascontiguousarray(x_julia.transpose(2, 1, 0))             # row-major (..., seq, head)
    y = rope(x)
    assert y.shape == shape and y.dtype == np.float32
    ang = truth_angles(np.arange(100), head)
    cos = np.concatenate([np.cos(ang)] * 2, -1).astype(np.float32)
    sin = np.concatenate([np.sin(ang)] * 2, -1).astype(np.float32)
    # Julia: x .* cos + neg_half(x) .* sin
    np.testing.assert_array_equal(y, x * cos + posemb.neg_half(x) * sin)
    # norms are preserved by a rotation
    np.testing.assert_allclose(np.linalg.norm(y, axis=-1), np.linalg.norm(x, axis=-1), rtol=1e-5)


def test_relative_property(rng):
    """<R_m q, R_n k> depends only on m - n."""
    rope = posemb.RoPE(64, 300, dtype=np.float64)
    q = rng.standard_normal(64)
    k = rng.standard_normal(64)
    def score(m, n):
        return rope(q[None], positions=[m]) @ rope(k[None], positions=[n])[0]
    assert score(10, 3) == pytest.approx(score(207, 200), rel=1e-10)


def test_dask_through_gufunc_protocol(rng):
    da = pytest.importorskip("dask.array")
    x = rng.standard_normal((8, 4, 16, 32)).astype(np.float32)
    cos, sin = posemb.rope_cos_sin(np.arange(16), 32)
    dx = da.from_array(x, chunks=(2, 4, 16, 32))
    dy = posemb.apply_rope(dx, cos, sin)
    assert isinstance(dy, da.Array)
    np.testing.assert_array_equal(dy.compute(), posemb.apply_rope(x, cos, sin))
    dy2 = posemb.RoPE(32, 16)(dx)
    assert isinstance(dy2, da.Array)
    np.testing.assert_array_equal(dy2.compute(), posemb.apply_rope(x, cos, sin))


def test_inputs_not_modified(rng):
    x = rng.standard_normal((2, 5, 8)).astype(np.float32)
    cos, sin = posemb.rope_cos_sin(np.arange(5), 8)
    xc, cc, sc = x.copy(), cos.copy(), sin.copy()
    posemb.apply_rope(x, cos, sin)
    posemb.apply_rope_backward(x, cos, sin)
    posemb.RoPE(8, 5)(x)
    np.testing.assert_array_equal(x, xc)
    np.testing.assert_array_equal(cos, cc)
    np.testing.assert_array_equal(sin, sc)


def test_zero_sizes():
    cos, sin = posemb.rope_cos_sin(np.zeros((0,), np.int64), 8)
    assert cos.shape == (0, 8)
    x = np.zeros((0, 3, 8), np.float32)
    assert posemb.RoPE(8, 0)(x).shape == (0, 3, 8)
    assert posemb.apply_rope(np.zeros((2, 0, 8)), np.zeros((0, 8)), np.zeros((0, 8))).shape == (2, 0, 8)
    # r = 0: nothing rotates
    x = np.arange(6.0).reshape(1, 6)
    np.testing.assert_array_equal(posemb.apply_rope(x, np.zeros((1, 0)), np.zeros((1, 0))), x)

# ---------------------------------------------------------------- bad input


def test_bad_inputs(rng):
    x = rng.standard_normal((2, 5, 8)).astype(np.float32)
    cos, sin = posemb.rope_cos_sin(np.arange(5), 8)
    with pytest.raises(TypeError, match=r"^x must be a float16, float32 or float64 array, "
                                        r"got dtype int64$"):
        posemb.apply_rope(np.ones((2, 8), np.int64), cos, sin)
    with pytest.raises(TypeError, match=r"^x must be a float16, float32 or float64 array, "
                                        r"got dtype complex64$"):
        posemb.apply_rope(np.ones((2, 8), np.complex64), cos, sin)
    with pytest.raises(TypeError, match="cos"):
        posemb.apply_rope(x, cos.astype(np.int32), sin)
    # an odd width is total (TorchLean): its unpaired last feature passes through
    np.testing.assert_array_equal(posemb.apply_rope(x, cos[:, :7], sin[:, :7]),
                                  posemb.apply_rope(x, cos[:, :6], sin[:, :6]))
    with pytest.raises(ValueError, match="exceed"):
        posemb.apply_rope(x[..., :4], cos, sin)
    with pytest.raises(ValueError, match="same width"):
        posemb.apply_rope(x, cos, sin[:, :6])
    with pytest.raises(ValueError, match="x must have"):
        posemb.apply_rope(np.float32(1.0), cos, sin)
    with pytest.raises(ValueError):  # shapes that do not broadcast
        posemb.apply_rope(x, cos[:4], sin[:4])
    ro = np.empty_like(x)
    ro.flags.writeable = False
    with pytest.raises(ValueError, match="read-only"):
        posemb.apply_rope(x, cos, sin, out=ro)
    with pytest.raises(ValueError):
        posemb.apply_rope(x, cos, sin, out=np.empty((2, 5, 6), np.float32))
    # odd widths are total: dim // 2 frequencies base ** (-2i / dim)
    np.testing.assert_allclose(posemb.rope_inv_freq(7), 10000.0 ** (-np.arange(3) * 2 / 7),
                               rtol=1e-15)
    with pytest.raises(ValueError, match="base"):
        posemb.rope_inv_freq(8, base=-1.0)
    with pytest.raises(ValueError, match="base"):
        posemb.rope_inv_freq(8, base=float("nan"))
    with pytest.raises(TypeError, match="dim"):
        posemb.rope_inv_freq(8.0)
    with pytest.raises(ValueError, match="positions"):
        posemb.rope_cos_sin([-1, 2], 8)
    with pytest.raises(ValueError, match="positions"):
        posemb.rope_cos_sin([2**60], 8)
    with pytest.raises(TypeError, match="positions"):
        posemb.rope_cos_sin([1.5, 2.0], 8)
    with pytest.raises(TypeError, match="dtype"):
        posemb.rope_cos_sin([1], 8, dtype=np.int32)
    with pytest.raises(ValueError, match="head_size"):
        posemb.RoPE(-1, 10)
    with pytest.raises(ValueError, match="rotary_dim"):
        posemb.RoPE(8, 10, rotary_dim=16)
    assert posemb.RoPE(7, 10).rotary_dim == 7            # odd sizes are total
    with pytest.raises(ValueError, match="seq_len"):
        posemb.RoPE(8, -1)
    rope = posemb.RoPE(8, 10)
    with pytest.raises(ValueError, match="head_size"):
        rope(np.ones((3, 6), np.float32))
    with pytest.raises(ValueError, match="offset"):
        rope(x, offset=-1)
    with pytest.raises(ValueError, match="positions"):
        rope(x, positions=np.array([-1, 0, 1, 2, 3]))
    with pytest.raises(ValueError, match="positions"):
        rope(x, positions=np.arange(4))          # does not broadcast to (2, 5)
    with pytest.raises(TypeError, match="positions"):
        rope(x, positions=np.arange(5.0))
    with pytest.raises(TypeError, match=r"^x must be a float16, float32 or float64 array, "
                                        r"got dtype int64$"):
        rope(np.ones((5, 8), np.int64))
    with pytest.raises(ValueError, match="freqs_cis"):
        posemb.apply_rotary_emb(np.ones((1, 5, 2, 8), np.float32), np.ones((1, 5, 2, 8), np.float32),
                                posemb.precompute_freqs_cis(8, 4))
    with pytest.raises(TypeError, match="freqs_cis"):
        posemb.apply_rotary_emb(np.ones((1, 4, 2, 8), np.float32), np.ones((1, 4, 2, 8), np.float32),
                                np.ones((4, 4), np.float32))
    with pytest.raises(ValueError, match="even"):
        posemb.rotate_half(np.ones(5))
    with pytest.raises(ValueError, match="axis"):
        posemb.neg_half(np.ones((4, 5)), axis=2)
    with pytest.raises(ValueError, match="unsqueeze_dim"):
        posemb.apply_rotary_pos_emb(x, x, cos, sin, unsqueeze_dim=7)


def test_private_table_function_checks_arguments():
    pos = np.arange(3, dtype=np.int64)
    inv = np.ones(2)
    c = np.empty((3, 4), np.float32)
    s = np.empty((3, 4), np.float32)
    with pytest.raises(ValueError, match="cos"):
        posemb._core._rope_table(pos, inv, 1.0, False, np.empty((3, 5), np.float32), s)
    with pytest.raises(TypeError, match="positions"):
        posemb._core._rope_table(pos.astype(np.int32), inv, 1.0, False, c, s)
    with pytest.raises(ValueError, match="contiguous"):
        posemb._core._rope_table(np.arange(6)[::2], inv, 1.0, False, c, s)
    with pytest.raises(TypeError, match="sin"):
        posemb._core._rope_table(pos, inv, 1.0, False, c, np.empty((3, 4)))
    ro = np.empty((3, 4), np.float32)
    ro.flags.writeable = False
    with pytest.raises(ValueError, match="writeable"):
        posemb._core._rope_table(pos, inv, 1.0, False, c, ro)
    with pytest.raises(ValueError, match="share memory"):
        posemb._core._rope_table(pos, inv, 1.0, False, c, c)
    buf = np.empty((4, 4), np.float32)               # sin starts one row into cos
    with pytest.raises(ValueError, match="share memory"):
        posemb._core._rope_table(pos, inv, 1.0, False, buf[:3], buf[1:])


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("backward", [False, True])
@pytest.mark.parametrize("variant", ["dup", "random", "partial", "unaligned"])
def test_large_blocked_paths_equal_gufunc(rng, dtype, backward, variant, partial_lines):
    """Large arrays, and with HF-style duplicated tables the half-table
    kernels (streaming stores when out-of-place): all give the formula's
    bits."""
    x = rng.standard_normal((1, 8, 1024, 128)).astype(dtype)       # >= 4 MiB
    rot = 64 if variant == "partial" else 128
    cos, sin = posemb.rope_cos_sin(np.arange(1024), rot, dtype=dtype)
    if variant == "random":
        cos = rng.standard_normal(cos.shape).astype(dtype)
        sin = rng.standard_normal(sin.shape).astype(dtype)
    want = formula_bits(x, cos, sin, backward=backward)
    fn = posemb.apply_rope_backward if backward else posemb.apply_rope
    if variant == "unaligned":
        buf = np.empty(x.size + 1, dtype)
        out = buf[1:].reshape(x.shape)            # 4 or 8 bytes off 16-byte alignment
    else:
        out = np.empty_like(x)
    np.testing.assert_array_equal(fn(x, cos, sin, out=out), want)
    np.testing.assert_array_equal(fn(x, cos, sin), want)
    xi = x.copy()
    np.testing.assert_array_equal(fn(xi, cos, sin, out=xi), want)


def _past_the_cache(heads, d, dtype):
    """The last-level cache's bytes (as posemb's runtime and bench read it)
    and a sequence length making (1, heads, seq, d) of dtype just larger;
    skips where that would be too large for a test."""
    llc, _ = llc_bytes()
    if llc > 256 << 20:
        pytest.skip(f"a {llc >> 20} MiB last-level cache: x would be too large here")
    return llc, llc // (heads * d * np.dtype(dtype).itemsize) + 64


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("interleaved", [False, True])
@pytest.mark.parametrize("layout", ["hf", "sliced", "contiguous"])
def test_beyond_the_last_level_cache(rng, dtype, interleaved, layout):
    """Arrays larger than the last-level cache (read at run time): (b, s, h,
    d) memory (HF's transposed q, heads sliced from a fused projection)
    runs one head per kernel call, each head's next row prefetched, and in
    place every layout takes the 32-byte kernels (where rows allow).
    In place, into a new array and into an out= one element off alignment:
    all the formula's bits, nothing written past out."""
    heads, d = 8, 128
    llc, seq = _past_the_cache(heads, d, dtype)
    extra = 4 if layout == "sliced" else 0                  # fused k, v heads after q
    if layout == "contiguous":
        fused = rng.standard_normal((1, heads, seq, d)).astype(dtype)
        x = fused
    else:
        fused = rng.standard_normal((1, seq, heads + extra, d)).astype(dtype)
        x = fused[:, :, :heads].transpose(0, 2, 1, 3)       # (1, heads, seq, d) view
    assert x.nbytes > llc and x.flags.c_contiguous == (layout == "contiguous")
    cos, sin = posemb.rope_cos_sin(np.arange(seq), d, dtype=dtype, interleaved=interleaved)
    want = formula_bits(x, cos, sin, interleaved)
    np.testing.assert_array_equal(posemb.apply_rope(x, cos, sin, interleaved=interleaved), want)
    buf = np.full(x.size + 8, 7.0, dtype)
    out = buf[1:x.size + 1].reshape(x.shape)
    posemb.apply_rope(x, cos, sin, interleaved=interleaved, out=out)
    np.testing.assert_array_equal(out, want)
    np.testing.assert_array_equal(buf[x.size + 1:], 7.0)
    others = fused[:, :, heads:].copy() if extra else None
    posemb.apply_rope(x, cos, sin, interleaved=interleaved, out=x)
    np.testing.assert_array_equal(x, want)
    if extra:
        np.testing.assert_array_equal(fused[:, :, heads:], others)   # k, v heads untouched


@pytest.mark.parametrize("dtype", ["float32", "float16"])
@pytest.mark.parametrize("offset", [16, 0, 4])
@pytest.mark.parametrize("interleaved", [False, True])
def test_into_fresh_memory_past_the_cache(rng, dtype, offset, interleaved):
    """An out= larger than the last-level cache whose pages were never
    touched (a fresh allocation, as np.empty_like gives) may take streaming
    stores (pe_memory_stream_ok): at NumPy's offset (16 bytes past a line),
    on a line and 4 bytes off, both layouts, all the formula's bits (float16:
    the float32 formula rounded once) and nothing written outside out."""
    dt = np.dtype(dtype)
    heads, d = 4, 128
    _, seq = _past_the_cache(heads, d, dt)
    x = rng.standard_normal((1, heads, seq, d)).astype(dt)
    cos, sin = posemb.rope_cos_sin(np.arange(seq), d, dtype=dt, interleaved=interleaved)
    if dt.itemsize == 2:
        want = formula_bits(x.astype(np.float32), cos.astype(np.float32),
                            sin.astype(np.float32), interleaved).astype(dt)
    else:
        want = formula_bits(x, cos, sin, interleaved)
    buf = np.empty(x.nbytes + 8192, np.uint8)           # fresh pages, untouched
    start = (-buf.ctypes.data) % 4096 + offset
    buf[:start] = 0x55                                  # (the first and last pages only)
    buf[start + x.nbytes:] = 0x55
    out = buf[start:start + x.nbytes].view(dt).reshape(x.shape)
    old_lines = _core._partial_lines(None)
    try:
        _core._partial_lines(False)     # (the realigning kernels where y allows, any CPU)
        assert posemb.apply_rope(x, cos, sin, interleaved=interleaved, out=out) is out
    finally:
        _core._partial_lines(old_lines)
    np.testing.assert_array_equal(out.view(np.uint8), want.view(np.uint8))
    assert (buf[:start] == 0x55).all() and (buf[start + x.nbytes:] == 0x55).all()


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("backward", [False, True])
@pytest.mark.parametrize("rot", [128, 40, 36])
@pytest.mark.parametrize("tables", ["rope_cos_sin", "random"])
def test_interleaved_in_place_beyond_the_cache(rng, dtype, backward, rot, tables):
    """Interleaved in place beyond the last-level cache takes the 32-byte
    kernels where a row's rotated part is a multiple of 32 bytes (rot 128
    and 40), else the 16-byte ones (rot 36 in float32): every bit of the
    formula, forward and backward, with any tables, features past rot
    unchanged."""
    heads, d = 8, 128
    _, seq = _past_the_cache(heads, d, dtype)
    x = rng.standard_normal((1, heads, seq, d)).astype(dtype)
    if tables == "random":
        cos, sin = (rng.standard_normal((seq, rot)).astype(dtype) for _ in range(2))
    else:
        cos, sin = posemb.rope_cos_sin(np.arange(seq), rot, dtype=dtype, interleaved=True)
    fn = posemb.apply_rope_backward if backward else posemb.apply_rope
    want = formula_bits(x, cos, sin, True, backward)
    fn(x, cos, sin, interleaved=True, out=x)
    np.testing.assert_array_equal(x, want)


@pytest.mark.parametrize("backward", [False, True])
@pytest.mark.parametrize("dtype, heads, d, rot", [
    (np.float64, 8, 128, 128), (np.float64, 5, 128, 128), (np.float64, 8, 192, 128),
    (np.float32, 8, 256, 256), (np.float32, 5, 256, 256), (np.float64, 8, 64, 64)])
@pytest.mark.parametrize("tables", ["rope_cos_sin", "mixed"])
@pytest.mark.parametrize("offset", [0, 16])
def test_half_split_long_rows_in_place_beyond_the_cache(rng, backward, dtype, heads, d, rot,
                                                        tables, offset):
    """Half-split rows of 1 KiB or more (float64 d = 128, float32 d = 256)
    in place beyond the last-level cache take, at the AVX-512 level, the
    kernel whose steps load x before the step before them stores (groups of
    4 heads run in pairs; an odd last head alone; features past rot), and
    shorter rows (float64 d = 64) the 32-byte kernels; each block's table
    rows are checked and packed in one pass ("mixed": one row's halves
    differ, so its block takes the kernel for any tables): every bit of the
    formula, forward and backward, x on a line or 16 bytes past one."""
    _, seq = _past_the_cache(heads, d, dtype)
    x = _aligned_empty((1, heads, seq, d), dtype, offset)
    x[...] = rng.standard_normal(x.shape)
    cos, sin = posemb.rope_cos_sin(np.arange(seq), rot, dtype=dtype)
    if tables == "mixed":
        cos, sin = cos.copy(), sin.copy()
        cos[seq // 2, 1] += 0.25
    fn = posemb.apply_rope_backward if backward else posemb.apply_rope
    want = formula_bits(x, cos, sin, False, backward)
    fn(x, cos, sin, out=x)
    np.testing.assert_array_equal(x, want)


@pytest.mark.parametrize("backward", [False, True])
@pytest.mark.parametrize("dtype, heads, d, rot, where", [
    (np.float64, 8, 128, 128, "past"), (np.float64, 5, 128, 128, "past"),
    (np.float32, 8, 256, 256, "past"), (np.float64, 3, 256, 256, "past"),
    (np.float64, 3, 256, 192, "past"), (np.float64, 4, 256, 256, "within")])
@pytest.mark.parametrize("interleaved", [False, True])
@pytest.mark.parametrize("offset", [0, 16])
def test_long_rows_out_of_place_beyond_the_cache(rng, backward, dtype, heads, d, rot, where,
                                                 interleaved, offset):
    """Rows of 1 KiB or more beyond the last-level cache go in groups of 4
    heads (5 heads: a group of 4 and one alone; rows of 2 KiB in groups of 2,
    3 heads: 2 and 1), half-split out of place with each position's rows
    prefetched first: into y on a line (streaming stores) and 16 bytes past
    one (realigned in registers; rot 192 of 256 features: staged, two rows
    of 2 KiB a flush), both layouts, forward and backward; rows of 2 KiB
    within the cache (8 MiB: heads one at a time, not staged): every bit of
    the formula, x left as it was, and nothing written past y."""
    seq = _past_the_cache(heads, d, dtype)[1] if where == "past" else 1024
    x = rng.standard_normal((1, heads, seq, d)).astype(dtype)
    x0 = x.copy()
    cos, sin = posemb.rope_cos_sin(np.arange(seq), rot, dtype=dtype, interleaved=interleaved)
    fn = posemb.apply_rope_backward if backward else posemb.apply_rope
    want = formula_bits(x, cos, sin, interleaved, backward)
    y = _aligned_empty((x.size + 16,), dtype, offset)
    y[...] = 7
    out = y[:x.size].reshape(x.shape)
    fn(x, cos, sin, interleaved=interleaved, out=out)
    np.testing.assert_array_equal(out, want)
    np.testing.assert_array_equal(y[x.size:], 7)
    np.testing.assert_array_equal(x, x0)


def _aligned_empty(shape, dtype, offset):
    """An empty array whose data starts `offset` bytes past 64-byte alignment."""
    itemsize = np.dtype(dtype).itemsize
    buf = np.empty(int(np.prod(shape)) * itemsize + 128, np.uint8)
    start = (-buf.ctypes.data) % 64 + offset
    return buf[start:start + int(np.prod(shape)) * itemsize].view(dtype).reshape(shape)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("backward", [False, True])
@pytest.mark.parametrize("case", ["dup", "mixed", "per_batch", "rot40", "rot36", "partial"])
@pytest.mark.parametrize("offset", [0, 16, 4])
@pytest.mark.parametrize("interleaved", [False, True])
def test_kernels_equal_formula(rng, dtype, backward, case, offset, interleaved):
    """The kernels of the CPU level in use (.ci/cpu_levels.sh runs this at
    every level: portable C, SSE2, AVX2, ...), both layouts, in place, out of
    place with plain stores (small) and streaming stores (>= 4 MiB, 32-, 16-
    or 4-byte aligned out), and half-split blocks whose tables are not
    duplicated: all the formula's bits, and nothing past the output is
    written."""
    if offset == 4 and dtype == np.float64:
        offset = 8
    seq = 2048 if dtype == np.float32 else 1024              # x: 8 MiB
    rot = {"rot40": 40, "rot36": 36, "partial": 64}.get(case, 128)
    batch = 2 if case == "per_batch" else 1
    x = rng.standard_normal((batch, 4, seq, 128)).astype(dtype)
    pos = np.arange(seq) if case != "per_batch" else np.stack([np.arange(seq), np.arange(seq)[::-1]])
    cos, sin = posemb.rope_cos_sin(pos, rot, dtype=dtype, interleaved=interleaved)
    cos, sin = cos.reshape(batch, 1, seq, rot).copy(), sin.reshape(batch, 1, seq, rot).copy()
    if case == "mixed":                # a few rows (so some blocks) not duplicated
        cos[..., 700, 0] += 0.25
        sin[..., 1500 % seq, rot - 1] -= 0.25
    fn = posemb.apply_rope_backward if backward else posemb.apply_rope
    want = formula_bits(x, cos, sin, interleaved, backward)
    for shape in (x.shape, (batch, 1, 64, 128)):             # streaming, and small
        xs = np.ascontiguousarray(x[:, :shape[1], :shape[2]])
        w = want[:, :shape[1], :shape[2]]
        cs, ss = cos[:, :, :shape[2]], sin[:, :, :shape[2]]
        big = _aligned_empty((xs.size + 16,), dtype, offset)
        big[:] = 7.0
        out = big[:xs.size].reshape(xs.shape)
        fn(xs, cs, ss, interleaved=interleaved, out=out)
        np.testing.assert_array_equal(out, w)
        np.testing.assert_array_equal(big[xs.size:], 7.0)
        xi = _aligned_empty(xs.shape, dtype, offset)
        xi[...] = xs
        fn(xi, cs, ss, interleaved=interleaved, out=xi)
        np.testing.assert_array_equal(xi, w)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("backward", [False, True])
@pytest.mark.parametrize("interleaved", [False, True])
@pytest.mark.parametrize("heads", [1, 3, 4])
def test_kernels_every_alignment(rng, dtype, backward, interleaved, heads):
    """x and out at every element offset from a 64-byte line (NumPy's own
    arrays start 16 bytes past one; views start anywhere), in place and out
    of place, in calls over the heads of a position (heads=4: two pairs
    sharing a table row; 3: a pair and one more) and over the positions of
    one head (1), rotated halves of one 64-byte vector and of several: the
    formula's bits, nothing written outside out."""
    itemsize = np.dtype(dtype).itemsize
    fn = posemb.apply_rope_backward if backward else posemb.apply_rope
    for d in (16, 32, 64, 128, 256):
        if d * itemsize < 128:              # halves shorter than 64 bytes
            continue
        x = rng.standard_normal((1, heads, 8, d)).astype(dtype)
        cos, sin = posemb.rope_cos_sin(np.arange(8), d, dtype=dtype, interleaved=interleaved)
        want = formula_bits(x, cos, sin, interleaved=interleaved, backward=backward)
        for offset in range(0, 64, itemsize):
            big = _aligned_empty((x.size + 32,), dtype, offset)
            big[:] = 7.0
            out = big[16:16 + x.size].reshape(x.shape)
            fn(x, cos, sin, interleaved=interleaved, out=out)
            np.testing.assert_array_equal(out, want, err_msg=f"d={d} offset={offset}")
            out[...] = x
            fn(out, cos, sin, interleaved=interleaved, out=out)
            np.testing.assert_array_equal(out, want, err_msg=f"d={d} offset={offset}")
            np.testing.assert_array_equal(big[:16], 7.0)
            np.testing.assert_array_equal(big[16 + x.size:], 7.0)


@pytest.mark.parametrize("dtype, d", [(np.float32, 128), (np.float32, 64), (np.float64, 64),
                                      (np.float32, 256), (np.float64, 128)])
@pytest.mark.parametrize("backward", [False, True])
@pytest.mark.parametrize("threads", [1, 2])
@pytest.mark.parametrize("interleaved", [False, True])
def test_tile_walk_rows_past_a_line(rng, dtype, d, backward, threads, interleaved):
    """Arrays within a quarter of the last-level cache in (b, h, s, d)
    memory go in tiles of positions, two heads at a time; where x lies past
    a line by other than a multiple of 32 bytes (NumPy's arrays of a few
    MiB: 16), each head's rows of a tile are read and written as whole
    lines, realigned in registers, the line shared with the next row
    written with it, the tile's first and last lines with masks (their
    other values belong to the tiles before and after, at 2 threads perhaps
    another thread's).  Every element offset, in place and into an out at
    the same offset and at another, 9 heads (four pairs and one alone), 37
    positions (a partial tile), and at 2 threads 3-6 MiB (tiles split
    between the threads): the formula's bits, nothing written outside.
    Interleaved rows alike, whose pairs' values are neighbours: each head's
    rows a run of whole lines, the tables placed at x's offset."""
    itemsize = np.dtype(dtype).itemsize
    fn = posemb.apply_rope_backward if backward else posemb.apply_rope
    seqs = [37] + ([(6 << 20) // (32 * d * itemsize) - 3] if threads == 2 else [])
    old_threads = posemb.get_num_threads()
    try:
        posemb.set_num_threads(threads)
        for seq in seqs:
            heads = 9 if seq == 37 else 32
            x = rng.standard_normal((1, heads, seq, d)).astype(dtype)
            cos, sin = posemb.rope_cos_sin(np.arange(seq) + 5, d, dtype=dtype,
                                           interleaved=interleaved)
            want = formula_bits(x, cos, sin, interleaved, backward)
            offsets = range(0, 64, itemsize) if seq == 37 else (16, 48, 4 * (dtype == np.float32))
            for offset in offsets:
                big = _aligned_empty((x.size + 32,), dtype, offset)
                big[:] = 7.0
                xi = big[16:16 + x.size].reshape(x.shape)    # (16 values on: the same offset)
                xi[...] = x
                assert fn(xi, cos, sin, interleaved=interleaved, out=xi) is xi
                np.testing.assert_array_equal(xi, want, err_msg=f"offset={offset} seq={seq}")
                np.testing.assert_array_equal(big[:16], 7.0)
                np.testing.assert_array_equal(big[16 + x.size:], 7.0)
                big[:] = 7.0
                xs = _aligned_empty(x.shape, dtype, offset)    # x at out's offset
                xs[...] = x
                fn(xs, cos, sin, interleaved=interleaved, out=xi)
                np.testing.assert_array_equal(xi, want, err_msg=f"offset={offset} seq={seq}")
                np.testing.assert_array_equal(big[:16], 7.0)
                np.testing.assert_array_equal(big[16 + x.size:], 7.0)
                xo = _aligned_empty(x.shape, dtype, offset)
                xo[...] = x
                other = _aligned_empty(x.shape, dtype, (offset + 16) % 64)
                fn(xo, cos, sin, interleaved=interleaved, out=other)
                np.testing.assert_array_equal(other, want, err_msg=f"offset={offset} seq={seq}")
    finally:
        posemb.set_num_threads(old_threads)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("where", [None, 0, 15, 19])
def test_tile_walk_table_check_every_byte(rng, dtype, where):
    """The tile walk copies HF's duplicated half rows for its tiles,
    checking each row's halves as it copies (a vector at a time, then the
    bytes that do not fill one): rotating 40 of 128 features (float32 half
    rows of 80 bytes: one 64-byte vector and 16 bytes), one row's second
    half changed at element `where` (the first, in the vector, the last:
    in the bytes past it), in cos or in sin, makes the call read both
    halves; the formula's bits either way, float64 too."""
    x = rng.standard_normal((1, 8, 37, 128)).astype(dtype)
    cos0, sin0 = posemb.rope_cos_sin(np.arange(37) + 3, 40, dtype=dtype)
    for table in (0, 1):          # the change in cos, then in sin
        cos, sin = cos0.copy(), sin0.copy()
        if where is not None:
            (sin if table else cos)[21, 20 + where] *= 0.5
        want = formula_bits(x, cos, sin)
        for offset in (0, 16):
            xi = _aligned_empty(x.shape, dtype, offset)
            xi[...] = x
            np.testing.assert_array_equal(posemb.apply_rope(xi, cos, sin), want)
            assert posemb.apply_rope(xi, cos, sin, out=xi) is xi
            np.testing.assert_array_equal(xi, want)


@pytest.mark.parametrize("dtype, d", [(np.float32, 128), (np.float32, 64), (np.float64, 64),
                                      (np.float64, 128)])
@pytest.mark.parametrize("backward", [False, True])
@pytest.mark.parametrize("threads", [1, 2])
def test_meta_layout_rows_past_a_line(rng, dtype, d, backward, threads):
    """Meta's (b, s, h, d) within the cache with HF's duplicated tables:
    where the heads' rows lie one after another past a line by other than a
    multiple of 32 bytes, each position's rows go to the realigning kernel
    as two runs of h / 2 rows, the tables' half rows packed on lines.  An
    even and an odd head count (the odd one walked as before), every
    element offset, in place and into an out at the same offset and at
    another, at 2 threads 6 MiB (blocks split between the threads, the
    pool woken by calls just before): the formula's bits, nothing written
    outside; tables whose halves differ (no packing) too."""
    itemsize = np.dtype(dtype).itemsize
    fn = posemb.apply_rope_backward if backward else posemb.apply_rope
    shapes = [(37, 8), (37, 7)] + ([((6 << 20) // (32 * d * itemsize), 32)] if threads == 2 else [])
    old_threads = posemb.get_num_threads()
    try:
        posemb.set_num_threads(threads)
        for seq, heads in shapes:
            x = rng.standard_normal((1, seq, heads, d)).astype(dtype)
            cos, sin = posemb.rope_cos_sin(np.arange(seq) + 5, d, dtype=dtype)
            odd = cos.copy()
            odd[seq // 2, -1] += 1     # one row's halves differ
            for c in (cos, odd):
                want = formula_bits(x, c[:, None], sin[:, None], False, backward)
                offsets = range(0, 64, itemsize) if seq == 37 else (16, 48)
                for offset in offsets:
                    msg = f"offset={offset} seq={seq} heads={heads}"
                    big = _aligned_empty((x.size + 32,), dtype, offset)
                    big[:] = 7.0
                    xi = big[16:16 + x.size].reshape(x.shape)    # (16 values on: the same offset)
                    if threads == 2:
                        # (calls first, so that the pool's workers are awake
                        # and the checked call is split between them)
                        for _ in range(3):
                            fn(x, c, sin, seq_axis=1, out=xi)
                    xi[...] = x
                    assert fn(xi, c, sin, seq_axis=1, out=xi) is xi
                    np.testing.assert_array_equal(xi, want, err_msg=msg)
                    np.testing.assert_array_equal(big[:16], 7.0)
                    np.testing.assert_array_equal(big[16 + x.size:], 7.0)
                    xs = _aligned_empty(x.shape, dtype, offset)    # x at out's offset
                    xs[...] = x
                    fn(xs, c, sin, seq_axis=1, out=xi)
                    np.testing.assert_array_equal(xi, want, err_msg=msg)
                    np.testing.assert_array_equal(big[:16], 7.0)
                    np.testing.assert_array_equal(big[16 + x.size:], 7.0)
                    other = _aligned_empty(x.shape, dtype, (offset + 16) % 64)
                    fn(xs, c, sin, seq_axis=1, out=other)
                    np.testing.assert_array_equal(other, want, err_msg=msg)
    finally:
        posemb.set_num_threads(old_threads)


@pytest.mark.parametrize("dtype", ["float32", "float64", "float16", "bfloat16"])
@pytest.mark.parametrize("heads, d", [(3, 128), (5, 96), (3, 64), (5, 256)])
@pytest.mark.parametrize("offset", [0, 4, 16, 48])
@pytest.mark.parametrize("threads", [1, 2])
def test_staged_streaming_into_any_offset(rng, dtype, heads, d, offset, threads):
    """Where streaming stores may not leave lines partly written (the
    runtime's probe said so: set here), a large out-of-place output that is
    not on a 64-byte line is staged: each head's rows written to a buffer,
    then y's whole lines streamed and the partial ones at the block ends
    stored plainly (float32 and float64 at 16 bytes past a line, float16
    and bfloat16 with rows of 64, 128 or 256 values on a line or 16 bytes
    past one, at AVX2 and AVX-512: realigned in registers instead, each
    head's last 16 bytes carried to its next row, the heads of a group a row
    apart).  Both layouts, forward and backward, every offset within a line,
    head counts not a multiple of the group, rows of 96 values, 1 and 2
    threads: the
    formula's bits (a float16 or bfloat16 result: the float32 formula
    rounded once), nothing
    written outside out."""
    from posemb import _core
    if dtype == "bfloat16":
        dt = np.dtype(pytest.importorskip("ml_dtypes").bfloat16)
    else:
        dt = np.dtype(dtype)
    shape = (1, heads, (9 << 19) // (heads * d * dt.itemsize) | 1, d)   # 4.5 MiB of x, odd
    x = rng.standard_normal(shape).astype(dt)
    cos, sin = posemb.rope_cos_sin(np.arange(shape[2]), shape[3], dtype=dt)
    buf = np.empty(x.nbytes + 256, np.uint8)
    start = (-buf.ctypes.data) % 64 + offset
    out = buf[start:start + x.nbytes].view(dt).reshape(shape)
    old_lines, old_threads = _core._partial_lines(None), posemb.get_num_threads()
    try:
        _core._partial_lines(False)
        posemb.set_num_threads(threads)
        for interleaved, backward in [(False, False), (True, False), (False, True),
                                      (True, True)]:
            if dt.itemsize == 2:
                want = formula_bits(x.astype(np.float32), cos.astype(np.float32),
                                    sin.astype(np.float32), interleaved, backward).astype(dt)
            else:
                want = formula_bits(x, cos, sin, interleaved, backward)
            buf[:] = 0x55
            apply = posemb.apply_rope_backward if backward else posemb.apply_rope
            assert apply(x, cos, sin, interleaved=interleaved, out=out) is out
            np.testing.assert_array_equal(out.view(np.uint8), want.view(np.uint8))
            assert (buf[:start] == 0x55).all() and (buf[start + x.nbytes:] == 0x55).all()
    finally:
        _core._partial_lines(old_lines)
        posemb.set_num_threads(old_threads)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("interleaved", [False, True])
@pytest.mark.parametrize("layout", ["bhsd", "bshd", "sliced"])
def test_measured_choices_either_way_same_bits(rng, dtype, interleaved, layout):
    """Beyond the last-level cache the grouped walk ((b, h, s, d) memory)
    prefetches rows ahead or not, and the heads-inner walk (HF's transposed
    q, heads sliced from a fused projection) takes one head or all heads
    per call, as measured on the calls
    themselves (show_config's rope_prefetch_ahead, rope_one_head_per_call);
    each way, forced with _core._choice, gives the formula's bits in place
    and out of place, nothing written past out."""
    heads, d = 8, 128
    llc, seq = _past_the_cache(heads, d, dtype)
    if layout == "bhsd":
        x0 = rng.standard_normal((1, heads, seq, d)).astype(dtype)
    elif layout == "bshd":
        x0 = rng.standard_normal((1, seq, heads, d)).astype(dtype).transpose(0, 2, 1, 3)
    else:
        qkv = rng.standard_normal((1, seq, heads + 4, d)).astype(dtype)
        x0 = qkv[:, :, :heads].transpose(0, 2, 1, 3)
    cos, sin = posemb.rope_cos_sin(np.arange(seq), d, dtype=dtype, interleaved=interleaved)
    want = formula_bits(x0, cos, sin, interleaved)
    try:
        for way in (0, 1):
            assert _core._choice(way)[0] == way
            cfg = posemb.show_config(print_=False)
            assert cfg["rope_prefetch_ahead"] == cfg["rope_one_head_per_call"] == \
                ("yes" if way else "no") + " (set)"
            buf = np.full(x0.size + 8, 7.0, dtype)
            out = buf[:x0.size].reshape(x0.shape)
            posemb.apply_rope(x0, cos, sin, interleaved=interleaved, out=out)
            np.testing.assert_array_equal(out, want)
            np.testing.assert_array_equal(buf[x0.size:], 7.0)
            x = (qkv.copy()[:, :, :heads].transpose(0, 2, 1, 3) if layout == "sliced"
                 else x0.copy())
            posemb.apply_rope(x, cos, sin, interleaved=interleaved, out=x)
            np.testing.assert_array_equal(x, want)
    finally:
        _core._choice(-1)


def test_measured_choices_are_measured_both_ways(rng):
    """Measuring (the default; _choice(-1) starts afresh): forced calls are
    not timed, the first trial takes way 0 (show_config: measuring), and
    within PE_CHOICE_TRIALS + PE_CHOICE_RECHECK calls of one kind (float32
    in place beyond the cache: (b, h, s, d) memory, HF's transposed q, and
    heads sliced from a fused projection, whose positions have gaps and so
    a kind of their own) both ways have run and been timed, and show_config
    reports the kind with its verdict; the sliced heads' calls leave HF's
    kind as it was.  The setting takes -1, 0, 1 or None only."""
    heads, d = 8, 128
    _, seq = _past_the_cache(heads, d, np.float32)
    x = rng.standard_normal((1, heads, seq, d), dtype=np.float32)
    cos, sin = posemb.rope_cos_sin(np.arange(seq), d)
    assert _core._choice(-1)[0] == -1                   # measure afresh: no times kept
    assert all(pair == (0, 0) for pair in _core._choice(None)[1])
    assert "none yet" in posemb.show_config(print_=False)["rope_prefetch_ahead"]
    _core._choice(1)                                     # forced: not measured
    posemb.apply_rope(x, cos, sin, out=x)
    assert all(pair == (0, 0) for pair in _core._choice(None)[1])
    _core._choice(-1)
    posemb.apply_rope(x, cos, sin, out=x)                # the first trial: way 0 only
    assert _core._choice(None)[1][4 + 1][0] > 0 and _core._choice(None)[1][4 + 1][1] == 0
    assert "float32 in place measuring (-/" in \
        posemb.show_config(print_=False)["rope_prefetch_ahead"]
    for _ in range(8 + 17):
        posemb.apply_rope(x, cos, sin, out=x)
    xt = rng.standard_normal((1, seq, heads, d), dtype=np.float32).transpose(0, 2, 1, 3)
    for _ in range(8 + 17):
        posemb.apply_rope(xt, cos, sin, out=xt)
    kinds = _core._choice(None)[1]
    n = len(kinds) // 3                                  # kinds per decision
    assert kinds[2 * n + 4 + 1] == (0, 0)                # no sliced heads yet
    qkv = rng.standard_normal((1, seq, heads + 4, d), dtype=np.float32)
    xs = qkv[:, :, :heads].transpose(0, 2, 1, 3)         # heads sliced: gaps
    for _ in range(8 + 17):
        posemb.apply_rope(xs, cos, sin, out=xs)
    assert _core._choice(None)[1][n + 4 + 1] == kinds[n + 4 + 1]
    kinds = _core._choice(None)[1]
    for key, kind, where in (("rope_prefetch_ahead", 4 + 1, ""),   # (in place, float32)
                             ("rope_one_head_per_call", n + 4 + 1, ""),
                             ("rope_one_head_per_call", 2 * n + 4 + 1,
                              ", positions with gaps")):
        without, with_ = kinds[kind]
        assert without > 0 and with_ > 0
        verdict = "yes" if with_ < without else "no"
        assert f"float32 in place{where} {verdict} ({with_} ps/{without} ps per byte" in \
            posemb.show_config(print_=False)[key]
    for bad, err in ((2, ValueError), (-2, ValueError), (1 << 70, ValueError),
                     (True, TypeError), (0.0, TypeError), ("1", TypeError)):
        with pytest.raises(err, match="_choice: v must be"):
            _core._choice(bad)
        assert _core._choice(None)[0] == -1

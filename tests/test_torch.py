"""posemb.torch against pure-PyTorch formulas (HF/Meta, as in each family test), forward and backward.

References written here, in PyTorch: HF ``rotate_half``/``apply_rotary_pos_emb``
and ``LlamaRotaryEmbedding``; the GPT-J interleaved rotation; ``x + nn.Embedding``;
HF ``T5Attention.compute_bias``; ALiBi ``-m_h * (i - j)``.
"""
import copy
import math
import subprocess
import sys

import numpy as np
import pytest
import torch
import torch.nn.functional as F

import posemb
import posemb.torch as pt

from _hf import hf_bucket as hf_t5_bucket  # HF's T5 bucket, transcribed once

# ---------------------------------------------------------------- references


def hf_rotate_half(x):
    h = x.shape[-1] // 2
    return torch.cat((-x[..., h:], x[..., :h]), dim=-1)


def hf_apply_rotary_pos_emb(q, k, cos, sin, position_ids=None, unsqueeze_dim=1):
    cos = cos.unsqueeze(unsqueeze_dim)
    sin = sin.unsqueeze(unsqueeze_dim)
    return (q * cos) + (hf_rotate_half(q) * sin), (k * cos) + (hf_rotate_half(k) * sin)


def partial_rope(x, cos, sin, interleaved=False):
    """Rotate the first r = cos.shape[-1] features, pass the rest (GPT-NeoX)."""
    r = cos.shape[-1]
    xr, xp = x[..., :r], x[..., r:]
    if interleaved:
        pairs = xr.unflatten(-1, (-1, 2))
        rot = torch.stack((-pairs[..., 1], pairs[..., 0]), dim=-1).flatten(-2)
    else:
        rot = hf_rotate_half(xr)
    return torch.cat((xr * cos + rot * sin, xp), dim=-1)


def hf_cos_sin(position_ids, dim, base=10000.0, dtype=torch.float64):
    """LlamaRotaryEmbedding's formula, evaluated in float64."""
    inv_freq = 1.0 / (base ** (torch.arange(0, dim, 2, dtype=torch.float64) / dim))
    freqs = position_ids.to(torch.float64)[..., None] * inv_freq
    emb = torch.cat((freqs, freqs), dim=-1)
    return emb.cos().to(dtype), emb.sin().to(dtype)


def hf_compute_bias(weight, q, k, bidirectional=True, max_distance=128, offset=0):
    ctx = torch.arange(q, dtype=torch.long)[:, None] + offset
    mem = torch.arange(k, dtype=torch.long)[None, :]
    bucket = hf_t5_bucket(mem - ctx, bidirectional, weight.shape[0], max_distance)
    return F.embedding(bucket, weight).permute([2, 0, 1])


def alibi_formula(slopes, q, k, symmetric=False, offset=None):
    off = k - q if offset is None else offset
    d = (torch.arange(q, dtype=slopes.dtype)[:, None] + off) - torch.arange(k, dtype=slopes.dtype)
    if symmetric:
        d = d.abs()
    return -slopes[:, None, None] * d


def grads(outputs, inputs, seed=0):
    """Gradients of sum(out * g) for fixed random g."""
    gen = torch.Generator().manual_seed(seed)
    outs = outputs if isinstance(outputs, (tuple, list)) else (outputs,)
    gs = [torch.randn(o.shape, generator=gen, dtype=torch.float64).to(o.dtype) for o in outs]
    return torch.autograd.grad(outs, inputs, gs)


def rand(*shape, dtype=torch.float32, seed=0, requires_grad=False):
    gen = torch.Generator().manual_seed(seed)
    t = torch.randn(*shape, generator=gen, dtype=torch.float64).to(dtype)
    return t.requires_grad_(requires_grad)


# ---------------------------------------------------------------- import


def test_import_posemb_does_not_import_torch():
    code = ("import sys, posemb; assert 'torch' not in sys.modules, 'torch'; "
            "assert 'matplotlib' not in sys.modules, 'matplotlib'; print('ok')")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "ok"


# ---------------------------------------------------------------- gradcheck (float64)


@pytest.mark.parametrize("interleaved", [False, True])
@pytest.mark.parametrize("rotary", [8, 6, 5])   # 5: an unpaired last feature
def test_gradcheck_apply_rope(interleaved, rotary):
    x = rand(2, 3, 5, 8, dtype=torch.float64, requires_grad=True)
    cos = rand(5, rotary, dtype=torch.float64, seed=1, requires_grad=True)
    sin = rand(1, 5, rotary, dtype=torch.float64, seed=2, requires_grad=True)
    assert torch.autograd.gradcheck(
        lambda x, c, s: pt.apply_rope(x, c, s, interleaved=interleaved), (x, cos, sin))


def test_gradcheck_apply_rope_broadcast_x():
    # x broadcast against tables with more leading axes: gradient summed back
    x = rand(5, 8, dtype=torch.float64, requires_grad=True)
    cos = rand(3, 5, 8, dtype=torch.float64, seed=1)
    sin = rand(3, 5, 8, dtype=torch.float64, seed=2)
    assert torch.autograd.gradcheck(lambda x: pt.apply_rope(x, cos, sin), (x,))


def test_gradcheck_apply_rotary_pos_emb():
    q = rand(2, 4, 5, 8, dtype=torch.float64, requires_grad=True)
    k = rand(2, 2, 5, 8, dtype=torch.float64, seed=1, requires_grad=True)
    cos, sin = hf_cos_sin(torch.arange(5)[None].expand(2, 5), 8)
    assert torch.autograd.gradcheck(
        lambda q, k: pt.apply_rotary_pos_emb(q, k, cos, sin), (q, k))


@pytest.mark.parametrize("unsqueeze_dim", [1, 2])
@pytest.mark.parametrize("rotary", [8, 6, 5])   # 5: an unpaired last feature
def test_gradcheck_apply_rotary_pos_emb_tables(unsqueeze_dim, rotary):
    """q, k and both tables trained, one autograd node for q and k: each
    table's gradient sums q's and k's parts (partial rotary too)."""
    shape_q, shape_k = ((2, 4, 5, 8), (2, 2, 5, 8)) if unsqueeze_dim == 1 else \
        ((2, 5, 4, 8), (2, 5, 2, 8))
    q = rand(*shape_q, dtype=torch.float64, requires_grad=True)
    k = rand(*shape_k, dtype=torch.float64, seed=1, requires_grad=True)
    cos = rand(2, 5, rotary, dtype=torch.float64, seed=2, requires_grad=True)
    sin = rand(2, 5, rotary, dtype=torch.float64, seed=3, requires_grad=True)
    assert torch.autograd.gradcheck(
        lambda q, k, c, s: pt.apply_rotary_pos_emb(q, k, c, s, unsqueeze_dim=unsqueeze_dim),
        (q, k, cos, sin))


def test_apply_rotary_pos_emb_grad_flags_and_unused_output():
    """Only q trained: k's result needs no gradient (as with HF's formula);
    both trained, one result unused: the other's gradient is still right."""
    cos, sin = hf_cos_sin(torch.arange(5)[None], 8)
    q = rand(1, 4, 5, 8, dtype=torch.float64, requires_grad=True)
    k = rand(1, 2, 5, 8, dtype=torch.float64, seed=1)
    qe, ke = pt.apply_rotary_pos_emb(q, k, cos, sin)
    assert qe.requires_grad and not ke.requires_grad
    k.requires_grad_(True)
    qe, ke = pt.apply_rotary_pos_emb(q, k, cos, sin)
    (qe * 3).sum().backward()
    want = hf_apply_rotary_pos_emb(q, k, cos, sin)[0]
    (gq,) = torch.autograd.grad((want * 3).sum(), (q,))
    torch.testing.assert_close(q.grad, gq, rtol=0, atol=1e-15)
    assert k.grad is None or not k.grad.any()


@pytest.mark.parametrize("bidirectional", [True, False])
def test_gradcheck_t5(bidirectional):
    table = rand(16, 3, dtype=torch.float64, requires_grad=True)
    assert torch.autograd.gradcheck(
        lambda t: pt.t5_relative_bias(t, 5, 7, bidirectional=bidirectional, max_distance=20,
                                      query_offset=2), (table,))


def test_gradcheck_learned():
    pe = pt.LearnedPositionalEmbedding(6, 4, dtype=torch.float64, std=1.0)
    x = rand(2, 3, 4, dtype=torch.float64, requires_grad=True)
    pos = torch.tensor([[0, 5, 5], [2, 2, 2]])
    assert torch.autograd.gradcheck(lambda x, w: pt._LearnedPE.apply(x, w, pos.numpy(), 0),
                                    (x, pe.weight))
    assert torch.autograd.gradcheck(lambda x, w: pt._LearnedPE.apply(x, w, None, 2),
                                    (x, pe.weight))


@pytest.mark.parametrize("symmetric", [False, True])
def test_gradcheck_alibi(symmetric):
    slopes = torch.tensor([0.5, 0.25, 0.125], dtype=torch.float64, requires_grad=True)
    assert torch.autograd.gradcheck(
        lambda m: pt.alibi_bias(m, 4, 6, symmetric=symmetric), (slopes,))
    assert torch.autograd.gradcheck(
        lambda m: pt.alibi_bias(m, 3, 3, query_offset=5), (slopes,))


# ---------------------------------------------------------------- equal to the PyTorch formulas


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_apply_rotary_pos_emb_matches_hf(dtype):
    q = rand(2, 8, 16, 64, dtype=dtype, requires_grad=True)
    k = rand(2, 2, 16, 64, dtype=dtype, seed=1, requires_grad=True)
    pos = torch.tensor([list(range(16)), list(range(100, 116))])
    cos, sin = pt.RotaryEmbedding(dim=64)(q, pos)
    got = pt.apply_rotary_pos_emb(q, k, cos, sin)
    want = hf_apply_rotary_pos_emb(q, k, cos, sin)
    for g, w in zip(got, want):
        assert g.dtype == dtype
        assert torch.equal(g, w)                      # same tables: bit for bit
    for g, w in zip(grads(got, (q, k)), grads(want, (q, k))):
        torch.testing.assert_close(g, w, rtol=0, atol=4 * torch.finfo(dtype).eps)


@pytest.mark.parametrize("interleaved", [False, True])
def test_apply_rope_partial_and_table_grads_match(interleaved):
    x = rand(3, 7, 10, dtype=torch.float64, requires_grad=True)
    cos = rand(7, 6, dtype=torch.float64, seed=1, requires_grad=True)
    sin = rand(7, 6, dtype=torch.float64, seed=2, requires_grad=True)
    got = pt.apply_rope(x, cos, sin, interleaved=interleaved)
    want = partial_rope(x, cos, sin, interleaved)
    torch.testing.assert_close(got, want, rtol=0, atol=1e-15)
    for g, w in zip(grads(got, (x, cos, sin)), grads(want, (x, cos, sin))):
        torch.testing.assert_close(g, w, rtol=1e-13, atol=1e-13)


def test_rotary_embedding_matches_hf_formula():
    rotary = pt.RotaryEmbedding(dim=32, max_position_embeddings=64, base=500.0)
    pos = torch.tensor([[0, 1, 2, 63, 64, 1000]])
    for dtype in (torch.float32, torch.float64):
        cos, sin = rotary(torch.ones(1, dtype=dtype), pos)
        wc, ws = hf_cos_sin(pos, 32, base=500.0, dtype=dtype)
        assert cos.dtype == sin.dtype == dtype and cos.shape == (1, 6, 32)
        # float64: the reference's own angle rounding (~p * 1e-16) dominates
        atol = 2 * torch.finfo(dtype).eps if dtype == torch.float32 else 1e-13
        torch.testing.assert_close(cos, wc, rtol=0, atol=atol)
        torch.testing.assert_close(sin, ws, rtol=0, atol=atol)
    assert rotary.inv_freq.dtype == torch.float32 and rotary.inv_freq.shape == (16,)
    assert rotary.attention_scaling == 1.0 and rotary.rope_type == "default"
    assert rotary.state_dict() == {}                 # inv_freq is not persistent, as in HF


def test_rotary_embedding_from_config_scaling():
    config = {"hidden_size": 512, "num_attention_heads": 4, "rope_theta": 1e6,
              "max_position_embeddings": 131072,
              "rope_scaling": {"rope_type": "yarn", "factor": 4.0,
                               "original_max_position_embeddings": 32768}}
    rotary = pt.RotaryEmbedding(config)
    ref = posemb.rope_config(config)
    pos = np.array([[0, 5, 40000]])
    cos, sin = rotary(torch.zeros(1), torch.from_numpy(pos))
    rc, rs = ref.cos_sin(pos)
    assert np.array_equal(cos.numpy(), rc) and np.array_equal(sin.numpy(), rs)
    assert rotary.attention_scaling == pytest.approx(0.1 * math.log(4.0) + 1)
    assert rotary.rope_type == "yarn"
    # a transformers-like config object (to_dict) works the same
    class Config:
        def to_dict(self):
            return config
    cos2, _ = pt.RotaryEmbedding(Config())(torch.zeros(1), torch.from_numpy(pos))
    assert torch.equal(cos, cos2)
    # and the scaling dict given directly
    rot3 = pt.RotaryEmbedding(dim=128, base=1e6, max_position_embeddings=131072,
                              scaling=config["rope_scaling"])
    assert torch.equal(rot3(torch.zeros(1), torch.from_numpy(pos))[0], cos)


def test_rotary_embedding_interleaved_tables():
    rotary = pt.RotaryEmbedding(dim=8, interleaved=True)
    cos, sin = rotary(torch.zeros(1, dtype=torch.float64), torch.arange(4)[None])
    assert torch.equal(cos[..., 0::2], cos[..., 1::2])
    x = rand(1, 4, 8, dtype=torch.float64)
    torch.testing.assert_close(pt.apply_rope(x, cos, sin, interleaved=True),
                               partial_rope(x, cos, sin, interleaved=True))


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_learned_matches_embedding(dtype):
    torch.manual_seed(0)
    pe = pt.LearnedPositionalEmbedding(32, 16, dtype=dtype, std=1.0)
    emb = torch.nn.Embedding(32, 16, dtype=dtype)
    with torch.no_grad():
        emb.weight.copy_(pe.weight)
    x = rand(4, 10, 16, dtype=dtype, requires_grad=True)
    pos = torch.randint(0, 32, (4, 10), generator=torch.Generator().manual_seed(1))
    for kwargs, p in (({"positions": pos}, pos), ({"offset": 7}, torch.arange(7, 17))):
        got = pe(x, **kwargs)
        want = x + emb(p)
        assert torch.equal(got, want)
        g_got = grads(got, (x, pe.weight))
        g_want = grads(want, (x, emb.weight))
        assert torch.equal(g_got[0], g_want[0])
        assert torch.equal(g_got[1], g_want[1])       # token-order sums, as Embedding


def test_learned_bfloat16_kernel_loops():
    """bfloat16 x and table go through the kernel's bfloat16 loops: the
    forward equals torch's bfloat16 x + Embedding (a float32 sum rounded
    once), x's gradient is the incoming one, and the table's gradient is its
    float32 sums (as Embedding's in float32) rounded once to bfloat16."""
    torch.manual_seed(0)
    pe = pt.LearnedPositionalEmbedding(32, 20, dtype=torch.bfloat16, std=1.0)
    emb = torch.nn.Embedding(32, 20, dtype=torch.bfloat16)
    with torch.no_grad():
        emb.weight.copy_(pe.weight)
    x = (rand(4, 10, 20) * 50).to(torch.bfloat16).requires_grad_(True)
    pos = torch.randint(0, 32, (4, 10), generator=torch.Generator().manual_seed(1))
    got = pe(x, positions=pos)
    assert got.dtype == torch.bfloat16
    assert torch.equal(got.view(torch.int16), (x + emb(pos)).view(torch.int16))
    g = (rand(4, 10, 20) * 10).to(torch.bfloat16)
    gx, gw = torch.autograd.grad(got, (x, pe.weight), g)
    assert torch.equal(gx, g)
    want = torch.zeros(32, 20).index_add_(0, pos.reshape(-1), g.float().reshape(-1, 20))
    assert gw.dtype == torch.bfloat16 and torch.equal(gw, want.to(torch.bfloat16))


def test_bfloat16_relative_forwards_move_bits():
    """bfloat16 T5 biases and Shaw embeddings are gathers of the table's bits
    (float16's loops move them): equal to HF's / the index formula's
    bfloat16 gather bit for bit, a NaN with a payload included."""
    weight = rand(32, 6).to(torch.bfloat16)
    weight.view(torch.int16)[3, 2] = 0x7f81                    # a signalling NaN's bits
    got = pt.t5_relative_bias(weight, 9, 40, query_offset=3)
    want = hf_compute_bias(weight, 9, 40, True, offset=3)
    assert got.dtype == torch.bfloat16 and torch.equal(got.view(torch.int16),
                                                       want.view(torch.int16))
    table = rand(7, 5).to(torch.bfloat16)
    table.view(torch.int16)[0, 1] = 0x7f81
    got = pt.relative_embeddings(table, 6, 9)
    idx = (torch.arange(9)[None, :] - torch.arange(3, 9)[:, None]).clamp(-3, 3) + 3
    assert got.dtype == torch.bfloat16 and torch.equal(got.view(torch.int16),
                                                       table[idx].view(torch.int16))


def test_bfloat16_relative_backwards_widen_in_the_kernel():
    """bfloat16 gradients of the T5 table and the Shaw table are read as
    bfloat16 by the kernels (widened a row at a time; 8 values per step at
    the AVX2 level, rows with a tail): the float64 sums of the same values,
    rounded to float32, then bfloat16."""
    weight = rand(32, 3).to(torch.bfloat16).requires_grad_(True)
    g = (rand(3, 9, 21, seed=1) * 10).to(torch.bfloat16)
    (got,) = torch.autograd.grad(pt.t5_relative_bias(weight, 9, 21), (weight,), g)
    w64 = weight.detach().double().requires_grad_(True)
    (want,) = torch.autograd.grad(hf_compute_bias(w64, 9, 21, True), (w64,), g.double())
    assert got.dtype == torch.bfloat16 and torch.equal(got, want.float().to(torch.bfloat16))
    table = rand(7, 11).to(torch.bfloat16).requires_grad_(True)
    g = (rand(6, 13, 11, seed=2) * 10).to(torch.bfloat16)
    (got,) = torch.autograd.grad(pt.relative_embeddings(table, 6, 13), (table,), g)
    idx = (torch.arange(13)[None, :] - torch.arange(7, 13)[:, None]).clamp(-3, 3) + 3
    want = torch.zeros(7, 11, dtype=torch.float64).index_add_(
        0, idx.reshape(-1), g.double().reshape(-1, 11))
    assert got.dtype == torch.bfloat16 and torch.equal(got, want.float().to(torch.bfloat16))


@pytest.mark.parametrize("bidirectional", [True, False])
def test_t5_matches_hf(bidirectional):
    weight = rand(32, 6, requires_grad=True)
    for q, k, off in ((20, 20, 0), (1, 300, 299), (7, 200, 3)):
        got = pt.t5_relative_bias(weight, q, k, bidirectional=bidirectional, query_offset=off)
        want = hf_compute_bias(weight, q, k, bidirectional, offset=off)
        assert torch.equal(got, want)
        (g_got,) = grads(got, (weight,))
        (g_want,) = grads(want, (weight,))
        torch.testing.assert_close(g_got, g_want, rtol=1e-5, atol=1e-4)


def test_alibi_matches_formula():
    slopes = torch.from_numpy(posemb.alibi_slopes(8)).requires_grad_(True)
    for sym in (False, True):
        got = pt.alibi_bias(slopes, 5, 9, symmetric=sym)
        want = alibi_formula(slopes, 5, 9, sym)
        torch.testing.assert_close(got, want, rtol=0, atol=0)
        torch.testing.assert_close(grads(got, (slopes,))[0], grads(want, (slopes,))[0])
    b = pt.alibi_bias(8, 5, 9)
    assert b.dtype == torch.float32 and not b.requires_grad
    torch.testing.assert_close(b, alibi_formula(slopes.detach(), 5, 9).float())


@pytest.mark.parametrize("sym, offset", [(False, None), (True, -3), (False, 1000)])
def test_alibi_bfloat16_is_torch_cast_of_float64(sym, offset):
    """bfloat16 biases are made by the kernel: the bits of torch's cast of
    the float64 bias (through float32), for slopes that are not powers of
    two (products that round), given as a head count, a tensor that needs
    grad (the autograd path) or a bfloat16 tensor."""
    rng = np.random.default_rng(7)
    slopes = rng.uniform(0.001, 3.0, 6)
    want = torch.from_numpy(posemb.alibi_bias(slopes, 7, 300, symmetric=sym, query_offset=offset,
                                              dtype=np.float64)).to(torch.bfloat16)
    got = pt.alibi_bias(slopes, 7, 300, symmetric=sym, query_offset=offset, dtype=torch.bfloat16)
    assert got.dtype == torch.bfloat16 and torch.equal(got.view(torch.int16),
                                                       want.view(torch.int16))
    m = torch.from_numpy(slopes).requires_grad_(True)
    got = pt.alibi_bias(m, 7, 300, symmetric=sym, query_offset=offset, dtype=torch.bfloat16)
    assert torch.equal(got.view(torch.int16), want.view(torch.int16)) and got.requires_grad
    assert (want.double() != torch.from_numpy(posemb.alibi_bias(
        slopes, 7, 300, symmetric=sym, query_offset=offset, dtype=np.float64))).any()  # rounded
    m16 = torch.tensor([0.5, 0.25], dtype=torch.bfloat16)
    assert pt.alibi_bias(m16, 3, 3).dtype == torch.bfloat16


def test_sinusoidal_tensor():
    pe = pt.sinusoidal(50, 16, dtype=torch.float64)
    assert np.array_equal(pe.numpy(), posemb.sinusoidal(50, 16, dtype=np.float64))
    assert pt.sinusoidal(4, 6, dtype=torch.bfloat16).dtype == torch.bfloat16


# ---------------------------------------------------------------- memory, strides, dtypes


def test_kernels_see_views_and_results_are_not_copied(monkeypatch):
    seen = {}
    real = posemb.apply_rope

    def spy(x, cos, sin, **kw):
        seen["args"] = (x, cos, sin)
        seen["out"] = real(x, cos, sin, **kw)
        return seen["out"]

    monkeypatch.setattr(posemb, "apply_rope", spy)
    x = rand(2, 6, 8)
    cos, sin = hf_cos_sin(torch.arange(6), 8, dtype=torch.float32)
    y = pt.apply_rope(x, cos, sin)
    for a, t in zip(seen["args"], (x, cos, sin)):
        assert a.ctypes.data == t.data_ptr()          # NumPy views of the tensors
    assert y.data_ptr() == seen["out"].ctypes.data    # the tensor is the kernel's output


def test_strided_inputs():
    q = rand(2, 16, 4, 8, requires_grad=True)         # (batch, seq, heads, dim)
    qt = q.transpose(1, 2)                            # (batch, heads, seq, dim): strided
    assert not qt.is_contiguous()
    cos, sin = hf_cos_sin(torch.arange(16)[None].expand(2, 16), 8, dtype=torch.float32)
    got, _ = pt.apply_rotary_pos_emb(qt, qt, cos, sin)
    want, _ = hf_apply_rotary_pos_emb(qt, qt, cos, sin)
    assert torch.equal(got, want)
    # the tables broadcast with stride 0 as well (expand, no copy)
    x = rand(3, 16, 8)
    c1, s1 = hf_cos_sin(torch.arange(16), 8, dtype=torch.float32)
    assert torch.equal(pt.apply_rope(x, c1.expand(3, 16, 8), s1.expand(3, 16, 8)),
                       partial_rope(x, c1, s1))
    (g1,) = grads(pt.apply_rope(qt, cos[:, None], sin[:, None]), (q,))
    (g2,) = grads(partial_rope(qt, cos[:, None], sin[:, None]), (q,))
    torch.testing.assert_close(g1, g2, rtol=0, atol=1e-6)


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_half_dtypes(dtype):
    q = rand(1, 2, 12, 16, dtype=dtype, requires_grad=True)
    rotary = pt.RotaryEmbedding(dim=16)
    cos, sin = rotary(q, torch.arange(12)[None])
    assert cos.dtype == sin.dtype == dtype
    y, _ = pt.apply_rotary_pos_emb(q, q, cos, sin)
    assert y.dtype == dtype
    # computed in float32 from the same tables and rounded once
    want, _ = hf_apply_rotary_pos_emb(q.float(), q.float(), cos.float(), sin.float())
    assert torch.equal(y, want.to(dtype))
    (g,) = grads(y, (q,))
    assert g.dtype == dtype
    (gw,) = grads(want.to(dtype), (q,))
    torch.testing.assert_close(g.float(), gw.float(), rtol=0, atol=2e-2)
    pe = pt.LearnedPositionalEmbedding(12, 16, dtype=dtype)
    out = pe(q.detach()[0])
    assert out.dtype == dtype
    assert torch.equal(out, (q.detach()[0].float() + pe.weight.detach()[:12].float()).to(dtype))
    table = rand(32, 2, dtype=dtype, requires_grad=True)
    bias = pt.t5_relative_bias(table, 4, 4)
    assert bias.dtype == dtype
    bias.sum().backward()
    assert table.grad.dtype == dtype
    assert pt.alibi_bias(4, 3, 3, dtype=dtype).dtype == dtype


def test_device_and_type_errors():
    meta = torch.empty(2, 4, 8, device="meta")
    cpu = torch.ones(4, 8)
    with pytest.raises(TypeError, match="posemb is a CPU library"):
        pt.apply_rope(meta, cpu, cpu)
    with pytest.raises(TypeError, match="posemb is a CPU library"):
        pt.t5_relative_bias(torch.empty(32, 2, device="meta"), 2, 2)
    with pytest.raises(TypeError, match="posemb is a CPU library"):
        pt.RotaryEmbedding(dim=8)(meta, torch.arange(4)[None])
    with pytest.raises(TypeError, match="posemb is a CPU library"):
        pt.RotaryEmbedding(dim=8, device="cuda")
    with pytest.raises(TypeError, match="posemb is a CPU library"):
        pt.LearnedPositionalEmbedding(4, 8, device="cuda:0")
    with pytest.raises(TypeError, match="float16, bfloat16, float32 or float64"):
        pt.apply_rope(torch.ones(4, 8, dtype=torch.int32), cpu, cpu)
    with pytest.raises(TypeError, match="torch.Tensor"):
        pt.apply_rope(np.ones((4, 8)), cpu, cpu)
    with pytest.raises(TypeError, match="integer"):
        pt.RotaryEmbedding(dim=8)(cpu, torch.ones(1, 4))
    with pytest.raises(ValueError, match="must not exceed"):
        pt.apply_rope(torch.ones(4, 8), torch.ones(4, 9), torch.ones(4, 9))
    with pytest.raises(IndexError):
        pt.LearnedPositionalEmbedding(4, 8)(torch.ones(6, 8))
    with pytest.raises(TypeError, match="config or dim"):
        pt.RotaryEmbedding()


_META = torch.empty(2, 4, 8, device="meta")
_C = torch.ones(4, 8)
_Q = torch.ones(1, 2, 4, 8)
_CPU_ONLY = "posemb is a CPU library"
TORCH_BAD = [
    # (label, call, exception, message pattern)
    ("apply_rope-meta-cos", lambda: pt.apply_rope(_C, torch.empty(4, 8, device="meta"), _C),
     TypeError, _CPU_ONLY + ": cos"),
    ("apply_rope-meta-sin", lambda: pt.apply_rope(_C, _C, torch.empty(4, 8, device="meta")),
     TypeError, _CPU_ONLY + ": sin"),
    ("apply_rope-int-cos", lambda: pt.apply_rope(_C, _C.int(), _C), TypeError, "cos"),
    ("apply_rope-complex-x", lambda: pt.apply_rope(_C.to(torch.complex64), _C, _C), TypeError,
     "x"),
    ("apply_rope-sparse-x", lambda: pt.apply_rope(_C.to_sparse(), _C, _C), TypeError, "x"),
    ("apply_rope-wide-tables", lambda: pt.apply_rope(_C, torch.ones(4, 10), torch.ones(4, 10)),
     ValueError, "cos"),
    ("apply_rope-shape", lambda: pt.apply_rope(_C, torch.ones(3, 8), torch.ones(3, 8)),
     ValueError, "broadcast"),
    ("hf-meta-q", lambda: pt.apply_rotary_pos_emb(_META[None], _Q, _C[None], _C[None]),
     TypeError, _CPU_ONLY + ": q"),
    ("hf-meta-k", lambda: pt.apply_rotary_pos_emb(_Q, _META[None], _C[None], _C[None]),
     TypeError, _CPU_ONLY + ": k"),
    ("hf-meta-cos", lambda: pt.apply_rotary_pos_emb(
        _Q, _Q, torch.empty(1, 4, 8, device="meta"), _C[None]), TypeError, _CPU_ONLY + ": cos"),
    ("hf-int-q", lambda: pt.apply_rotary_pos_emb(_Q.int(), _Q, _C[None], _C[None]), TypeError,
     "q"),
    # plain CPU float32 tensors of another layout: numpy() refuses them on
    # the no-grad road, which then names the argument
    ("hf-sparse-k", lambda: pt.apply_rotary_pos_emb(_Q, _Q.to_sparse(), _C[None], _C[None]),
     TypeError, "k must be a dense"),
    ("hf-sparse-sin", lambda: pt.apply_rotary_pos_emb(_Q, _Q, _C[None], _C[None].to_sparse()),
     TypeError, "sin must be a dense"),
    ("hf-unsqueeze_dim", lambda: pt.apply_rotary_pos_emb(_Q, _Q, _C[None], _C[None],
                                                         unsqueeze_dim=9),
     (ValueError, IndexError), "unsqueeze_dim"),
    ("RotaryEmbedding-cuda", lambda: pt.RotaryEmbedding(dim=8, device="cuda"), TypeError,
     _CPU_ONLY),
    ("RotaryEmbedding-meta-device", lambda: pt.RotaryEmbedding(dim=8, device="meta"),
     TypeError, _CPU_ONLY),
    ("RotaryEmbedding-bad-scaling", lambda: pt.RotaryEmbedding(dim=8, scaling={"rope_type": "x"}),
     ValueError, "rope_type"),
    ("RotaryEmbedding-meta-positions", lambda: pt.RotaryEmbedding(dim=8)(
        _C, torch.arange(4, device="meta")[None]), TypeError, _CPU_ONLY + ": position_ids"),
    ("RotaryEmbedding-float-positions", lambda: pt.RotaryEmbedding(dim=8)(_C, torch.ones(1, 4)),
     TypeError, "position_ids"),
    ("RotaryEmbedding-negative-positions", lambda: pt.RotaryEmbedding(dim=8)(
        _C, -torch.ones(1, 4, dtype=torch.long)), ValueError, "positions"),
    ("RotaryEmbedding-int-x", lambda: pt.RotaryEmbedding(dim=8)(_C.int(), torch.arange(4)[None]),
     TypeError, "x"),
    ("sinusoidal-int-dtype", lambda: pt.sinusoidal(4, 8, dtype=torch.int32), TypeError, "dtype"),
    ("sinusoidal-str-dtype", lambda: pt.sinusoidal(4, 8, dtype="float32"), TypeError, "dtype"),
    ("alibi-meta-slopes", lambda: pt.alibi_bias(torch.ones(2, device="meta"), 3, 3), TypeError,
     _CPU_ONLY + ": slopes"),
    ("alibi-2d-slopes", lambda: pt.alibi_bias(torch.ones(2, 2), 3, 3), ValueError, "slopes"),
    ("alibi-int-slopes", lambda: pt.alibi_bias(torch.ones(2, dtype=torch.int32), 3, 3),
     TypeError, "slopes"),
    ("alibi-int-dtype", lambda: pt.alibi_bias(2, 3, 3, dtype=torch.int32), TypeError, "dtype"),
    ("t5-meta", lambda: pt.t5_relative_bias(torch.empty(32, 2, device="meta"), 2, 2), TypeError,
     _CPU_ONLY + ": table"),
    ("t5-1d", lambda: pt.t5_relative_bias(torch.ones(32), 3, 3), ValueError, "table"),
    ("t5-int", lambda: pt.t5_relative_bias(torch.ones(32, 2, dtype=torch.int64), 3, 3),
     TypeError, "table"),
    ("learned-cuda", lambda: pt.LearnedPositionalEmbedding(4, 8, device="cuda:0"), TypeError,
     _CPU_ONLY),
    ("learned-int-dtype", lambda: pt.LearnedPositionalEmbedding(4, 8, dtype=torch.int32),
     TypeError, "dtype"),
    ("learned-meta-x", lambda: pt.LearnedPositionalEmbedding(4, 8)(_META), TypeError,
     _CPU_ONLY + ": x"),
    ("learned-int-x", lambda: pt.LearnedPositionalEmbedding(4, 8)(_C.int()), TypeError, "x"),
    ("learned-width", lambda: pt.LearnedPositionalEmbedding(4, 8)(torch.ones(2, 7)), ValueError,
     "width"),
    ("learned-float-positions", lambda: pt.LearnedPositionalEmbedding(4, 8)(
        torch.ones(2, 8), torch.ones(2)), TypeError, "positions"),
    ("learned-meta-positions", lambda: pt.LearnedPositionalEmbedding(4, 8)(
        torch.ones(2, 8), torch.arange(2, device="meta")), TypeError, _CPU_ONLY + ": positions"),
]


@pytest.mark.parametrize("call,exc,match", [(c, e, m) for _, c, e, m in TORCH_BAD],
                         ids=[n for n, *_ in TORCH_BAD])
def test_bad_inputs_name_the_argument(call, exc, match):
    """CUDA/meta tensors are a TypeError saying posemb is a CPU library; wrong
    dtypes, shapes and devices of every posemb.torch function name the argument."""
    with pytest.raises(exc, match=match):
        call()

# ---------------------------------------------------------------- a training step


class OneLayerRoPEAttention(torch.nn.Module):
    """x -> qkv -> RoPE(q, k) -> causal SDPA -> out projection."""

    def __init__(self, d_model=32, heads=4, rope_impl="posemb"):
        super().__init__()
        self.heads, self.head_dim = heads, d_model // heads
        self.qkv = torch.nn.Linear(d_model, 3 * d_model)
        self.out = torch.nn.Linear(d_model, d_model)
        self.pos = pt.LearnedPositionalEmbedding(64, d_model, std=0.1)
        self.rope_impl = rope_impl

    def forward(self, x):
        b, s, d = x.shape
        position_ids = torch.arange(s)[None].expand(b, s)
        if self.rope_impl == "posemb":
            x = self.pos(x)
            cos, sin = pt.RotaryEmbedding(dim=self.head_dim)(x, position_ids)
            rope = pt.apply_rotary_pos_emb
        else:   # the PyTorch formulas throughout
            x = x + F.embedding(position_ids, self.pos.weight)
            cos, sin = hf_cos_sin(position_ids, self.head_dim, dtype=x.dtype)
            rope = hf_apply_rotary_pos_emb
        qkv = self.qkv(x).view(b, s, 3, self.heads, self.head_dim).permute(2, 0, 3, 1, 4)
        q, k = rope(qkv[0], qkv[1], cos, sin)
        att = F.scaled_dot_product_attention(q, k, qkv[2], is_causal=True)
        return self.out(att.transpose(1, 2).reshape(b, s, d))


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_training_step_same_loss_and_gradients(dtype):
    torch.manual_seed(0)
    model = OneLayerRoPEAttention().to(dtype)
    ref = copy.deepcopy(model)
    ref.rope_impl = "torch"
    x = rand(3, 24, 32, dtype=dtype, seed=5)
    target = rand(3, 24, 32, dtype=dtype, seed=6)
    tol = {"rtol": 0, "atol": 4 * torch.finfo(dtype).eps}
    losses = []
    for m in (model, ref):
        opt = torch.optim.SGD(m.parameters(), lr=0.1)
        loss = F.mse_loss(m(x), target)
        loss.backward()
        losses.append(loss.detach())
        opt.step()
    torch.testing.assert_close(losses[0], losses[1], **tol)
    for (name, p), (_, r) in zip(model.named_parameters(), ref.named_parameters()):
        torch.testing.assert_close(p.grad, r.grad, **tol, msg=f"grad of {name}")
        torch.testing.assert_close(p, r, **tol, msg=f"{name} after the step")
    # and the second step's loss (parameters updated from those gradients)
    torch.testing.assert_close(F.mse_loss(model(x), target), F.mse_loss(ref(x), target), **tol)


# ---------------------------------------------------------------- bench rows


def test_bench_torch_family_runs():
    from posemb import _bench
    result = _bench.run(["torch"], quick=True, repeat=3)
    rows = result["rows"]
    assert rows and all(r["family"] == "torch" for r in rows)
    assert all(r["posemb_s"] > 0 and r["torch_s"] > 0 for r in rows)
    assert "fwd+bwd" in _bench.format_table(result)

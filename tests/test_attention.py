"""posemb.scaled_dot_product_attention and the RoPE multi-head example vs PyTorch."""
import importlib.util
import math
import pathlib

import numpy as np
import pytest
from _torch import torch
from _torch import F

import posemb

EXAMPLE = pathlib.Path(__file__).resolve().parents[1] / "examples" / "rope_multihead_attention.py"

TOL = {np.float64: dict(rtol=1e-12, atol=1e-12), np.float32: dict(rtol=2e-5, atol=2e-6),
       np.float16: dict(rtol=5e-3, atol=5e-3)}


def qkv(rng, shape_q, shape_kv, dtype, ev=None):
    q = rng.standard_normal(shape_q).astype(dtype)
    k = rng.standard_normal(shape_kv).astype(dtype)
    v_shape = shape_kv if ev is None else shape_kv[:-1] + (ev,)
    v = rng.standard_normal(v_shape).astype(dtype)
    return q, k, v


def torch_sdpa(q, k, v, **kw):
    t = [torch.from_numpy(np.asarray(a, dtype=np.float64 if a.dtype == np.float16 else a.dtype))
         for a in (q, k, v)]
    return F.scaled_dot_product_attention(*t, **kw).numpy()


@pytest.mark.parametrize("dtype", [np.float64, np.float32, np.float16])
def test_no_mask_and_scale(rng, dtype):
    q, k, v = qkv(rng, (2, 3, 7, 8), (2, 3, 11, 8), dtype, ev=5)
    got = posemb.scaled_dot_product_attention(q, k, v)
    assert got.shape == (2, 3, 7, 5) and got.dtype == dtype
    np.testing.assert_allclose(got, torch_sdpa(q, k, v), **TOL[dtype])
    got = posemb.scaled_dot_product_attention(q, k, v, scale=0.3)
    np.testing.assert_allclose(got, torch_sdpa(q, k, v, scale=0.3), **TOL[dtype])


@pytest.mark.parametrize("dtype", [np.float64, np.float32])
def test_boolean_and_additive_masks(rng, dtype):
    q, k, v = qkv(rng, (2, 4, 6, 8), (2, 4, 9, 8), dtype)
    causal = posemb.causal_mask(6, 9)
    rand = rng.random((2, 1, 6, 9)) < 0.7
    for mask in (causal, rand, causal & rand):
        want = torch_sdpa(q, k, v, attn_mask=torch.from_numpy(mask))
        np.testing.assert_allclose(posemb.scaled_dot_product_attention(q, k, v, mask=mask),
                                   want, **TOL[dtype])
        add = posemb.to_additive(mask, dtype)
        np.testing.assert_allclose(posemb.scaled_dot_product_attention(q, k, v, mask=add),
                                   want, **TOL[dtype])
    soft = rng.standard_normal((6, 9)).astype(dtype)         # any additive float mask
    np.testing.assert_allclose(posemb.scaled_dot_product_attention(q, k, v, mask=soft),
                               torch_sdpa(q, k, v, attn_mask=torch.from_numpy(soft)),
                               **TOL[dtype])


@pytest.mark.parametrize("kind", ["alibi", "t5"])
def test_bias_plus_mask(rng, kind):
    H, L = 6, 10
    q, k, v = qkv(rng, (3, H, L, 16), (3, H, L, 16), np.float32)
    if kind == "alibi":
        bias = posemb.alibi_bias(H, L, L)
    else:
        bias = posemb.t5_relative_bias(rng.standard_normal((32, H)).astype(np.float32), L, L)
    mask = posemb.causal_mask(L)
    # PyTorch takes one attn_mask: the bias with -inf where masked
    tmask = torch.from_numpy(bias).masked_fill(~torch.from_numpy(mask), -math.inf)
    want = torch_sdpa(q, k, v, attn_mask=tmask)
    got = posemb.scaled_dot_product_attention(q, k, v, mask=mask, bias=bias)
    np.testing.assert_allclose(got, want, **TOL[np.float32])
    got = posemb.scaled_dot_product_attention(q, k, v, bias=bias)
    np.testing.assert_allclose(got, torch_sdpa(q, k, v, attn_mask=torch.from_numpy(bias)),
                               **TOL[np.float32])


def test_fully_masked_rows_give_zeros(rng):
    q, k, v = qkv(rng, (2, 5, 4), (2, 6, 4), np.float32)
    mask = np.ones((5, 6), dtype=bool)
    mask[1] = False
    mask[3] = False
    got = posemb.scaled_dot_product_attention(q, k, v, mask=mask)
    assert np.isfinite(got).all()
    np.testing.assert_array_equal(got[:, [1, 3]], 0)
    want = torch_sdpa(q, k, v, attn_mask=torch.from_numpy(mask))
    np.testing.assert_allclose(got, want, **TOL[np.float32])
    got = posemb.scaled_dot_product_attention(q, k, v, mask=posemb.to_additive(mask))
    np.testing.assert_array_equal(got[:, [1, 3]], 0)
    empty = posemb.scaled_dot_product_attention(q, k[:, :0], v[:, :0])
    assert empty.shape == (2, 5, 4) and not empty.any()


def test_large_scores_are_stable():
    q = np.full((1, 2, 4), 300.0, np.float32)
    k = np.full((1, 3, 4), 300.0, np.float32)
    v = np.arange(12, dtype=np.float32).reshape(1, 3, 4)
    got = posemb.scaled_dot_product_attention(q, k, v)
    np.testing.assert_allclose(got, np.broadcast_to(v.mean(axis=1, keepdims=True), (1, 2, 4)),
                               rtol=1e-6)


def test_broadcast_leading_axes(rng):
    q, _, _ = qkv(rng, (2, 4, 5, 8), (1,), np.float64)
    k = rng.standard_normal((1, 4, 7, 8))
    v = rng.standard_normal((1, 4, 7, 3))
    want = torch_sdpa(q, np.broadcast_to(k, (2, 4, 7, 8)).copy(),
                      np.broadcast_to(v, (2, 4, 7, 3)).copy())
    np.testing.assert_allclose(posemb.scaled_dot_product_attention(q, k, v), want, rtol=1e-12)


@pytest.mark.parametrize("call,err,name", [
    (lambda a: posemb.scaled_dot_product_attention(a.astype(int), a, a), TypeError, "q"),
    (lambda a: posemb.scaled_dot_product_attention(a, a[..., :3], a), ValueError, "q and k"),
    (lambda a: posemb.scaled_dot_product_attention(a, a, a[:, :2]), ValueError, "k and v"),
    (lambda a: posemb.scaled_dot_product_attention(a[0, 0, 0], a, a), ValueError, "q"),
    (lambda a: posemb.scaled_dot_product_attention(a, a, a, mask=np.ones((3, 3), bool)),
     ValueError, "mask"),
    (lambda a: posemb.scaled_dot_product_attention(a, a, a, mask=np.ones((4, 4), int)),
     TypeError, "mask"),
    (lambda a: posemb.scaled_dot_product_attention(a, a, a, mask=np.ones((5, 2, 4, 4), bool)),
     ValueError, "mask"),
    (lambda a: posemb.scaled_dot_product_attention(a, a, a, bias=np.ones((3, 4))),
     ValueError, "bias"),
    (lambda a: posemb.scaled_dot_product_attention(a, a, a, bias=np.ones((4, 4), int)),
     TypeError, "bias"),
    (lambda a: posemb.scaled_dot_product_attention(a, a, a, scale=math.inf), ValueError, "scale"),
    (lambda a: posemb.scaled_dot_product_attention(a, a, a, scale="x"), TypeError, "scale"),
])
def test_bad_arguments(call, err, name):
    a = np.ones((2, 3, 4, 4))
    with pytest.raises(err, match=name):
        call(a)


# ---------------------------------------------------------------- the example

def load_example():
    spec = importlib.util.spec_from_file_location("rope_multihead_attention", EXAMPLE)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def torch_rope_mha(x, Wq, Wk, Wv, Wo, num_heads, mask=None, base=10000.0):
    """The same model with PyTorch ops: HF-style rotate_half RoPE, F.sdpa."""
    B, L, D = x.shape
    hd = D // num_heads

    def split(t):
        return t.view(B, L, num_heads, hd).transpose(1, 2)

    def rotate_half(t):
        return torch.cat((-t[..., hd // 2:], t[..., :hd // 2]), dim=-1)

    inv_freq = base ** (-torch.arange(0, hd, 2, dtype=torch.float64) / hd)
    angle = torch.arange(L, dtype=torch.float64)[:, None] * inv_freq[None, :]
    emb = torch.cat((angle, angle), dim=-1)
    cos, sin = emb.cos().to(x.dtype), emb.sin().to(x.dtype)
    q, k, v = split(x @ Wq.T), split(x @ Wk.T), split(x @ Wv.T)
    q = q * cos + rotate_half(q) * sin
    k = k * cos + rotate_half(k) * sin
    out = F.scaled_dot_product_attention(q, k, v, attn_mask=mask, scale=1.0 / math.sqrt(hd))
    return out.transpose(1, 2).reshape(B, L, D) @ Wo.T


@pytest.mark.parametrize("causal", [False, True])
def test_example_rope_multihead_attention_matches_torch(causal):
    ex = load_example()
    rng = np.random.default_rng(7)
    mha = ex.RoPEMultiHeadAttention(128, 4, maxlen=64, rng=rng)
    x = rng.random((3, 20, 128), dtype=np.float32)
    mask = posemb.create_causal_mask(20) if causal else None
    got = mha(x, mask=mask)
    assert got.shape == x.shape and got.dtype == np.float32
    W = [torch.from_numpy(w) for w in (mha.Wq, mha.Wk, mha.Wv, mha.Wo)]
    tmask = None if mask is None else torch.from_numpy(mask)
    want = torch_rope_mha(torch.from_numpy(x), *W, 4, mask=tmask).numpy()
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4)


def test_example_main_runs(capsys):
    load_example().main()
    assert "(32, 20, 512)" in capsys.readouterr().out


def test_example_refuses_indivisible_heads():
    with pytest.raises(ValueError, match="num_heads"):
        load_example().RoPEMultiHeadAttention(10, 3)

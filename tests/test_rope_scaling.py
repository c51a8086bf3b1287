"""RoPE scaling (HF rope_scaling dicts) and rope_config against PyTorch
transcriptions of transformers' ``modeling_rope_utils.py`` (``ROPE_INIT_FUNCTIONS``) and Meta's
``apply_scaling`` (llama3).

The transcriptions below follow HF's compute functions line by line, with the
working dtype a parameter: float64 to check posemb's float64 frequencies to the
last bits, float32 to show that HF's own tables agree to float32 accuracy.
Config dicts are written in the shapes of real checkpoints' config.json.
"""
import math

import numpy as np
import pytest
from _torch import torch

import posemb

def T(a):
    return torch.from_numpy(a)

# ---------------------------------------------------------------- references


def hf_default(dim, base, dtype=torch.float64):
    return 1.0 / (base ** (torch.arange(0, dim, 2, dtype=torch.int64).to(dtype) / dim))


def hf_linear(dim, base, rs, dtype=torch.float64):
    return hf_default(dim, base, dtype) / rs["factor"], 1.0


def hf_dynamic(dim, base, rs, max_pos, seq_len=None, dtype=torch.float64):
    factor = rs["factor"]
    seq_len = max_pos if seq_len is None else max(seq_len, max_pos)
    base = base * ((factor * seq_len / max_pos) - (factor - 1)) ** (dim / (dim - 2))
    return hf_default(dim, base, dtype), 1.0


def hf_yarn(dim, base, rs, max_pos, dtype=torch.float64):
    factor = rs["factor"]
    attention_factor = rs.get("attention_factor")
    mscale, mscale_all_dim = rs.get("mscale"), rs.get("mscale_all_dim")
    orig = rs.get("original_max_position_embeddings") or max_pos

    def get_mscale(scale, mscale=1):
        return 1.0 if scale <= 1 else 0.1 * mscale * math.log(scale) + 1.0

    if attention_factor is None:
        if mscale and mscale_all_dim:
            attention_factor = float(get_mscale(factor, mscale) / get_mscale(factor, mscale_all_dim))
        else:
            attention_factor = get_mscale(factor)
    beta_fast = rs.get("beta_fast") or 32
    beta_slow = rs.get("beta_slow") or 1

    def find_correction_dim(num_rotations):
        return (dim * math.log(orig / (num_rotations * 2 * math.pi))) / (2 * math.log(base))

    low = find_correction_dim(beta_fast)
    high = find_correction_dim(beta_slow)
    if rs.get("truncate", True):
        low, high = math.floor(low), math.ceil(high)
    low, high = max(low, 0), min(high, dim - 1)
    if low == high:
        high += 0.001
    ramp = torch.clamp((torch.arange(dim // 2, dtype=dtype) - low) / (high - low), 0, 1)
    pos_freqs = base ** (torch.arange(0, dim, 2).to(dtype) / dim)
    extrapolation, interpolation = 1.0 / pos_freqs, 1.0 / (factor * pos_freqs)
    ef = 1 - ramp
    return interpolation * (1 - ef) + extrapolation * ef, attention_factor


def hf_longrope(dim, base, rs, max_pos, seq_len=None, dtype=torch.float64):
    factor = rs.get("factor")
    attention_factor = rs.get("attention_factor")
    orig = rs.get("original_max_position_embeddings") or max_pos
    if factor is None:
        factor = max_pos / orig
    if attention_factor is None:
        attention_factor = 1.0 if factor <= 1.0 else math.sqrt(1 + math.log(factor) / math.log(orig))
    ext = rs["long_factor"] if seq_len and seq_len > orig else rs["short_factor"]
    ext = torch.tensor(ext, dtype=dtype)
    shape = torch.arange(0, dim, 2, dtype=torch.int64).to(dtype) / dim
    return 1.0 / (ext * base ** shape), attention_factor


def hf_llama3(dim, base, rs, dtype=torch.float64):
    inv_freq = hf_default(dim, base, dtype)
    factor, low, high = rs["factor"], rs["low_freq_factor"], rs["high_freq_factor"]
    old = rs["original_max_position_embeddings"]
    low_wavelen, high_wavelen = old / low, old / high
    wavelen = 2 * math.pi / inv_freq
    inv_llama = torch.where(wavelen > low_wavelen, inv_freq / factor, inv_freq)
    smooth = (old / wavelen - low) / (high - low)
    smoothed = (1 - smooth) * inv_llama / factor + smooth * inv_llama
    medium = ~(wavelen < high_wavelen) * ~(wavelen > low_wavelen)
    return torch.where(medium, smoothed, inv_llama), 1.0


def hf_params(dim, base, rs, max_pos=None, seq_len=None, dtype=torch.float64):
    kind = (rs or {}).get("rope_type", (rs or {}).get("type", "default"))
    if kind == "default":
        return hf_default(dim, base, dtype), 1.0
    if kind == "linear":
        return hf_linear(dim, base, rs, dtype)
    if kind == "dynamic":
        return hf_dynamic(dim, base, rs, max_pos, seq_len, dtype)
    if kind == "yarn":
        return hf_yarn(dim, base, rs, max_pos, dtype)
    if kind == "longrope":
        return hf_longrope(dim, base, rs, max_pos, seq_len, dtype)
    return hf_llama3(dim, base, rs, dtype)


def hf_rotary_forward(inv_freq, attention_scaling, position_ids, dtype=torch.float64):
    """HF *RotaryEmbedding.forward: (batch, seq) position_ids -> (batch, seq, dim)."""
    inv = inv_freq[None, :, None].to(dtype).expand(position_ids.shape[0], -1, 1)
    freqs = (inv @ position_ids[:, None, :].to(dtype)).transpose(1, 2)
    emb = torch.cat((freqs, freqs), dim=-1)
    return emb.cos() * attention_scaling, emb.sin() * attention_scaling


def rotate_half(x):
    h = x.shape[-1] // 2
    return torch.cat((-x[..., h:], x[..., :h]), dim=-1)


def hf_apply_rotary_pos_emb(q, k, cos, sin, unsqueeze_dim=1):
    cos, sin = cos.unsqueeze(unsqueeze_dim), sin.unsqueeze(unsqueeze_dim)
    return q * cos + rotate_half(q) * sin, k * cos + rotate_half(k) * sin


def truth_tables(positions, inv, attn, dtype):
    """float64 angles from posemb-independent float64 frequencies, rounded once."""
    ang = np.asarray(positions, np.float64)[..., None] * inv
    c = np.concatenate([np.cos(ang)] * 2, -1) * attn
    s = np.concatenate([np.sin(ang)] * 2, -1) * attn
    return c.astype(dtype), s.astype(dtype)


LLAMA3 = {"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
          "original_max_position_embeddings": 8192}
PHI3_SHORT = [1.05, 1.05, 1.05, 1.1, 1.1, 1.1, 1.25, 1.25, 1.4, 1.45, 1.55, 1.85, 1.9, 1.9,
              1.95, 2.0, 2.05, 2.1, 2.1, 2.2, 2.35, 2.35, 2.4, 2.45, 2.5, 2.55, 2.6, 2.7, 2.75,
              2.75, 2.8, 2.85, 2.9, 2.95, 3.0, 3.0, 3.0, 3.05, 3.05, 3.05, 3.1, 3.1, 3.1, 3.15,
              3.2, 3.3, 3.35, 3.4]
PHI3_LONG = [1.08, 1.11, 1.14, 1.34, 1.59, 1.6, 1.62, 2.62, 3.23, 3.28, 4.58, 7.9, 12.4, 16.0,
             20.9, 28.4, 33.2, 38.9, 43.3, 46.1, 49.8, 51.6, 52.7, 53.8, 54.9, 57.1, 58.3,
             59.5, 60.4, 61.2, 61.9, 62.1, 62.3, 62.4, 62.8, 62.9, 63.0, 63.4, 63.6, 63.8,
             64.0, 64.1, 64.5, 64.8, 64.8, 64.9, 65.0, 65.2]

# (dim, base, scaling, max_position_embeddings, original context)
CASES = {
    "linear2": (64, 10000.0, {"rope_type": "linear", "factor": 2.0}, 4096, 4096),
    "linear4": (128, 10000.0, {"type": "linear", "factor": 4.0}, 4096, 4096),
    "dynamic2": (64, 10000.0, {"rope_type": "dynamic", "factor": 2.0}, 2048, 2048),
    "dynamic8": (128, 1e6, {"type": "dynamic", "factor": 8.0}, 4096, 4096),
    "llama3": (128, 500000.0, LLAMA3, 131072, 8192),
    "llama3_f32": (64, 500000.0, dict(LLAMA3, factor=32.0, high_freq_factor=8.0), 131072, 8192),
    "yarn4": (128, 1e6, {"rope_type": "yarn", "factor": 4.0,
                         "original_max_position_embeddings": 32768}, 131072, 32768),
    "yarn_deepseek": (64, 10000.0, {"type": "yarn", "factor": 40, "beta_fast": 32, "beta_slow": 1,
                                    "mscale": 1.0, "mscale_all_dim": 0.707,
                                    "original_max_position_embeddings": 4096}, 163840, 4096),
    "yarn_notrunc": (64, 150000.0, {"rope_type": "yarn", "factor": 32.0, "beta_fast": 32.0,
                                    "beta_slow": 1.0, "truncate": False,
                                    "original_max_position_embeddings": 4096}, 131072, 4096),
    "yarn_attn": (32, 10000.0, {"rope_type": "yarn", "factor": 16.0, "attention_factor": 0.9},
                  2048, 2048),
    "longrope": (96, 10000.0, {"type": "longrope", "short_factor": PHI3_SHORT,
                               "long_factor": PHI3_LONG,
                               "original_max_position_embeddings": 4096}, 131072, 4096),
    "longrope_factor": (96, 10000.0, {"rope_type": "longrope", "short_factor": PHI3_SHORT,
                                      "long_factor": PHI3_LONG, "factor": 8.0}, 4096, 4096),
}


def _case(name):
    dim, base, rs, max_pos, orig = CASES[name]
    return dim, base, rs, max_pos, orig

# ---------------------------------------------------------------- frequencies


@pytest.mark.parametrize("name", sorted(CASES))
def test_inv_freq_matches_hf_formula(name):
    dim, base, rs, max_pos, orig = _case(name)
    for seq_len in (None, orig, orig + 1, 3 * orig):
        inv, attn = posemb.rope_scaling_parameters(dim, base, rs, max_position_embeddings=max_pos,
                                                   seq_len=seq_len)
        ref, ref_attn = hf_params(dim, base, rs, max_pos, seq_len)
        assert inv.dtype == np.float64 and inv.shape == (dim // 2,)
        np.testing.assert_allclose(inv, ref.numpy(), rtol=4e-15, atol=0)
        assert attn == pytest.approx(ref_attn, rel=1e-15)
        np.testing.assert_array_equal(
            posemb.rope_inv_freq(dim, base, scaling=rs, max_position_embeddings=max_pos,
                                 seq_len=seq_len), inv)
        # HF's own float32 computation agrees to float32 accuracy
        ref32, _ = hf_params(dim, base, rs, max_pos, seq_len, dtype=torch.float32)
        np.testing.assert_allclose(inv, ref32.double().numpy(), rtol=3e-6)


@pytest.mark.parametrize("name", sorted(CASES))
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_cos_sin_beyond_original_context(name, dtype):
    """Tables at positions up to 4x the original context, attention factor included."""
    dim, base, rs, max_pos, orig = _case(name)
    pos = np.concatenate([np.arange(0, 64), np.arange(orig - 64, orig + 64),
                          np.arange(4 * orig - 64, 4 * orig)])
    cos, sin = posemb.rope_cos_sin(pos, dim, base, scaling=rs, max_position_embeddings=max_pos,
                                   dtype=dtype)
    # HF's dynamic_rope_update uses seq_len = max(position_ids) + 1
    inv, attn = hf_params(dim, base, rs, max_pos, seq_len=int(pos.max()) + 1)
    want_c, want_s = truth_tables(pos, inv.numpy(), attn, np.float64)
    tol = 2.5e-7 * max(attn, 1.0) if dtype == np.float32 else 1e-9
    assert cos.dtype == dtype and cos.shape == (pos.size, dim)
    np.testing.assert_allclose(cos, want_c, rtol=0, atol=tol)
    np.testing.assert_allclose(sin, want_s, rtol=0, atol=tol)
    # HF's forward (float64 transcription) gives the same tables
    hc, hs = hf_rotary_forward(inv, attn, T(pos)[None])
    np.testing.assert_allclose(cos, hc[0].numpy(), rtol=0, atol=tol)
    np.testing.assert_allclose(sin, hs[0].numpy(), rtol=0, atol=tol)


def test_rotated_q_k_equal_hf_with_same_tables():
    """Given posemb's scaled tables, the rotation equals HF's formula bit for bit."""
    rng = np.random.default_rng(1)
    dim, base, rs, max_pos, orig = _case("yarn4")
    pos = np.stack([np.arange(orig, orig + 9), np.arange(5 * orig, 5 * orig + 9)])
    cos, sin = posemb.rope_cos_sin(pos, dim, base, scaling=rs, max_position_embeddings=max_pos)
    q = rng.standard_normal((2, 4, 9, dim), dtype=np.float32)
    k = rng.standard_normal((2, 1, 9, dim), dtype=np.float32)
    qe, ke = posemb.apply_rotary_pos_emb(q, k, cos, sin)
    rq, rk = hf_apply_rotary_pos_emb(T(q), T(k), T(cos), T(sin))
    np.testing.assert_array_equal(qe, rq.numpy())
    np.testing.assert_array_equal(ke, rk.numpy())


def test_yarn_attention_factor_multiplies_cos_and_sin():
    rs = {"rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": 1024}
    cos, sin = posemb.rope_cos_sin(np.arange(10), 32, scaling=rs, dtype=np.float64)
    m = 0.1 * math.log(4.0) + 1.0
    np.testing.assert_allclose(cos ** 2 + sin ** 2, m * m, rtol=1e-14)
    # DeepSeek's mscale == mscale_all_dim makes the factor exactly 1
    rs2 = dict(rs, mscale=1.0, mscale_all_dim=1.0)
    assert posemb.rope_scaling_parameters(32, 10000.0, rs2)[1] == 1.0
    # no original_max_position_embeddings: max_position_embeddings is the original length
    a = posemb.rope_scaling_parameters(32, 10000.0, {"type": "yarn", "factor": 4.0},
                                       max_position_embeddings=1024)
    b = posemb.rope_scaling_parameters(32, 10000.0, rs)
    np.testing.assert_array_equal(a[0], b[0])


def test_dynamic_uses_current_length():
    dim, base, rs, max_pos, _ = _case("dynamic2")
    plain = posemb.rope_inv_freq(dim, base)
    inside = np.arange(max_pos)
    np.testing.assert_array_equal(
        posemb.rope_cos_sin(inside, dim, base, scaling=rs, max_position_embeddings=max_pos)[0],
        posemb.rope_cos_sin(inside, dim, base)[0])
    np.testing.assert_array_equal(
        posemb.rope_inv_freq(dim, base, scaling=rs, max_position_embeddings=max_pos), plain)
    grown = posemb.rope_inv_freq(dim, base, scaling=rs, max_position_embeddings=max_pos,
                                 seq_len=3 * max_pos)
    assert grown[0] == plain[0] and np.all(grown[1:] < plain[1:])
    # the same positions inside a longer call use the grown base (HF semantics)
    c_long, _ = posemb.rope_cos_sin(np.arange(3 * max_pos), dim, base, scaling=rs,
                                    max_position_embeddings=max_pos)
    c_seq, _ = posemb.rope_cos_sin(np.arange(10), dim, base, scaling=rs,
                                   max_position_embeddings=max_pos, seq_len=3 * max_pos)
    np.testing.assert_array_equal(c_long[:10], c_seq)


@pytest.mark.parametrize("interleaved", [False, True])
def test_rope_class_dynamic_and_longrope_regimes(interleaved):
    rng = np.random.default_rng(2)
    for name in ("dynamic2", "longrope", "llama3", "yarn4"):
        dim, base, rs, max_pos, orig = _case(name)
        rope = posemb.RoPE(dim, 64, base=base, scaling=rs, max_position_embeddings=max_pos,
                           interleaved=interleaved, dtype=np.float64)
        x = rng.standard_normal((2, 8, dim))
        for offset in (0, orig - 8, orig - 4, 2 * orig):
            pos = np.arange(offset, offset + 8)
            c, s = posemb.rope_cos_sin(pos, dim, base, scaling=rs, max_position_embeddings=max_pos,
                                       interleaved=interleaved, dtype=np.float64)
            want = posemb.apply_rope(x, c, s, interleaved=interleaved)
            np.testing.assert_array_equal(rope(x, offset=offset), want)
            np.testing.assert_array_equal(rope(x, positions=pos), want)
            rc, rs_ = rope.cos_sin(offset=offset, seq_len=8, dtype=np.float64)
            np.testing.assert_array_equal(rc, c)
            np.testing.assert_array_equal(rs_, s)
    # longrope switches to the long factors exactly past the original context
    dim, base, rs, max_pos, orig = _case("longrope")
    rope = posemb.RoPE(dim, 16, base=base, scaling=rs, max_position_embeddings=max_pos,
                       dtype=np.float64)
    short_inv, attn = hf_longrope(dim, base, rs, max_pos, seq_len=orig)
    long_inv, _ = hf_longrope(dim, base, rs, max_pos, seq_len=orig + 1)
    c_in, _ = rope.cos_sin(np.array([orig - 1]))
    c_out, _ = rope.cos_sin(np.array([orig - 1, orig]))
    np.testing.assert_allclose(c_in[0], truth_tables([orig - 1], short_inv.numpy(), attn, np.float64)[0][0],
                               atol=1e-12)
    np.testing.assert_allclose(c_out[0], truth_tables([orig - 1], long_inv.numpy(), attn, np.float64)[0][0],
                               atol=1e-12)
    assert rope.attention_factor == pytest.approx(math.sqrt(1 + math.log(32) / math.log(4096)))


def test_scaling_float16_tables_rounded_once():
    dim, base, rs, max_pos, orig = _case("llama3")
    pos = np.arange(orig, orig + 50)
    c16, s16 = posemb.rope_cos_sin(pos, dim, base, scaling=rs, dtype=np.float16)
    c64, s64 = posemb.rope_cos_sin(pos, dim, base, scaling=rs, dtype=np.float64)
    np.testing.assert_array_equal(c16, c64.astype(np.float16))
    np.testing.assert_array_equal(s16, s64.astype(np.float16))

# ---------------------------------------------------------------- rope_config

LLAMA31_8B = {
    "architectures": ["LlamaForCausalLM"], "model_type": "llama",
    "hidden_size": 4096, "num_attention_heads": 32, "num_key_value_heads": 8,
    "max_position_embeddings": 131072, "rope_theta": 500000.0,
    "rope_scaling": {"factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
                     "original_max_position_embeddings": 8192, "rope_type": "llama3"},
}
QWEN2_7B = {
    "architectures": ["Qwen2ForCausalLM"], "model_type": "qwen2",
    "hidden_size": 3584, "num_attention_heads": 28, "num_key_value_heads": 4,
    "max_position_embeddings": 32768, "rope_theta": 1000000.0, "rope_scaling": None,
}
QWEN25_YARN = dict(QWEN2_7B, max_position_embeddings=131072,
                   rope_scaling={"factor": 4.0, "original_max_position_embeddings": 32768,
                                 "type": "yarn"})
PHI3_MINI_128K = {
    "architectures": ["Phi3ForCausalLM"], "model_type": "phi3",
    "hidden_size": 3072, "num_attention_heads": 32, "num_key_value_heads": 32,
    "max_position_embeddings": 131072, "original_max_position_embeddings": 4096,
    "rope_theta": 10000.0,
    "rope_scaling": {"type": "longrope", "short_factor": PHI3_SHORT, "long_factor": PHI3_LONG},
}
DEEPSEEK_V3 = {
    "architectures": ["DeepseekV3ForCausalLM"], "model_type": "deepseek_v3",
    "hidden_size": 7168, "num_attention_heads": 128, "qk_nope_head_dim": 128,
    "qk_rope_head_dim": 64, "v_head_dim": 128, "max_position_embeddings": 163840,
    "rope_theta": 10000, "rope_interleave": True,
    "rope_scaling": {"beta_fast": 32, "beta_slow": 1, "factor": 40, "mscale": 1.0,
                     "mscale_all_dim": 1.0, "original_max_position_embeddings": 4096,
                     "type": "yarn"},
}
PYTHIA_70M = {
    "architectures": ["GPTNeoXForCausalLM"], "model_type": "gpt_neox",
    "hidden_size": 512, "num_attention_heads": 8, "rotary_pct": 0.25,
    "rotary_emb_base": 10000, "max_position_embeddings": 2048,
}
PHI2 = {  # partial_rotary_factor spelled the HF way
    "model_type": "phi", "hidden_size": 2560, "num_attention_heads": 32,
    "partial_rotary_factor": 0.4, "rope_theta": 10000.0, "max_position_embeddings": 2048,
}

# what HF's config classes hand to the rope init functions, written out per model:
# (rotary dim, theta, rope_scaling with HF's standardisation, max_position_embeddings, head_dim)
HF_VIEW = {
    "llama31": (LLAMA31_8B, 128, 500000.0, LLAMA31_8B["rope_scaling"], 131072, 128),
    "qwen2": (QWEN2_7B, 128, 1e6, None, 32768, 128),
    "qwen25_yarn": (QWEN25_YARN, 128, 1e6, QWEN25_YARN["rope_scaling"], 131072, 128),
    # Phi3 moves the top-level original_max_position_embeddings into rope_scaling
    "phi3": (PHI3_MINI_128K, 96, 10000.0,
             dict(PHI3_MINI_128K["rope_scaling"], original_max_position_embeddings=4096),
             131072, 96),
    # DeepSeek-V3: head_dim = qk_rope_head_dim
    "deepseek_v3": (DEEPSEEK_V3, 64, 10000.0, DEEPSEEK_V3["rope_scaling"], 163840, 64),
    # GPTNeoXConfig: partial_rotary_factor = rotary_pct, rope_theta = rotary_emb_base
    "pythia": (PYTHIA_70M, 16, 10000.0, None, 2048, 64),
    "phi2": (PHI2, 32, 10000.0, None, 2048, 80),
}


@pytest.mark.parametrize("name", sorted(HF_VIEW))
def test_rope_config_reproduces_model(name):
    config, dim, theta, rs, max_pos, head_dim = HF_VIEW[name]
    rope = posemb.rope_config(config, dtype=np.float64)
    assert rope.head_size == head_dim and rope.rotary_dim == dim
    assert rope.base == theta
    orig = (rs or {}).get("original_max_position_embeddings", max_pos)
    # a prefill inside the original context and a batch of sequences far past it
    for position_ids in (np.arange(16)[None], np.stack([np.arange(2 * orig, 2 * orig + 16),
                                                       np.arange(orig - 8, orig + 8)])):
        inv, attn = hf_params(dim, theta, rs, max_pos, seq_len=int(position_ids.max()) + 1)
        hc, hs = hf_rotary_forward(inv, attn, T(position_ids))
        cos, sin = rope.cos_sin(position_ids)
        # interleaved tables hold each value twice in a row; HF's, once per half
        perm = np.concatenate([np.arange(0, dim, 2), np.arange(1, dim, 2)])
        if rope.interleaved:
            cos, sin = cos[..., perm], sin[..., perm]
        np.testing.assert_allclose(cos, hc.numpy(), rtol=0, atol=1e-9)
        np.testing.assert_allclose(sin, hs.numpy(), rtol=0, atol=1e-9)
        # rotated q and k (float32 model activations, GQA head counts)
        rng = np.random.default_rng(3)
        b, s = position_ids.shape
        q = rng.standard_normal((b, 4, s, head_dim), dtype=np.float32)
        k = rng.standard_normal((b, 2, s, head_dim), dtype=np.float32)
        qr, kr = rope.apply_qk(q, k, position_ids[:, None, :])
        c32, s32 = hc.float(), hs.float()
        if rope.interleaved:
            # HF's apply_rotary_pos_emb_interleave de-interleaves q/k, then rotate_half
            def deint(t):
                return t.view(*t.shape[:-1], t.shape[-1] // 2, 2).transpose(-1, -2).reshape(t.shape)
            rq, rk = hf_apply_rotary_pos_emb(deint(T(q)), deint(T(k)), c32, s32)
            qr, kr = qr[..., perm], kr[..., perm]
        else:
            qx, qp = T(q)[..., :dim], T(q)[..., dim:]
            kx, kp = T(k)[..., :dim], T(k)[..., dim:]
            rq, rk = hf_apply_rotary_pos_emb(qx, kx, c32, s32)
            rq, rk = torch.cat((rq, qp), -1), torch.cat((rk, kp), -1)
        np.testing.assert_allclose(qr, rq.numpy(), rtol=0, atol=3e-6 * max(attn, 1))
        np.testing.assert_allclose(kr, rk.numpy(), rtol=0, atol=3e-6 * max(attn, 1))


def test_rope_config_details():
    phi3 = posemb.rope_config(PHI3_MINI_128K)
    assert phi3.scaling["original_max_position_embeddings"] == 4096
    assert phi3.max_position_embeddings == 131072
    assert phi3.attention_factor == pytest.approx(math.sqrt(1 + math.log(32) / math.log(4096)))
    assert posemb.rope_config(DEEPSEEK_V3).interleaved
    assert posemb.rope_config(DEEPSEEK_V3).attention_factor == 1.0
    assert posemb.rope_config(QWEN25_YARN).attention_factor == pytest.approx(0.1 * math.log(4) + 1)
    assert posemb.rope_config(LLAMA31_8B).cos_cached.shape == (4096, 128)
    assert posemb.rope_config(LLAMA31_8B, seq_len=100).seq_len == 100
    # transformers v5 writes rope_parameters, with the theta inside
    v5 = {"hidden_size": 256, "num_attention_heads": 4, "max_position_embeddings": 1024,
          "rope_parameters": {"rope_type": "linear", "factor": 2.0, "rope_theta": 5000.0}}
    r = posemb.rope_config(v5)
    assert r.base == 5000.0 and r.scaling["rope_type"] == "linear"
    np.testing.assert_array_equal(r.inv_freq, posemb.rope_inv_freq(64, 5000.0) / 2.0)
    # multimodal: rotary settings in text_config; Qwen2-VL's "mrope" is default RoPE
    vl = {"model_type": "qwen2_vl", "vision_config": {"depth": 32},
          "text_config": {"hidden_size": 1536, "num_attention_heads": 12, "rope_theta": 1e6,
                          "max_position_embeddings": 32768,
                          "rope_scaling": {"type": "mrope", "mrope_section": [16, 24, 24]}}}
    r = posemb.rope_config(vl)
    assert r.head_size == 128 and r.scaling["rope_type"] == "default"
    assert r.scaling["mrope_section"] == [16, 24, 24]
    # GPT-J: rotary_dim and interleaved pairs
    gptj = {"model_type": "gptj", "n_embd": 4096, "n_head": 16, "rotary_dim": 64,
            "n_positions": 2048}
    r = posemb.rope_config(gptj)
    assert (r.head_size, r.rotary_dim, r.interleaved) == (256, 64, True)

# ---------------------------------------------------------------- bad input


@pytest.mark.parametrize("scaling, err, match", [
    ("linear", TypeError, "scaling"),
    ({"factor": 2.0}, ValueError, "rope_type"),
    ({"rope_type": "ntk-by-parts", "factor": 2.0}, ValueError, "rope_type.*'llama3'"),
    ({"rope_type": 3}, TypeError, "rope_type"),
    ({"rope_type": "linear"}, ValueError, "factor"),
    ({"type": "llama3", "factor": 8.0}, ValueError, "low_freq_factor"),
    ({"rope_type": "longrope", "short_factor": [1.0] * 4}, ValueError, "long_factor"),
    ({"rope_type": "linear", "factor": -2.0}, ValueError, "factor"),
    ({"rope_type": "linear", "factor": "2"}, TypeError, "factor"),
    ({"rope_type": "linear", "factor": [2.0]}, TypeError, "factor"),
    ({"rope_type": "linear", "factor": True}, TypeError, "factor"),
    ({"rope_type": "yarn", "factor": float("nan")}, ValueError, "factor"),
    (dict(LLAMA3, high_freq_factor=0.5), ValueError, "high_freq_factor"),
    (dict(LLAMA3, original_max_position_embeddings=0), ValueError, "original_max_position_embeddings"),
    ({"rope_type": "longrope", "short_factor": [1.0] * 3, "long_factor": [1.0] * 4,
      "original_max_position_embeddings": 64}, ValueError, "short_factor"),
    ({"rope_type": "longrope", "short_factor": [1.0] * 4, "long_factor": [1.0, 0, 1, 1],
      "original_max_position_embeddings": 64}, ValueError, "long_factor"),
    ({"rope_type": "longrope", "short_factor": ["a"] * 4, "long_factor": [1.0] * 4,
      "original_max_position_embeddings": 64}, TypeError, "short_factor"),
    ({"rope_type": "yarn", "factor": 4.0}, ValueError, "max_position_embeddings"),
    ({"rope_type": "dynamic", "factor": 4.0}, ValueError, "max_position_embeddings"),
])
def test_bad_scaling(scaling, err, match):
    with pytest.raises(err, match=match):
        posemb.rope_scaling_parameters(8, 10000.0, scaling)
    with pytest.raises(err, match=match):
        posemb.rope_cos_sin(np.arange(4), 8, scaling=scaling)
    with pytest.raises(err, match=match):
        posemb.RoPE(8, 4, scaling=scaling)


def test_bad_scaling_arguments():
    with pytest.raises(ValueError, match="max_position_embeddings"):
        posemb.rope_inv_freq(8, scaling={"rope_type": "linear", "factor": 2.0},
                             max_position_embeddings=0)
    with pytest.raises(TypeError, match="max_position_embeddings"):
        posemb.RoPE(8, 4, max_position_embeddings=2.5)
    with pytest.raises(ValueError, match="seq_len"):
        posemb.rope_inv_freq(8, seq_len=-1)
    with pytest.raises(ValueError, match="dim"):
        posemb.rope_inv_freq(2, scaling={"rope_type": "dynamic", "factor": 2.0},
                             max_position_embeddings=8)
    assert posemb.rope_scaling_parameters(7, 10000.0, None)[0].shape == (3,)   # total


@pytest.mark.parametrize("config, err, match", [
    ([1, 2], TypeError, "config"),
    ({"rope_theta": 10000.0}, ValueError, "head_dim"),
    ({"head_dim": 64, "partial_rotary_factor": 0.3}, ValueError, "partial_rotary_factor"),
    ({"head_dim": 64, "partial_rotary_factor": 1.5}, ValueError, "partial_rotary_factor"),
    ({"head_dim": 64, "rope_theta": -1.0}, ValueError, "rope_theta"),
    ({"head_dim": 64, "rope_scaling": "linear"}, TypeError, "rope_scaling"),
    ({"head_dim": 64, "rope_scaling": {"rope_type": "su"}}, ValueError, "rope_type"),
    ({"head_dim": 64, "rope_scaling": {"rope_type": "dynamic", "factor": 2.0}}, ValueError,
     "max_position_embeddings"),
    ({"hidden_size": 64, "num_attention_heads": 0}, ValueError, "num_attention_heads"),
    ({"head_dim": 64, "max_position_embeddings": -5}, ValueError, "max_position_embeddings"),
])
def test_bad_config(config, err, match):
    with pytest.raises(err, match=match):
        posemb.rope_config(config)

"""Conformance with the real transformers, model family by model family.

For each family a tiny randomly initialised model (2 layers, hidden 64) is
built from a dict written from the family's published ``config.json`` (sizes
shrunk, every rotary key kept; no hub downloads).  Compared with
transformers' own code:

* the rotary module's ``(cos, sin)`` against posemb.torch's
  ``RotaryEmbedding(config)`` -- bit-equal with ``precision="float32"``, within
  float32 rounding with the default exact tables;
* the family's apply function against posemb's, on random inputs: bit-equal;
* the model's logits and every parameter's gradient with posemb swapped in
  (the rotary module replaced, the modeling module's apply function
  monkeypatched; T5's ``compute_bias``, BLOOM's and MPT's ALiBi builders for
  the relative-bias families): bit-equal with ``precision="float32"``.

Run ``python tests/test_conformance.py`` to print the measured differences.
"""
from __future__ import annotations

import contextlib
import functools
import importlib
import math

import numpy as np
import pytest

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

import posemb  # noqa: E402
import posemb.torch as pt  # noqa: E402

TINY = {"hidden_size": 64, "intermediate_size": 128, "num_hidden_layers": 2,
        "num_attention_heads": 4, "num_key_value_heads": 2, "vocab_size": 128}


def _factors(n: int, top: float) -> list[float]:
    return [float(x) for x in np.round(np.linspace(1.0, top, n), 4)]


# name -> (config.json as a dict, modeling module, model class, apply function names)
FAMILIES: dict[str, dict] = {
    # meta-llama/Llama-2-7b-hf
    "llama2": dict(TINY, model_type="llama", architectures=["LlamaForCausalLM"],
                   max_position_embeddings=4096, rms_norm_eps=1e-5, rope_scaling=None,
                   num_key_value_heads=4),
    # meta-llama/Llama-3.1-8B
    "llama3.1": dict(TINY, model_type="llama", architectures=["LlamaForCausalLM"],
                     max_position_embeddings=131072, rope_theta=500000.0,
                     rope_scaling={"factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
                                   "original_max_position_embeddings": 8192,
                                   "rope_type": "llama3"}),
    # meta-llama/Llama-3.2-1B
    "llama3.2": dict(TINY, model_type="llama", architectures=["LlamaForCausalLM"], head_dim=16,
                     max_position_embeddings=131072, rope_theta=500000.0,
                     rope_scaling={"factor": 32.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
                                   "original_max_position_embeddings": 8192,
                                   "rope_type": "llama3"}),
    # Qwen/Qwen2-7B
    "qwen2": dict(TINY, model_type="qwen2", architectures=["Qwen2ForCausalLM"],
                  max_position_embeddings=32768, rope_theta=1000000.0, sliding_window=131072,
                  use_sliding_window=False),
    # Qwen/Qwen2-VL-7B-Instruct (text part; mrope_section [16, 24, 24] of 64 -> [2, 3, 3] of 8)
    "qwen2_vl": dict(TINY, model_type="qwen2_vl_text", max_position_embeddings=32768,
                     rope_theta=1000000.0,
                     rope_scaling={"type": "mrope", "mrope_section": [2, 3, 3]}),
    # Qwen/Qwen3-8B
    "qwen3": dict(TINY, model_type="qwen3", architectures=["Qwen3ForCausalLM"], head_dim=16,
                  max_position_embeddings=40960, rope_theta=1000000.0, rope_scaling=None),
    # Qwen/Qwen3-8B with the YaRN block of its model card
    "qwen3-yarn": dict(TINY, model_type="qwen3", head_dim=16, max_position_embeddings=131072,
                       rope_theta=1000000.0,
                       rope_scaling={"rope_type": "yarn", "factor": 4.0,
                                     "original_max_position_embeddings": 32768}),
    # Qwen/Qwen3-VL-8B-Instruct text_config (interleaved M-RoPE)
    "qwen3_vl": dict(TINY, model_type="qwen3_vl_text", head_dim=16,
                     max_position_embeddings=262144, rope_theta=5000000.0,
                     rope_scaling={"mrope_interleaved": True, "mrope_section": [2, 3, 3],
                                   "rope_type": "default"}),
    # microsoft/Phi-3-mini-128k-instruct
    "phi3": dict(TINY, model_type="phi3", architectures=["Phi3ForCausalLM"],
                 max_position_embeddings=131072, original_max_position_embeddings=4096,
                 rope_theta=10000.0, num_key_value_heads=4,
                 rope_scaling={"type": "longrope", "short_factor": _factors(8, 1.3),
                               "long_factor": _factors(8, 30.0)}),
    # microsoft/Phi-4-mini-instruct (partial_rotary_factor 0.75)
    "phi4-mini": dict(TINY, model_type="phi3", architectures=["Phi3ForCausalLM"],
                      max_position_embeddings=131072, original_max_position_embeddings=4096,
                      partial_rotary_factor=0.75, rope_theta=10000.0,
                      rope_scaling={"type": "longrope", "short_factor": _factors(6, 1.1),
                                    "long_factor": _factors(6, 40.0)}),
    # deepseek-ai/DeepSeek-V3 (no rope_interleave key: the config class defaults it to true)
    "deepseek_v3": dict(TINY, model_type="deepseek_v3", architectures=["DeepseekV3ForCausalLM"],
                        num_key_value_heads=4,
                        q_lora_rank=32, kv_lora_rank=16, qk_nope_head_dim=8, qk_rope_head_dim=8,
                        v_head_dim=8, n_routed_experts=4, n_shared_experts=1,
                        num_experts_per_tok=2, n_group=2, topk_group=1, first_k_dense_replace=1,
                        moe_intermediate_size=32, max_position_embeddings=163840,
                        rope_theta=10000.0,
                        rope_scaling={"beta_fast": 32, "beta_slow": 1, "factor": 40,
                                      "mscale": 1.0, "mscale_all_dim": 1.0,
                                      "original_max_position_embeddings": 4096, "type": "yarn"}),
    # deepseek-ai/DeepSeek-V2-Lite (complex freqs_cis, interleaved pairs)
    "deepseek_v2": dict(TINY, model_type="deepseek_v2", architectures=["DeepseekV2ForCausalLM"],
                        num_key_value_heads=4, q_lora_rank=None, kv_lora_rank=16,
                        qk_nope_head_dim=8, qk_rope_head_dim=8, v_head_dim=8, n_routed_experts=4,
                        n_shared_experts=1, num_experts_per_tok=2, first_k_dense_replace=1,
                        moe_intermediate_size=32, n_group=2, topk_group=1,
                        max_position_embeddings=163840, rope_theta=10000.0,
                        rope_scaling={"beta_fast": 32, "beta_slow": 1, "factor": 40,
                                      "mscale": 0.707, "mscale_all_dim": 0.707,
                                      "original_max_position_embeddings": 4096, "type": "yarn"}),
    # meta-llama/Llama-4-Scout-17B-16E text_config (complex freqs_cis; high == low freq factor)
    "llama4": dict(TINY, model_type="llama4_text", architectures=["Llama4ForCausalLM"],
                   head_dim=16, intermediate_size_mlp=128, rope_theta=500000.0,
                   max_position_embeddings=10485760, num_local_experts=2, num_experts_per_tok=1,
                   interleave_moe_layer_step=1, no_rope_layers=[1, 1], attention_chunk_size=8192,
                   rope_scaling={"factor": 16.0, "high_freq_factor": 1.0, "low_freq_factor": 1.0,
                                 "original_max_position_embeddings": 8192,
                                 "rope_type": "llama3"}),
    # EleutherAI/pythia-70m
    "gpt_neox": {"model_type": "gpt_neox", "architectures": ["GPTNeoXForCausalLM"],
                 "hidden_size": 64, "intermediate_size": 128, "num_attention_heads": 4,
                 "num_hidden_layers": 2, "vocab_size": 128, "max_position_embeddings": 2048,
                 "rotary_emb_base": 10000, "rotary_pct": 0.25, "use_parallel_residual": True},
    # EleutherAI/gpt-j-6b (rotary_dim 64 of head 256 -> 8 of 16)
    "gptj": {"model_type": "gptj", "architectures": ["GPTJForCausalLM"], "n_embd": 64,
             "n_head": 4, "n_layer": 2, "n_positions": 2048, "rotary_dim": 8, "vocab_size": 128},
    # Salesforce/codegen-350M-mono
    "codegen": {"model_type": "codegen", "architectures": ["CodeGenForCausalLM"], "n_embd": 64,
                "n_head": 4, "n_layer": 2, "n_ctx": 2048, "n_positions": 2048, "rotary_dim": 8,
                "vocab_size": 128},
    # CohereForAI/c4ai-command-r-v01
    "cohere": dict(TINY, model_type="cohere", architectures=["CohereForCausalLM"],
                   max_position_embeddings=8192, rope_theta=8000000.0, logit_scale=0.0625,
                   use_qk_norm=False),
    # THUDM/GLM-4-9B-0414
    "glm4": dict(TINY, model_type="glm4", architectures=["Glm4ForCausalLM"], head_dim=16,
                 partial_rotary_factor=0.5, max_position_embeddings=32768, rope_theta=10000.0),
    # google/gemma-2b
    "gemma": dict(TINY, model_type="gemma", architectures=["GemmaForCausalLM"], head_dim=16,
                  max_position_embeddings=8192, rope_theta=10000.0, num_key_value_heads=1),
    # google/gemma-2-2b
    "gemma2": dict(TINY, model_type="gemma2", architectures=["Gemma2ForCausalLM"], head_dim=16,
                   max_position_embeddings=8192, rope_theta=10000.0, sliding_window=4,
                   query_pre_attn_scalar=16, attn_logit_softcapping=50.0,
                   final_logit_softcapping=30.0),
    # google/gemma-3-4b-it text_config (local base on sliding layers, linear 8 on global ones)
    "gemma3": dict(TINY, model_type="gemma3_text", architectures=["Gemma3ForCausalLM"],
                   head_dim=16, max_position_embeddings=131072, rope_theta=1000000.0,
                   rope_local_base_freq=10000.0, sliding_window=4, sliding_window_pattern=2,
                   query_pre_attn_scalar=16,
                   rope_scaling={"factor": 8.0, "rope_type": "linear"}),
    # google-t5/t5-small
    "t5": {"model_type": "t5", "architectures": ["T5ForConditionalGeneration"], "d_model": 64,
           "d_kv": 16, "d_ff": 128, "num_heads": 4, "num_layers": 2, "vocab_size": 128,
           "relative_attention_num_buckets": 32, "relative_attention_max_distance": 128},
    # bigscience/bloom-560m
    "bloom": {"model_type": "bloom", "architectures": ["BloomForCausalLM"], "hidden_size": 64,
              "n_head": 4, "n_layer": 2, "vocab_size": 128},
    # mosaicml/mpt-7b
    "mpt": {"model_type": "mpt", "architectures": ["MPTForCausalLM"], "d_model": 64,
            "n_heads": 4, "n_layers": 2, "max_seq_len": 2048, "vocab_size": 128,
            "attn_config": {"alibi": True, "alibi_bias_max": 8}},
}

MODULES = {"llama": "llama", "llama4_text": "llama4", "deepseek_v2": "deepseek_v2", "qwen2": "qwen2", "qwen2_vl_text": "qwen2_vl", "qwen3": "qwen3",
           "qwen3_vl_text": "qwen3_vl", "phi3": "phi3", "deepseek_v3": "deepseek_v3",
           "gpt_neox": "gpt_neox", "gptj": "gptj", "codegen": "codegen", "cohere": "cohere",
           "glm4": "glm4", "gemma": "gemma", "gemma2": "gemma2", "gemma3_text": "gemma3",
           "t5": "t5", "bloom": "bloom", "mpt": "mpt"}
ROTARY = [f for f in FAMILIES if FAMILIES[f]["model_type"] not in ("t5", "bloom", "mpt")]
COMPLEX = ("deepseek_v2", "llama4_text")     # rotary modules that return polar(1, angle)


def _module(name: str):
    mt = FAMILIES[name]["model_type"]
    return importlib.import_module(f"transformers.models.{MODULES[mt]}.modeling_{MODULES[mt]}")


def hf_config(name: str):
    d = dict(FAMILIES[name])
    d.pop("architectures", None)
    mt = d.pop("model_type")
    d.update(pad_token_id=0, bos_token_id=1, eos_token_id=2)   # within the tiny vocabulary
    cfg = transformers.AutoConfig.for_model(mt, **d)
    cfg._attn_implementation = "eager"
    return cfg


@functools.lru_cache(maxsize=None)
def hf_model(name: str):
    """The tiny model, built once per family (tests restore whatever they swap)."""
    cfg = hf_config(name)
    torch.manual_seed(0)
    mt = FAMILIES[name]["model_type"]
    if mt == "qwen2_vl_text":
        model = _module(name).Qwen2VLTextModel(cfg)
    elif mt == "qwen3_vl_text":
        model = _module(name).Qwen3VLTextModel(cfg)
    elif mt == "t5":
        model = transformers.T5ForConditionalGeneration(cfg)
    else:
        model = transformers.AutoModelForCausalLM.from_config(cfg)
    return model.eval()


def _rotary_owner(model):
    for _, mod in model.named_modules():
        child = getattr(mod, "rotary_emb", None)
        if child is not None and "Vision" not in type(child).__name__:
            return mod
    return None


def _positions(name: str, seq: int = 12, start: int = 0):
    torch.manual_seed(1)
    pos = torch.arange(start, start + seq)[None].expand(2, seq)
    if FAMILIES[name]["model_type"] in ("qwen2_vl_text", "qwen3_vl_text"):
        t = pos
        h = pos // 3 + torch.tensor([[0], [5]])
        w = pos % 3 + torch.tensor([[1], [2]])
        return torch.stack([t, h, w])          # (3, batch, seq)
    return pos


def posemb_apply(name: str):
    """posemb's replacement for the family's apply function, and that function's name."""
    mt = FAMILIES[name]["model_type"]
    if mt in ("gptj", "codegen"):
        return "apply_rotary_pos_emb", pt.apply_rotary_pos_emb_gptj
    if mt == "deepseek_v3":
        return "apply_rotary_pos_emb_interleave", pt.apply_rotary_pos_emb_interleave
    if mt in COMPLEX:           # Llama 4: (batch, seq, heads, d); DeepSeek-V2: (batch, heads, ...)
        unsqueeze = -2 if mt == "llama4_text" else 1
        return "apply_rotary_emb", functools.partial(pt.apply_rotary_emb,
                                                     unsqueeze_dim=unsqueeze)
    conv = posemb.rope_convention(FAMILIES[name])

    def apply(q, k, cos, sin, unsqueeze_dim=1):
        return pt.apply_rotary_pos_emb_convention(q, k, cos, sin, conv, unsqueeze_dim)
    return "apply_rotary_pos_emb", apply


@contextlib.contextmanager
def swapped(name: str, model, precision: str = "float32"):
    """``model`` with posemb in place of transformers' positional code."""
    mt = FAMILIES[name]["model_type"]
    mod = _module(name)
    saved = []

    def patch(obj, attr, value):
        saved.append((obj, attr, getattr(obj, attr)))
        setattr(obj, attr, value)

    try:
        if mt == "t5":
            def compute_bias(self, query_length, key_length, device=None, past_seen_tokens=0):
                return pt.t5_relative_bias(
                    self.relative_attention_bias.weight, query_length, key_length,
                    bidirectional=not self.is_decoder,
                    max_distance=self.relative_attention_max_distance,
                    query_offset=int(past_seen_tokens))[None]
            patch(mod.T5Attention, "compute_bias", compute_bias)
        elif mt == "bloom":
            patch(mod, "build_alibi_tensor",
                  functools.partial(pt.build_alibi_tensor,
                                    precision="exact" if precision == "exact" else "float32"))
        elif mt == "mpt":
            patch(mod, "build_mpt_alibi_tensor", pt.build_mpt_alibi_tensor)
        elif mt in ("gptj", "codegen"):
            fname, fn = posemb_apply(name)
            patch(mod, fname, fn)
            for m in model.modules():
                if hasattr(m, "embed_positions"):
                    table = pt.create_sinusoidal_positions(m.embed_positions.shape[0],
                                                           m.embed_positions.shape[1],
                                                           precision=precision)
                    patch(m, "embed_positions", table)
        else:
            fname, fn = posemb_apply(name)
            patch(mod, fname, fn)
            owner = _rotary_owner(model)
            patch(owner, "rotary_emb", pt.RotaryEmbedding(FAMILIES[name], precision=precision))
        yield model
    finally:
        for obj, attr, value in reversed(saved):
            setattr(obj, attr, value)


def _run(name: str, model):
    """Logits (or last hidden states) and every parameter's gradient."""
    mt = FAMILIES[name]["model_type"]
    torch.manual_seed(2)
    ids = torch.randint(0, 128, (2, 12))
    model.zero_grad(set_to_none=True)
    if mt == "t5":
        out = model(input_ids=ids, decoder_input_ids=ids[:, :7]).logits
    elif mt in ("qwen2_vl_text", "qwen3_vl_text"):
        out = model(input_ids=ids, position_ids=_positions(name)).last_hidden_state
    elif mt == "bloom":
        mask = torch.ones(2, 12, dtype=torch.long)
        mask[1, :3] = 0                                # left padding: positions restart
        out = model(input_ids=ids, attention_mask=mask).logits
    else:
        out = model(input_ids=ids).logits
    weights = torch.linspace(-1, 1, out.numel()).reshape(out.shape)
    (out * weights).sum().backward()
    grads = {n: p.grad.detach().clone() for n, p in model.named_parameters() if p.grad is not None}
    return out.detach(), grads


def _maxdiff(a, b) -> float:
    return float((a.detach().double() - b.detach().double()).abs().max())


def measure_tables(name: str, precision: str) -> float:
    model = hf_model(name)
    if FAMILIES[name]["model_type"] in ("gptj", "codegen"):
        attn = next(m for m in model.modules() if hasattr(m, "embed_positions"))
        ours = pt.create_sinusoidal_positions(*attn.embed_positions.shape, precision=precision)
        return _maxdiff(ours, attn.embed_positions)
    ref = _rotary_owner(model).rotary_emb
    ours = pt.RotaryEmbedding(FAMILIES[name], precision=precision)
    x = torch.zeros(1, dtype=torch.float32)
    worst = 0.0
    for start in (0, 5000, 40000):      # past longrope's 4096 and llama3's wavelengths
        pos = _positions(name, 12, start)
        kinds = [None]
        if getattr(ref, "layer_types", None):
            kinds = list(ref.layer_types)
        for lt in kinds:
            args = () if lt is None else (lt,)
            r, o = ref(x, pos, *args), ours(x, pos, *args)
            if isinstance(r, torch.Tensor):      # complex freqs_cis
                r, o = (r.real, r.imag), (o.real, o.imag)
            (rc, rs), (oc, os_) = r, o
            assert oc.shape == rc.shape and oc.dtype == rc.dtype
            worst = max(worst, _maxdiff(oc, rc), _maxdiff(os_, rs))
    return worst


def measure_apply(name: str) -> float:
    mod = _module(name)
    fname, fn = posemb_apply(name)
    ref = getattr(mod, fname)
    g = torch.Generator().manual_seed(3)
    mt = FAMILIES[name]["model_type"]
    if mt in ("gptj", "codegen"):
        x = torch.randn(2, 5, 4, 8, generator=g, requires_grad=True)
        sin, cos = torch.randn(2, 5, 4, generator=g), torch.randn(2, 5, 4, generator=g)
        outs = [f(x, sin, cos) for f in (ref, fn)]
        grads = [torch.autograd.grad((o * o.detach()).sum(), x)[0] for o in outs]
        return max(_maxdiff(outs[0], outs[1]), _maxdiff(grads[0], grads[1]))
    if mt in COMPLEX:
        shape = (2, 5, 4, 16) if mt == "llama4_text" else (2, 4, 5, 8)
        xq = torch.randn(*shape, generator=g, requires_grad=True)
        xk = torch.randn(*shape, generator=g, requires_grad=True)
        angle = torch.randn(2, 5, shape[-1] // 2, generator=g) * 100
        freqs = torch.polar(torch.rand(angle.shape, generator=g) + 0.5, angle)
        outs = [f(xq, xk, freqs) for f in (ref, fn)]
        grads = [torch.autograd.grad(sum((o * o.detach()).sum() for o in out), (xq, xk))
                 for out in outs]
        return max([_maxdiff(a, b) for a, b in zip(outs[0], outs[1])]
                   + [_maxdiff(a, b) for a, b in zip(grads[0], grads[1])])
    model_cfg = hf_config(name)
    rotary = pt.RotaryEmbedding(FAMILIES[name])
    r = rotary.dim
    hd = getattr(model_cfg, "qk_rope_head_dim", None) or getattr(model_cfg, "head_dim", None) \
        or model_cfg.hidden_size // model_cfg.num_attention_heads
    q = torch.randn(2, 4, 5, hd, generator=g, requires_grad=True)
    k = torch.randn(2, 2, 5, hd, generator=g, requires_grad=True)
    cos, sin = torch.randn(2, 5, r, generator=g), torch.randn(2, 5, r, generator=g)
    if rotary.convention.tables == "repeat":
        cos, sin = cos[..., ::2].repeat_interleave(2, -1), sin[..., ::2].repeat_interleave(2, -1)
    else:
        cos, sin = torch.cat([cos[..., :r // 2]] * 2, -1), torch.cat([sin[..., :r // 2]] * 2, -1)
    outs = [f(q, k, cos, sin) for f in (ref, fn)]
    diffs = [_maxdiff(a, b) for a, b in zip(outs[0], outs[1])]
    grads = [torch.autograd.grad(sum((o * o.detach()).sum() for o in out), (q, k)) for out in outs]
    diffs += [_maxdiff(a, b) for a, b in zip(grads[0], grads[1])]
    return max(diffs)


def measure_model(name: str, precision: str = "float32") -> tuple[float, float]:
    model = hf_model(name)
    ref_out, ref_grads = _run(name, model)
    with swapped(name, model, precision):
        out, grads = _run(name, model)
    assert set(grads) == set(ref_grads)
    return _maxdiff(out, ref_out), max(_maxdiff(grads[n], ref_grads[n]) for n in grads)


@pytest.mark.parametrize("name", ROTARY)
def test_rotary_tables_float32_bit_equal(name):
    assert measure_tables(name, "float32") == 0.0


@pytest.mark.parametrize("name", ROTARY)
def test_rotary_tables_exact_within_rounding(name):
    # exact tables differ from float32 ones by transformers' float32 angle error,
    # about |p| * 2**-24 at positions up to 40012 (measured: at most 7.1e-4)
    assert measure_tables(name, "exact") < 40012 * 2.0 ** -24 * 2


# transformers' complex multiply on a broadcast freqs_cis takes another (FMA) path than on
# contiguous operands: DeepSeek-V2's own results move by an ulp with the layout
ULP_LEVEL = {"deepseek_v2": (1e-6, 1e-6, 1e-4)}      # apply, logits, grads


@pytest.mark.parametrize("name", ROTARY)
def test_apply_bit_equal(name):
    assert measure_apply(name) <= ULP_LEVEL.get(name, (0.0,))[0]


@pytest.mark.parametrize("name", list(FAMILIES))
def test_model_logits_and_grads_bit_equal(name):
    logits, grads = measure_model(name, "float32")
    if FAMILIES[name]["model_type"] == "t5":
        # posemb sums the bias table's gradient in float64 (torch's Embedding
        # backward in float32): equal logits, gradients within float32 rounding
        assert logits == 0.0 and grads < 1e-5
    elif name in ULP_LEVEL:
        assert logits <= ULP_LEVEL[name][1] and grads <= ULP_LEVEL[name][2]
    else:
        assert (logits, grads) == (0.0, 0.0)


@pytest.mark.parametrize("name", ["llama3.1", "deepseek_v3", "glm4", "gemma3", "phi4-mini"])
def test_model_exact_tables_close(name):
    logits, grads = measure_model(name, "exact")
    assert logits < 1e-4 and grads < 1e-3


def test_deepseek_v3_interleaved_false_is_honoured():
    cfg = FAMILIES["deepseek_v3"]
    assert pt.RotaryEmbedding(cfg).convention.output == "deinterleaved"
    half = pt.RotaryEmbedding(cfg, interleaved=False)
    assert not half.interleaved and half.convention.tables == "half"
    assert posemb.rope_config(cfg, interleaved=False).interleaved is False
    assert posemb.rope_config(dict(cfg, rope_interleave=False)).interleaved is False
    # transformers with rope_interleave=False: half-split apply on the same tables
    mod = _module("deepseek_v3")
    g = torch.Generator().manual_seed(4)
    q, k = torch.randn(1, 2, 3, 8, generator=g), torch.randn(1, 1, 3, 8, generator=g)
    cos, sin = half(q, torch.arange(3)[None])
    ref = mod.apply_rotary_pos_emb(q, k, cos, sin)
    got = half.apply_rotary_pos_emb(q, k, cos, sin)
    assert all(torch.equal(a, b) for a, b in zip(ref, got))


def test_rotary_module_keeps_nn_module_apply():
    """model.apply(init_fn) (transformers' post_init) must reach through posemb's module."""
    seen = []
    torch.nn.Sequential(pt.RotaryEmbedding(dim=8)).apply(lambda m: seen.append(type(m).__name__))
    assert seen == ["RotaryEmbedding", "Sequential"]


def test_gemma3_rope_config_needs_layer_type():
    cfg = FAMILIES["gemma3"]
    with pytest.raises(ValueError, match="layer_type"):
        posemb.rope_config(cfg)
    local = posemb.rope_config(cfg, layer_type="sliding_attention")
    full = posemb.rope_config(cfg, layer_type="full_attention")
    assert (local.base, local.scaling["rope_type"]) == (10000.0, "default")
    assert (full.base, full.scaling["rope_type"], full.scaling["factor"]) == (1e6, "linear", 8.0)


def test_nested_rope_parameters_and_nope_layers():
    cfg = dict(TINY, head_dim=16, layer_types=["full_attention", "sliding_attention"],
               rope_parameters={"full_attention": {"rope_type": "default", "rope_theta": 160000.0},
                                "sliding_attention": None})
    assert posemb.rope_config(cfg, layer_type="sliding_attention") is None
    assert posemb.rope_config(cfg, layer_type="full_attention").base == 160000.0
    rotary = pt.RotaryEmbedding(cfg)
    x = torch.zeros(1)
    cos, _ = rotary(x, torch.arange(4)[None], "full_attention")
    assert cos.shape == (1, 4, 16)
    with pytest.raises(ValueError, match="NoPE"):
        rotary(x, torch.arange(4)[None], "sliding_attention")
    with pytest.raises(ValueError, match="layer_type"):
        rotary(x, torch.arange(4)[None])


def test_modernbert_global_local_theta():
    cfg = {"model_type": "modernbert", "hidden_size": 64, "num_attention_heads": 4,
           "global_rope_theta": 160000.0, "local_rope_theta": 10000.0,
           "max_position_embeddings": 8192}
    ref = transformers.AutoConfig.for_model("modernbert", **{k: v for k, v in cfg.items()
                                                             if k != "model_type"})
    mod = importlib.import_module("transformers.models.modernbert.modeling_modernbert")
    hf = mod.ModernBertRotaryEmbedding(ref)
    ours = pt.RotaryEmbedding(cfg, precision="float32")
    pos = torch.arange(50)[None]
    for lt in ("full_attention", "sliding_attention"):
        for a, b in zip(hf(torch.zeros(1), pos, lt), ours(torch.zeros(1), pos, lt)):
            assert torch.equal(a, b)


def test_dynamic_ntk_keeps_longest_sequence():
    """transformers' dynamic module keeps the longest length's frequencies; so does posemb's."""
    cfg = dict(TINY, model_type="llama", max_position_embeddings=64,
               rope_scaling={"rope_type": "dynamic", "factor": 2.0})
    mod = _module("llama2")
    for precision in ("float32", "exact"):
        hf = mod.LlamaRotaryEmbedding(transformers.LlamaConfig(**{k: v for k, v in cfg.items()
                                                                   if k != "model_type"}))
        ours = pt.RotaryEmbedding(cfg, precision=precision)
        x = torch.zeros(1)
        for n in (100, 80, 40, 90, 30):       # grow, keep (80 after 100), reset (40), ...
            rc, _ = hf(x, torch.arange(n)[None])
            oc, _ = ours(x, torch.arange(n)[None])
            assert ours.max_seq_len_cached == hf.max_seq_len_cached
            if precision == "float32":
                assert torch.equal(oc, rc)
                assert torch.equal(ours.inv_freq, hf.inv_freq)
            else:
                assert _maxdiff(oc, rc) < 1e-4
        # the functional API is per call: 80 positions alone use the 80-length base
        per_call, _ = posemb.rope_cos_sin(np.arange(80), 16, 10000.0,
                                          scaling=cfg["rope_scaling"], max_position_embeddings=64)
        kept, _ = pt.RotaryEmbedding(cfg)(x, torch.arange(100)[None])
        assert not np.allclose(per_call[79], kept[0, 79].numpy())


def test_every_rope_type_of_transformers():
    """Each key of ROPE_INIT_FUNCTIONS: posemb's float64 frequencies within float32 rounding
    of transformers', and its float32 recipe bit-equal."""
    from posemb import _rope_precision as rp
    from transformers.modeling_rope_utils import ROPE_INIT_FUNCTIONS

    params = {
        "linear": {"factor": 4.0},
        "dynamic": {"factor": 2.0},
        "yarn": {"factor": 8.0, "original_max_position_embeddings": 512, "beta_fast": 32,
                 "beta_slow": 1, "mscale": 1.0, "mscale_all_dim": 0.5},
        "longrope": {"short_factor": _factors(8, 1.2), "long_factor": _factors(8, 9.0),
                     "original_max_position_embeddings": 512},
        "llama3": {"factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
                   "original_max_position_embeddings": 256},
        "proportional": {"partial_rotary_factor": 0.5},
        # Llama 4 publishes high_freq_factor == low_freq_factor: a step, no smooth band
        "llama3-step": {"factor": 16.0, "low_freq_factor": 1.0, "high_freq_factor": 1.0,
                        "original_max_position_embeddings": 256},
    }
    assert set(ROPE_INIT_FUNCTIONS) <= set(params)
    for key, extra in params.items():
        rope_type = key.split("-")[0]
        scaling = dict(extra, rope_type=rope_type)
        cfg = transformers.LlamaConfig(hidden_size=64, num_attention_heads=4,
                                       max_position_embeddings=2048,
                                       rope_parameters=dict(scaling, rope_theta=10000.0))
        for seq_len in (None, 4096):
            # dynamic_rope_update passes the length as a tensor (float32 arithmetic)
            hf_len = torch.tensor(seq_len) if seq_len and rope_type == "dynamic" else seq_len
            ref, ref_attn = ROPE_INIT_FUNCTIONS[rope_type](cfg, None, seq_len=hf_len)
            inv, attn = posemb.rope_scaling_parameters(16, 10000.0, scaling,
                                                       max_position_embeddings=2048,
                                                       seq_len=seq_len)
            np.testing.assert_allclose(inv, ref.numpy(), rtol=3e-7, atol=0)
            assert attn == pytest.approx(ref_attn, rel=1e-12)
            f32, _ = rp.float32_rope_parameters(
                16, 10000.0, posemb._rope_scaling.normalize_scaling(scaling),
                max_position_embeddings=2048, seq_len=seq_len, power=pt._torch_power)
            assert np.array_equal(f32, ref.numpy())


def test_go_walkthrough_bfloat16_values():
    """The bfloat16 recipe prints the Go walk-through's values (llama.go, dim 128)."""
    cos, sin = posemb.rope_cos_sin(np.array([1, 8190, 8191]), 128, 10000.0,
                                   precision="bfloat16")
    assert cos.dtype == np.float32
    from posemb import _rope_precision as rp
    inv = rp.bfloat16_inv_freq(128, 10000.0)
    assert [round(float(v), 4 if v > 1e-2 else 8) for v in inv[[0, 1, 2]]] == \
        [1.0, 0.8633, 0.7461]
    ang = rp.bfloat16_angles(np.array([8190, 8191]), inv)
    assert ang[1, 0] == 8160.0 and ang[1, 1] == 7040.0 and ang[1, 63] == 0.94140625
    assert cos[2, 63] == np.float32(0.58865184) and sin[2, 63] == np.float32(0.8083867)


@pytest.mark.parametrize("precision", ["float32", "bfloat16"])
def test_precision_recipes_odd_width_passes_through(precision):
    cos, sin = posemb.rope_cos_sin(np.arange(5), 7, precision=precision)
    even_cos, _ = posemb.rope_cos_sin(np.arange(5), 7, precision=precision, interleaved=True)
    assert cos.shape == (5, 7) and np.all(cos[:, 6] == 1) and np.all(sin[:, 6] == 0)
    assert np.array_equal(np.sort(cos[:, :6], axis=1), np.sort(even_cos[:, :6], axis=1))


@pytest.mark.parametrize("name", ["llama3.1", "phi3", "qwen3-yarn", "glm4"])
def test_numpy_rope_module_float32_precision(name):
    """rope_config(..., precision="float32"): transformers' tables within a float32 ulp."""
    ref = _rotary_owner(hf_model(name)).rotary_emb
    rope = posemb.rope_config(FAMILIES[name], precision="float32",
                              interleaved=False)          # transformers' table layout
    pos = torch.arange(4990, 5010)[None]
    rc, rs = ref(torch.zeros(1), pos)
    oc, os_ = rope.cos_sin(pos[0].numpy())
    assert rope.precision == "float32" and "precision='float32'" in repr(rope)
    assert np.abs(oc - rc[0].numpy()).max() <= 2.0 ** -23
    assert np.abs(os_ - rs[0].numpy()).max() <= 2.0 ** -23
    go = posemb.RoPE(128, 8192, precision="bfloat16")
    assert go.cos_cached[8191, 63] == np.float32(0.58865184)
    with pytest.raises(ValueError, match="scale"):
        posemb.RoPE(8, 4, scale=2.0, precision="float32")
    with pytest.raises(ValueError, match="precision"):
        posemb.RoPE(8, 4, precision="float16")


def test_rope_cos_sin_float32_precision_matches_transformers():
    """NumPy float32 recipe: angles bit-equal; cos/sin within one float32 ulp of torch's."""
    ref = _module("llama2").LlamaRotaryEmbedding(hf_config("llama3.1"))
    pos = torch.arange(0, 70000, 7)[None]
    rc, rs = ref(torch.zeros(1), pos)
    cfg = FAMILIES["llama3.1"]
    scaling = dict(cfg["rope_scaling"])
    oc, os_ = posemb.rope_cos_sin(pos[0].numpy(), 16, 500000.0, scaling=scaling,
                                  precision="float32")
    exact, _ = posemb.rope_cos_sin(pos[0].numpy(), 16, 500000.0, scaling=scaling)
    assert np.abs(oc - rc[0].numpy()).max() <= 2.0 ** -24
    assert np.abs(os_ - rs[0].numpy()).max() <= 2.0 ** -24
    assert np.abs(exact - rc[0].numpy()).max() > 1e-4     # the float32 drift is real


@pytest.mark.parametrize("name", [f for f in ROTARY if "vl" not in f])
def test_numpy_rope_config_rotates_like_transformers(name):
    """posemb.rope_config(config.json) in the NumPy API: the family's rotation."""
    mt = FAMILIES[name]["model_type"]
    kw = {"layer_type": "full_attention"} if mt == "gemma3_text" else {}
    rope = posemb.rope_config(FAMILIES[name], dtype=np.float64, **kw)
    g = torch.Generator().manual_seed(8)
    pos = torch.arange(100, 109)[None]
    q = torch.randn(1, 4, 9, rope.head_size, generator=g, dtype=torch.float64)
    model = hf_model(name)
    if mt in ("gptj", "codegen"):
        attn = next(m for m in model.modules() if hasattr(m, "embed_positions"))
        sincos = attn.embed_positions[pos].double()
        sin, cos = sincos.chunk(2, dim=-1)
        x = q.transpose(1, 2)                                 # GPT-J's (batch, seq, heads, dim)
        r = rope.rotary_dim
        rot = _module(name).apply_rotary_pos_emb(x[..., :r], sin, cos)
        ref = torch.cat([rot, x[..., r:]], dim=-1).transpose(1, 2)
    elif mt in COMPLEX:
        freqs = _rotary_owner(model).rotary_emb(q, pos)
        if mt == "llama4_text":                               # (batch, seq, heads, dim)
            ref, _ = _module(name).apply_rotary_emb(q.transpose(1, 2), q.transpose(1, 2), freqs)
            ref = ref.transpose(1, 2)
        else:
            ref, _ = _module(name).apply_rotary_emb(q, q, freqs)
    else:
        cos, sin = _rotary_owner(model).rotary_emb(q, pos, *(
            ("full_attention",) if mt == "gemma3_text" else ()))
        fname, _ = posemb_apply(name)
        ref, _ = getattr(_module(name), fname)(q, q, cos, sin)
        if mt == "deepseek_v3":     # transformers returns the rotated features de-interleaved
            ours = torch.from_numpy(rope(q.numpy(), offset=100))
            ours = torch.cat([ours[..., 0::2], ours[..., 1::2]], dim=-1)
            assert _maxdiff(ours, ref) < 1e-5
            return
    ours = rope(q.numpy(), offset=100)
    assert _maxdiff(torch.from_numpy(ours), ref) < 1e-5      # float32 tables vs exact ones
    wrong = posemb.rope_config(FAMILIES[name], dtype=np.float64,
                               interleaved=not rope.interleaved, **kw)(q.numpy(), offset=100)
    assert _maxdiff(torch.from_numpy(wrong), ref) > 0.1       # the pair order matters


@pytest.mark.parametrize("name", [f for f in ROTARY if f not in ("gptj", "codegen")])
def test_rotary_from_transformers_config_object(name):
    """A transformers config object (v5 rope_parameters, nested for Gemma 3) works too."""
    ref = _rotary_owner(hf_model(name)).rotary_emb
    ours = pt.RotaryEmbedding(hf_config(name), precision="float32")
    pos = _positions(name, 12, 5000)
    for lt in list(getattr(ref, "layer_types", None) or [None]):
        args = () if lt is None else (lt,)
        for a, b in zip(ref(torch.zeros(1), pos, *args), ours(torch.zeros(1), pos, *args)):
            assert torch.equal(a, b)


def test_deepseek_v2_rope_config_rotates_like_transformers():
    mod = importlib.import_module("transformers.models.deepseek_v2.modeling_deepseek_v2")
    cfg = dict(TINY, model_type="deepseek_v2", num_key_value_heads=4, q_lora_rank=None,
               kv_lora_rank=16, qk_nope_head_dim=8, qk_rope_head_dim=8, v_head_dim=8,
               max_position_embeddings=163840, rope_theta=10000.0,
               rope_scaling={"beta_fast": 32, "beta_slow": 1, "factor": 40, "mscale": 0.707,
                             "mscale_all_dim": 0.707, "original_max_position_embeddings": 4096,
                             "type": "yarn"})
    hf = mod.DeepseekV2RotaryEmbedding(transformers.AutoConfig.for_model(
        "deepseek_v2", **{k: v for k, v in cfg.items() if k != "model_type"}))
    pos = torch.arange(30, 36)[None]
    q = torch.randn(1, 4, 6, 8, generator=torch.Generator().manual_seed(9))
    ref, _ = mod.apply_rotary_emb(q, q, hf(q, pos))
    rope = posemb.rope_config(cfg)
    assert rope.interleaved and rope.rotary_dim == 8
    assert _maxdiff(torch.from_numpy(rope(q.numpy(), offset=30)), ref) < 1e-5


def test_go_walkthrough_bfloat16_in_torch_module():
    rotary = pt.RotaryEmbedding(dim=128, max_position_embeddings=8192, precision="bfloat16")
    cos, sin = rotary(torch.zeros(1), torch.tensor([[8191]]))
    ref_cos, ref_sin = posemb.rope_cos_sin(np.array([8191]), 128, precision="bfloat16")
    assert np.array_equal(cos[0].numpy(), ref_cos) and np.array_equal(sin[0].numpy(), ref_sin)
    assert cos[0, 0, 63] == np.float32(0.58865184)


def test_fairseq_sinusoid_and_padding_row():
    mod = importlib.import_module("transformers.models.m2m_100.modeling_m2m_100")
    for dim in (16, 17):
        ref = mod.M2M100SinusoidalPositionalEmbedding.get_embedding(40, dim, padding_idx=1)
        ours = pt.sinusoidal(40, dim, layout="concat", spacing="fairseq", padding_idx=1)
        assert ours.shape == ref.shape
        assert torch.equal(ours[1], torch.zeros(dim)) and torch.equal(ref[1], torch.zeros(dim))
        assert _maxdiff(ours, ref) < 40 * 2.0 ** -22         # float32 angle drift in transformers
    exact = np.exp(-np.arange(8) * np.log(10000.0) / 7)   # last frequency exactly 1/base
    assert np.allclose(pt.sinusoidal(2, 16, layout="concat", spacing="fairseq")[1, :8].numpy(),
                       np.sin(exact), rtol=0, atol=1e-7)


def test_asymmetric_relative_clipping_as_wav2vec2_bert():
    from types import SimpleNamespace
    mod = importlib.import_module("transformers.models.wav2vec2_bert.modeling_wav2vec2_bert")
    torch.manual_seed(5)
    left, right, dim = 6, 2, 8
    emb = torch.nn.Embedding(left + right + 1, dim)
    fake = SimpleNamespace(left_max_position_embeddings=left, right_max_position_embeddings=right,
                           distance_embedding=emb, scaling=0.25)
    query = torch.randn(2, 3, 11, dim)
    _, ref = mod._apply_relative_key_position_encoding(fake, query, query)
    ref.sum().backward()
    ref_grad = emb.weight.grad.clone()
    emb.weight.grad = None
    pos = pt.relative_embeddings(emb.weight, 11, 11, max_left=left, max_right=right)
    ours = torch.einsum("bhld,lrd->bhlr", query, pos) * 0.25
    ours.sum().backward()
    assert torch.equal(ours, ref)
    assert _maxdiff(emb.weight.grad, ref_grad) < 1e-5


def test_trainable_shaw_table_gradient():
    torch.manual_seed(6)
    table = torch.randn(7, 4, dtype=torch.float64, requires_grad=True)       # K = 3
    weights = torch.randn(5, 9, 4, dtype=torch.float64)
    (pt.relative_embeddings(table, 5, 9) * weights).sum().backward()
    ours = table.grad.clone()
    table.grad = None
    index = torch.from_numpy(posemb.relative_position_index(5, 9, 3))
    (table[index] * weights).sum().backward()
    assert torch.allclose(ours, table.grad, rtol=1e-12, atol=1e-12)
    assert torch.equal(pt.relative_embeddings(table, 5, 9), table[index])


@pytest.mark.parametrize("heads,bias_max", [(4, 8), (6, 8), (12, 16)])
def test_mpt_alibi_bias_max(heads, bias_max):
    mod = importlib.import_module("transformers.models.mpt.modeling_mpt")
    ref = mod.build_mpt_alibi_tensor(heads, 10, alibi_bias_max=bias_max)
    assert torch.equal(pt.build_mpt_alibi_tensor(heads, 10, alibi_bias_max=bias_max), ref)


@pytest.mark.parametrize("heads", [4, 6, 16])
def test_bloom_padding_aware_alibi(heads):
    mod = importlib.import_module("transformers.models.bloom.modeling_bloom")
    mask = torch.tensor([[1, 1, 1, 1, 1, 1], [0, 0, 1, 1, 1, 1], [0, 1, 1, 0, 1, 1]])
    ref = mod.build_alibi_tensor(mask, heads, torch.float32)
    ours = pt.build_alibi_tensor(mask, heads, torch.float32)
    # exact slopes: within an ulp of transformers' float32 powers (equal when they are
    # powers of two); precision="float32": bit-equal
    assert _maxdiff(ours, ref) <= (0.0 if heads in (4, 8) else 5 * 2.0 ** -23)
    assert torch.equal(pt.build_alibi_tensor(mask, heads, torch.float32, precision="float32"),
                       ref)


def test_multimodal_apply_selects_sections():
    torch.manual_seed(7)
    pos = torch.stack([torch.arange(6), torch.arange(6) // 2, torch.arange(6) % 2])[:, None]
    per_axis = [posemb.rope_cos_sin(p.numpy(), 16, 1e4) for p in pos]
    cos = torch.from_numpy(np.stack([c for c, _ in per_axis]))
    sin = torch.from_numpy(np.stack([s for _, s in per_axis]))
    q = torch.randn(1, 2, 6, 16, requires_grad=True)
    qe, _ = pt.apply_multimodal_rotary_pos_emb(q, q, cos, sin, [2, 3, 3])
    mc, ms = posemb.mrope_cos_sin(pos.numpy(), 16, [2, 3, 3], 1e4)
    ref = posemb.apply_rope(q.detach().numpy(), mc[:, None], ms[:, None])
    assert np.array_equal(qe.detach().numpy(), ref)
    qe.sum().backward()
    assert q.grad is not None


def report() -> None:  # pragma: no cover - run by hand
    print(f"{'family':12} {'cos/sin f32':>11} {'cos/sin exact':>13} {'apply':>6} "
          f"{'logits':>8} {'grads':>8} {'logits exact':>12} {'grads exact':>11}")
    for name in FAMILIES:
        rotary = name in ROTARY
        t32 = measure_tables(name, "float32") if rotary else math.nan
        tex = measure_tables(name, "exact") if rotary else math.nan
        ap = measure_apply(name) if rotary else math.nan
        lg, gr = measure_model(name, "float32")
        lge, gre = measure_model(name, "exact")
        print(f"{name:12} {t32:11.3g} {tex:13.3g} {ap:6.3g} {lg:8.3g} {gr:8.3g} "
              f"{lge:12.3g} {gre:11.3g}")


if __name__ == "__main__":  # pragma: no cover
    report()


def test_layer_uses_rope_matches_transformers_nope_layers():
    # which layers rotate q and k: Llama 4's no_rope_layers (read by
    # Llama4TextAttention.use_rope) and Cohere 2's sliding-window layers
    # (Cohere2Attention applies RoPE only there), from transformers' configs
    from transformers import Cohere2Config, Llama4TextConfig

    for kw in ({}, {"no_rope_layer_interval": 3}, {"no_rope_layers": [1, 0, 0, 1, 1, 0, 1, 1]}):
        cfg = Llama4TextConfig(num_hidden_layers=8, **kw)
        mine = {"model_type": "llama4_text", "num_hidden_layers": 8, **kw}
        assert [posemb.layer_uses_rope(mine, i) for i in range(8)] == \
            [bool(f) for f in cfg.no_rope_layers]
    for kw in ({}, {"sliding_window_pattern": 3}):
        cfg = Cohere2Config(num_hidden_layers=7, **kw)
        mine = {"model_type": "cohere2", "num_hidden_layers": 7, **kw}
        assert [posemb.layer_uses_rope(mine, i) for i in range(7)] == \
            [t == "sliding_attention" for t in cfg.layer_types]
        mine["layer_types"] = list(cfg.layer_types)
        assert [posemb.layer_uses_rope(mine, i) for i in range(7)] == \
            [t == "sliding_attention" for t in cfg.layer_types]
    nested = {"layer_types": ["full_attention", "sliding_attention"],
              "rope_parameters": {"full_attention": None,
                                  "sliding_attention": {"rope_type": "default"}}}
    assert [posemb.layer_uses_rope(nested, i) for i in range(2)] == [False, True]
    assert posemb.layer_uses_rope({"model_type": "llama"}, 5) is True

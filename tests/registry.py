"""The one registry of posemb's public functions, methods and constructors.

Each entry is ``(name, fn, args, kwargs, oracle)``: valid example arguments
(small arrays) and, where an independent float64 formula exists
(``posemb._reference``), an oracle ``oracle(result)`` that raises
AssertionError on a wrong result.  The leak check (tests/leak_check.py),
the registry-driven bad-input and oracle tests (tests/test_registry.py), the
API fuzzer (tests/fuzz_api.py, which mutates these calls) and the valgrind
driver (.ci/valgrind_driver.py) all read it, so a new public function is
registered once, here; tests/test_registry.py fails while one is missing.

Names are ``function``, ``Class`` (the constructor), ``Class.method`` or
``Class.__call__``; a ``-suffix`` distinguishes variants of one callable.
"""
from __future__ import annotations

import numpy as np

import posemb
from posemb import _reference as R

rng = np.random.default_rng(0)
X = rng.standard_normal((4, 16, 64)).astype(np.float32)
X64 = X.astype(np.float64)
XB = rng.standard_normal((2, 4, 64, 64)).astype(np.float32)
COS, SIN = posemb.rope_cos_sin(np.arange(16), 64)
COSB, SINB = posemb.rope_cos_sin(np.arange(64), 64)
POS = np.arange(16)
W = rng.standard_normal((32, 64)).astype(np.float32)
T5T = rng.standard_normal((32, 4)).astype(np.float32)
G5 = rng.standard_normal((4, 16, 16)).astype(np.float32)
SHT = rng.standard_normal((9, 8)).astype(np.float32)
SHG = rng.standard_normal((16, 16, 8)).astype(np.float32)
OUT = np.empty_like(X)
ROPE = posemb.RoPE(64, 32)
APE = posemb.AbsolutePE(64, 32)
LPE = posemb.LearnedPE(32, 64, seed=0)
FC = posemb.precompute_freqs_cis(64, 16)
MASK = posemb.causal_mask(16)
PADMASK = posemb.padding_mask(np.array([3, 16]), 16)
XV = rng.standard_normal((64, 4, 64)).astype(np.float32)       # packed: 16 + 0 + 48 tokens
CU = np.array([0, 16, 16, 64])
OFFS = np.array([3, 0, 7])
VC, VS = posemb.rope_cos_sin(np.arange(64), 64)
DYN = {"rope_type": "dynamic", "factor": 2.0}
YARN = {"rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": 16}
LLAMA = {"hidden_size": 256, "num_attention_heads": 4, "max_position_embeddings": 128,
         "rope_scaling": {"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0,
                          "high_freq_factor": 4.0, "original_max_position_embeddings": 32}}
ROPE_DYN = posemb.RoPE(64, 32, scaling=DYN, max_position_embeddings=16)
Q4 = XB[:, :, :16]
K4 = XB[:, :2, :16].copy()
MPOS = np.stack([np.zeros(16, int), np.arange(16) // 4, np.arange(16) % 4])[:, None]
MC, MS = posemb.rope_cos_sin(np.tile(np.arange(16), (3, 1, 1)), 64)
GRID = np.stack([a.ravel() for a in np.indices((4, 4))], axis=-1)
WQ = rng.standard_normal((256, 64)).astype(np.float32)
OUT_ALIBI = np.empty((8, 16, 16), np.float32)
OUT_T5 = np.empty((4, 16, 16), np.float32)
OUTV = np.empty_like(XV)

F32 = 4e-6       # float32 results: the float64 value rounded once (plus float32 arithmetic)


def near(want, tol=F32):
    """An oracle: the result equals ``want`` (float64) within ``tol`` relative."""
    def check(got):
        got = tuple(got) if isinstance(got, tuple) else (got,)
        ref = tuple(want) if isinstance(want, tuple) else (want,)
        assert len(got) == len(ref)
        for g, w in zip(got, ref):
            g, w = np.asarray(g), np.asarray(w)
            wide = np.complex128 if np.iscomplexobj(g) or np.iscomplexobj(w) else np.float64
            np.testing.assert_allclose(g.astype(wide), w.astype(wide), rtol=tol, atol=tol)
    return check


def equal(want):
    def check(got):
        assert np.array_equal(got, want)
    return check


C64, S64 = R.rope_cos_sin(POS, 64)

REGISTRY = [
    ("rope_inv_freq", posemb.rope_inv_freq, (64,), {}, near(R.inv_freq(64), 1e-15)),
    ("rope_cos_sin", posemb.rope_cos_sin, (POS, 64), {}, near((C64, S64))),
    ("apply_rope", posemb.apply_rope, (X, COS, SIN), {},
     near(R.apply_rope(X64, COS, SIN))),
    ("apply_rope-out", posemb.apply_rope, (X, COS, SIN), {"out": OUT},
     near(R.apply_rope(X64, COS, SIN))),
    ("apply_rope-grid", posemb.apply_rope, (XB, COSB, SINB), {},
     near(R.apply_rope(XB.astype(np.float64), COSB, SINB))),
    ("apply_rope_backward", posemb.apply_rope_backward, (X, COS, SIN), {"interleaved": True},
     near(R.apply_rope_backward(X64, COS, SIN, interleaved=True))),
    ("apply_rotary_pos_emb", posemb.apply_rotary_pos_emb,
     (X[None], X[None], COS[None], SIN[None]), {},
     near((R.apply_rope(X64[None], COS[None, None], SIN[None, None]),) * 2)),
    ("rotate_half", posemb.rotate_half, (X,), {}, equal(R.rotate_half(X64).astype(np.float32))),
    ("rotate_pairs", posemb.rotate_pairs, (X,), {},
     equal(np.stack([-X[..., 1::2], X[..., 0::2]], -1).reshape(X.shape))),
    ("neg_half", posemb.neg_half, (X,), {"axis": 1},
     equal(R.rotate_half(X64, 1).astype(np.float32))),
    ("precompute_freqs_cis", posemb.precompute_freqs_cis, (64, 16), {},
     near(R.precompute_freqs_cis(64, 16))),
    ("apply_rotary_emb", posemb.apply_rotary_emb, (X[:, :, None], X[:, :, None], FC), {},
     None),
    ("compute_frequencies", posemb.compute_frequencies, (64, 16), {},
     near(np.outer(np.arange(16), R.inv_freq(64)), 1e-15)),
    ("RoPE", posemb.RoPE, (64, 16), {}, None),
    ("RoPE.__call__", ROPE, (X,), {"offset": 3},
     near(R.apply_rope(X64, *R.rope_cos_sin(np.arange(3, 19), 64)))),
    ("RoPE.forward", ROPE.forward, (X, POS), {},
     near(R.apply_rope(X64, C64, S64))),
    ("RoPE.backward", ROPE.backward, (X, POS), {},
     near(R.apply_rope_backward(X64, C64, S64))),
    ("RoPE.cos_sin", ROPE.cos_sin, (POS,), {}, near((C64, S64))),
    ("set_num_threads", posemb.set_num_threads, (posemb.get_num_threads(),), {}, None),
    ("get_num_threads", posemb.get_num_threads, (), {}, None),
    ("show_config", posemb.show_config, (), {"print_": False}, None),
    ("set_output_cache", posemb.set_output_cache,
     (int(posemb._native._out_cache(None)[0]),), {}, None),
    ("empty_cache", posemb.empty_cache, (), {}, None),
    ("sinusoidal", posemb.sinusoidal, (16, 64), {"start": 5},
     near(R.sinusoidal(16, 64, start=5))),
    ("add_sinusoidal", posemb.add_sinusoidal, (X,), {},
     near(X64 + R.sinusoidal(16, 64))),
    ("AbsolutePE", posemb.AbsolutePE, (64, 16), {}, None),
    ("AbsolutePE.forward", APE.forward, (X,), {}, near(X64 + R.sinusoidal(16, 64))),
    ("AbsolutePE.__call__", APE, (X,), {"start": 2}, near(X64 + R.sinusoidal(16, 64, start=2))),
    ("learned_pe_forward", posemb.learned_pe_forward, (X, W, POS), {},
     near(R.learned_forward(X64, W, POS))),
    ("learned_pe_backward", posemb.learned_pe_backward, (X, POS), {"num_positions": 32},
     near(R.learned_backward(X64, POS, 32), 1e-5)),
    ("LearnedPE", posemb.LearnedPE, (16, 8), {"seed": 0}, None),
    ("LearnedPE.forward", LPE.forward, (X,), {}, near(X64 + LPE.weight[:16])),
    ("LearnedPE.__call__", LPE, (X,), {"offset": 2}, near(X64 + LPE.weight[2:18])),
    ("LearnedPE.backward", LPE.backward, (X,), {}, None),
    ("t5_relative_position_bucket", posemb.t5_relative_position_bucket, (POS - 8,), {},
     equal(R.t5_buckets(POS - 8))),
    ("t5_relative_bias", posemb.t5_relative_bias, (T5T, 16, 16), {},
     near(R.t5_bias(T5T, 16, 16))),
    ("t5_relative_bias_backward", posemb.t5_relative_bias_backward, (G5,),
     {"num_buckets": 32, "query_length": 16, "key_length": 16},
     near(R.t5_bias_backward(G5, num_buckets=32), 1e-5)),
    ("relative_position_index", posemb.relative_position_index, (16, 16, 4), {},
     equal(R.shaw_index(16, 16, 4))),
    ("relative_embeddings", posemb.relative_embeddings, (SHT, 16, 16), {},
     near(R.shaw_embeddings(SHT, 16, 16))),
    ("relative_embeddings_backward", posemb.relative_embeddings_backward, (SHG, 4, 16, 16), {},
     near(R.shaw_embeddings_backward(SHG, 4), 1e-5)),
    ("alibi_slopes", posemb.alibi_slopes, (12,), {}, near(R.alibi_slopes(12), 1e-15)),
    ("alibi_bias", posemb.alibi_bias, (8, 16, 16), {},
     near(R.alibi_bias(R.alibi_slopes(8), 16, 16))),
    ("causal_mask", posemb.causal_mask, (16, 32), {"window": 4},
     equal(R.causal_mask(16, 32, window=4))),
    ("padding_mask", posemb.padding_mask, (POS, 16), {"side": "left"},
     equal(R.padding_mask(POS, 16, side="left"))),
    ("to_additive", posemb.to_additive, (MASK,), {},
     equal(np.where(MASK, np.float32(0), np.float32(-np.inf)))),
    ("attention_mask", posemb.attention_mask, (16, 16), {"lengths": np.array([3, 16])}, None),
    ("padding_to_attention_mask", posemb.padding_to_attention_mask, (PADMASK,), {}, None),
    ("create_causal_mask", posemb.create_causal_mask, (16,), {}, None),
    ("create_padding_mask", posemb.create_padding_mask, (POS, 16), {},
     equal(~R.padding_mask(POS, 16)[..., None])),
    ("scaled_dot_product_attention", posemb.scaled_dot_product_attention, (X, X, X),
     {"mask": MASK}, near(R.attention(X64, X64, X64, mask=MASK), 1e-5)),
    ("rope_scaling_parameters", posemb.rope_scaling_parameters, (64, 10000.0, YARN), {},
     near(R.rope_scaling(64, 10000.0, YARN), 1e-13)),
    ("rope_inv_freq-scaling", posemb.rope_inv_freq, (64,),
     {"scaling": DYN, "max_position_embeddings": 16, "seq_len": 40},
     near(R.rope_scaling(64, 10000.0, DYN, max_position_embeddings=16, seq_len=40)[0],
          1e-13)),
    ("rope_cos_sin-scaling", posemb.rope_cos_sin, (POS, 64), {"scaling": YARN}, None),
    ("rope_config", posemb.rope_config, (LLAMA,), {}, None),
    ("rope_config-layer_type", posemb.rope_config,
     ({"model_type": "gemma3_text", "head_dim": 8, "rope_local_base_freq": 1e4},),
     {"layer_type": "sliding_attention"}, None),
    ("rope_convention", posemb.rope_convention, ({"model_type": "deepseek_v3"},), {}, None),
    ("RopeConvention", posemb.RopeConvention, ("interleaved", "repeat"), {}, None),
    ("layer_rope_parameters", posemb.layer_rope_parameters,
     ({"model_type": "gemma3_text", "rope_local_base_freq": 1e4},), {}, None),
    ("layer_uses_rope", posemb.layer_uses_rope,
     ({"model_type": "llama4_text", "num_hidden_layers": 8}, 3), {}, None),
    ("RoPE-scaling", posemb.RoPE, (64, 16), {"scaling": YARN}, None),
    ("RoPE.__call__-dynamic", ROPE_DYN, (X,), {"offset": 20}, None),
    ("RoPE.__call__-offset-array", ROPE, (XB[:, :, :16],), {"offset": np.array([3, 9])}, None),
    ("RoPE.backward-offset-array", ROPE.backward, (XB[:, :, :16],),
     {"offset": np.array([3, 9])}, None),
    ("RoPE.apply_qk", ROPE.apply_qk, (Q4, K4), {"offset": np.array([1, 5])}, None),
    ("RoPE.apply_varlen", ROPE.apply_varlen, (XV, CU), {"offset": OFFS}, None),
    ("RoPE.apply_varlen-far", ROPE.apply_varlen, (XV, CU), {"offset": 2**40}, None),
    ("apply_rope_varlen", posemb.apply_rope_varlen, (XV, CU, VC[:56], VS[:56]),
     {"offset": OFFS}, near(R.apply_rope_varlen(XV.astype(np.float64), CU, VC[:56], VS[:56],
                                               offset=OFFS))),
    ("apply_rope_varlen-out", posemb.apply_rope_varlen, (XV, CU, VC, VS), {"out": OUTV}, None),
    ("convert_rope_layout", posemb.convert_rope_layout, (WQ, 4), {},
     equal(R.convert_rope_layout(WQ, 4))),
    ("mrope_cos_sin", posemb.mrope_cos_sin, (MPOS, 64, [8, 12, 12]), {},
     near(R.mrope_cos_sin(MPOS, 64, [8, 12, 12]))),
    ("apply_multimodal_rotary_pos_emb", posemb.apply_multimodal_rotary_pos_emb,
     (XB[:1, :, :16], XB[:1, :2, :16], MC, MS, [8, 12, 12]), {}, None),
    ("axial_rope_cos_sin", posemb.axial_rope_cos_sin, (GRID, 64), {},
     near(R.axial_rope_cos_sin(GRID, 64))),
    ("xpos_cos_sin", posemb.xpos_cos_sin, (POS, 64), {"center": 8},
     near(R.xpos_cos_sin(POS, 64, center=8))),
    ("alibi_bias-out", posemb.alibi_bias, (8, 16, 16), {"out": OUT_ALIBI},
     near(R.alibi_bias(R.alibi_slopes(8), 16, 16))),
    ("t5_relative_bias-out", posemb.t5_relative_bias, (T5T, 16, 16), {"out": OUT_T5},
     near(R.t5_bias(T5T, 16, 16))),
]

#: calls that must raise (error paths are where references leak)
BAD = np.ones((3, 5), np.float32)
ERROR_CALLS = [
    ("apply_rope-error", posemb.apply_rope, (X, BAD, SIN), {}),
    ("rotate_half-error", posemb.rotate_half, (np.ones((3, 5), np.float32),), {}),
    ("RoPE-error", ROPE, (BAD,), {}),
    ("learned_pe_forward-error", posemb.learned_pe_forward, (X, W, POS + 30), {}),
    ("t5_relative_bias-error", posemb.t5_relative_bias, (T5T, 16, 16), {"max_distance": 4}),
    ("rope_scaling_parameters-error", posemb.rope_scaling_parameters,
     (64, 10000.0, {"rope_type": "linear"}), {}),
    ("RoPE.apply_qk-error", ROPE.apply_qk, (Q4, K4[..., :8]), {}),
    ("apply_rope_varlen-error", posemb.apply_rope_varlen, (XV, CU, VC[:8], VS[:8]), {}),
    ("apply_rope_varlen-error-cu", posemb.apply_rope_varlen, (XV, CU[::-1], VC, VS), {}),
    ("convert_rope_layout-error", posemb.convert_rope_layout, (WQ, 3), {}),
    ("mrope_cos_sin-error", posemb.mrope_cos_sin, (MPOS, 64, [8, 12, 11]), {}),
    ("xpos_cos_sin-error", posemb.xpos_cos_sin, (POS + 2**40, 64), {}),
    ("_core._rope_varlen-error", posemb._core._rope_varlen,
     (XV, CU, None, VC[:8], VS[:8], False, False, OUTV), {}),
    ("_core._t5_bias-error", posemb._core._t5_bias, (T5T, np.empty((3, 16, 16), np.float32),
                                                     True, 128, 0), {}),
    ("_core._learned_back-error", posemb._core._learned_back,
     (X[0], POS + 99, np.zeros((32, 64), np.float32)), {}),
]


#: public callables not called from here, and why
NOT_REGISTERED = {
    "bench": "runs the benchmark table (seconds to minutes); tests/test_main.py calls it",
}


def public_names() -> set[str]:
    """Every public callable of posemb and every public method of its classes
    (less :data:`NOT_REGISTERED`)."""
    names = set()
    for n in posemb.__all__:
        if n in NOT_REGISTERED:
            continue
        obj = getattr(posemb, n)
        if not callable(obj):
            continue
        names.add(n)
        if isinstance(obj, type):
            for m, v in vars(obj).items():
                if callable(v) and (not m.startswith("_") or m == "__call__"):
                    names.add(f"{n}.{m}")
    return names


def registered_names() -> set[str]:
    return {name.split("-")[0] for name, *_ in REGISTRY}

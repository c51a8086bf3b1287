"""Call every public function 10,000 times (python tests/leak_check.py [n]) and
print one JSON line per call: refcount change of each input and growth of the
process's RSS and peak RSS (VmRSS/VmHWM, kB) over the calls after a warm-up.
Run in a fresh process by tests/test_refcounts.py.  Inputs are small, and a
few calls take the error path (error paths are where references leak)."""
import json
import sys

import numpy as np

import posemb


def _status(key):
    with open("/proc/self/status") as f:
        return next(int(line.split()[1]) for line in f if line.startswith(key))


rng = np.random.default_rng(0)
X = rng.standard_normal((4, 16, 64)).astype(np.float32)      # 16 KB: a leaked copy shows
XB = rng.standard_normal((2, 4, 64, 64)).astype(np.float32)   # the position-blocked path
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
BAD = np.ones((3, 5), np.float32)
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

CALLS = [
    ("rope_inv_freq", posemb.rope_inv_freq, (64,), {}),
    ("rope_cos_sin", posemb.rope_cos_sin, (POS, 64), {}),
    ("apply_rope", posemb.apply_rope, (X, COS, SIN), {}),
    ("apply_rope-out", posemb.apply_rope, (X, COS, SIN), {"out": OUT}),
    ("apply_rope-grid", posemb.apply_rope, (XB, COSB, SINB), {}),
    ("apply_rope-error", posemb.apply_rope, (X, BAD, SIN), {}),
    ("apply_rope_backward", posemb.apply_rope_backward, (X, COS, SIN), {"interleaved": True}),
    ("apply_rotary_pos_emb", posemb.apply_rotary_pos_emb, (X[None], X[None], COS[None],
                                                           SIN[None]), {}),
    ("rotate_half", posemb.rotate_half, (X,), {}),
    ("neg_half", posemb.neg_half, (X,), {"axis": 1}),
    ("rotate_half-error", posemb.rotate_half, (BAD,), {}),
    ("precompute_freqs_cis", posemb.precompute_freqs_cis, (64, 16), {}),
    ("apply_rotary_emb", posemb.apply_rotary_emb, (X[:, :, None], X[:, :, None], FC), {}),
    ("compute_frequencies", posemb.compute_frequencies, (64, 16), {}),
    ("RoPE", posemb.RoPE, (64, 16), {}),
    ("RoPE.__call__", ROPE, (X,), {"offset": 3}),
    ("RoPE.backward", ROPE.backward, (X, POS), {}),
    ("RoPE.cos_sin", ROPE.cos_sin, (POS,), {}),
    ("RoPE-error", ROPE, (BAD,), {}),
    ("set_num_threads", posemb.set_num_threads, (posemb.get_num_threads(),), {}),
    ("get_num_threads", posemb.get_num_threads, (), {}),
    ("sinusoidal", posemb.sinusoidal, (16, 64), {"start": 5}),
    ("add_sinusoidal", posemb.add_sinusoidal, (X,), {}),
    ("AbsolutePE", posemb.AbsolutePE, (64, 16), {}),
    ("AbsolutePE.__call__", APE, (X,), {"start": 2}),
    ("learned_pe_forward", posemb.learned_pe_forward, (X, W, POS), {}),
    ("learned_pe_forward-error", posemb.learned_pe_forward, (X, W, POS + 30), {}),
    ("learned_pe_backward", posemb.learned_pe_backward, (X, POS), {"num_positions": 32}),
    ("LearnedPE", posemb.LearnedPE, (16, 8), {"seed": 0}),
    ("LearnedPE.forward", LPE.forward, (X,), {}),
    ("LearnedPE.backward", LPE.backward, (X,), {}),
    ("t5_relative_position_bucket", posemb.t5_relative_position_bucket, (POS - 8,), {}),
    ("t5_relative_bias", posemb.t5_relative_bias, (T5T, 16, 16), {}),
    ("t5_relative_bias-error", posemb.t5_relative_bias, (T5T, 16, 16), {"max_distance": 4}),
    ("t5_relative_bias_backward", posemb.t5_relative_bias_backward, (G5,),
     {"num_buckets": 32, "query_length": 16, "key_length": 16}),
    ("relative_position_index", posemb.relative_position_index, (16, 16, 4), {}),
    ("relative_embeddings", posemb.relative_embeddings, (SHT, 16, 16), {}),
    ("relative_embeddings_backward", posemb.relative_embeddings_backward, (SHG, 4, 16, 16), {}),
    ("alibi_slopes", posemb.alibi_slopes, (12,), {}),
    ("alibi_bias", posemb.alibi_bias, (8, 16, 16), {}),
    ("causal_mask", posemb.causal_mask, (16, 32), {"window": 4}),
    ("padding_mask", posemb.padding_mask, (POS, 16), {"side": "left"}),
    ("to_additive", posemb.to_additive, (MASK,), {}),
    ("create_causal_mask", posemb.create_causal_mask, (16,), {}),
    ("create_padding_mask", posemb.create_padding_mask, (POS, 16), {}),
    ("scaled_dot_product_attention", posemb.scaled_dot_product_attention, (X, X, X),
     {"mask": MASK}),
    ("rope_scaling_parameters", posemb.rope_scaling_parameters, (64, 10000.0, YARN), {}),
    ("rope_scaling_parameters-error", posemb.rope_scaling_parameters,
     (64, 10000.0, {"rope_type": "linear"}), {}),
    ("rope_inv_freq-scaling", posemb.rope_inv_freq, (64,),
     {"scaling": DYN, "max_position_embeddings": 16, "seq_len": 40}),
    ("rope_cos_sin-scaling", posemb.rope_cos_sin, (POS, 64), {"scaling": YARN}),
    ("rope_config", posemb.rope_config, (LLAMA,), {}),
    ("rope_config-layer_type", posemb.rope_config,
     ({"model_type": "gemma3_text", "head_dim": 8, "rope_local_base_freq": 1e4},),
     {"layer_type": "sliding_attention"}),
    ("rope_convention", posemb.rope_convention, ({"model_type": "deepseek_v3"},), {}),
    ("RopeConvention", posemb.RopeConvention, ("interleaved", "repeat"), {}),
    ("layer_rope_parameters", posemb.layer_rope_parameters,
     ({"model_type": "gemma3_text", "rope_local_base_freq": 1e4},), {}),
    ("RoPE-scaling", posemb.RoPE, (64, 16), {"scaling": YARN}),
    ("RoPE.__call__-dynamic", ROPE_DYN, (X,), {"offset": 20}),
    ("RoPE.__call__-offset-array", ROPE, (XB[:, :, :16],), {"offset": np.array([3, 9])}),
    ("RoPE.backward-offset-array", ROPE.backward, (XB[:, :, :16],),
     {"offset": np.array([3, 9])}),
    ("RoPE.apply_qk", ROPE.apply_qk, (Q4, K4), {"offset": np.array([1, 5])}),
    ("RoPE.apply_qk-error", ROPE.apply_qk, (Q4, K4[..., :8]), {}),
    ("RoPE.apply_varlen", ROPE.apply_varlen, (XV, CU), {"offset": OFFS}),
    ("RoPE.apply_varlen-far", ROPE.apply_varlen, (XV, CU), {"offset": 2**40}),
    ("apply_rope_varlen", posemb.apply_rope_varlen, (XV, CU, VC[:56], VS[:56]),
     {"offset": OFFS}),
    ("apply_rope_varlen-out", posemb.apply_rope_varlen, (XV, CU, VC, VS), {"out": OUTV}),
    ("apply_rope_varlen-error", posemb.apply_rope_varlen, (XV, CU, VC[:8], VS[:8]), {}),
    ("apply_rope_varlen-error-cu", posemb.apply_rope_varlen, (XV, CU[::-1], VC, VS), {}),
    ("_core._rope_varlen-error", posemb._core._rope_varlen,
     (XV, CU, None, VC[:8], VS[:8], False, False, OUTV), {}),
    ("convert_rope_layout", posemb.convert_rope_layout, (WQ, 4), {}),
    ("convert_rope_layout-error", posemb.convert_rope_layout, (WQ, 3), {}),
    ("mrope_cos_sin", posemb.mrope_cos_sin, (MPOS, 64, [8, 12, 12]), {}),
    ("mrope_cos_sin-error", posemb.mrope_cos_sin, (MPOS, 64, [8, 12, 11]), {}),
    ("apply_multimodal_rotary_pos_emb", posemb.apply_multimodal_rotary_pos_emb,
     (XB[:1, :, :16], XB[:1, :2, :16], MC, MS, [8, 12, 12]), {}),
    ("axial_rope_cos_sin", posemb.axial_rope_cos_sin, (GRID, 64), {}),
    ("xpos_cos_sin", posemb.xpos_cos_sin, (POS, 64), {"center": 8}),
    ("xpos_cos_sin-error", posemb.xpos_cos_sin, (POS + 2**40, 64), {}),
    ("alibi_bias-out", posemb.alibi_bias, (8, 16, 16), {"out": OUT_ALIBI}),
    ("t5_relative_bias-out", posemb.t5_relative_bias, (T5T, 16, 16), {"out": OUT_T5}),
    ("_core._t5_bias-error", posemb._core._t5_bias, (T5T, np.empty((3, 16, 16), np.float32),
                                                     True, 128, 0), {}),
    ("_core._learned_back-error", posemb._core._learned_back,
     (X[0], POS + 99, np.zeros((32, 64), np.float32)), {}),
]


def run(fn, args, kwargs, n):
    for _ in range(n):
        try:
            fn(*args, **kwargs)
        except (TypeError, ValueError, IndexError):
            pass


def refcounts(arrays):
    return [sys.getrefcount(a) for a in arrays]


def main(n):
    for name, fn, args, kwargs in CALLS:
        inputs = [a for a in list(args) + list(kwargs.values()) if isinstance(a, np.ndarray)]
        run(fn, args, kwargs, 1000)                        # warm caches and the allocator
        refs = refcounts(inputs)
        rss, hwm = _status("VmRSS"), _status("VmHWM")
        run(fn, args, kwargs, n)
        drefs = [after - before for after, before in zip(refcounts(inputs), refs)]
        print(json.dumps({"name": name, "calls": n, "refcount_delta": drefs,
                          "rss_kb": _status("VmRSS") - rss, "hwm_kb": _status("VmHWM") - hwm}),
              flush=True)


if __name__ == "__main__":
    main(int(sys.argv[1]) if len(sys.argv) > 1 else 10_000)

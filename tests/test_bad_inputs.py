"""Bad input never crashes: every public function and method, each argument
given the wrong type, dtype, rank or shape, size 0, odd sizes, bad positions,
NaN/inf, huge sizes, odd layouts (non-contiguous, reversed, zero-stride,
byte-swapped, read-only, unaligned) and bad or overlapping ``out=``.

Table-driven: each public callable has a spec (a good call plus a kind for
each argument); generic variants per kind are generated from it.  Every case
either raises a clear exception naming the argument, or returns the result
the same call gives on plain C-contiguous copies of its inputs (or the
float64 oracle of posemb._reference).  Inputs other than ``out`` are never
modified.  ``test_case_count`` prints how many cases ran.
"""
import contextlib
import os
import resource

import numpy as np
import pytest

import posemb
from posemb import _reference as R

from _layouts import lay

# ------------------------------------------------------------------ kinds

F, SIZE, OFFSET, POS, REAL, DTYPE, FLAG, OUT, CHOICE, OTHER = (
    "float", "size", "offset", "pos", "real", "dtype", "flag", "out", "choice", "other")
OFFSETS, CUSEQ, SCALING, SECTIONS, OUTC = ("offsets", "cu_seqlens", "scaling", "sections",
                                            "out_c")


class Spec:
    """A public callable with a good call and a kind for each argument.

    kinds[name] = (kind, options); options by kind:
      float: bad_shapes (list of ValueError shapes), optional (None is allowed)
      size:  minimum, optional, odd (odd values are a ValueError)
      pos:   err (IndexError or ValueError for negative/too large), top
      real:  positive
      out:   -
    """

    def __init__(self, name, fn, args, kinds, oracle=None, tol=0.0):
        self.name, self.fn, self.args, self.kinds = name, fn, dict(args), kinds
        self.oracle, self.tol = oracle, tol


def _rotate_pairs_oracle(x):
    """TorchLean's rotatePairs as a signed permutation: output i takes input
    i + 1 negated (i even) or i - 1 (i odd); an unpaired last entry stays."""
    d = x.shape[-1]
    perm = [i + 1 if i % 2 == 0 else i - 1 for i in range(d - d % 2)] + [d - 1] * (d % 2)
    sign = [-1.0 if i % 2 == 0 else 1.0 for i in range(d - d % 2)] + [1.0] * (d % 2)
    return x[..., perm] * np.array(sign)


def _x(shape, dtype=np.float32, seed=0):
    return np.random.default_rng(seed).standard_normal(shape).astype(dtype)


X = _x((2, 3, 8))
COS, SIN = posemb.rope_cos_sin(np.arange(3), 8)
ROPE = posemb.RoPE(8, 6, rotary_dim=6)
APE = posemb.AbsolutePE(8, 6)
LPE = posemb.LearnedPE(6, 8, seed=1)
T5T = _x((32, 2))
T5G = _x((2, 3, 4))
SHT = _x((5, 3))
SHG = _x((3, 4, 3))


def rope_oracle(backward):
    def f(x, cos, sin, interleaved=False, out=None):
        fn = R.apply_rope_backward if backward else R.apply_rope
        return fn(np.array(x, np.float64), np.array(cos, np.float64), np.array(sin, np.float64),
                  interleaved=bool(interleaved))
    return f


# RoPE scaling and variants
XV = _x((7, 2, 8))                       # packed: sequences of 3, 0 and 4 tokens
CU = np.array([0, 3, 3, 7])
VC, VS = posemb.rope_cos_sin(np.arange(6), 6)      # 6 rows, partial rotary (r = 6 < 8)
DYN = {"rope_type": "dynamic", "factor": 2.0}
MPOS = np.stack([np.zeros(6, int), np.arange(6) // 3, np.arange(6) % 3])[:, None]  # (3, 1, 6)
MC, MS = posemb.rope_cos_sin(np.tile(np.arange(5), (3, 1, 1)) * [[[1]], [[2]], [[3]]], 16)
GRID = np.stack([a.ravel() for a in np.indices((4, 6))], axis=-1)                  # (24, 2)
LLAMA = {"hidden_size": 64, "num_attention_heads": 4, "rope_theta": 500000.0,
         "max_position_embeddings": 256,
         "rope_scaling": {"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0,
                          "high_freq_factor": 4.0, "original_max_position_embeddings": 32}}


def _rope_positions(x, positions, offset):
    if positions is not None:
        return np.asarray(positions)
    x = np.asarray(x)
    off = np.asarray(offset, dtype=np.int64)
    if off.ndim == 1:
        off = off.reshape((-1,) + (1,) * (x.ndim - 2))
    return off + np.arange(x.shape[-2])


def rope_module_oracle(backward, r=6):
    def f(x, positions=None, offset=0, out=None, grad=None):
        x = grad if x is None else x
        cos, sin = R.rope_cos_sin(_rope_positions(x, positions, offset), r)
        fn = R.apply_rope_backward if backward else R.apply_rope
        return fn(np.array(x, np.float64), cos, sin)
    return f


def apply_qk_oracle(q, k, positions=None, offset=0, inplace=False):
    cos, sin = R.rope_cos_sin(_rope_positions(q, positions, offset), 6)
    return R.apply_rope(q, cos, sin), R.apply_rope(k, cos, sin)


def varlen_oracle(x, cu_seqlens, cos, sin, interleaved=False, offset=0, out=None):
    return R.apply_rope_varlen(x, cu_seqlens, cos, sin, interleaved=bool(interleaved),
                               offset=offset)


def rope_varlen_module_oracle(x, cu_seqlens, offset=0, out=None):
    rows = int(np.max(np.asarray(offset), initial=0)) + np.asarray(x).shape[0] + 1
    cos, sin = R.rope_cos_sin(np.arange(rows), 6)
    return R.apply_rope_varlen(x, cu_seqlens, cos, sin, offset=offset)


def scaled_cos_sin_oracle(positions, dim, base, scaling, max_position_embeddings, seq_len,
                          interleaved, dtype):
    pos = np.asarray(positions)
    if seq_len is None and pos.size:
        seq_len = int(pos.max()) + 1
    inv, attn = R.rope_scaling(dim, base, scaling, max_position_embeddings=max_position_embeddings,
                               seq_len=seq_len)
    cos, sin = R._band_tables([pos], [inv], bool(interleaved))
    return cos * attn, sin * attn


def multimodal_oracle(q, k, cos, sin, mrope_section, unsqueeze_dim=1):
    cos, sin = np.asarray(cos, np.float64), np.asarray(sin, np.float64)
    sections = [int(v) for v in np.asarray(mrope_section).reshape(-1)]
    h = cos.shape[-1] // 2
    cs, sn = np.empty(cos.shape[1:]), np.empty(sin.shape[1:])
    a = 0
    for j, w in enumerate(sections):
        for lo in (a, h + a):
            cs[..., lo:lo + w], sn[..., lo:lo + w] = cos[j, ..., lo:lo + w], sin[j, ..., lo:lo + w]
        a += w
    cs, sn = np.expand_dims(cs, unsqueeze_dim), np.expand_dims(sn, unsqueeze_dim)
    return R.apply_rope(q, cs, sn), R.apply_rope(k, cs, sn)


def mrope_oracle(positions, dim, mrope_section, base, interleaved, dtype, scaling,
                 max_position_embeddings):
    pos = np.asarray(positions)
    sections = [int(v) for v in np.asarray(mrope_section).reshape(-1)]
    inv, attn = R.rope_scaling(dim, base, scaling, max_position_embeddings=max_position_embeddings,
                               seq_len=int(pos.max()) + 1 if pos.size else None)
    bounds = np.cumsum([0] + sections)
    cos, sin = R._band_tables([pos[j] for j in range(len(sections))],
                              [inv[bounds[j]:bounds[j + 1]] for j in range(len(sections))],
                              bool(interleaved))
    return cos * attn, sin * attn


MROPE_SCALING_GOOD = [("none", None), ("mrope", {"type": "mrope", "mrope_section": [2, 3, 3]}),
                      ("linear", {"rope_type": "linear", "factor": 4.0}),
                      ("yarn", {"rope_type": "yarn", "factor": 4.0,
                                "original_max_position_embeddings": 4})]
MROPE_SCALING_BAD = [("linear", TypeError, "scaling"), ({"rope_type": "ntk"}, ValueError, "scaling"),
                     ({"rope_type": "linear", "factor": "2"}, TypeError, "scaling"),
                     ({"rope_type": "dynamic", "factor": 2.0}, ValueError,
                      "max_position_embeddings")]


def _rope_config_summary(config, seq_len=None, dtype=np.float32):
    rope = posemb.rope_config(config, seq_len=seq_len, dtype=dtype)
    return rope.inv_freq, rope.cos_cached, rope.sin_cached


SCALING_GOOD = [
    ("None", None), ("empty", {}), ("default", {"rope_type": "default"}),
    ("type-key", {"type": "linear", "factor": 2.0}), ("int-factor", {"rope_type": "linear", "factor": 2}),
    ("numpy-factor", {"rope_type": "linear", "factor": np.float32(2.0)}),
    ("dynamic-extra-keys", {"rope_type": "dynamic", "factor": 4.0, "rope_theta": 1.0}),
    ("yarn", {"rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": 8}),
    ("yarn-from-max-pos", {"rope_type": "yarn", "factor": 4.0, "beta_fast": 8, "beta_slow": 2}),
    ("yarn-mscale", {"rope_type": "yarn", "factor": 4.0, "mscale": 0.7, "mscale_all_dim": 0.5,
                     "truncate": False}),
    ("longrope", {"rope_type": "longrope", "short_factor": [1.0, 1.5, 2, 3],
                  "long_factor": (2, 3, 4, 5.0), "original_max_position_embeddings": 8}),
    ("longrope-array", {"rope_type": "longrope", "short_factor": np.ones(4),
                        "long_factor": np.full(4, 2, np.int32), "factor": 4.0}),
    ("llama3", {"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0,
                "high_freq_factor": 4.0, "original_max_position_embeddings": 8}),
    ("mrope", {"type": "mrope", "mrope_section": [1, 1, 2]}),
]
_LR = {"rope_type": "longrope", "short_factor": [1.0] * 4, "long_factor": [2.0] * 4}
_Y = {"rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": 8}
SCALING_BAD = [
    ("type-list", [("rope_type", "linear")], TypeError), ("type-str", "linear", TypeError),
    ("type-float", 2.0, TypeError), ("rope_type-int", {"rope_type": 3}, TypeError),
    ("rope_type-None", {"rope_type": None, "factor": 2.0}, ValueError),
    ("unknown-type", {"rope_type": "ntk-by-parts", "factor": 2.0}, ValueError),
    ("no-type", {"factor": 2.0}, ValueError),
    ("missing-factor", {"rope_type": "linear"}, ValueError),
    ("factor-None", {"rope_type": "linear", "factor": None}, ValueError),
    ("factor-str", {"rope_type": "linear", "factor": "2"}, TypeError),
    ("factor-bool", {"rope_type": "dynamic", "factor": True}, TypeError),
    ("factor-list", {"rope_type": "linear", "factor": [2.0]}, TypeError),
    ("factor-array", {"rope_type": "linear", "factor": np.array([2.0, 3.0])}, TypeError),
    ("factor-complex", {"rope_type": "linear", "factor": 2j}, TypeError),
    ("factor-0", {"rope_type": "linear", "factor": 0}, ValueError),
    ("factor-negative", {"rope_type": "dynamic", "factor": -2.0}, ValueError),
    ("factor-nan", {"rope_type": "linear", "factor": float("nan")}, ValueError),
    ("factor-inf", {"rope_type": "yarn", "factor": float("inf")}, ValueError),
    ("yarn-orig-str", dict(_Y, original_max_position_embeddings="8"), TypeError),
    ("yarn-orig-float", dict(_Y, original_max_position_embeddings=8.5), TypeError),
    ("yarn-orig-0", dict(_Y, original_max_position_embeddings=0), ValueError),
    ("yarn-beta-str", dict(_Y, beta_fast="32"), TypeError),
    ("yarn-beta-negative", dict(_Y, beta_slow=-1.0), ValueError),
    ("yarn-mscale-str", dict(_Y, mscale="1", mscale_all_dim=1.0), TypeError),
    ("yarn-attention-nan", dict(_Y, attention_factor=float("nan")), ValueError),
    ("yarn-truncate-str", dict(_Y, truncate="no"), TypeError),
    ("longrope-missing", {"rope_type": "longrope", "short_factor": [1.0] * 4}, ValueError),
    ("longrope-length", dict(_LR, short_factor=[1.0] * 3), ValueError),
    ("longrope-2d", dict(_LR, long_factor=[[2.0] * 4]), ValueError),
    ("longrope-str", dict(_LR, short_factor="abcd"), TypeError),
    ("longrope-bool", dict(_LR, long_factor=[True] * 4), TypeError),
    ("longrope-None-entries", dict(_LR, short_factor=[None] * 4), (TypeError, ValueError)),
    ("longrope-negative", dict(_LR, short_factor=[-1.0] * 4), ValueError),
    ("longrope-nan", dict(_LR, long_factor=[float("nan")] * 4), ValueError),
    ("longrope-orig-1", dict(_LR, original_max_position_embeddings=1, factor=4.0), ValueError),
    ("llama3-missing", {"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0,
                        "original_max_position_embeddings": 8}, ValueError),
    ("llama3-low-above-high", {"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 4.0,
                               "high_freq_factor": 1.0, "original_max_position_embeddings": 8},
     ValueError),
    ("llama3-orig-str", {"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0,
                         "high_freq_factor": 4.0, "original_max_position_embeddings": "8"},
     TypeError),
]

CONFIG_GOOD = [
    ("llama3", LLAMA), ("head_dim", {"head_dim": 8}),
    ("gptj", {"n_embd": 64, "n_head": 4, "rotary_dim": 8, "model_type": "gptj"}),
    ("neox", {"hidden_size": 64, "num_attention_heads": 4, "rotary_pct": 0.5,
              "rotary_emb_base": 100.0}),
    ("text_config", {"text_config": {"head_dim": 8, "rope_scaling": DYN,
                                     "max_position_embeddings": 16}}),
    ("v5-rope_parameters", {"head_dim": 8, "rope_parameters": {"rope_type": "default",
                                                               "rope_theta": 100.0}}),
    ("phi3", {"head_dim": 8, "max_position_embeddings": 64, "original_max_position_embeddings": 16,
              "rope_scaling": {"type": "longrope", "short_factor": [1] * 4,
                               "long_factor": [2] * 4}}),
    ("deepseek", {"qk_rope_head_dim": 8, "head_dim": 24, "rope_interleave": True,
                  "max_position_embeddings": 64,
                  "rope_scaling": {"type": "yarn", "factor": 4.0,
                                   "original_max_position_embeddings": 16}}),
    ("rope_scaling-None", {"head_dim": 8, "rope_scaling": None}),
    ("glm4", {"model_type": "glm4", "head_dim": 16}),
    ("cohere", {"architectures": ["CohereForCausalLM"], "head_dim": 8}),
    ("proportional", {"head_dim": 8, "rope_parameters": {"rope_type": "proportional",
                                                         "partial_rotary_factor": 0.5}}),
]
CONFIG_BAD = [
    (["head_dim", 8], TypeError, "config"), ("config.json", TypeError, "config"),
    (None, TypeError, "config"), ({}, ValueError, "config"),
    ({"hidden_size": "64", "num_attention_heads": 4}, TypeError, "hidden_size"),
    ({"hidden_size": 64, "num_attention_heads": 0}, ValueError, "num_attention_heads"),
    ({"hidden_size": 4, "num_attention_heads": 8}, ValueError, "rotary width"),
    ({"head_dim": 7}, ValueError, "rotary width"), ({"head_dim": 8.0}, TypeError, "head_dim"),
    ({"head_dim": 8, "rope_theta": "theta"}, TypeError, "rope_theta"),
    ({"head_dim": 8, "rope_theta": -1.0}, ValueError, "rope_theta"),
    ({"head_dim": 8, "partial_rotary_factor": 0}, ValueError, "partial_rotary_factor"),
    ({"head_dim": 8, "partial_rotary_factor": 2}, ValueError, "partial_rotary_factor"),
    ({"head_dim": 8, "partial_rotary_factor": 0.1}, ValueError, "rotary width"),
    ({"head_dim": 8, "rotary_dim": 10}, ValueError, "rotary_dim"),
    ({"head_dim": 8, "rope_scaling": ["linear"]}, TypeError, "rope_scaling"),
    ({"head_dim": 8, "rope_scaling": {"rope_type": "su"}}, ValueError, "rope_type"),
    ({"head_dim": 8, "rope_scaling": {"rope_type": "yarn", "factor": 2.0}}, ValueError,
     "original"),
    ({"head_dim": 8, "max_position_embeddings": "4096"}, TypeError, "max_position_embeddings"),
    ({"head_dim": 8, "max_position_embeddings": 0}, ValueError, "max_position_embeddings"),
    ({"head_dim": 8, "rope_interleave": "no"}, TypeError, "rope_interleave"),
    ({"model_type": "gemma3_text", "head_dim": 8, "rope_local_base_freq": 1e4}, ValueError,
     "layer_type"),
]
GEMMA3 = {"model_type": "gemma3_text", "head_dim": 8, "rope_theta": 1e6,
          "rope_local_base_freq": 1e4, "rope_scaling": {"rope_type": "linear", "factor": 8.0}}


SPECS = [
    Spec("rope_inv_freq", posemb.rope_inv_freq, dict(dim=8, base=10000.0),
         dict(dim=(SIZE, {}), base=(REAL, dict(positive=True)))),
    Spec("rope_cos_sin", posemb.rope_cos_sin,
         dict(positions=np.arange(3), dim=8, base=10000.0, interleaved=False, dtype=np.float32),
         dict(positions=(POS, dict(err=ValueError, top=2**53)), dim=(SIZE, {}),
              base=(REAL, dict(positive=True)), interleaved=(FLAG, {}), dtype=(DTYPE, {}))),
    Spec("apply_rope", posemb.apply_rope,
         dict(x=X, cos=COS, sin=SIN, interleaved=False, out=None),
         dict(x=(F, dict(bad_shapes=[(), (2, 3, 6), (2, 3, 7)])),
              cos=(F, dict(bad_shapes=[(), (3, 10), (3, 7), (2, 8)])),
              sin=(F, dict(bad_shapes=[(), (3, 6), (3, 7), (4, 8)])),
              interleaved=(FLAG, {}), out=(OUT, {})),
         oracle=rope_oracle(False), tol=1e-5),
    Spec("apply_rope_backward", posemb.apply_rope_backward,
         dict(grad=X, cos=COS, sin=SIN, interleaved=True, out=None),
         dict(grad=(F, dict(bad_shapes=[(), (2, 3, 6)])),
              cos=(F, dict(bad_shapes=[(), (3, 10), (3, 5)])),
              sin=(F, dict(bad_shapes=[(), (3, 6)])), interleaved=(FLAG, {}), out=(OUT, {})),
         oracle=lambda grad, cos, sin, interleaved, out: rope_oracle(True)(grad, cos, sin,
                                                                            interleaved),
         tol=1e-5),
    Spec("apply_rotary_pos_emb", posemb.apply_rotary_pos_emb,
         dict(q=_x((1, 2, 3, 8)), k=_x((1, 1, 3, 8)), cos=COS[None], sin=SIN[None],
              unsqueeze_dim=1),
         dict(q=(F, dict(bad_shapes=[(), (1, 2, 3, 6)])), k=(F, dict(bad_shapes=[(1, 1, 3, 4)])),
              cos=(F, dict(bad_shapes=[(), (1, 3, 10)])), sin=(F, dict(bad_shapes=[(1, 3, 6)])),
              unsqueeze_dim=(OFFSET, dict(bad=[(7, ValueError), (2**40, ValueError),
                                               (-9, ValueError)])))),
    Spec("rotate_half", posemb.rotate_half, dict(x=X),
         dict(x=(F, dict(bad_shapes=[(), (3, 7), (0, 5)]))),
         oracle=lambda x: R.rotate_half(np.array(x, np.float64))),
    Spec("rotate_pairs", posemb.rotate_pairs, dict(x=X),
         dict(x=(F, dict(bad_shapes=[()]))),
         oracle=lambda x: _rotate_pairs_oracle(np.array(x, np.float64))),
    Spec("neg_half", posemb.neg_half, dict(x=X, axis=-1),
         dict(x=(F, dict(bad_shapes=[(), (3, 7)])),
              axis=(OFFSET, dict(bad=[(3, ValueError), (1, ValueError), (2**40, ValueError),
                                      (-4, ValueError)]))),
         oracle=lambda x, axis: R.rotate_half(np.array(x, np.float64), axis)),
    Spec("precompute_freqs_cis", posemb.precompute_freqs_cis,
         dict(dim=8, end=5, theta=10000.0),
         dict(dim=(SIZE, {}), end=(SIZE, {}), theta=(REAL, dict(positive=True)))),
    Spec("apply_rotary_emb", posemb.apply_rotary_emb,
         dict(xq=_x((1, 3, 2, 8)), xk=_x((1, 3, 1, 8)),
              freqs_cis=posemb.precompute_freqs_cis(8, 3)),
         dict(xq=(F, dict(bad_shapes=[(), (1, 3, 2, 6), (1, 4, 2, 8), (3, 8)])),
              xk=(F, dict(bad_shapes=[(1, 3, 1, 7)])),
              freqs_cis=(OTHER, dict(bad=[(np.ones((3, 4)), TypeError),
                                          (np.ones((3, 3), complex), ValueError),
                                          (np.ones(12, complex), ValueError),
                                          ("x", TypeError), (None, TypeError)])))),
    Spec("compute_frequencies", posemb.compute_frequencies, dict(dim=8, seq_len=5, base=100.0),
         dict(dim=(SIZE, dict(odd=True)), seq_len=(SIZE, {}), base=(REAL, dict(positive=True)))),
    Spec("RoPE", posemb.RoPE,
         dict(head_size=8, seq_len=6, base=10000.0, scale=1.0, interleaved=False, rotary_dim=6,
              dtype=np.float32),
         dict(head_size=(SIZE, {}), seq_len=(SIZE, {}),
              base=(REAL, dict(positive=True)), scale=(REAL, {}), interleaved=(FLAG, {}),
              rotary_dim=(SIZE, dict(optional=True, bad=[(10, ValueError)])),
              dtype=(DTYPE, {}))),
    Spec("RoPE.__call__", ROPE, dict(x=X, positions=None, offset=0, out=None),
         dict(x=(F, dict(bad_shapes=[(), (2, 3, 6), (8,)])),
              positions=(POS, dict(err=ValueError, top=2**53, optional=True, shape=(3,))),
              offset=(OFFSETS, dict(valid=np.array([1, 4]), top=2**53, err=ValueError)),
              out=(OUT, {})),
         oracle=rope_module_oracle(False), tol=1e-5),
    Spec("RoPE.backward", ROPE.backward, dict(grad=X, positions=np.arange(3), offset=0, out=None),
         dict(grad=(F, dict(bad_shapes=[(), (2, 3, 6)])),
              positions=(POS, dict(err=ValueError, top=2**53, optional=True, shape=(3,))),
              offset=(OFFSETS, dict(valid=np.array([7, 0]), top=2**53, err=ValueError)),
              out=(OUT, {})),
         oracle=lambda grad, positions, offset, out: rope_module_oracle(True)(
             grad, positions, offset), tol=1e-5),
    Spec("RoPE.cos_sin", ROPE.cos_sin, dict(positions=None, offset=2, seq_len=3, dtype=None),
         dict(positions=(POS, dict(err=ValueError, top=2**53, optional=True, shape=(3,))),
              offset=(SIZE, {}), seq_len=(SIZE, {}), dtype=(DTYPE, dict(optional=True)))),
    Spec("set_num_threads", posemb.set_num_threads, dict(n=posemb.get_num_threads()),
         dict(n=(SIZE, dict(minimum=1)))),
    Spec("set_output_cache", posemb.set_output_cache,
         dict(max_bytes=int(posemb._native._out_cache(None)[0])),
         dict(max_bytes=(SIZE, {}))),
    Spec("show_config", posemb.show_config, dict(print_=False), dict(print_=(FLAG, {}))),
    Spec("sinusoidal", posemb.sinusoidal,
         dict(seq_len=5, dim=7, base=10000.0, start=3, layout="concat", dtype=np.float64),
         dict(seq_len=(SIZE, {}), dim=(SIZE, {}), base=(REAL, dict(positive=True)),
              start=(SIZE, {}), layout=(CHOICE, {}), dtype=(DTYPE, {}))),
    Spec("add_sinusoidal", posemb.add_sinusoidal,
         dict(x=X, start=2, base=10000.0, layout="interleaved", out=None),
         dict(x=(F, dict(bad_shapes=[(), (8,)])), start=(SIZE, {}),
              base=(REAL, dict(positive=True)), layout=(CHOICE, {}), out=(OUT, {})),
         oracle=lambda x, start, base, layout, out: np.array(x, np.float64) + R.sinusoidal(
             x.shape[-2], x.shape[-1], base=base, start=start, layout=layout), tol=1e-6),
    Spec("AbsolutePE", posemb.AbsolutePE,
         dict(embedding_size=8, max_length=6, base=10000.0, dtype=np.float32),
         dict(embedding_size=(SIZE, {}), max_length=(SIZE, {}),
              base=(REAL, dict(positive=True)), dtype=(DTYPE, {}))),
    Spec("AbsolutePE.__call__", APE,
         dict(x=X, start=1, out=None, seq_axis=-2, feature_axis=-1),
         dict(x=(F, dict(bad_shapes=[(), (8,), (2, 3, 7), (2, 7, 8)])),
              start=(SIZE, dict(bad=[(4, ValueError)])), out=(OUT, {}),
              seq_axis=(OFFSET, dict(optional=True, bad=[(-1, ValueError), (3, ValueError), (2**70, ValueError)])),
              feature_axis=(OFFSET, dict(optional=True, bad=[(-2, ValueError), (-4, ValueError)])))),
    Spec("learned_pe_forward", posemb.learned_pe_forward,
         dict(x=X, weight=_x((6, 8)), positions=np.array([5, 0, 2]), offset=0, out=None),
         dict(x=(F, dict(bad_shapes=[(), (2, 3, 7)])),
              weight=(F, dict(bad_shapes=[(), (8,), (6, 7), (1, 6, 8), (6, 9)])),
              positions=(POS, dict(err=IndexError, top=6, optional=True, shape=(3,))),
              offset=(SIZE, dict(bad=[(1, ValueError)])), out=(OUT, {})),
         oracle=lambda x, weight, positions, offset, out: R.learned_forward(
             x, weight, offset + np.arange(x.shape[-2]) if positions is None else positions),
         tol=1e-5),
    Spec("learned_pe_backward", posemb.learned_pe_backward,
         dict(grad_out=X, positions=None, num_positions=6, offset=2),
         dict(grad_out=(F, dict(bad_shapes=[()])),
              positions=(POS, dict(err=IndexError, top=6, optional=True, shape=(3,))),
              num_positions=(SIZE, dict(bad=[(4, IndexError)], match="positions")),
              offset=(SIZE, {})),
         oracle=lambda grad_out, positions, num_positions, offset: R.learned_backward(
             grad_out, offset + np.arange(grad_out.shape[-2]) if positions is None else positions,
             num_positions), tol=1e-5),
    Spec("LearnedPE", posemb.LearnedPE,
         dict(max_length=6, dim=8, dtype=np.float32, std=0.02, seed=0),
         dict(max_length=(SIZE, {}), dim=(SIZE, {}), dtype=(DTYPE, {}), std=(REAL, {}),
              seed=(OTHER, dict(bad=[("x", TypeError), (-1, TypeError), (1.5, TypeError)])))),
    Spec("LearnedPE.forward", LPE.forward, dict(x=X, positions=None, offset=1),
         dict(x=(F, dict(bad_shapes=[(), (2, 3, 7)])),
              positions=(POS, dict(err=IndexError, top=6, optional=True, shape=(3,))),
              offset=(SIZE, dict(bad=[(4, IndexError)], match="positions")))),
    Spec("LearnedPE.backward", LPE.backward, dict(grad_out=X, positions=np.array([1, 1, 5]),
                                                  offset=0),
         dict(grad_out=(F, dict(bad_shapes=[()])),
              positions=(POS, dict(err=IndexError, top=6, optional=True, shape=(3,))),
              offset=(SIZE, dict(bad=[(1, ValueError)])))),
    Spec("t5_relative_position_bucket", posemb.t5_relative_position_bucket,
         dict(relative_position=np.arange(-5, 5), bidirectional=True, num_buckets=32,
              max_distance=128),
         dict(relative_position=(POS, dict(signed=True)), bidirectional=(FLAG, {}),
              num_buckets=(SIZE, dict(minimum=4, bad=[(2**21, ValueError)])),
              max_distance=(SIZE, dict(bad=[(8, ValueError), (2**54, ValueError)])))),
    Spec("t5_relative_bias", posemb.t5_relative_bias,
         dict(table=T5T, query_length=3, key_length=4, bidirectional=True, num_buckets=32,
              max_distance=128, query_offset=1, out=None),
         dict(table=(F, dict(bad_shapes=[(), (32,), (31, 2), (1, 32, 2)])),
              query_length=(SIZE, {}), key_length=(SIZE, {}), bidirectional=(FLAG, {}),
              num_buckets=(SIZE, dict(minimum=4, bad=[(31, ValueError)])),
              max_distance=(SIZE, dict(bad=[(8, ValueError)])),
              query_offset=(OFFSET, dict(bad=[(2**62, ValueError), (-2**62, ValueError)])),
              out=(OUTC, dict(overlap_with="table"))),
         oracle=lambda table, query_length, key_length, bidirectional, num_buckets,
         max_distance, query_offset, out=None: R.t5_bias(table, query_length, key_length,
                                               bidirectional=bidirectional,
                                               num_buckets=num_buckets,
                                               max_distance=max_distance,
                                               query_offset=query_offset)),
    Spec("t5_relative_bias_backward", posemb.t5_relative_bias_backward,
         dict(grad_bias=T5G, num_buckets=32, query_length=3, key_length=4, bidirectional=True,
              max_distance=128, query_offset=0),
         dict(grad_bias=(F, dict(bad_shapes=[(), (3, 4), (2, 4, 3), (2, 3, 5)])),
              num_buckets=(SIZE, dict(minimum=4)), query_length=(SIZE, dict(bad=[(2, ValueError)])),
              key_length=(SIZE, dict(bad=[(5, ValueError)])), bidirectional=(FLAG, {}),
              max_distance=(SIZE, dict(bad=[(8, ValueError)])),
              query_offset=(OFFSET, dict(bad=[(2**62, ValueError)]))),
         oracle=lambda grad_bias, num_buckets, query_length, key_length, bidirectional,
         max_distance, query_offset: R.t5_bias_backward(
             grad_bias, num_buckets=num_buckets, bidirectional=bidirectional,
             max_distance=max_distance, query_offset=query_offset), tol=1e-5),
    Spec("relative_position_index", posemb.relative_position_index,
         dict(query_length=3, key_length=5, max_relative_position=2),
         dict(query_length=(SIZE, {}), key_length=(SIZE, {}), max_relative_position=(SIZE, {}))),
    Spec("relative_embeddings", posemb.relative_embeddings,
         dict(table=SHT, query_length=3, key_length=4),
         dict(table=(F, dict(bad_shapes=[(), (5,), (4, 3), (1, 5, 3)])),
              query_length=(SIZE, {}), key_length=(SIZE, {})),
         oracle=lambda table, query_length, key_length: R.shaw_embeddings(
             table, query_length, key_length)),
    Spec("relative_embeddings_backward", posemb.relative_embeddings_backward,
         dict(grad=SHG, max_relative_position=2, query_length=3, key_length=4),
         dict(grad=(F, dict(bad_shapes=[(), (3, 4), (4, 3, 3), (1, 3, 4, 3)])),
              max_relative_position=(SIZE, {}), query_length=(SIZE, dict(bad=[(4, ValueError)])),
              key_length=(SIZE, dict(bad=[(3, ValueError)]))),
         oracle=lambda grad, max_relative_position, query_length, key_length:
         R.shaw_embeddings_backward(grad, max_relative_position), tol=1e-5),
    Spec("alibi_slopes", posemb.alibi_slopes, dict(num_heads=6, dtype=np.float64),
         dict(num_heads=(SIZE, dict(minimum=1)), dtype=(DTYPE, {}))),
    Spec("alibi_bias", posemb.alibi_bias,
         dict(slopes_or_num_heads=np.array([0.5, 0.25, 1.0]), query_length=3, key_length=5,
              symmetric=False, query_offset=None, dtype=np.float32, out=None),
         dict(slopes_or_num_heads=(F, dict(bad_shapes=[(2, 2)], ints_ok=True, nonfinite=True,
                                           optional_dtypes=("longdouble",))),
              query_length=(SIZE, dict(bad=[(2**53, ValueError)])), key_length=(SIZE, {}),
              symmetric=(FLAG, {}),
              query_offset=(OFFSET, dict(optional=True, bad=[(2**53, ValueError)])),
              dtype=(DTYPE, {}), out=(OUTC, dict(overlap_with="slopes_or_num_heads"))),
         oracle=lambda slopes_or_num_heads, query_length, key_length, symmetric, query_offset,
         dtype, out=None: R.alibi_bias(slopes_or_num_heads, query_length, key_length,
                             symmetric=symmetric, query_offset=query_offset), tol=1e-6),
    Spec("causal_mask", posemb.causal_mask,
         dict(query_length=3, key_length=5, window=2, query_offset=None),
         dict(query_length=(SIZE, {}), key_length=(SIZE, dict(optional=True)),
              window=(SIZE, dict(minimum=1, optional=True)),
              query_offset=(OFFSET, dict(optional=True, bad=[(2**62, ValueError)]))),
         oracle=lambda **kw: R.causal_mask(**kw)),
    Spec("padding_mask", posemb.padding_mask,
         dict(lengths=np.array([0, 3, 5]), max_length=5, side="left"),
         dict(lengths=(POS, dict(err=ValueError, top=6, rank1=True)),
              max_length=(SIZE, dict(bad=[(4, ValueError)])), side=(CHOICE, {})),
         oracle=lambda **kw: R.padding_mask(**kw)),
    Spec("attention_mask", posemb.attention_mask,
         dict(query_length=3, key_length=5, lengths=np.array([2, 5]), causal=True, window=2,
              query_offset=None, side="left"),
         dict(query_length=(SIZE, {}), key_length=(SIZE, dict(optional=True, bad=[(1, ValueError)])),
              lengths=(POS, dict(err=ValueError, top=6, rank1=True, optional=True)),
              causal=(FLAG, {}), window=(SIZE, dict(minimum=1, optional=True)),
              query_offset=(OFFSET, dict(optional=True, bad=[(2**62, ValueError)])),
              side=(CHOICE, {})),
         oracle=lambda query_length, key_length, lengths, causal, window, query_offset, side:
         R.causal_mask(query_length, key_length, window=window, query_offset=query_offset)
         & R.padding_mask(lengths, key_length, side=side)[:, None, None, :]),
    Spec("padding_to_attention_mask", posemb.padding_to_attention_mask,
         dict(mask=posemb.padding_mask([1, 3], 4), true_means="padding"),
         dict(mask=(OTHER, dict(bad=[(np.ones((2, 4)), TypeError), (np.ones(4, bool), ValueError),
                                     ("x", TypeError), (None, TypeError)])),
              true_means=(CHOICE, {})),
         oracle=lambda mask, true_means: ~np.asarray(mask)[:, None, None, :]),
    Spec("to_additive", posemb.to_additive, dict(mask=posemb.causal_mask(3), dtype=np.float16),
         dict(mask=(OTHER, dict(bad=[(np.ones((3, 3)), TypeError), (np.ones(3, int), TypeError),
                                     ("x", TypeError), (None, TypeError)])),
              dtype=(DTYPE, {}))),
    Spec("create_causal_mask", posemb.create_causal_mask, dict(seq_len=4),
         dict(seq_len=(SIZE, {}))),
    Spec("create_padding_mask", posemb.create_padding_mask,
         dict(lengths=np.array([1, 4]), max_len=4),
         dict(lengths=(POS, dict(err=ValueError, top=5, rank1=True)),
              max_len=(SIZE, dict(bad=[(3, ValueError)])))),
    Spec("scaled_dot_product_attention", posemb.scaled_dot_product_attention,
         dict(q=_x((2, 3, 4)), k=_x((2, 5, 4)), v=_x((2, 5, 3)), mask=posemb.causal_mask(3, 5),
              bias=posemb.alibi_bias(2, 3, 5), scale=None),
         dict(q=(F, dict(bad_shapes=[(), (4,), (2, 3, 5), (3, 3, 4)])),
              k=(F, dict(bad_shapes=[(), (2, 5, 3)])), v=(F, dict(bad_shapes=[(2, 4, 3)])),
              mask=(OTHER, dict(bad=[(np.ones((3, 5), int), TypeError), ("x", TypeError),
                                     (np.ones((3, 4), bool), ValueError)])),
              bias=(F, dict(bad_shapes=[(3, 4)], optional=True)),
              scale=(REAL, dict(optional=True))),
         oracle=lambda q, k, v, mask, bias, scale: R.attention(q, k, v, mask=mask, bias=bias,
                                                               scale=scale), tol=1e-5),
    # ---- RoPE scaling and variants
    Spec("RoPE.apply_qk", ROPE.apply_qk,
         dict(q=_x((2, 4, 3, 8)), k=_x((2, 2, 3, 8), seed=1), positions=None,
              offset=np.array([1, 4]), inplace=False),
         dict(q=(F, dict(bad_shapes=[(), (2, 4, 3, 6), (2, 4, 2, 8)])),
              k=(F, dict(bad_shapes=[(), (2, 2, 3, 6), (2, 2, 2, 8), (3, 2, 3, 8)])),
              positions=(POS, dict(err=ValueError, top=2**53, optional=True, shape=(3,))),
              offset=(OFFSETS, dict(valid=np.array([1, 4]), top=2**53, err=ValueError)),
              inplace=(FLAG, {})),
         oracle=apply_qk_oracle, tol=1e-5),
    Spec("RoPE.apply_varlen", ROPE.apply_varlen,
         dict(x=XV, cu_seqlens=CU, offset=np.array([1, 5, 2]), out=None),
         dict(x=(F, dict(bad_shapes=[(), (7, 8), (7, 2, 6), (7, 2, 2, 8)])),
              cu_seqlens=(CUSEQ, dict(total=7)),
              offset=(OFFSETS, dict(valid=np.array([1, 5, 2]), top=2**53, err=ValueError)),
              out=(OUT, dict(strict_dtype=True))),
         oracle=rope_varlen_module_oracle, tol=1e-5),
    Spec("apply_rope_varlen", posemb.apply_rope_varlen,
         dict(x=XV, cu_seqlens=CU, cos=VC, sin=VS, interleaved=False, offset=np.array([1, 2, 2]),
              out=None),
         dict(x=(F, dict(bad_shapes=[(), (7, 8), (7, 2, 4), (7, 2, 2, 8)])),
              cu_seqlens=(CUSEQ, dict(total=7, rows=6)),
              cos=(F, dict(bad_shapes=[(), (6,), (6, 7), (6, 10), (1, 6, 6), (5, 6)])),
              sin=(F, dict(bad_shapes=[(), (6, 4), (7, 6)])),
              interleaved=(FLAG, {}),
              offset=(OFFSETS, dict(valid=np.array([1, 2, 2]), top=5, err=IndexError)),
              out=(OUT, dict(strict_dtype=True))),
         oracle=varlen_oracle, tol=1e-5),
    Spec("rope_scaling_parameters", posemb.rope_scaling_parameters,
         dict(dim=8, base=10000.0, scaling=DYN, max_position_embeddings=16, seq_len=32),
         dict(dim=(SIZE, dict(bad=[(2, ValueError)])), base=(REAL, dict(positive=True)),
              scaling=(SCALING, {}),
              max_position_embeddings=(SIZE, dict(minimum=1, optional=True,
                                                  bad=[(None, ValueError)])),
              seq_len=(SIZE, dict(optional=True))),
         oracle=lambda dim, base, scaling, max_position_embeddings, seq_len: R.rope_scaling(
             dim, base, scaling, max_position_embeddings=max_position_embeddings,
             seq_len=seq_len), tol=1e-13),
    Spec("rope_inv_freq/scaling", posemb.rope_inv_freq,
         dict(dim=8, base=10000.0, scaling=DYN, max_position_embeddings=16, seq_len=32),
         dict(scaling=(SCALING, {}),
              max_position_embeddings=(SIZE, dict(minimum=1, optional=True,
                                                  bad=[(None, ValueError)])),
              seq_len=(SIZE, dict(optional=True))),
         oracle=lambda dim, base, scaling, max_position_embeddings, seq_len: R.rope_scaling(
             dim, base, scaling, max_position_embeddings=max_position_embeddings,
             seq_len=seq_len)[0], tol=1e-13),
    Spec("rope_cos_sin/scaling", posemb.rope_cos_sin,
         dict(positions=np.arange(20), dim=8, base=10000.0, scaling=DYN,
              max_position_embeddings=16, seq_len=None, interleaved=False, dtype=np.float64),
         dict(positions=(POS, dict(err=ValueError, top=2**53)), scaling=(SCALING, {}),
              max_position_embeddings=(SIZE, dict(minimum=1, optional=True,
                                                  bad=[(None, ValueError)])),
              seq_len=(SIZE, dict(optional=True))),
         oracle=scaled_cos_sin_oracle, tol=1e-12),
    Spec("RoPE/scaling", posemb.RoPE,
         dict(head_size=8, seq_len=6, scaling=DYN, max_position_embeddings=16),
         dict(scaling=(SCALING, {}),
              max_position_embeddings=(SIZE, dict(minimum=1, optional=True,
                                                  bad=[(None, ValueError)])))),
    Spec("rope_config", _rope_config_summary, dict(config=LLAMA, seq_len=None, dtype=np.float32),
         dict(config=(OTHER, dict(good=CONFIG_GOOD, bad=CONFIG_BAD)),
              seq_len=(SIZE, dict(optional=True)), dtype=(DTYPE, {}))),
    Spec("rope_convention", posemb.rope_convention, dict(config={"model_type": "glm4"}),
         dict(config=(OTHER, dict(good=[("str", "cohere"), ("deepseek", {"model_type":
                                                                         "deepseek_v3"})],
                                  bad=[(None, TypeError, "config"), (3, TypeError, "config"),
                                       ({"rope_interleave": "yes"}, TypeError,
                                        "rope_interleave")])))),
    Spec("RopeConvention", posemb.RopeConvention, dict(pairs="interleaved", tables="repeat"),
         dict(pairs=(OTHER, dict(bad=[("diagonal", ValueError, "pairs")])),
              tables=(OTHER, dict(bad=[("cat", ValueError, "tables")])))),
    Spec("layer_rope_parameters", posemb.layer_rope_parameters, dict(config=GEMMA3),
         dict(config=(OTHER, dict(
             good=[("flat", {"head_dim": 8}),
                   ("nested", {"layer_types": ["full_attention"],
                               "rope_parameters": {"full_attention": None}})],
             bad=[(None, TypeError, "config"),
                  ({"layer_types": ["full_attention"], "rope_parameters": {"full_attention": 3}},
                   TypeError, "rope_parameters")])))),
    Spec("layer_uses_rope", posemb.layer_uses_rope,
         dict(config={"model_type": "llama4_text", "num_hidden_layers": 8}, layer_idx=3),
         dict(config=(OTHER, dict(bad=[(None, TypeError, "config"),
                                       ({"model_type": "llama4_text"}, ValueError,
                                        "num_hidden_layers")])),
              layer_idx=(SIZE, dict(bad=[(8, IndexError)])))),
    Spec("convert_rope_layout", posemb.convert_rope_layout,
         dict(weight=np.arange(16.0).reshape(8, 2), num_heads=2, to="half", rotary_dim=2),
         dict(weight=(OTHER, dict(
             good=[(lo, lay(np.arange(16.0).reshape(8, 2), np.float64, lo))
                   for lo in ("F", "strided", "reversed", "transposed", "swapped", "readonly",
                              "unaligned")] + [
                 ("zero-stride", np.broadcast_to(np.arange(2.0), (8, 2))),
                 ("int", np.arange(16).reshape(8, 2)), ("float16", np.ones((8, 2), np.float16)),
                 ("list", np.arange(16.0).reshape(8, 2).tolist()), ("bias-1d", np.arange(8.0)),
                 ("rank-3", np.ones((8, 2, 3))), ("empty-in", np.ones((8, 0)))],
             bad=[(np.float64(1.0), ValueError, "weight"), (None, ValueError, "weight"),
                  (np.ones((9, 2)), ValueError, "weight"),
                  (np.ones((2, 2)), ValueError, "rotary_dim")])),
              num_heads=(SIZE, dict(minimum=1, bad=[(3, ValueError), (2**40, ValueError)])),
              to=(CHOICE, {}),
              rotary_dim=(SIZE, dict(minimum=2, odd=True, optional=True, bad=[(6, ValueError)]))),
         oracle=lambda weight, num_heads, to, rotary_dim: R.convert_rope_layout(
             weight, num_heads, to=to, rotary_dim=rotary_dim)),
    Spec("mrope_cos_sin", posemb.mrope_cos_sin,
         dict(positions=MPOS, dim=16, mrope_section=[2, 3, 3], base=10000.0, interleaved=False,
              dtype=np.float64, scaling=None, max_position_embeddings=None),
         dict(positions=(POS, dict(err=ValueError, top=2**53, scalar_err=True)),
              dim=(SIZE, dict(odd=True, bad=[(14, ValueError)], match="mrope_section")),
              mrope_section=(SECTIONS, {}), base=(REAL, dict(positive=True)),
              interleaved=(FLAG, {}), dtype=(DTYPE, {}),
              scaling=(OTHER, dict(good=MROPE_SCALING_GOOD, bad=MROPE_SCALING_BAD)),
              max_position_embeddings=(SIZE, dict(minimum=1, optional=True))),
         oracle=mrope_oracle, tol=1e-12),
    Spec("apply_multimodal_rotary_pos_emb", posemb.apply_multimodal_rotary_pos_emb,
         dict(q=_x((1, 2, 5, 16)), k=_x((1, 1, 5, 16), seed=2), cos=MC, sin=MS,
              mrope_section=[2, 3, 3], unsqueeze_dim=1),
         dict(q=(F, dict(bad_shapes=[(), (1, 2, 5, 14), (1, 2, 4, 16)])),
              k=(F, dict(bad_shapes=[(1, 1, 5, 8), (1, 1, 6, 16)])),
              cos=(F, dict(bad_shapes=[(), (16,), (2, 1, 5, 16), (3, 1, 5, 15)])),
              sin=(F, dict(bad_shapes=[(3, 1, 5, 14), (3, 1, 4, 16)])),
              mrope_section=(SECTIONS, {}),
              unsqueeze_dim=(OFFSET, dict(bad=[(7, ValueError), (2**40, ValueError),
                                               (-9, ValueError)]))),
         oracle=multimodal_oracle, tol=1e-5),
    Spec("axial_rope_cos_sin", posemb.axial_rope_cos_sin,
         dict(positions=GRID, dim=16, base=100.0, interleaved=True, dtype=np.float64),
         dict(positions=(POS, dict(err=ValueError, top=2**53, scalar_err=True)),
              dim=(SIZE, dict(odd=True, bad=[(6, ValueError)])), base=(REAL, dict(positive=True)),
              interleaved=(FLAG, {}), dtype=(DTYPE, {})),
         oracle=lambda positions, dim, base, interleaved, dtype: R.axial_rope_cos_sin(
             positions, dim, base, interleaved=bool(interleaved)), tol=1e-12),
    Spec("xpos_cos_sin", posemb.xpos_cos_sin,
         dict(positions=np.arange(8), dim=8, base=10000.0, scale_base=64.0, center=4.0,
              interleaved=False, dtype=np.float64),
         dict(positions=(POS, dict(err=ValueError, top=2**53)),
              dim=(SIZE, dict(minimum=2, odd=True)), base=(REAL, dict(positive=True)),
              scale_base=(REAL, dict(positive=True)), center=(REAL, {}),
              interleaved=(FLAG, {}), dtype=(DTYPE, {})),
         oracle=lambda positions, dim, base, scale_base, center, interleaved, dtype:
         R.xpos_cos_sin(positions, dim, base, scale_base=scale_base, center=center,
                        interleaved=bool(interleaved)), tol=1e-12),
]


# ------------------------------------------------------------------ variants

class Case:
    def __init__(self, spec, arg, variant, value, expect, match=None, oracle=True):
        self.spec, self.arg, self.variant, self.value = spec, arg, variant, value
        self.expect, self.match, self.oracle = expect, match, oracle

    @property
    def id(self):
        return f"{self.spec.name}-{self.arg}-{self.variant}"


def _zero_stride(a):
    """A read-only broadcast view equal in shape to a (its first row repeated)."""
    if a.ndim == 0 or a.shape[0] == 0:
        return np.broadcast_to(a, a.shape)
    return np.broadcast_to(a[:1], a.shape)


def _float_variants(spec, name, good, opts):
    for layout in ("F", "strided", "reversed", "transposed", "swapped", "readonly",
                   "unaligned"):
        yield layout, lay(good, good.dtype, layout), None
    yield "zero-stride", _zero_stride(good), None
    if good.size:
        for bad in (np.nan, np.inf, -np.inf):
            v = np.array(good)
            v.flat[0] = bad
            if opts.get("nonfinite"):
                yield f"value-{bad}", v, (ValueError, name)
            else:
                yield f"value-{bad}", v, None
    yield "list", good.tolist(), None
    for dt in (np.float16, np.float64):
        if np.dtype(dt) != good.dtype:
            yield f"dtype-{np.dtype(dt).name}", good.astype(dt), None
    for dt in ("int32", "int64", "uint8", "bool", "complex64", "object", "U1", "longdouble"):
        if opts.get("ints_ok") and dt in ("int32", "int64", "uint8"):
            continue
        v = good.astype(dt) if dt != "U1" else np.full(good.shape, "a")
        if dt == "longdouble" and np.dtype(dt).itemsize == 8:
            continue
        if dt in opts.get("optional_dtypes", ()):
            yield f"dtype-{dt}", v, None
            continue
        yield f"dtype-{dt}", v, (TypeError, name)
    yield "type-str", "abc", (TypeError, name)
    if not opts.get("optional"):
        yield "type-None", None, (TypeError, name)
    yield "type-dict", {"a": 1}, (TypeError, name)
    for shape in opts.get("bad_shapes", []):
        yield f"shape-{shape}", np.ones(shape, good.dtype), (ValueError, name)


def _size_variants(spec, name, good, opts):
    minimum = opts.get("minimum", 0)
    yield "type-float", 2.5, (TypeError, name)
    yield "type-float-integral", float(good if good is not None else 3), (TypeError, name)
    yield "type-str", "3", (TypeError, name)
    yield "type-bool", True, (TypeError, name)
    yield "type-list", [3], (TypeError, name)
    yield "type-array", np.array([2, 4]), (TypeError, name)
    yield "type-complex", 2j, (TypeError, name)
    if not opts.get("optional"):
        yield "type-None", None, (TypeError, name)
    yield "below-minimum", minimum - 1, (ValueError, name)
    yield "very-negative", -2**70, (ValueError, name)
    if good is not None:
        yield "numpy-int64", np.int64(good), None
        if good < 128:
            yield "numpy-int8", np.int8(good), None
    if opts.get("odd") and good is not None:
        yield "odd", good + 1 if good % 2 else good - 1, (ValueError, name)
    for value, err in opts.get("bad", []):
        yield f"bad-{value}", value, (err, opts.get("match", name))


def _offset_variants(spec, name, good, opts):
    yield "type-float", 1.5, (TypeError, name)
    yield "type-str", "1", (TypeError, name)
    yield "type-bool", True, (TypeError, name)
    yield "type-array", np.array([1, 2]), (TypeError, name)
    if not opts.get("optional"):
        yield "type-None", None, (TypeError, name)
    yield "huge", 2**70, (ValueError, name)
    yield "huge-negative", -2**70, (ValueError, name)
    if good is not None:
        yield "numpy-int32", np.int32(good), None
    for value, err in opts.get("bad", []):
        yield f"bad-{value}", value, (err, name)


def _pos_variants(spec, name, good, opts):
    shape = opts.get("shape")
    if good is None:
        good = np.arange(int(np.prod(shape)), dtype=np.int64).reshape(shape)
        yield "given", good, None
    signed = opts.get("signed")
    for dt in ("int32", "uint8", "int16", "uint64"):
        if signed and dt.startswith("u"):
            continue
        yield f"dtype-{dt}", good.astype(dt), None
    yield "swapped", good.astype(good.dtype.newbyteorder()), None
    yield "reversed", good[::-1], None
    yield "unaligned", lay(good, good.dtype, "unaligned"), None
    yield "list", good.tolist(), None
    if not opts.get("rank1"):
        yield "zero-stride", np.broadcast_to(good.reshape(-1)[:1], good.shape), None
    yield "empty-ok" if opts.get("rank1") else "scalar", \
        (np.zeros(0, np.int64) if opts.get("rank1") else np.int64(0)), \
        (ValueError, name) if opts.get("scalar_err") else None
    for dt in ("float64", "float32", "bool", "complex128", "object"):
        yield f"dtype-{dt}", good.astype(dt), (TypeError, name)
    yield "dtype-str", np.full(good.shape, "1"), (TypeError, name)
    yield "type-str", "abc", (TypeError, name)
    yield "type-float", 1.5, (TypeError, name)
    if not opts.get("optional"):
        yield "type-None", None, (TypeError, name)
    if signed:
        yield "uint64-huge", np.array([2**64 - 1], np.uint64), (ValueError, name)
        yield "int64-extremes", np.array([-2**63, 2**63 - 1]), None
        return
    err = opts["err"]
    neg = good.copy()
    neg.flat[0] = -1
    yield "negative", neg, (err, name)
    big = good.copy()
    big.flat[-1] = opts["top"]
    yield "too-large", big, (err, name)
    yield "uint64-huge", np.full(good.shape, 2**64 - 1, np.uint64), (err, name)
    if opts.get("rank1"):
        yield "rank-2", good[None], (ValueError, name)


def _real_variants(spec, name, good, opts):
    yield "type-str", "abc", (TypeError, name)
    yield "type-complex", 1j, (TypeError, name)
    yield "type-array", np.array([1.0, 2.0]), (TypeError, name)
    if not opts.get("optional"):
        yield "type-None", None, (TypeError, name)
    for bad in (np.nan, np.inf, -np.inf):
        yield f"value-{bad}", bad, (ValueError, name)
    if opts.get("positive"):
        yield "zero", 0.0, (ValueError, name)
        yield "negative", -2.0, (ValueError, name)
    if good is not None:
        yield "numpy-float32", np.float32(good), None
        yield "int", int(good) if float(good).is_integer() else good, None


def _dtype_variants(spec, name, good, opts):
    for bad in ("foo", int, bool, np.complex64, object, np.int8, np.dtype(">f8"), "U3"):
        yield f"bad-{bad}", bad, (TypeError, name)
    yield "string-f4", "f4", None
    yield "type-float16", np.float16, None


def _flag_variants(spec, name, good, opts):
    yield "type-str", "yes", (TypeError, name)
    yield "type-array", np.array([True, False]), (TypeError, name)
    yield "numpy-bool", np.bool_(good), None
    yield "int", int(bool(good)), None


def _choice_variants(spec, name, good, opts):
    yield "wrong-value", "nope", (ValueError, name)
    yield "type-list", [good], (ValueError, name)
    yield "type-None", None, (ValueError, name)
    yield "upper", good.upper(), (ValueError, name)
    yield "type-array", np.array([good, good]), ((TypeError, ValueError), name)


def _other_variants(spec, name, good, opts):
    for label, value in opts.get("good", []):
        yield f"good-{label}", value, None
    for i, item in enumerate(opts.get("bad", [])):
        value, err = item[:2]
        yield f"bad-{type(value).__name__}" + (f"-{i}" if "good" in opts else ""), value, \
            (err, item[2] if len(item) > 2 else name)


def _offsets_variants(spec, name, good, opts):
    """An integer offset, or one per sequence (shape (batch,)); valid: a good array."""
    valid, top, err = opts["valid"], opts["top"], opts["err"]
    n = valid.shape[0]
    yield "int-0", 0, None
    yield "int", 1, None
    yield "numpy-int64", np.int64(1), None
    yield "array-0d", np.array(1), None
    yield "array", valid, None
    yield "list", valid.tolist(), None
    yield "tuple", tuple(valid.tolist()), None
    for dt in ("int32", "uint8", "int16", "uint64", ">i8"):
        yield f"dtype-{dt}", valid.astype(dt), None
    yield "reversed", valid[::-1], None
    yield "zero-stride", np.broadcast_to(valid[:1], valid.shape), None
    yield "unaligned", lay(valid, np.int64, "unaligned"), None
    yield "readonly", lay(valid, np.int64, "readonly"), None
    for label, bad in (("float", 1.5), ("str", "1"), ("bool", True), ("None", None),
                       ("complex", 1j), ("dict", {"a": 1})):
        yield f"type-{label}", bad, (TypeError, name)
    for dt in ("float64", "bool", "complex128", "object"):
        yield f"dtype-{dt}", valid.astype(dt), (TypeError, name)
    yield "dtype-str", np.full(n, "1"), (TypeError, name)
    yield "dtype-float-0d", np.array(1.0), (TypeError, name)
    yield "wrong-length", np.zeros(n + 1, np.int64), (ValueError, name)
    yield "short", np.zeros(n - 1, np.int64), (ValueError, name)
    yield "rank-2", valid[None], (ValueError, name)
    yield "negative", -1, (ValueError, name)
    neg = valid.copy()
    neg[-1] = -1
    yield "negative-entry", neg, (ValueError, name)
    yield "too-large", top, (err, name)
    big = valid.copy()
    big[-1] = top
    yield "too-large-entry", big, (err, name)
    yield "huge", 2**70, ((ValueError, IndexError), name)
    yield "huge-negative", -2**70, (ValueError, name)
    yield "int64-max", np.full(n, 2**63 - 1), ((ValueError, IndexError), name)
    yield "uint64-huge", np.full(n, 2**64 - 1, np.uint64), ((ValueError, IndexError), name)


def _cu_variants(spec, name, good, opts):
    """cu_seqlens: batch + 1 integers from 0 up to total_tokens, never decreasing."""
    total = opts["total"]
    yield "list", good.tolist(), None
    yield "tuple", tuple(good.tolist()), None
    for dt in ("int32", "uint8", "int16", "uint64", ">i8"):
        yield f"dtype-{dt}", good.astype(dt), None
    for layout in ("strided", "readonly", "unaligned"):
        yield layout, lay(good, np.int64, layout), None
    yield "one-sequence", np.array([0, total]), None if "rows" not in opts else (IndexError, name)
    yield "empty-sequences", np.array([0, 0, total, total]), \
        None if "rows" not in opts else (IndexError, name)
    for label, bad in (("start-1", [1, 3, 3, total]), ("decreasing", [0, 3, 2, total]),
                       ("end-short", [0, 3, 3, total - 1]), ("end-over", [0, 3, 3, total + 1]),
                       ("negative", [0, -1, 3, total]), ("int64-min", [0, -2**63, 3, total]),
                       ("huge", [0, 2**62, 3, total]), ("only-start", [0]),
                       ("reversed", good[::-1].tolist()), ("huge-end", [0, 3, 3, 2**63 - 1])):
        yield label, np.array(bad, np.int64), (ValueError, name)
    yield "uint64-huge", np.array([0, 3, 2**64 - 1, total], np.uint64), (ValueError, name)
    yield "empty", np.zeros(0, np.int64), (ValueError, name)
    yield "rank-2", good[None], (ValueError, name)
    yield "scalar", np.int64(total), (ValueError, name)
    for dt in ("float64", "bool", "complex128", "object"):
        yield f"dtype-{dt}", good.astype(dt), (TypeError, name)
    for label, bad in (("str", "abc"), ("None", None), ("float", 7.0), ("dict", {"a": 1})):
        yield f"type-{label}", bad, (TypeError, name)


def _scaling_variants(spec, name, good, opts):
    for label, value in SCALING_GOOD:
        yield f"good-{label}", value, None
    for label, value, err in SCALING_BAD:
        yield label, value, (err, name)


def _sections_variants(spec, name, good, opts):
    """mrope_section: non-negative integers summing to dim // 2 (here [2, 3, 3])."""
    yield "tuple", tuple(good), None
    yield "array", np.array(good), None
    yield "int32-array", np.array(good, np.int32), None
    yield "numpy-ints", [np.int64(v) for v in good], None
    yield "zero-section", [0, 4, 4], None
    yield "2d-array", np.array([good]), None
    for label, bad in (("sum-low", [2, 3, 2]), ("sum-high", [2, 3, 4]), ("negative", [-1, 5, 4]),
                       ("empty", []), ("four-sections", [2, 3, 3, 0]),
                       ("huge", [2**70, 3, 3])):
        yield label, bad, (ValueError, name)
    for label, bad in (("float", [2.0, 3, 3]), ("float-array", np.array([2.0, 3, 3])),
                       ("str", "233"), ("None", None), ("bool", [True, 3, 4]),
                       ("objects", [object(), 3, 3]), ("dict", {"a": 1})):
        yield label, bad, (TypeError, name)


def _outc_variants(spec, name, good, opts):
    """out= of a kernel that writes a whole C-contiguous array (any float dtype)."""
    plain = spec.fn(**spec.args)
    shape, dtype = plain.shape, plain.dtype
    yield "fresh", np.empty(shape, dtype), None
    yield "float64", np.empty(shape, np.float64), None
    yield "float16", np.empty(shape, np.float16), None
    for layout in ("F", "strided", "reversed", "unaligned"):
        yield layout, lay(np.zeros(shape), dtype, layout) if layout != "F" else \
            np.asfortranarray(np.zeros(shape, dtype)), (ValueError, name)
    yield "swapped", np.empty(shape, dtype.newbyteorder()), (TypeError, name)
    yield "readonly", lay(np.zeros(shape), dtype, "readonly"), (ValueError, name)
    yield "zero-stride", np.broadcast_to(np.zeros(shape[-1:], dtype), shape), (ValueError, name)
    yield "wrong-shape", np.empty(shape[:-1] + (shape[-1] + 2,), dtype), (ValueError, name)
    yield "wrong-shape-short", np.empty(shape[1:], dtype), (ValueError, name)
    yield "dtype-int", np.empty(shape, np.int64), (TypeError, name)
    yield "dtype-bool", np.empty(shape, bool), (TypeError, name)
    yield "type-list", np.zeros(shape).tolist(), (TypeError, name)
    yield "type-str", "out", (TypeError, name)
    yield "overlap-input", "OVERLAP", (ValueError, name)


def _out_variants(spec, name, good, opts):
    x_name = next(iter(spec.args))
    x = spec.args[x_name]
    plain = spec.fn(**spec.args)
    shape, dtype = plain.shape, plain.dtype
    yield "fresh", np.empty(shape, dtype), None
    yield "F-order", np.asfortranarray(np.empty(shape, dtype)), None
    yield "strided", lay(np.zeros(shape), dtype, "strided"), None
    yield "reversed", lay(np.zeros(shape), dtype, "reversed"), None
    yield "unaligned", lay(np.zeros(shape), dtype, "unaligned"), None
    yield "swapped", np.empty(shape, dtype.newbyteorder()), None
    yield "float64", np.empty(shape, np.float64), \
        (TypeError, name) if opts.get("strict_dtype") else None
    yield "alias-input", "ALIAS", None                       # out=x, in place
    yield "overlap-reversed-input", "REVERSED", None         # out=x[::-1] view
    yield "overlap-shifted-input", "SHIFTED", None           # shares all but one element
    yield "readonly", lay(np.zeros(shape), dtype, "readonly"), (ValueError, name)
    yield "zero-stride", np.broadcast_to(np.zeros(shape[-1:], dtype), shape), (ValueError, name)
    yield "wrong-shape", np.empty(shape[:-1] + (shape[-1] + 2,), dtype), (ValueError, name)
    yield "wrong-shape-short", np.empty(shape[1:], dtype), (ValueError, name)
    yield "dtype-int", np.empty(shape, np.int64), (TypeError, name)
    yield "dtype-bool", np.empty(shape, bool), (TypeError, name)
    yield "type-list", np.zeros(shape).tolist(), (TypeError, name)
    yield "type-str", "out", (TypeError, name)
    yield "type-tuple-of-two", (np.empty(shape, dtype), np.empty(shape, dtype)), (TypeError, name)
    del x


GENERATORS = {F: _float_variants, SIZE: _size_variants, OFFSET: _offset_variants,
              POS: _pos_variants, REAL: _real_variants, DTYPE: _dtype_variants,
              FLAG: _flag_variants, CHOICE: _choice_variants, OTHER: _other_variants,
              OUT: _out_variants, OFFSETS: _offsets_variants, CUSEQ: _cu_variants,
              SCALING: _scaling_variants, SECTIONS: _sections_variants, OUTC: _outc_variants}


def _cases():
    cases = []
    for spec in SPECS:
        cases.append(Case(spec, "-", "good", None, None))
        for name, (kind, opts) in spec.kinds.items():
            for variant, value, expect in GENERATORS[kind](spec, name, spec.args[name], opts):
                cases.append(Case(spec, name, variant, value,
                                  expect if expect is None else expect[0],
                                  None if expect is None else expect[1]))
    return cases


CASES = _cases()


# ------------------------------------------------------------------ running

def _snapshot(args):
    snap = {}
    for k, v in args.items():
        if isinstance(v, np.ndarray):
            snap[k] = (v.copy(), v.dtype, v.strides, v.flags.writeable)
        elif isinstance(v, (dict, list)):
            snap[k] = repr(v)
    return snap


def _plain(v):
    if isinstance(v, list):
        return np.array(v)
    if isinstance(v, np.ndarray):
        return np.array(v, dtype=v.dtype.newbyteorder("=") if v.dtype.kind in "fiuc" else v.dtype)
    return v


def _flat(result):
    if isinstance(result, tuple):
        return list(result)
    if isinstance(result, np.ndarray):
        return [result]
    return []


def _compare(got, want, tol):
    got, want = _flat(got), _flat(want)
    assert len(got) == len(want)
    for g, w in zip(got, want):
        g, w = np.asarray(g), np.asarray(w)     # LearnedPE.backward returns grad_out itself
        assert g.shape == w.shape, (g.shape, w.shape)
        if g.dtype.kind in "fc":
            np.testing.assert_allclose(g.astype(np.complex128 if g.dtype.kind == "c" else
                                                np.float64), w, rtol=tol, atol=tol,
                                       equal_nan=True)
        else:
            np.testing.assert_array_equal(g, w)


def _run(case):
    spec = case.spec
    args = dict(spec.args)
    if case.arg != "-":
        args[case.arg] = case.value
    if case.arg == "cu_seqlens" and "offset" in args:
        args["offset"] = 0                       # batch sizes differ between the variants
    if case.arg == "offset" and spec.kinds["offset"][0] == OFFSETS and "positions" in args:
        args["positions"] = None                 # offset applies only without positions
    if case.arg == "out" and isinstance(case.value, str) and case.value == "OVERLAP":
        src = np.asarray(spec.args[spec.kinds["out"][1]["overlap_with"]])
        plain = spec.fn(**spec.args)
        buf = np.zeros(max(src.size, plain.size) + 1, src.dtype)
        view = buf[:src.size].reshape(src.shape)
        view[...] = src
        args[spec.kinds["out"][1]["overlap_with"]] = view
        case = Case(spec, "out", case.variant, buf[:plain.size].reshape(plain.shape),
                    case.expect, case.match)
        args["out"] = case.value
    if case.arg == "positions" and "offset" in args:
        args["offset"] = 0                       # offset applies only without positions
        if "seq_len" in args:
            args["seq_len"] = None
    if case.arg == "out" and isinstance(case.value, str) and case.value.isupper():
        x_name = next(iter(spec.args))
        x = np.array(spec.args[x_name])
        if case.value == "ALIAS":
            args[x_name] = args["out"] = x
        elif case.value == "REVERSED":
            args[x_name] = x
            args["out"] = x[::-1]
        else:
            buf = np.zeros(x.size + 1, x.dtype)
            xin = buf[1:].reshape(x.shape)
            xin[...] = x
            args[x_name] = xin
            args["out"] = buf[:-1].reshape(x.shape)
    snap = _snapshot({k: v for k, v in args.items() if k != "out"})
    aliased = [k for k, v in args.items()
               if k != "out" and isinstance(v, np.ndarray) and args.get("out") is not None
               and isinstance(args["out"], np.ndarray) and np.may_share_memory(v, args["out"])]
    plain_args = {k: _plain(v) for k, v in args.items() if k != "out"}
    if "out" in args:
        plain_args["out"] = None
    if case.expect is not None:
        with pytest.raises(case.expect, match=case.match):
            spec.fn(**args)
    else:
        want = spec.fn(**plain_args)
        got = spec.fn(**args)
        if "out" in args and args["out"] is not None:
            assert got is args["out"]
        if isinstance(args.get("out"), np.ndarray) and args["out"].dtype == np.float16:
            want = np.asarray(want).astype(np.float16)      # the result rounded to out's dtype
        _compare(got, want, spec.tol)
        if spec.oracle is not None:
            dts = [np.asarray(g).dtype for g in _flat(got)]
            rounding = (1e-2 if any(dt == np.float16 for dt in dts) else
                        2e-6 if any(dt == np.float32 for dt in dts) else 0)
            _compare(got, spec.oracle(**{k: v for k, v in plain_args.items()}),
                     max(spec.tol, rounding, 1e-2 if any(getattr(v, "dtype", None) == np.float16
                                                         for v in args.values()) else 0))
    for k, saved in snap.items():
        if k in aliased:
            continue
        v = args[k]
        if isinstance(saved, str):
            assert repr(v) == saved, f"{k} was modified"
            continue
        copy, dtype, strides, writeable = saved
        assert v.dtype == dtype and v.strides == strides and v.flags.writeable == writeable, k
        np.testing.assert_array_equal(v, copy, err_msg=f"{k} was modified")


@pytest.mark.parametrize("case", CASES, ids=[c.id for c in CASES])
def test_bad_input(case):
    _run(case)


# ------------------------------------------------------------------ huge sizes

@contextlib.contextmanager
def limited_address_space(extra=2 << 30):
    """Cap this process's address space at its current size + extra, so that
    an allocation the size checks miss fails instead of paging the machine
    to death.  Not under ASan (its shadow memory is reserved up front)."""
    if "asan" in os.environ.get("LD_PRELOAD", ""):
        yield
        return
    with open("/proc/self/status") as f:
        vm = next(int(line.split()[1]) * 1024 for line in f if line.startswith("VmSize"))
    soft, hard = resource.getrlimit(resource.RLIMIT_AS)
    cap = vm + extra if hard == resource.RLIM_INFINITY else min(hard, vm + extra)
    resource.setrlimit(resource.RLIMIT_AS, (cap, hard))
    try:
        yield
    finally:
        resource.setrlimit(resource.RLIMIT_AS, (soft, hard))


HUGE = [
    ("RoPE-2**40", lambda: posemb.RoPE(2**40, 2**40)),
    ("RoPE-seq-2**40", lambda: posemb.RoPE(64, 2**40)),
    ("RoPE-head-2**62", lambda: posemb.RoPE(2**62, 4)),
    ("RoPE.cos_sin-2**40", lambda: ROPE.cos_sin(seq_len=2**40)),
    ("RoPE.cos_sin-offset", lambda: ROPE.cos_sin(offset=2**52, seq_len=2**40)),
    ("rope_inv_freq-2**62", lambda: posemb.rope_inv_freq(2**62)),
    ("rope_cos_sin-dim", lambda: posemb.rope_cos_sin(np.arange(4), 2**40)),
    ("compute_frequencies", lambda: posemb.compute_frequencies(64, 2**40)),
    ("precompute_freqs_cis", lambda: posemb.precompute_freqs_cis(2**40, 2**40)),
    ("sinusoidal-2**40", lambda: posemb.sinusoidal(2**40, 2**40)),
    ("sinusoidal-2**31", lambda: posemb.sinusoidal(2**31, 2**31)),
    ("sinusoidal-seq-2**62", lambda: posemb.sinusoidal(2**62, 4)),
    ("AbsolutePE", lambda: posemb.AbsolutePE(2**40, 2**40)),
    ("LearnedPE", lambda: posemb.LearnedPE(2**40, 2**40)),
    ("LearnedPE-2**62", lambda: posemb.LearnedPE(2**62, 2**62)),
    ("learned_pe_backward", lambda: posemb.learned_pe_backward(X, num_positions=2**60)),
    ("t5_relative_bias", lambda: posemb.t5_relative_bias(T5T, 2**40, 2**40)),
    ("t5_relative_bias-2**61", lambda: posemb.t5_relative_bias(T5T, 2**61, 2**61)),
    ("relative_position_index", lambda: posemb.relative_position_index(2**40, 2**40, 3)),
    ("relative_position_index-2**61", lambda: posemb.relative_position_index(2**61, 2**61, 2**61)),
    ("relative_embeddings", lambda: posemb.relative_embeddings(SHT, 2**40, 2**40)),
    ("relative_embeddings_backward", lambda: posemb.relative_embeddings_backward(SHG, 2**61, 3, 4)),
    ("alibi_slopes", lambda: posemb.alibi_slopes(2**40)),
    ("alibi_slopes-2**62", lambda: posemb.alibi_slopes(2**62)),
    ("alibi_bias", lambda: posemb.alibi_bias(8, 2**40, 2**40)),
    ("alibi_bias-heads", lambda: posemb.alibi_bias(2**40, 2, 2)),
    ("causal_mask", lambda: posemb.causal_mask(2**40, 2**40)),
    ("causal_mask-2**61", lambda: posemb.causal_mask(2**61)),
    ("create_causal_mask", lambda: posemb.create_causal_mask(2**40)),
    ("padding_mask", lambda: posemb.padding_mask([1], 2**60)),
    ("create_padding_mask", lambda: posemb.create_padding_mask([1], 2**60)),
    ("add_sinusoidal-start", lambda: posemb.add_sinusoidal(X, start=2**62)),
]


@pytest.mark.parametrize("call", [c for _, c in HUGE], ids=[n for n, _ in HUGE])
def test_huge_sizes_fail_cleanly(call):
    """A size whose table cannot exist is a MemoryError or ValueError, at once."""
    with limited_address_space():
        with pytest.raises((MemoryError, ValueError)):
            call()


def test_case_count():
    n = len(CASES) + len(HUGE) + len(EMPTY_BUT_LONG)
    print(f"\nbad-input cases: {n} ({len(CASES)} generated over {len(SPECS)} public "
          f"callables, {len(HUGE)} huge-size and {len(EMPTY_BUT_LONG)} empty-but-long cases)")
    public = {name for name in posemb.__all__ if callable(getattr(posemb, name))}
    # bench: a good call runs the benchmark; tests/test_main.py checks its arguments
    covered = {s.name.split(".")[0] for s in SPECS} | {"get_num_threads", "empty_cache",
                                                  "bench"}
    assert public <= covered, public - covered
    assert n >= 1000


EMPTY_BUT_LONG = [
    ("relative_position_index", lambda: posemb.relative_position_index(2**40, 0, 3), (2**40, 0)),
    ("relative_embeddings", lambda: posemb.relative_embeddings(SHT, 2**40, 0), (2**40, 0, 3)),
    ("relative_embeddings-dim-0", lambda: posemb.relative_embeddings(SHT[:, :0], 2**40, 1),
     (2**40, 1, 0)),
    ("relative_embeddings_backward", lambda: posemb.relative_embeddings_backward(
        np.empty((2**40, 0, 3)), 2, 2**40, 0), (5, 3)),
    ("causal_mask", lambda: posemb.causal_mask(2**40, 0), (2**40, 0)),
    ("t5_relative_bias", lambda: posemb.t5_relative_bias(T5T, 2**40, 0), (2, 2**40, 0)),
    ("alibi_bias", lambda: posemb.alibi_bias(2, 2**40, 0), (2, 2**40, 0)),
    ("sinusoidal", lambda: posemb.sinusoidal(2**40, 0), (2**40, 0)),
    ("padding_mask", lambda: posemb.padding_mask(np.zeros(0, int), 2**40), (0, 2**40)),
]


@pytest.mark.parametrize("call,shape", [(c, s) for _, c, s in EMPTY_BUT_LONG],
                         ids=[n for n, _, _ in EMPTY_BUT_LONG])
def test_empty_results_with_a_huge_axis_return_at_once(call, shape):
    """An empty output with a 2**40-long axis is returned without walking the
    axis (before the fix, relative_position_index(2**40, 0, 3) and
    causal_mask(2**40, 0) looped over 2**40 empty rows)."""
    got = call()
    assert got.shape == shape
    if got.size:
        assert not got.any()


@pytest.mark.parametrize("layout", ["C", "F", "strided", "reversed", "transposed", "swapped",
                                    "readonly", "unaligned", "zero-stride", "float16", "list"])
@pytest.mark.parametrize("which", ["q", "k"])
def test_apply_qk_inplace_rotates_in_place_or_refuses(layout, which):
    """RoPE.apply_qk(inplace=True) either rotates q and k in their own memory and
    returns them, or raises an error naming the one it cannot write -- never a
    silent copy that leaves the caller's array unrotated."""
    q0, k0 = _x((2, 4, 3, 8)), _x((2, 2, 3, 8), seed=1)
    arrs = {"q": q0.copy(), "k": k0.copy()}
    a = arrs[which]
    if layout == "zero-stride":
        a = np.broadcast_to(a[:, :, :1], a.shape)
    elif layout == "float16":
        a = a.astype(np.float16)
    elif layout == "list":
        a = a.tolist()
    else:
        a = lay(a, a.dtype, layout)
    arrs[which] = a
    off = np.array([1, 4])
    want = ROPE.apply_qk(np.array(arrs["q"]), np.array(arrs["k"]), offset=off)
    try:
        qr, kr = ROPE.apply_qk(arrs["q"], arrs["k"], offset=off, inplace=True)
    except (TypeError, ValueError) as e:
        assert which in str(e)
        return
    assert qr is arrs["q"] and kr is arrs["k"]
    np.testing.assert_allclose(np.asarray(qr, np.float64), want[0], rtol=1e-3, atol=1e-3)
    np.testing.assert_allclose(np.asarray(kr, np.float64), want[1], rtol=1e-3, atol=1e-3)


DEGENERATE = [
    ("yarn-base-1", lambda: posemb.rope_scaling_parameters(
        8, 1.0, {"rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": 8}), "base"),
    ("yarn-RoPE-base-1", lambda: posemb.RoPE(8, 4, base=1.0, scaling={
        "rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": 8}), "base"),
    ("longrope-orig-1", lambda: posemb.rope_cos_sin(np.arange(3), 8, scaling=dict(
        _LR, factor=2.0), max_position_embeddings=1), "original_max_position_embeddings"),
    ("varlen-offset-2**63", lambda: posemb.apply_rope_varlen(XV, CU, VC, VS, offset=2**63),
     "offset"),
    ("xpos-float16-overflow", lambda: posemb.xpos_cos_sin(np.arange(6000), 8, dtype=np.float16),
     "center"),
]


@pytest.mark.parametrize("call,match", [(c, m) for _, c, m in DEGENERATE],
                         ids=[n for n, _, _ in DEGENERATE])
def test_degenerate_values_are_value_errors(call, match):
    """Values that pass every type and range check but make a formula divide by
    zero or overflow are an error naming the argument (not ZeroDivisionError)."""
    with pytest.raises((ValueError, IndexError), match=match):
        call()


@pytest.mark.parametrize("call,name", [
    (lambda v: posemb.rope_inv_freq(64, base=v), "base"),
    (lambda v: posemb.RoPE(64, 16, scale=v), "scale"),
    (lambda v: posemb.alibi_slopes(8, alibi_bias_max=v), "alibi_bias_max"),
    (lambda v: posemb.xpos_cos_sin(np.arange(4), 8, center=v), "center"),
])
def test_one_element_array_for_a_number_is_a_type_error(call, name):
    """A number given as a one-element array is refused by name on every
    NumPy (older ones converted it with a DeprecationWarning), and a 0-d
    array is a number."""
    import warnings
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        for bad in (np.array([2.0]), np.array([[2.0]])):
            with pytest.raises(TypeError, match=f"{name} must be a real number, got an array"):
                call(bad)
        call(np.array(2.0))
        call(np.float64(2.0))

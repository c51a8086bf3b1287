"""Framework-faithful RoPE tables: the float32 and bfloat16 recipes, not the exact values.

posemb's tables are exact (angles in float64, rounded once).  Frameworks form
them in lower precision, and a user comparing against a checkpoint's reference
outputs needs those bits.  Two recipes:

``"float32"`` -- transformers (``modeling_rope_utils.py``: the
``_compute_*_parameters`` functions and each model's
``compute_default_rope_parameters``/``forward``) and Meta's
``precompute_freqs_cis`` (llama ``model.py``): inverse frequencies computed
with float32 arithmetic in the same order of operations, the angle
``float32(p) * inv_freq`` rounded to float32, then ``cos``/``sin`` of that
float32 angle and the attention factor multiplied in float32.  Every step but
the transcendental functions (``pow``, ``cos``, ``sin``) is IEEE-exact and so
bit-identical; here those are evaluated in float64 and rounded (correctly
rounded), while PyTorch's vectorised float32 versions are within one ulp of
that.  ``posemb.torch`` runs those three with PyTorch itself and so matches
transformers bit for bit.

``"bfloat16"`` -- the Go walk-through's ``precomputeFreqsCis`` (llama.go):
``freqs`` and positions stored as bfloat16 by truncation (position 8191
becomes 8160), their product computed in float32 and truncated to bfloat16,
then ``cos``/``sin`` of that angle in float64 stored as float32.
"""
from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from typing import Any

import numpy as np

PRECISIONS = ("exact", "float32", "bfloat16")

f32 = np.float32


def check_precision(precision: Any) -> str:
    if not isinstance(precision, str) or precision not in PRECISIONS:
        raise ValueError(f"precision must be one of {PRECISIONS}, got {precision!r}")
    return precision


def numpy_power(base: Any, exponents: Any) -> np.ndarray:
    """float32 ``base ** exponents`` (a float32 array, or a Python float kept
    in double as PyTorch does), evaluated in float64 and rounded once."""
    b = np.asarray(base, dtype=np.float32).astype(np.float64)
    return (b ** np.asarray(exponents, dtype=np.float64)).astype(np.float32)


Power = Callable[[Any, Any], np.ndarray]


def _default_inv(dim: int, base: float, power: Power, denom: int | None = None) -> np.ndarray:
    # 1.0 / (base ** (torch.arange(0, dim, 2).float() / dim))
    denom = dim if denom is None else denom
    exps = np.arange(0, 2 * (dim // 2), 2, dtype=np.float32) / f32(denom)
    return f32(1.0) / power(f32(base), exps)


def float32_rope_parameters(dim: int, base: float, scaling: Mapping[str, Any], *,
                            max_position_embeddings: int | None, seq_len: Any = None,
                            power: Power = numpy_power) -> tuple[np.ndarray, float]:
    """float32 ``(inv_freq, attention_factor)`` as transformers computes them.

    ``scaling`` is normalized (see ``normalize_scaling``); ``seq_len`` is None
    at construction and the current length during a dynamic update (then
    transformers computes the new base in float32 tensor arithmetic).
    """
    rope_type = scaling["rope_type"]
    if rope_type == "default":
        return _default_inv(dim, base, power), 1.0
    if rope_type == "linear":
        return _default_inv(dim, base, power) / f32(scaling["factor"]), 1.0
    if rope_type == "proportional":
        # dim is head_dim here; the first int(p * head_dim // 2) angles rotate
        factor = scaling.get("factor") or 1.0
        p = scaling.get("partial_rotary_factor", 1.0)
        angles = int(p * dim // 2)
        inv = np.zeros(dim // 2, np.float32)
        inv[:angles] = _default_inv(2 * angles, base, power, denom=dim)
        return inv / f32(factor), 1.0
    if rope_type == "dynamic":
        factor = float(scaling["factor"])
        if max_position_embeddings is None:
            raise ValueError("scaling of rope_type 'dynamic' needs max_position_embeddings=")
        mpe = int(max_position_embeddings)
        if seq_len is None:     # construction: Python floats
            length = mpe
            new_base = base * ((factor * length / mpe) - (factor - 1)) ** (dim / (dim - 2))
            return _default_inv(dim, new_base, power), 1.0
        length = max(int(seq_len), mpe)    # forward: float32 tensor arithmetic
        t = f32(factor) * f32(length)
        t = t / f32(mpe)
        t = t - f32(factor - 1)
        t = np.float32(power(t, dim / (dim - 2)))     # float32 tensor ** Python float
        new_base = f32(base) * t
        return _default_inv(dim, new_base, power), 1.0
    if rope_type == "yarn":
        factor = scaling.get("factor")
        orig = scaling["original_max_position_embeddings"]
        if factor is None:
            factor = max_position_embeddings / orig
        attention = scaling.get("attention_factor")

        def mscale(scale: float, m: float = 1.0) -> float:
            return 1.0 if scale <= 1 else 0.1 * m * math.log(scale) + 1.0

        if attention is None:
            ms, msa = scaling.get("mscale"), scaling.get("mscale_all_dim")
            attention = (float(mscale(factor, ms) / mscale(factor, msa)) if ms and msa
                         else mscale(factor))
        beta_fast = scaling.get("beta_fast") or 32
        beta_slow = scaling.get("beta_slow") or 1

        def corr(rot: float) -> float:
            return (dim * math.log(orig / (rot * 2 * math.pi))) / (2 * math.log(base))

        low, high = corr(beta_fast), corr(beta_slow)
        if scaling.get("truncate", True):
            low, high = math.floor(low), math.ceil(high)
        low, high = max(low, 0), min(high, dim - 1)
        if low == high:
            high += 0.001
        pos_freqs = power(f32(base), np.arange(0, 2 * (dim // 2), 2, dtype=np.float32) / f32(dim))
        extra = f32(1.0) / pos_freqs
        inter = f32(1.0) / (f32(factor) * pos_freqs)
        ramp = np.clip((np.arange(dim // 2, dtype=np.float32) - f32(low)) / f32(high - low),
                       f32(0), f32(1))
        extra_factor = f32(1) - ramp
        inv = inter * (f32(1) - extra_factor) + extra * extra_factor
        return inv.astype(np.float32), float(attention)
    if rope_type == "longrope":
        orig = scaling["original_max_position_embeddings"]
        factor = scaling.get("factor")
        if factor is None:
            factor = max_position_embeddings / orig
        attention = scaling.get("attention_factor")
        if attention is None:
            attention = 1.0 if factor <= 1.0 else math.sqrt(1 + math.log(factor) / math.log(orig))
        key = "long_factor" if seq_len and seq_len > orig else "short_factor"
        ext = np.asarray(scaling[key], dtype=np.float32)
        shape = np.arange(0, 2 * (dim // 2), 2, dtype=np.float32) / f32(dim)
        return f32(1.0) / (ext * power(f32(base), shape)), float(attention)
    if rope_type == "llama3":
        inv = _default_inv(dim, base, power)
        factor = scaling["factor"]
        low_ff, high_ff = scaling["low_freq_factor"], scaling["high_freq_factor"]
        old = scaling["original_max_position_embeddings"]
        low_wl, high_wl = old / low_ff, old / high_ff
        wavelen = f32(2 * math.pi) / inv
        llama = np.where(wavelen > f32(low_wl), inv / f32(factor), inv)
        with np.errstate(divide="ignore", invalid="ignore"):   # Llama 4: high == low
            smooth = (f32(old) / wavelen - f32(low_ff)) / f32(high_ff - low_ff)
            smoothed = (f32(1) - smooth) * llama / f32(factor) + smooth * llama
        medium = ~(wavelen < f32(high_wl)) & ~(wavelen > f32(low_wl))
        return np.where(medium, smoothed, llama).astype(np.float32), 1.0
    raise ValueError(f"precision='float32' does not know rope_type {rope_type!r}")


def float32_angles(positions: np.ndarray, inv_freq: np.ndarray) -> np.ndarray:
    """``position_ids[..., None].float() * inv_freq``, in float32."""
    return positions.astype(np.float32)[..., None] * inv_freq.astype(np.float32)


def float32_cos_sin(angles: np.ndarray, attention: float) -> tuple[np.ndarray, np.ndarray]:
    """cos/sin of float32 angles (in float64, rounded), times the attention factor in float32."""
    a = angles.astype(np.float64)
    cos = np.cos(a).astype(np.float32) * f32(attention)
    sin = np.sin(a).astype(np.float32) * f32(attention)
    return cos, sin


def bf16_truncate(x: Any) -> np.ndarray:
    """float32 values truncated to bfloat16 (kept in float32): the top 16 bits."""
    bits = np.ascontiguousarray(x, dtype=np.float32).view(np.uint32)
    return (bits & np.uint32(0xFFFF0000)).view(np.float32)


def bfloat16_inv_freq(dim: int, base: float) -> np.ndarray:
    """The Go walk-through's ``freqs``: ``float32(1 / pow(theta, float64(val / dim)))``,
    ``val`` and the result stored as bfloat16."""
    vals = bf16_truncate(np.arange(0, 2 * (dim // 2), 2, dtype=np.float32))
    ratio = (vals / f32(dim)).astype(np.float64)
    return bf16_truncate((1.0 / np.power(float(base), ratio)).astype(np.float32))


def bfloat16_angles(positions: np.ndarray, inv_freq: np.ndarray) -> np.ndarray:
    """``Outer(t, freqs)`` with bfloat16 ``t``: float32 products truncated to bfloat16."""
    t = bf16_truncate(positions.astype(np.float32))
    return bf16_truncate(t[..., None] * inv_freq.astype(np.float32))


def framework_cos_sin(positions: np.ndarray, dim: int, base: float, scaling: Mapping[str, Any],
                      *, interleaved: bool, dtype: np.dtype, precision: str,
                      max_position_embeddings: int | None,
                      seq_len: int | None) -> tuple[np.ndarray, np.ndarray]:
    """Full-width tables by a framework's recipe (``precision`` "float32" or "bfloat16")."""
    if precision == "float32":
        if (scaling["rope_type"] == "dynamic" and max_position_embeddings is not None
                and (seq_len is None or seq_len <= max_position_embeddings)):
            seq_len = None      # transformers keeps the construction-time frequencies
        inv, attention = float32_rope_parameters(dim, base, scaling,
                                                 max_position_embeddings=max_position_embeddings,
                                                 seq_len=seq_len)
        cos, sin = float32_cos_sin(float32_angles(positions, inv), attention)
    else:
        if scaling["rope_type"] != "default":
            raise ValueError("precision='bfloat16' (the Go walk-through's recipe) has no "
                             f"scaling; got rope_type {scaling['rope_type']!r}")
        angles = bfloat16_angles(positions, bfloat16_inv_freq(dim, base)).astype(np.float64)
        cos, sin = np.cos(angles).astype(np.float32), np.sin(angles).astype(np.float32)
    if interleaved:
        cos, sin = np.repeat(cos, 2, axis=-1), np.repeat(sin, 2, axis=-1)
    else:
        cos, sin = np.concatenate([cos, cos], axis=-1), np.concatenate([sin, sin], axis=-1)
    if dim % 2:     # odd width: the unpaired last feature passes through (cos 1, sin 0)
        pad = cos.shape[:-1] + (1,)
        cos = np.concatenate([cos, np.ones(pad, cos.dtype)], axis=-1)
        sin = np.concatenate([sin, np.zeros(pad, sin.dtype)], axis=-1)
    return cos.astype(dtype, copy=False), sin.astype(dtype, copy=False)

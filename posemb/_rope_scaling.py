"""RoPE scaling as model configs describe it, and RoPE modules from a config.

The ``scaling`` dicts are Hugging Face's ``rope_scaling`` (``rope_parameters``
in transformers v5): ``{"rope_type": ..., "factor": ..., ...}``, the key
``"type"`` accepted for ``"rope_type"``.  Each type turns the plain inverse
frequencies ``base ** (-2i / dim)`` into the model's, and some give an
attention factor that multiplies cos and sin, as in transformers'
``modeling_rope_utils.py``.  Everything is computed in float64 (transformers
computes in float32), so tables stay within float32 rounding of the exact
values at any position.

Types (``h = dim // 2`` frequencies, ``orig`` the original context length):

* ``default``: no scaling.
* ``linear``: ``inv / factor``.
* ``dynamic`` (NTK): for the current length ``L = max(seq_len, max_pos)``,
  ``base' = base * (factor*L/max_pos - (factor-1)) ** (dim/(dim-2))``.
* ``yarn``: a ramp between interpolated (``inv / factor``) and extrapolated
  (``inv``) frequencies between the correction dims of ``beta_fast`` and
  ``beta_slow``; attention factor ``0.1 ln(factor) + 1`` (or the
  ``mscale``/``mscale_all_dim`` ratio, or ``attention_factor``).
* ``longrope``: ``inv / long_factor`` past ``orig`` positions, else
  ``inv / short_factor``; attention factor ``sqrt(1 + ln(factor)/ln(orig))``.
* ``llama3``: Meta's ``apply_scaling`` (keep high frequencies, divide low ones
  by ``factor``, interpolate smoothly in between).
"""
from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

import numpy as np

from . import _checks

__all__ = ["rope_scaling_parameters", "rope_config"]

#: rope_type -> (required keys, optional keys) of the scaling dict
ROPE_TYPES: dict[str, tuple[tuple[str, ...], tuple[str, ...]]] = {
    "default": ((), ()),
    "linear": (("factor",), ()),
    "dynamic": (("factor",), ()),
    "yarn": (("factor",), ("original_max_position_embeddings", "beta_fast", "beta_slow",
                           "mscale", "mscale_all_dim", "attention_factor", "truncate")),
    "longrope": (("short_factor", "long_factor"),
                 ("factor", "attention_factor", "original_max_position_embeddings")),
    "llama3": (("factor", "low_freq_factor", "high_freq_factor",
                "original_max_position_embeddings"), ()),
}

# Names configs on the Hub use for a listed type.  Qwen2-VL writes
# {"type": "mrope", "mrope_section": [...]}: default RoPE over sectioned positions
# (transformers rewrites it to "default" the same way).
_ALIASES = {"mrope": "default"}


def _expected_types() -> str:
    return ", ".join(repr(t) for t in ROPE_TYPES)


def normalize_scaling(scaling: Any) -> dict[str, Any]:
    """A checked copy of a ``rope_scaling`` dict with its ``"rope_type"`` resolved.

    ``None`` or ``{}`` is the default RoPE.  Unknown types and missing keys are
    a ValueError that lists what is expected; keys a type does not use (such as
    ``rope_theta`` in a transformers v5 ``rope_parameters``) are ignored.
    """
    if scaling is None:
        return {"rope_type": "default"}
    if not isinstance(scaling, Mapping):
        raise TypeError(
            f"scaling must be a dict in Hugging Face's rope_scaling format or None, "
            f"got {type(scaling).__name__}")
    out = dict(scaling)
    if not out:
        return {"rope_type": "default"}
    rope_type = out.get("rope_type", out.get("type"))
    if rope_type is None:
        raise ValueError(
            f"scaling needs a 'rope_type' (or 'type') key, one of {_expected_types()}; "
            f"got keys {sorted(out)}")
    if not isinstance(rope_type, str):
        raise TypeError(f"scaling's rope_type must be a string, got {rope_type!r}")
    rope_type = _ALIASES.get(rope_type, rope_type)
    if rope_type not in ROPE_TYPES:
        raise ValueError(
            f"scaling has an unknown rope_type {rope_type!r}; expected one of {_expected_types()}")
    required, optional = ROPE_TYPES[rope_type]
    missing = [k for k in required if out.get(k) is None]
    if missing:
        raise ValueError(
            f"scaling of rope_type {rope_type!r} is missing {missing}; it requires "
            f"{list(required)} and accepts {list(optional)}")
    out.pop("type", None)
    out["rope_type"] = rope_type
    return out


def _real(scaling: Mapping[str, Any], key: str, *, positive: bool = True) -> float:
    value = scaling[key]
    if isinstance(value, (bool, np.bool_, str, bytes)):
        raise TypeError(f"scaling[{key!r}] must be a real number, got {value!r}")
    name = f"scaling[{key!r}]"
    return _checks.positive_float(value, name) if positive else _checks.finite_float(value, name)


def _length(scaling: Mapping[str, Any], key: str) -> int:
    value = scaling[key]
    if isinstance(value, float) and value.is_integer():
        value = int(value)
    return _checks.size(value, f"scaling[{key!r}]", minimum=1)


def _original_length(scaling: Mapping[str, Any], max_position_embeddings: int | None,
                     rope_type: str) -> int:
    if scaling.get("original_max_position_embeddings") is not None:
        return _length(scaling, "original_max_position_embeddings")
    if max_position_embeddings is None:
        raise ValueError(
            f"scaling of rope_type {rope_type!r} needs the original context length: give "
            f"'original_max_position_embeddings' in scaling or max_position_embeddings=")
    return max_position_embeddings


def _yarn_mscale(scale: float, mscale: float = 1.0) -> float:
    return 1.0 if scale <= 1.0 else 0.1 * mscale * math.log(scale) + 1.0


def rope_scaling_parameters(dim: int, base: float = 10000.0, scaling: Any = None, *,
                            max_position_embeddings: int | None = None,
                            seq_len: int | None = None) -> tuple[np.ndarray, float]:
    """Inverse frequencies and attention factor of a scaled RoPE, in float64.

    The counterpart of transformers' ``ROPE_INIT_FUNCTIONS[rope_type](config,
    device, seq_len)``: returns ``(inv_freq, attention_factor)``, where
    ``attention_factor`` multiplies cos and sin (1.0 except for yarn and
    longrope).

    Parameters
    ----------
    dim : int
        Rotary width (``head_dim * partial_rotary_factor``), ``>= 0``; an odd
        width has ``dim // 2`` pairs and its last feature passes through.
    base : float
        ``rope_theta``.
    scaling : dict or None
        Hugging Face ``rope_scaling``: ``rope_type`` (or ``type``) one of
        ``default``, ``linear``, ``dynamic``, ``yarn``, ``longrope``,
        ``llama3``, and that type's keys.
    max_position_embeddings : int, optional
        The model's ``max_position_embeddings``: required by ``dynamic``; used by
        ``yarn`` and ``longrope`` when ``scaling`` has no
        ``original_max_position_embeddings``, and by ``longrope`` to infer
        ``factor`` (``max_position_embeddings / original``) when absent.
    seq_len : int, optional
        The current sequence length (largest position + 1), used by ``dynamic``
        (NTK grows the base past ``max_position_embeddings``) and ``longrope``
        (``long_factor`` past the original length).  ``None`` means "within the
        original context".

    Notes
    -----
    yarn uses an explicit ``factor`` as given, as current transformers does
    (Qwen3 writes ``factor`` 4 with ``max_position_embeddings`` 40960 and
    ``original_max_position_embeddings`` 32768); some older releases replaced it
    by ``max_position_embeddings / original_max_position_embeddings``.  longrope
    infers ``factor`` from that ratio only when ``factor`` is absent (Phi-3).

    Examples
    --------
    >>> import posemb
    >>> llama31 = {"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0,
    ...            "high_freq_factor": 4.0, "original_max_position_embeddings": 8192}
    >>> inv, attn = posemb.rope_scaling_parameters(128, 500000.0, llama31)
    >>> inv.shape, attn
    ((64,), 1.0)
    >>> inv, attn = posemb.rope_scaling_parameters(
    ...     64, 10000.0, {"type": "yarn", "factor": 4.0, "original_max_position_embeddings": 4096})
    >>> round(attn, 6)
    1.138629
    """
    # an odd width has dim // 2 pairs (the last feature passes through)
    dim = _checks.size(dim, "dim")
    base = _checks.positive_float(base, "base")
    cfg = normalize_scaling(scaling)
    rope_type = cfg["rope_type"]
    if max_position_embeddings is not None:
        max_position_embeddings = _checks.size(max_position_embeddings,
                                               "max_position_embeddings", minimum=1)
    if seq_len is not None:
        seq_len = _checks.size(seq_len, "seq_len")
    exponents = 2.0 * np.arange(dim // 2, dtype=np.float64) / max(dim, 1)
    plain = base ** -exponents

    if rope_type == "default":
        return plain, 1.0

    if rope_type == "linear":
        return plain / _real(cfg, "factor"), 1.0

    if rope_type == "dynamic":
        factor = _real(cfg, "factor")
        if max_position_embeddings is None:
            raise ValueError("scaling of rope_type 'dynamic' needs max_position_embeddings=")
        if dim < 4:
            raise ValueError(f"dim must be >= 4 for dynamic NTK scaling (exponent dim/(dim-2)), got {dim}")
        length = max(seq_len or 0, max_position_embeddings)
        if length == max_position_embeddings:
            return plain, 1.0
        new_base = base * ((factor * length / max_position_embeddings) - (factor - 1.0)) ** (
            dim / (dim - 2))
        return new_base ** -exponents, 1.0

    if rope_type == "yarn":
        factor = _real(cfg, "factor")
        orig = _original_length(cfg, max_position_embeddings, rope_type)
        if base == 1.0:     # the correction dims divide by ln(base)
            raise ValueError("base must not be 1 for scaling of rope_type 'yarn' (its "
                             "correction dims divide by ln(base))")
        attention = cfg.get("attention_factor")
        if attention is not None:
            attention = _real(cfg, "attention_factor")
        else:
            mscale = _real(cfg, "mscale") if cfg.get("mscale") else None
            mscale_all = _real(cfg, "mscale_all_dim") if cfg.get("mscale_all_dim") else None
            if mscale and mscale_all:
                attention = _yarn_mscale(factor, mscale) / _yarn_mscale(factor, mscale_all)
            else:
                attention = _yarn_mscale(factor)
        # transformers: `get("beta_fast") or 32` -- a 0 or None means the default
        beta_fast = _real(cfg, "beta_fast") if cfg.get("beta_fast") else 32.0
        beta_slow = _real(cfg, "beta_slow") if cfg.get("beta_slow") else 1.0

        def correction_dim(rotations: float) -> float:
            return dim * math.log(orig / (rotations * 2.0 * math.pi)) / (2.0 * math.log(base))

        low, high = correction_dim(beta_fast), correction_dim(beta_slow)
        if _checks.flag(cfg.get("truncate", True), "scaling['truncate']"):
            low, high = math.floor(low), math.ceil(high)
        low, high = max(low, 0), min(high, dim - 1)
        if low == high:
            high += 0.001  # as transformers: avoid 0/0
        ramp = np.clip((np.arange(dim // 2, dtype=np.float64) - low) / (high - low), 0.0, 1.0)
        extrapolation = 1.0 - ramp
        pos_freqs = base ** exponents
        inv = (1.0 / (factor * pos_freqs)) * (1.0 - extrapolation) + (1.0 / pos_freqs) * extrapolation
        return inv, float(attention)

    if rope_type == "longrope":
        orig = _original_length(cfg, max_position_embeddings, rope_type)
        ext = {}
        for key in ("short_factor", "long_factor"):
            try:
                arr = np.asarray(cfg[key])
                if arr.dtype.kind not in "iuf":     # bools and strings are not factors
                    raise TypeError
                arr = arr.astype(np.float64)
            except (TypeError, ValueError):
                raise TypeError(f"scaling[{key!r}] must be a list of numbers") from None
            if arr.shape != (dim // 2,):
                raise ValueError(
                    f"scaling[{key!r}] must have dim // 2 = {dim // 2} values, got shape {arr.shape}")
            if not np.all(np.isfinite(arr) & (arr > 0)):
                raise ValueError(f"scaling[{key!r}] must hold finite numbers > 0")
            ext[key] = arr
        if cfg.get("factor") is not None:
            factor = _real(cfg, "factor")
        elif max_position_embeddings is not None:
            factor = max_position_embeddings / orig
        else:
            factor = 1.0
        if cfg.get("attention_factor") is not None:
            attention = _real(cfg, "attention_factor")
        elif factor <= 1.0:
            attention = 1.0
        else:
            if orig < 2:    # ln(orig) = 0: no attention factor exists
                raise ValueError(
                    f"scaling of rope_type 'longrope' with factor {factor} > 1 needs an original "
                    f"context length (original_max_position_embeddings) >= 2, got {orig}")
            attention = math.sqrt(1.0 + math.log(factor) / math.log(orig))
        which = "long_factor" if seq_len is not None and seq_len > orig else "short_factor"
        return 1.0 / (ext[which] * base ** exponents), float(attention)

    # llama3
    factor = _real(cfg, "factor")
    low_ff = _real(cfg, "low_freq_factor")
    high_ff = _real(cfg, "high_freq_factor")
    if high_ff <= low_ff:   # else Meta's apply_scaling and HF's formula disagree
        raise ValueError(
            f"scaling['high_freq_factor'] must be greater than scaling['low_freq_factor'], got "
            f"{high_ff} and {low_ff}")
    orig = _length(cfg, "original_max_position_embeddings")
    low_wavelen = orig / low_ff
    high_wavelen = orig / high_ff
    wavelen = 2.0 * math.pi / plain
    inv = np.where(wavelen > low_wavelen, plain / factor, plain)
    smooth = (orig / wavelen - low_ff) / (high_ff - low_ff)
    smoothed = (1.0 - smooth) * inv / factor + smooth * inv
    medium = ~(wavelen < high_wavelen) & ~(wavelen > low_wavelen)
    return np.where(medium, smoothed, inv), 1.0


def frequency_regime(scaling: Mapping[str, Any], max_position_embeddings: int | None,
                     seq_len: int) -> Any:
    """Which frequencies a normalized ``scaling`` uses for ``seq_len``.

    ``None`` for the frequencies of the original context, else a hashable key:
    ``"long"`` for longrope's long factors, the length itself for dynamic NTK.
    """
    rope_type = scaling["rope_type"]
    if rope_type == "longrope":
        orig = _original_length(scaling, max_position_embeddings, rope_type)
        return "long" if seq_len > orig else None
    if rope_type == "dynamic" and max_position_embeddings is not None:
        return seq_len if seq_len > max_position_embeddings else None
    return None


def _get(cfg: Mapping[str, Any], *keys: str) -> Any:
    for k in keys:
        if cfg.get(k) is not None:
            return cfg[k]
    return None


def rope_config(config: Mapping[str, Any], *, seq_len: int | None = None,
                dtype: Any = np.float32) -> Any:
    """A :class:`RoPE` that reproduces a model's rotary embedding from its ``config.json``.

    Reads (as transformers does): ``head_dim`` or ``hidden_size //
    num_attention_heads`` (``qk_rope_head_dim`` for DeepSeek's MLA, GPT-J's
    ``n_embd``/``n_head``), ``rope_theta`` (GPT-NeoX ``rotary_emb_base``;
    default 10000), ``partial_rotary_factor`` (GPT-NeoX ``rotary_pct``; GPT-J
    ``rotary_dim``), ``rope_scaling`` (or transformers v5 ``rope_parameters``),
    ``max_position_embeddings`` and a top-level
    ``original_max_position_embeddings`` (Phi-3).  The interleaved layout is
    used for GPT-J and when ``rope_interleave`` is true (DeepSeek-V3:
    transformers de-interleaves q and k before its half-split rotation, so its
    outputs are these with each head's features in the order ``0, 2, 4, ...,
    1, 3, 5, ...``; ``q . k`` is the same); otherwise the half-split layout of
    transformers.  A multimodal config whose
    rotary settings live in ``text_config`` is read from there.

    Parameters
    ----------
    config : dict
        The parsed ``config.json``.
    seq_len : int, optional
        Rows of the table cache made up front (default ``min(max_position_embeddings,
        4096)``); later positions extend it.
    dtype : float16, float32 or float64
        dtype of the cached tables.

    Examples
    --------
    >>> import numpy as np, posemb
    >>> llama31 = {"hidden_size": 4096, "num_attention_heads": 32, "rope_theta": 500000.0,
    ...            "max_position_embeddings": 131072,
    ...            "rope_scaling": {"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0,
    ...                             "high_freq_factor": 4.0,
    ...                             "original_max_position_embeddings": 8192}}
    >>> rope = posemb.rope_config(llama31)
    >>> rope.head_size, rope.rotary_dim, rope.scaling["rope_type"]
    (128, 128, 'llama3')
    >>> q = np.ones((1, 32, 5, 128), np.float32)
    >>> rope(q, offset=100000).shape
    (1, 32, 5, 128)
    """
    from ._rope import RoPE

    if not isinstance(config, Mapping):
        raise TypeError(f"config must be a dict (a parsed config.json), got {type(config).__name__}")
    cfg: Mapping[str, Any] = config
    size_keys = ("head_dim", "hidden_size", "n_embd", "qk_rope_head_dim")
    text = cfg.get("text_config")
    if isinstance(text, Mapping) and not any(cfg.get(k) is not None for k in size_keys):
        cfg = text

    params = _get(cfg, "rope_scaling", "rope_parameters")
    if params is not None and not isinstance(params, Mapping):
        raise TypeError(f"config['rope_scaling'] must be a dict or None, got {type(params).__name__}")
    params = dict(params or {})

    if cfg.get("qk_rope_head_dim") is not None:  # DeepSeek MLA: RoPE on the rope slice only
        head_size = _checks.size(cfg["qk_rope_head_dim"], "config['qk_rope_head_dim']", minimum=2)
    elif cfg.get("head_dim") is not None:
        head_size = _checks.size(cfg["head_dim"], "config['head_dim']", minimum=2)
    else:
        hidden = _get(cfg, "hidden_size", "n_embd")
        heads = _get(cfg, "num_attention_heads", "n_head")
        if hidden is None or heads is None:
            raise ValueError(
                "config needs 'head_dim', or 'hidden_size' and 'num_attention_heads' "
                "(or 'qk_rope_head_dim' for DeepSeek MLA)")
        hidden = _checks.size(hidden, "config['hidden_size']", minimum=1)
        heads = _checks.size(heads, "config['num_attention_heads']", minimum=1)
        head_size = hidden // heads

    theta = _get(cfg, "rope_theta", "rotary_emb_base")
    if theta is None:
        theta = params.get("rope_theta", 10000.0)
    base = _checks.positive_float(theta, "config['rope_theta']")

    if cfg.get("rotary_dim") is not None:  # GPT-J
        rotary_dim = _checks.size(cfg["rotary_dim"], "config['rotary_dim']", minimum=2)
    else:
        fraction = _get(cfg, "partial_rotary_factor", "rotary_pct")
        if fraction is None:
            fraction = params.get("partial_rotary_factor", 1.0)
        fraction = _checks.positive_float(fraction, "config['partial_rotary_factor']")
        if fraction > 1.0:
            raise ValueError(f"config['partial_rotary_factor'] must be <= 1, got {fraction}")
        rotary_dim = int(head_size * fraction)
    if rotary_dim % 2 or rotary_dim < 2:
        raise ValueError(
            f"config gives a rotary width of {rotary_dim} (head_dim {head_size} times "
            f"partial_rotary_factor); it must be even and >= 2")

    max_pos = _get(cfg, "max_position_embeddings", "n_positions")
    if max_pos is not None:
        max_pos = _checks.size(max_pos, "config['max_position_embeddings']", minimum=1)
    if (cfg.get("original_max_position_embeddings") is not None
            and params.get("original_max_position_embeddings") is None and params):
        params["original_max_position_embeddings"] = cfg["original_max_position_embeddings"]

    interleaved = (_checks.flag(cfg.get("rope_interleave", False), "config['rope_interleave']")
                   or cfg.get("model_type") == "gptj")
    if seq_len is None:
        seq_len = min(max_pos or 4096, 4096)
    return RoPE(head_size, seq_len, base=base, interleaved=interleaved, rotary_dim=rotary_dim,
                dtype=dtype, scaling=params or None, max_position_embeddings=max_pos)

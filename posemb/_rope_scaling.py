"""RoPE scaling as model configs describe it (the module built from a config,
:func:`rope_config`, is in ``_rope_module``).

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
* ``proportional``: the first ``int(partial_rotary_factor * dim // 2)``
  frequencies ``base ** (-2i / dim)`` (over the whole head, not the rotated
  part), the rest 0 (those pairs pass through), all divided by ``factor``
  (default 1): transformers' ``_compute_proportional_rope_parameters``.

These are the types of transformers' ``ROPE_INIT_FUNCTIONS`` (5.x) plus
``default``.
"""
from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

import numpy as np

from . import _checks

__all__ = ["rope_scaling_parameters", "layer_rope_parameters", "layer_uses_rope"]

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
    "proportional": ((), ("factor", "partial_rotary_factor")),
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
    name = f"scaling[{key!r}]"
    _checks.size(value, name, minimum=1)
    return _checks.bounded(value, name, _checks.MAX_EXACT_POSITION)


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
        ``llama3``, ``proportional``, and that type's keys.
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
        _checks.size(max_position_embeddings, "max_position_embeddings", minimum=1)
        max_position_embeddings = _checks.bounded(max_position_embeddings,
                                                  "max_position_embeddings",
                                                  _checks.MAX_EXACT_POSITION)
    if seq_len is not None:
        seq_len = _checks.bounded(seq_len, "seq_len", _checks.MAX_EXACT_POSITION)
    h = dim // 2
    # about ten float64 temporaries per frequency, made block by block
    _checks.check_result((h,), np.float64, "dim", what=f"{h} inverse frequencies")
    inv = np.empty(h)
    attention = 1.0
    step = _checks.block_rows(10 * 8, h)
    for a in range(0, max(h, 1), step):   # once at least: dim 0 checks the parameters too
        idx = np.arange(a, min(h, a + step), dtype=np.float64)
        with np.errstate(over="ignore", divide="ignore", invalid="ignore"):
            block, attention = _scaled_frequencies(dim, base, cfg, max_position_embeddings,
                                                   seq_len, idx)
        inv[a:a + idx.shape[0]] = block
    if not (np.isfinite(inv).all() and math.isfinite(attention)):
        keys = [k for k in ("factor", "short_factor", "long_factor", "attention_factor",
                            "mscale", "mscale_all_dim") if cfg.get(k) is not None]
        what = "inverse frequencies" if math.isfinite(attention) else "an attention factor"
        raise ValueError(
            f"base={base!r} and {' / '.join(f'scaling[{k!r}]' for k in keys) or 'no scaling'} "
            f"(rope_type {rope_type!r}) give {what} that are not finite in float64")
    return inv, attention


def _scaled_frequencies(dim: int, base: float, cfg: Mapping[str, Any],
                        max_position_embeddings: int | None, seq_len: int | None,
                        idx: np.ndarray) -> tuple[np.ndarray, float]:
    """The inverse frequencies ``idx`` (float64 indices ``i < dim // 2``) of
    the checked ``cfg``, and the attention factor."""
    rope_type = cfg["rope_type"]
    exponents = 2.0 * idx / max(dim, 1)
    plain = base ** -exponents

    if rope_type == "default":
        return plain, 1.0

    if rope_type == "linear":
        return plain / _real(cfg, "factor"), 1.0

    if rope_type == "proportional":
        factor = _real(cfg, "factor") if cfg.get("factor") is not None else 1.0
        fraction = (_real(cfg, "partial_rotary_factor")
                    if cfg.get("partial_rotary_factor") is not None else 1.0)
        if fraction > 1.0:
            raise ValueError(f"scaling['partial_rotary_factor'] must be <= 1, got {fraction}")
        angles = int(fraction * dim // 2)
        inv = np.where(np.arange(dim // 2) < angles, plain, 0.0)
        return inv / factor, 1.0

    if rope_type == "dynamic":
        factor = _real(cfg, "factor")
        if max_position_embeddings is None:
            raise ValueError("scaling of rope_type 'dynamic' needs max_position_embeddings=")
        if dim < 4:
            raise ValueError(f"dim must be >= 4 for dynamic NTK scaling (exponent dim/(dim-2)), got {dim}")
        length = max(seq_len or 0, max_position_embeddings)
        if length == max_position_embeddings:
            return plain, 1.0
        ratio = (factor * length / max_position_embeddings) - (factor - 1.0)
        try:
            new_base = base * ratio ** (dim / (dim - 2))
        except OverflowError:
            new_base = math.inf
        if not math.isfinite(new_base) and math.isfinite(ratio):
            # base' beyond float64: its powers are formed from logarithms
            log_base = math.log(base) + dim / (dim - 2) * math.log(ratio)
            return np.exp(-exponents * log_base), 1.0
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
        ramp = np.clip((idx - low) / (high - low), 0.0, 1.0)
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
        return 1.0 / (ext[which][idx.astype(np.intp)] * base ** exponents), float(attention)

    # llama3
    factor = _real(cfg, "factor")
    low_ff = _real(cfg, "low_freq_factor")
    high_ff = _real(cfg, "high_freq_factor")
    if high_ff < low_ff:   # else Meta's apply_scaling and HF's formula disagree
        raise ValueError(
            f"scaling['high_freq_factor'] must not be less than scaling['low_freq_factor'], "
            f"got {high_ff} and {low_ff}")
    orig = _length(cfg, "original_max_position_embeddings")
    low_wavelen = orig / low_ff
    high_wavelen = orig / high_ff
    wavelen = 2.0 * math.pi / plain
    inv = np.where(wavelen > low_wavelen, plain / factor, plain)
    if high_ff == low_ff:   # Llama 4: no smooth band, a step at orig / low_freq_factor
        return inv, 1.0
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


#: layer-type names transformers uses as keys of a nested ``rope_parameters``
_LAYER_TYPES = ("full_attention", "sliding_attention", "chunked_attention", "linear_attention")


def layer_rope_parameters(config: Mapping[str, Any]) -> dict[str, dict[str, Any] | None] | None:
    """Per-layer-type RoPE settings of a config, or None when every layer shares one.

    Returns ``{layer_type: rope_parameters or None}`` (None: a NoPE layer
    type), each dict carrying its ``rope_theta``.  Three spellings exist:

    * transformers v5's nested ``rope_parameters`` (keys from ``layer_types``);
    * Gemma 3's published files: ``rope_theta`` (global, default 1e6, with
      ``rope_scaling`` on full-attention layers only) and
      ``rope_local_base_freq`` (sliding-window layers, default 1e4), as
      ``Gemma3TextConfig.convert_rope_params_to_dict`` reads them;
    * ModernBERT's ``global_rope_theta`` (default 160000) and
      ``local_rope_theta`` (default 1e4), ``rope_scaling`` on both.

    Examples
    --------
    >>> import posemb
    >>> layers = posemb.layer_rope_parameters(
    ...     {"model_type": "gemma3_text", "rope_theta": 1e6, "rope_local_base_freq": 1e4,
    ...      "rope_scaling": {"rope_type": "linear", "factor": 8.0}})
    >>> layers["full_attention"]["factor"], layers["sliding_attention"]["rope_theta"]
    (8.0, 10000.0)
    >>> posemb.layer_rope_parameters({"rope_theta": 1e4}) is None
    True
    """
    if not isinstance(config, Mapping):
        raise TypeError(f"config must be a dict (a parsed config.json), got {type(config).__name__}")
    params = _get(config, "rope_parameters", "rope_scaling")
    declared = config.get("layer_types")
    names = set(_LAYER_TYPES) | (set(declared) if isinstance(declared, (list, tuple)) else set())
    if isinstance(params, Mapping) and params and all(k in names for k in params):
        out: dict[str, dict[str, Any] | None] = {}
        for key, value in params.items():
            if value is not None and not isinstance(value, Mapping):
                raise TypeError(f"config['rope_parameters'][{key!r}] must be a dict or None, "
                                f"got {type(value).__name__}")
            if value is None:
                out[key] = None
                continue
            value = dict(value)
            if value.get("rope_theta") is None:
                value["rope_theta"] = config.get("rope_theta", 10000.0)
            out[key] = value
        return out
    flat = dict(params) if isinstance(params, Mapping) else {}
    mt = config.get("model_type")
    if mt in ("gemma3", "gemma3_text") or config.get("rope_local_base_freq") is not None:
        full = dict(flat, rope_theta=flat.get("rope_theta", config.get("rope_theta", 1e6)))
        local = {"rope_type": "default",
                 "rope_theta": config.get("rope_local_base_freq", 10000.0)}
        return {"full_attention": full, "sliding_attention": local}
    if (mt == "modernbert" or config.get("global_rope_theta") is not None
            or config.get("local_rope_theta") is not None):
        full = dict(flat, rope_theta=config.get("global_rope_theta", 160000.0))
        local = dict(flat, rope_theta=config.get("local_rope_theta", 10000.0))
        return {"full_attention": full, "sliding_attention": local}
    return None




def layer_uses_rope(config: Mapping[str, Any], layer_idx: int) -> bool:
    """Whether decoder layer ``layer_idx`` of a model rotates q and k (False: NoPE).

    * Llama 4: ``no_rope_layers[layer_idx]`` (1 = RoPE), by default a NoPE
      layer every ``no_rope_layer_interval`` (4) layers, as
      ``Llama4TextConfig`` builds it and ``Llama4TextAttention.use_rope`` reads it;
    * Cohere 2: only its sliding-window layers rotate (``Cohere2Attention``),
      ``layer_types`` or, without it, every ``sliding_window_pattern`` (4)-th
      layer full attention;
    * a nested ``rope_parameters`` whose entry for the layer's type (from
      ``layer_types``) is None;
    * every other model: True.

    Examples
    --------
    >>> import posemb
    >>> cfg = {"model_type": "llama4_text", "num_hidden_layers": 8}
    >>> [posemb.layer_uses_rope(cfg, i) for i in range(8)]
    [True, True, True, False, True, True, True, False]
    """
    if not isinstance(config, Mapping):
        raise TypeError(f"config must be a dict (a parsed config.json), got {type(config).__name__}")
    idx = _checks.size(layer_idx, "layer_idx")
    n = config.get("num_hidden_layers")
    if n is not None:
        n = _checks.size(n, "config['num_hidden_layers']")
        if idx >= n:
            raise IndexError(f"layer_idx={idx} is out of range for {n} layers")
    mt = config.get("model_type")
    layer_types = config.get("layer_types")

    def per_layer(values: Any, what: str) -> Any:
        if not isinstance(values, (list, tuple)) or idx >= len(values):
            raise ValueError(f"config[{what!r}] must list every layer, got {values!r}")
        return values[idx]

    if mt in ("llama4", "llama4_text"):
        flags = config.get("no_rope_layers")
        if not flags:
            if n is None:
                raise ValueError("a Llama 4 config without no_rope_layers needs num_hidden_layers")
            every = _checks.size(config.get("no_rope_layer_interval", 4),
                                 "config['no_rope_layer_interval']", minimum=1)
            return (idx + 1) % every != 0
        return bool(per_layer(flags, "no_rope_layers"))
    if mt == "cohere2":
        if layer_types:
            return per_layer(layer_types, "layer_types") == "sliding_attention"
        every = _checks.size(config.get("sliding_window_pattern", 4),
                             "config['sliding_window_pattern']", minimum=1)
        return bool((idx + 1) % every)
    per = layer_rope_parameters(config)
    if per is not None and layer_types:
        kind = per_layer(layer_types, "layer_types")
        return kind not in per or per[kind] is not None
    return True

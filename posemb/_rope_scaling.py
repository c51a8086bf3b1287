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

__all__ = ["rope_scaling_parameters", "rope_config", "layer_rope_parameters"]

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


def rope_config(config: Mapping[str, Any], *, seq_len: int | None = None,
                dtype: Any = np.float32, layer_type: str | None = None,
                interleaved: bool | None = None, precision: str = "exact") -> Any:
    """A :class:`RoPE` that reproduces a model's rotary embedding from its ``config.json``.

    Reads (as transformers does): ``head_dim`` or ``hidden_size //
    num_attention_heads`` (``qk_rope_head_dim`` for DeepSeek's MLA, GPT-J's
    ``n_embd``/``n_head``), ``rope_theta`` (GPT-NeoX ``rotary_emb_base``;
    default 10000), ``partial_rotary_factor`` (GPT-NeoX ``rotary_pct``; GPT-J
    ``rotary_dim``; the family's default when absent, e.g. 0.5 for GLM),
    ``rope_scaling`` (or transformers v5 ``rope_parameters``),
    ``max_position_embeddings`` and a top-level
    ``original_max_position_embeddings`` (Phi-3).  The pair layout is the
    model family's (:func:`rope_convention`: interleaved for GPT-J, CodeGen,
    Cohere, GLM, DeepSeek-V2/V3; half-split otherwise), unless
    ``interleaved`` says otherwise.  DeepSeek-V3's transformers module
    returns its rotated features de-interleaved (``0, 2, 4, ..., 1, 3, 5,
    ...``); this RoPE keeps them in place (``q . k`` is the same).  A
    multimodal config whose rotary settings live in ``text_config`` is read
    from there.

    Per-layer-type RoPE (Gemma 3's ``rope_local_base_freq``, ModernBERT's
    global/local theta, transformers v5's nested ``rope_parameters``, see
    :func:`layer_rope_parameters`) needs ``layer_type`` (e.g.
    ``"sliding_attention"``); a NoPE layer type gives None.

    Parameters
    ----------
    config : dict
        The parsed ``config.json``.
    seq_len : int, optional
        Rows of the table cache made up front (default ``min(max_position_embeddings,
        4096)``); later positions extend it.
    dtype : float16, float32 or float64
        dtype of the cached tables.
    layer_type : str, optional
        Which layers' RoPE, for configs that set it per layer type.
    interleaved : bool, optional
        Override the family's pair layout.
    precision : {"exact", "float32", "bfloat16"}
        The tables' recipe (see :func:`rope_cos_sin`); ``"float32"`` is the
        model's transformers computation.

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
    >>> gemma3 = {"model_type": "gemma3_text", "head_dim": 256, "hidden_size": 2560,
    ...           "num_attention_heads": 8, "rope_theta": 1000000.0,
    ...           "rope_local_base_freq": 10000.0, "max_position_embeddings": 131072,
    ...           "rope_scaling": {"rope_type": "linear", "factor": 8.0}}
    >>> posemb.rope_config(gemma3, layer_type="sliding_attention").base
    10000.0
    >>> posemb.rope_config({"model_type": "glm4", "hidden_size": 64, "num_attention_heads": 2,
    ...                     "max_position_embeddings": 128}).interleaved
    True
    """
    from ._conventions import rope_convention
    from ._rope import RoPE

    if not isinstance(config, Mapping):
        raise TypeError(f"config must be a dict (a parsed config.json), got {type(config).__name__}")
    cfg: Mapping[str, Any] = config
    size_keys = ("head_dim", "hidden_size", "n_embd", "qk_rope_head_dim")
    text = cfg.get("text_config")
    if isinstance(text, Mapping) and not any(cfg.get(k) is not None for k in size_keys):
        cfg = dict(text, model_type=text.get("model_type", cfg.get("model_type")))
    conv = rope_convention(cfg)

    layers = layer_rope_parameters(cfg)
    if layers is not None:
        if layer_type is None:
            raise ValueError(
                f"config sets RoPE per layer type ({', '.join(map(repr, layers))}): pass "
                f"layer_type= one of them")
        if layer_type not in layers:
            raise ValueError(f"layer_type {layer_type!r} is not one of the config's layer types "
                             f"{list(layers)}")
        if layers[layer_type] is None:
            return None     # a NoPE layer type
        params = dict(layers[layer_type] or {})
    else:
        declared = cfg.get("layer_types")
        if (layer_type is not None and isinstance(declared, (list, tuple))
                and layer_type not in declared):
            raise ValueError(f"layer_type {layer_type!r} is not one of the config's layer_types "
                             f"{sorted(set(declared))}")
        params = _get(cfg, "rope_scaling", "rope_parameters")
        if params is not None and not isinstance(params, Mapping):
            raise TypeError(
                f"config['rope_scaling'] must be a dict or None, got {type(params).__name__}")
        params = dict(params or {})

    if params and params.get("rope_type") is None and params.get("type") is None:
        params["rope_type"] = "default"   # e.g. {"rope_theta": ...} alone
    rope_dim_key = conv.rotary_dim_key
    if rope_dim_key == "qk_rope_head_dim" or cfg.get("qk_rope_head_dim") is not None:
        if cfg.get("qk_rope_head_dim") is None:
            raise ValueError("config of a DeepSeek MLA model needs 'qk_rope_head_dim'")
        # DeepSeek MLA: RoPE on the rope slice only
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

    if layers is not None:
        theta = params.get("rope_theta", 10000.0)
    else:
        theta = _get(cfg, "rope_theta", "rotary_emb_base")
        if theta is None:
            theta = params.get("rope_theta", 10000.0)
    base = _checks.positive_float(theta, "config['rope_theta']")

    fraction = _get(cfg, "partial_rotary_factor", "rotary_pct")
    if fraction is None:
        fraction = params.get("partial_rotary_factor", conv.partial_rotary_factor)
    if params.get("rope_type", params.get("type")) == "proportional":
        # the partial factor shapes the frequencies; the whole head "rotates"
        params.setdefault("partial_rotary_factor", fraction)
        rotary_dim = head_size
    elif cfg.get("rotary_dim") is not None:  # GPT-J, CodeGen
        rotary_dim = _checks.size(cfg["rotary_dim"], "config['rotary_dim']", minimum=2)
        n_ctx, n_head = cfg.get("n_ctx"), _get(cfg, "n_head", "num_attention_heads")
        if rope_dim_key == "rotary_dim" and cfg.get("model_type") == "codegen" \
                and n_ctx is not None and n_head:
            rotary_dim = min(rotary_dim, int(n_ctx) // int(n_head))  # CodeGenModel.__init__
    else:
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
    if params and params.get("rope_type", params.get("type")) in ("yarn", "longrope", "llama3") \
            and params.get("original_max_position_embeddings") is None and max_pos is not None:
        # transformers' standardize_rope_params: the pretraining length defaults to max_pos
        params["original_max_position_embeddings"] = max_pos

    if interleaved is None:
        interleaved = conv.interleaved
    else:
        interleaved = _checks.flag(interleaved, "interleaved")
    if seq_len is None:
        seq_len = min(max_pos or 4096, 4096)
    return RoPE(head_size, seq_len, base=base, interleaved=interleaved, rotary_dim=rotary_dim,
                dtype=dtype, scaling=params or None, max_position_embeddings=max_pos,
                precision=precision)

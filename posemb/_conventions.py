"""How each model family lays out its rotary embedding: one table, read from a config.

Rotary embeddings differ between model families in three ways that the
frequencies alone do not show, and a table with the wrong one gives
plausible-looking but wrong attention (errors of order 1 on unit queries):

``pairs``
    Which features rotate together.  ``"half"``: feature ``i`` with
    ``i + r/2`` (transformers' ``rotate_half`` in ``modeling_llama.py``, also
    GPT-NeoX, Qwen, Phi, Gemma, Mistral).  ``"interleaved"``: ``2i`` with
    ``2i + 1`` (RoFormer, Meta's complex ``apply_rotary_emb``, GPT-J's
    ``rotate_every_two``, Cohere's and GLM's ``rotate_half``, DeepSeek's MLA).
``tables``
    What the model's rotary module returns.  ``"half"``: ``cat(c, c)`` over
    the rotary width (``LlamaRotaryEmbedding.forward``; GLM and DeepSeek-V3
    return this layout too and convert inside their ``apply_rotary_pos_emb``).
    ``"repeat"``: ``repeat_interleave(c, 2)`` (``CohereRotaryEmbedding``).
    ``"sincos"``: GPT-J/CodeGen's ``embed_positions`` buffer,
    ``cat(sin, cos)`` of width ``r`` (``create_sinusoidal_positions``).
    ``"complex"``: ``polar(1, angle)`` of width ``r/2`` (DeepSeek-V2).
``output``
    ``"pairs"``: rotated features stay where they were.  ``"deinterleaved"``:
    DeepSeek-V3's ``apply_rotary_pos_emb_interleave`` returns the rotated even
    features, then the rotated odd ones (``q . k`` is unchanged, the
    feature order is not).

Plus where the rotary width comes from: ``head_dim`` (or ``hidden_size //
num_attention_heads``) times ``partial_rotary_factor`` (with the family's
default when the config omits it), GPT-J/CodeGen's ``rotary_dim``, DeepSeek
MLA's ``qk_rope_head_dim`` (RoPE on that slice of each head only).

The table below is checked against the installed transformers' own modules by
``tests/test_conformance.py``.  A ``model_type`` not listed uses the
transformers default (half pairs, half tables, no partial rotary).
"""
from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, replace
from typing import Any

__all__ = ["RopeConvention", "rope_convention"]


@dataclass(frozen=True)
class RopeConvention:
    """One model family's rotary layout (see the module docstring).

    Attributes
    ----------
    pairs : {"half", "interleaved"}
    tables : {"half", "repeat", "sincos", "complex"}
    output : {"pairs", "deinterleaved"}
    partial_rotary_factor : float
        The family's default fraction of ``head_dim`` that rotates, used when
        the config gives neither ``partial_rotary_factor`` nor ``rotary_pct``.
    rotary_dim_key : str or None
        A config key giving the rotary width directly (``"rotary_dim"`` for
        GPT-J/CodeGen, ``"qk_rope_head_dim"`` for DeepSeek MLA).
    source : str
        The transformers file and functions this row was read from.

    Examples
    --------
    >>> import posemb
    >>> conv = posemb.rope_convention({"model_type": "deepseek_v3"})
    >>> conv.interleaved, conv.output, conv.rotary_dim_key
    (True, 'deinterleaved', 'qk_rope_head_dim')
    """

    pairs: str = "half"
    tables: str = "half"
    output: str = "pairs"
    partial_rotary_factor: float = 1.0
    rotary_dim_key: str | None = None
    source: str = "models/llama/modeling_llama.py: LlamaRotaryEmbedding, apply_rotary_pos_emb"

    def __post_init__(self) -> None:
        for field, allowed in (("pairs", ("half", "interleaved")),
                               ("tables", ("half", "repeat", "sincos", "complex")),
                               ("output", ("pairs", "deinterleaved"))):
            if getattr(self, field) not in allowed:
                raise ValueError(f"RopeConvention {field} must be one of {allowed}, "
                                 f"got {getattr(self, field)!r}")
        f = self.partial_rotary_factor
        if isinstance(f, bool) or not isinstance(f, (int, float)) or not 0 < f <= 1:
            raise ValueError(f"RopeConvention partial_rotary_factor must be in (0, 1], got {f!r}")

    @property
    def interleaved(self) -> bool:
        """True when pairs are ``(2i, 2i+1)``."""
        return self.pairs == "interleaved"


_DEFAULT = RopeConvention()

#: model_type -> convention (transformers 5.x modeling files)
CONVENTIONS: dict[str, RopeConvention] = {
    "gpt_neox": RopeConvention(partial_rotary_factor=0.25,
                               source="models/gpt_neox/configuration_gpt_neox.py: "
                                      "rotary_pct default 0.25"),
    "stablelm": RopeConvention(partial_rotary_factor=0.25,
                               source="models/stablelm/configuration_stablelm.py: default 0.25"),
    "phi": RopeConvention(partial_rotary_factor=0.5,
                          source="models/phi/configuration_phi.py: default 0.5"),
    "gptj": RopeConvention("interleaved", "sincos", rotary_dim_key="rotary_dim",
                           source="models/gptj/modeling_gptj.py: create_sinusoidal_positions, "
                                  "rotate_every_two, apply_rotary_pos_emb"),
    "codegen": RopeConvention("interleaved", "sincos", rotary_dim_key="rotary_dim",
                              source="models/codegen/modeling_codegen.py: "
                                     "create_sinusoidal_positions, rotate_every_two"),
    "cohere": RopeConvention("interleaved", "repeat",
                             source="models/cohere/modeling_cohere.py: CohereRotaryEmbedding "
                                    "(repeat_interleave), rotate_half (x[..., ::2])"),
    "cohere2": RopeConvention("interleaved", "repeat",
                              source="models/cohere2/modeling_cohere2.py: as Cohere; its "
                                     "full-attention layers skip RoPE (NoPE): layer_uses_rope"),
    "glm": RopeConvention("interleaved", "half", partial_rotary_factor=0.5,
                          source="models/glm/modeling_glm.py: apply_rotary_pos_emb "
                                 "(cos[..., :r/2].repeat_interleave(2)), rotate_half"),
    "glm4": RopeConvention("interleaved", "half", partial_rotary_factor=0.5,
                           source="models/glm4/modeling_glm4.py: as GLM"),
    "glm4_moe": RopeConvention(partial_rotary_factor=0.5,
                               source="models/glm4_moe/modeling_glm4_moe.py: rotate_half "
                                      "(half-split), partial 0.5"),
    "deepseek_v2": RopeConvention("interleaved", "complex", rotary_dim_key="qk_rope_head_dim",
                                  source="models/deepseek_v2/modeling_deepseek_v2.py: "
                                         "apply_rotary_emb (view_as_complex)"),
    "deepseek_v3": RopeConvention("interleaved", "half", "deinterleaved",
                                  rotary_dim_key="qk_rope_head_dim",
                                  source="models/deepseek_v3/modeling_deepseek_v3.py: "
                                         "apply_rotary_pos_emb_interleave (rope_interleave, "
                                         "default True)"),
}
CONVENTIONS["kimi_k2"] = CONVENTIONS["deepseek_v3"]
CONVENTIONS["llama4_text"] = CONVENTIONS["llama4"] = RopeConvention(
    "interleaved", "complex",
    source="models/llama4/modeling_llama4.py: Llama4TextRotaryEmbedding (torch.polar), "
           "apply_rotary_emb (view_as_complex); NoPE layers: layer_uses_rope (no_rope_layers)")

# configs without model_type: the architectures' class-name prefixes
_ARCHITECTURES = (
    ("GPTJ", "gptj"), ("CodeGen", "codegen"), ("Cohere2", "cohere2"), ("Cohere", "cohere"),
    ("Glm4Moe", "glm4_moe"), ("Glm4", "glm4"), ("Glm", "glm"), ("DeepseekV3", "deepseek_v3"),
    ("DeepseekV2", "deepseek_v2"), ("Llama4", "llama4"), ("GPTNeoX", "gpt_neox"), ("StableLm", "stablelm"),
    ("Phi3", "phi3"), ("Phi", "phi"),
)


def model_type(config: Mapping[str, Any]) -> str | None:
    """``config["model_type"]``, else the type named by ``config["architectures"]``."""
    mt = config.get("model_type")
    if isinstance(mt, str):
        return mt
    archs = config.get("architectures")
    if isinstance(archs, (list, tuple)):
        for arch in archs:
            if isinstance(arch, str):
                for prefix, name in _ARCHITECTURES:
                    if arch.startswith(prefix):
                        return name
    return None


def rope_convention(config: Any) -> RopeConvention:
    """The rotary convention of the model a ``config.json`` describes.

    ``config`` is a parsed ``config.json`` (a dict), or a ``model_type``
    string.  DeepSeek-V3 follows its ``rope_interleave`` key (default true,
    as in ``DeepseekV3Config``); ``false`` gives the half-split layout.

    Examples
    --------
    >>> import posemb
    >>> posemb.rope_convention({"model_type": "cohere"}).pairs
    'interleaved'
    >>> c = posemb.rope_convention({"model_type": "glm4"})
    >>> c.pairs, c.tables, c.partial_rotary_factor
    ('interleaved', 'half', 0.5)
    >>> posemb.rope_convention({"model_type": "deepseek_v3", "rope_interleave": False}).pairs
    'half'
    >>> posemb.rope_convention("llama").pairs
    'half'
    """
    if isinstance(config, str):
        return CONVENTIONS.get(config, _DEFAULT)
    if not isinstance(config, Mapping):
        raise TypeError(f"config must be a dict (a parsed config.json) or a model_type string, "
                        f"got {type(config).__name__}")
    from . import _checks
    name = model_type(config)
    conv = CONVENTIONS.get(name, _DEFAULT) if name is not None else _DEFAULT
    flag = config.get("rope_interleave")
    if flag is not None:
        flag = _checks.flag(flag, "config['rope_interleave']")
    if name in ("deepseek_v3", "kimi_k2") and flag is False:
        conv = replace(conv, pairs="half", output="pairs")
    elif name not in CONVENTIONS and flag:
        conv = replace(conv, pairs="interleaved", output="pairs", tables="repeat")
    return conv

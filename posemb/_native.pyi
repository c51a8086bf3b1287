# Types of posemb._native, which re-exports the C extension posemb._core
# (src/binding.c) name for name: the names and types are _core.pyi's.
from typing import Any

from ._core import (
    rope_half_fwd as rope_half_fwd,
    rope_half_back as rope_half_back,
    rope_inter_fwd as rope_inter_fwd,
    rope_inter_back as rope_inter_back,
    rotate_half as rotate_half,
    learned_pe_fwd as learned_pe_fwd,
    sinusoidal_add_rows as sinusoidal_add_rows,
    get_num_threads as get_num_threads,
    set_num_threads as set_num_threads,
    _dispatch as _dispatch,
    MAX_EXTENT as MAX_EXTENT,
    MAX_EXACT as MAX_EXACT,
    MAX_EXACT_DISTANCE as MAX_EXACT_DISTANCE,
    T5_MAX_BUCKETS as T5_MAX_BUCKETS,
    OUT_CACHE_MIN_BYTES as OUT_CACHE_MIN_BYTES,
    PARALLEL_MIN_BYTES as PARALLEL_MIN_BYTES,
    _rope_table as _rope_table,
    _rope_varlen as _rope_varlen,
    _sinusoidal_table as _sinusoidal_table,
    _learned_back as _learned_back,
    _t5_bucket as _t5_bucket,
    _t5_bias as _t5_bias,
    _t5_bias_backward as _t5_bias_backward,
    _shaw_index as _shaw_index,
    _shaw_embed as _shaw_embed,
    _shaw_embed_backward as _shaw_embed_backward,
    _alibi_bias as _alibi_bias,
    _causal_mask as _causal_mask,
    _padding_mask as _padding_mask,
)

def __getattr__(name: str) -> Any: ...

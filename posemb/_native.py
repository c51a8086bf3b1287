"""The one module that talks to the C extension ``posemb._core``.

Every other module reaches the kernels through this one (``from . import
_native as _core``), so the set of C entry points the Python API uses is in
one place.  The extension provides, by family:

* RoPE: the gufuncs ``rope_half_fwd``, ``rope_half_back``, ``rope_inter_fwd``,
  ``rope_inter_back`` (``(h,s,d),(s,r),(s,r)->(h,s,d)``: heads x positions
  blocked in C), the same four on bfloat16 bit patterns (uint16)
  ``rope_bf16_{half,inter}_{fwd,back}``, and ``rotate_half``; the table
  filler ``_rope_table``; the
  packed-sequence kernel ``_rope_varlen``;
* sinusoidal: ``sinusoidal_add_rows`` (``(s,d),(s,d)->(s,d)``) and
  ``_sinusoidal_table``;
* learned: the gufunc ``learned_pe_fwd`` and ``_learned_back``;
* relative: ``_t5_bucket``, ``_t5_bias``, ``_t5_bias_backward``, ``_shaw_index``,
  ``_shaw_embed``, ``_shaw_embed_backward``;
* ALiBi and masks: ``_alibi_bias``, ``_causal_mask``, ``_padding_mask``;
* runtime: ``set_num_threads``, ``get_num_threads``, ``_dispatch`` (the CPU
  level and each family's instruction set, for ``show_config``), and the
  limits ``MAX_EXTENT``, ``MAX_EXACT``, ``MAX_EXACT_DISTANCE``,
  ``T5_MAX_BUCKETS``, ``OUT_CACHE_MIN_BYTES``, ``PARALLEL_MIN_BYTES`` (defined
  once, in src/posemb.h; the last from this machine's L2 size).

(Names are copied from the extension as built, so a binding that adds or
drops an entry point needs no change here.)
"""
from . import _core

__all__ = [name for name in dir(_core) if not name.startswith("__")]
globals().update({name: getattr(_core, name) for name in __all__})

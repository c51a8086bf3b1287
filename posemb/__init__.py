"""posemb: fast, exact positional-embedding kernels over NumPy arrays.

C kernels, registered as NumPy (generalized) ufuncs where they are vector
ops, for rotary embeddings (RoPE, with HF scaling and model variants),
sinusoidal and learned encodings (with backward), T5 and Shaw relative
position bias, ALiBi and attention masks, under PyTorch/Hugging Face-familiar
names.  ``posemb.torch`` adapts them to autograd; ``posemb.plot`` draws them.

>>> import numpy as np, posemb
>>> q = np.random.default_rng(0).standard_normal((8, 100, 64), dtype=np.float32)
>>> posemb.RoPE(64, 1024)(q).shape
(8, 100, 64)
>>> posemb.alibi_bias(8, 100, 100).shape
(8, 100, 100)
"""
from ._rope import (
    RoPE,
    apply_rope,
    apply_rope_backward,
    apply_rotary_emb,
    apply_rotary_pos_emb,
    compute_frequencies,
    neg_half,
    precompute_freqs_cis,
    rope_cos_sin,
    rope_inv_freq,
    rotate_half,
)

from ._threads import get_num_threads, set_num_threads, show_config
from ._rope_scaling import *  # noqa: F401,F403
from ._rope_variants import *  # noqa: F401,F403
from ._sinusoidal import *  # noqa: F401,F403
from ._learned import *  # noqa: F401,F403
from ._relative import *  # noqa: F401,F403
from ._alibi import *  # noqa: F401,F403
from ._masks import *  # noqa: F401,F403
from ._attention import *  # noqa: F401,F403
from . import _rope_scaling, _rope_variants
from . import _sinusoidal, _learned, _relative, _alibi, _masks, _attention

__version__ = "0.1.0"

__all__ = [
    "RoPE",
    "apply_rope",
    "apply_rope_backward",
    "apply_rotary_emb",
    "apply_rotary_pos_emb",
    "compute_frequencies",
    "neg_half",
    "precompute_freqs_cis",
    "rope_cos_sin",
    "rope_inv_freq",
    "rotate_half",
    "get_num_threads",
    "set_num_threads",
    "show_config",
    "__version__",
    *_rope_scaling.__all__,
    *_rope_variants.__all__,
    *_sinusoidal.__all__,
    *_learned.__all__,
    *_relative.__all__,
    *_alibi.__all__,
    *_masks.__all__,
    *_attention.__all__,
]

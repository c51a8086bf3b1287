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
import importlib.machinery as _machinery
import os as _os


def _require_built_extension() -> None:
    """Raise a clear ImportError when this is an unbuilt source tree.

    Run from the root of a clone, Python imports the ``posemb/`` folder there
    rather than an installed copy; without the compiled ``_core`` beside it
    the first import of it would fail deep inside, as a circular import.
    """
    here = _os.path.dirname(_os.path.abspath(__file__))
    if any(_os.path.exists(_os.path.join(here, "_core" + suffix))
           for suffix in _machinery.EXTENSION_SUFFIXES):
        return
    root = _os.path.dirname(here)
    if _os.path.exists(_os.path.join(root, "setup.py")):
        raise ImportError(
            f"posemb is being imported from its source tree ({here}), where its C "
            "extension posemb._core has not been built. Build it in place with "
            f"`pip install -e .` run in {root}, or start Python outside {root} to "
            "use an installed posemb."
        )


_require_built_extension()

from ._rope import (  # noqa: E402
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
    rotate_pairs,
)

from ._threads import empty_cache, get_num_threads, set_num_threads, set_output_cache, show_config
from ._bench import bench
from ._rope_scaling import *  # noqa: F401,F403
from ._rope_variants import *  # noqa: F401,F403
from ._rope_module import RoPE, rope_config  # noqa: E402
from ._conventions import *  # noqa: F401,F403
from ._sinusoidal import *  # noqa: F401,F403
from ._learned import *  # noqa: F401,F403
from ._relative import *  # noqa: F401,F403
from ._alibi import *  # noqa: F401,F403
from ._masks import *  # noqa: F401,F403
from ._attention import *  # noqa: F401,F403
from . import _rope_scaling, _rope_variants, _conventions
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
    "rotate_pairs",
    "get_num_threads",
    "set_num_threads",
    "show_config",
    "set_output_cache",
    "empty_cache",
    "bench",
    "__version__",
    "rope_config",
    *_rope_scaling.__all__,
    *_rope_variants.__all__,
    *_conventions.__all__,
    *_sinusoidal.__all__,
    *_learned.__all__,
    *_relative.__all__,
    *_alibi.__all__,
    *_masks.__all__,
    *_attention.__all__,
]

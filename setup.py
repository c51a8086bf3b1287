"""Build posemb's C extension (posemb._core) with setuptools.

Portable flags only: no -march=native in anything that ships.
"""
import glob
import sys

import numpy as np
from setuptools import Extension, setup

# posemb._core: the kernels (one file per family), the runtime (CPU
# dispatch, thread pool, memory policy) and the binding (src/binding.c).
RUNTIME = sorted(glob.glob("src/runtime/*.c"))
SOURCES = sorted(glob.glob("src/kernels/*.c")) + RUNTIME + ["src/binding.c"]

if sys.platform == "win32":
    COMPILE_ARGS = ["/O2", "/fp:precise"]
else:
    COMPILE_ARGS = [
        "-std=c11",
        "-O3",
        "-Wall",
        "-Wextra",
        # Kernels match PyTorch's formulas term for term: no fused multiply-add.
        "-ffp-contract=off",
        "-fno-math-errno",
        "-pthread",
    ]


def extension(name: str, sources: list[str]) -> Extension:
    return Extension(
        name,
        sources=sources,
        depends=sorted(glob.glob("src/**/*.h", recursive=True)),
        include_dirs=[np.get_include(), "src"],
        define_macros=[("NPY_TARGET_VERSION", "NPY_2_1_API_VERSION")],
        extra_compile_args=COMPILE_ARGS,
        extra_link_args=[] if sys.platform == "win32" else ["-pthread"],
    )


setup(
    ext_modules=[
        extension("posemb._core", SOURCES),
        # `python -m posemb bench` only: the memory-bandwidth limit
        extension("posemb._stream", ["src/bench/stream.c", "src/runtime/pool.c"]),
    ]
)

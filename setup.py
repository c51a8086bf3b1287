"""Build posemb's C extension (posemb._core) with setuptools.

Portable flags only: no -march=native in anything that ships.
"""
import glob
import sys

import numpy as np
from setuptools import Extension, setup

# One file per kernel family plus the binding file (src/module.c).
SOURCES = sorted(glob.glob("src/*.c"))

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

setup(
    ext_modules=[
        Extension(
            "posemb._core",
            sources=SOURCES,
            depends=sorted(glob.glob("src/*.h")),
            include_dirs=[np.get_include(), "src"],
            define_macros=[("NPY_TARGET_VERSION", "NPY_2_1_API_VERSION")],
            extra_compile_args=COMPILE_ARGS,
            extra_link_args=[] if sys.platform == "win32" else ["-pthread"],
        )
    ]
)

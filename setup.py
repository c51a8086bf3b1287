"""Build posemb's C extension (posemb._core) with setuptools.

Portable flags only: no -march=native in anything that ships.
"""
import glob
import os
import sys
import sysconfig

import numpy as np
from setuptools import Extension, setup

# One file per kernel family plus the binding file (src/module.c).
SOURCES = sorted(glob.glob("src/*.c"))

if sys.platform == "win32":
    # /std:c11: the kernels use C11 (restrict, _Alignas); MSVC's default C is C89-ish
    COMPILE_ARGS = ["/std:c11", "/O2", "/fp:precise"]
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

# POSEMB_ABI3=1 (set by [tool.cibuildwheel]): one wheel for every CPython >= 3.10,
# built against the limited API (abi3).  NumPy >= 2 headers compile under
# Py_LIMITED_API and the binding uses only limited API (.ci/wheel_abi3.sh
# checks both with abi3audit and tests the wheel on several Pythons).  Opt-in,
# so an in-place build never leaves a stale version-specific _core next to an
# abi3 one; free-threaded Pythons have no limited API.
ABI3 = os.environ.get("POSEMB_ABI3") == "1" and not sysconfig.get_config_var("Py_GIL_DISABLED")
MACROS = [("NPY_TARGET_VERSION", "NPY_2_1_API_VERSION")]
if ABI3:
    MACROS.append(("Py_LIMITED_API", "0x030A0000"))

setup(
    options={"bdist_wheel": {"py_limited_api": "cp310"}} if ABI3 else {},
    ext_modules=[
        Extension(
            "posemb._core",
            sources=SOURCES,
            depends=sorted(glob.glob("src/*.h")),
            include_dirs=[np.get_include(), "src"],
            define_macros=MACROS,
            py_limited_api=ABI3,
            extra_compile_args=COMPILE_ARGS,
            extra_link_args=[] if sys.platform == "win32" else ["-pthread"],
        )
    ]
)

"""Build posemb's C extension (posemb._core) with setuptools.

Portable flags only: no -march=native in anything that ships.
"""
import glob
import os
import sys
import sysconfig

import numpy as np
from setuptools import Extension, setup

# posemb._core: the kernels (one file per family), the runtime (CPU
# dispatch, thread pool, memory policy) and the binding (src/binding.c).
RUNTIME = sorted(glob.glob("src/runtime/*.c"))
SOURCES = sorted(glob.glob("src/kernels/*.c")) + RUNTIME + ["src/binding.c"]

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
        # Each function on a 64-byte line: a kernel's loops keep their place
        # in the instruction fetch blocks whatever the code before them.
        # Measured, Zen 5 EPYC, 1 thread, (1, 32, 8192, 128) float32
        # interleaved in place (its 16-byte kernel's code byte for byte the
        # same, moved by an unrelated change from 48 to 16 bytes past a
        # line): 4.60-4.82 -> 5.29-5.47 ms; with this flag 4.62-4.87 ms (2
        # runs), 1.15-1.26x an in-place scale against 1.18-1.23x before (3).
        "-falign-functions=64",
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


def extension(name: str, sources: list[str]) -> Extension:
    return Extension(
        name,
        sources=sources,
        depends=sorted(glob.glob("src/**/*.h", recursive=True)),
        include_dirs=[np.get_include(), "src"],
        define_macros=MACROS,
        py_limited_api=ABI3,
        extra_compile_args=COMPILE_ARGS,
        extra_link_args=[] if sys.platform == "win32" else ["-pthread"],
    )


setup(
    options={"bdist_wheel": {"py_limited_api": "cp310"}} if ABI3 else {},
    ext_modules=[
        extension("posemb._core", SOURCES),
        # `python -m posemb bench` only: the memory-bandwidth limit
        extension("posemb._stream", ["src/bench/stream.c", "src/runtime/pool.c"]),
    ]
)

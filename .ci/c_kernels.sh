#!/usr/bin/env bash
# The C kernel tests (tests/c/test_kernels.c: every RoPE kernel, the RoPE and
# sinusoidal tables and the float16 conversions against float64 references,
# no Python) built with the host compiler and run.
source "$(dirname "$0")/c_common.sh"
gcc "${FLAGS[@]}" "${INCLUDES[@]}" -pthread "$DRIVER" "${KERNELS[@]}" -lm -o "$tmp/test_kernels"
"$tmp/test_kernels"

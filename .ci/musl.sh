#!/usr/bin/env bash
# musl (the musllinux wheels): the kernels build with musl-gcc (Debian
# musl-tools) without ifunc/target_clones -- musl's loader rejects IRELATIVE
# relocations, so posemb.h enables the AVX2 clones on glibc only -- and the C
# kernel tests, linked dynamically against musl, load and pass.
source "$(dirname "$0")/c_common.sh"
apt_ensure musl-tools
compile_each musl-gcc -pthread
musl-gcc "${FLAGS[@]}" "${INCLUDES[@]}" -pthread "$DRIVER" "${KERNELS[@]}" -lm -o "$tmp/test_kernels"
if readelf -r "$tmp/test_kernels" | grep -q IRELATIV; then
  echo "ifunc (IRELATIVE) relocations in a musl build"; exit 1
fi
"$tmp/test_kernels"

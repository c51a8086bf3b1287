#!/usr/bin/env bash
# aarch64: cross-compile the kernels with Debian's gcc-aarch64-linux-gnu
# (warnings are errors), check that no fused multiply-add crept into the
# object code (bits must equal the other platforms' and PyTorch's), and run
# the C kernel tests -- the NEON RoPE kernels (src/rope_neon.c) bit for bit
# against the portable ones and all against float64 references -- under
# qemu-user.
source "$(dirname "$0")/c_common.sh"
apt_ensure gcc-aarch64-linux-gnu qemu-user libc6-dev-arm64-cross
CC=aarch64-linux-gnu-gcc
compile_each "$CC" -pthread
# fmadd/fmsub/fnmadd/fnmsub (scalar) and fmla/fmls (vector) fuse a*b+c
if aarch64-linux-gnu-objdump -d "$tmp"/*.o | grep -E '\s(fn?m(add|sub)|fml[as])\s'; then
  echo "fused multiply-add instructions in the aarch64 kernels"; exit 1
fi
grep -q "pe_rope_half_fwd_f32_neon" <(aarch64-linux-gnu-nm "$tmp"/*.o) \
  || { echo "the NEON RoPE kernels were not built"; exit 1; }
"$CC" "${FLAGS[@]}" "${INCLUDES[@]}" -pthread "$DRIVER" "${KERNELS[@]}" -lm -o "$tmp/test_kernels"
out=$(qemu-aarch64 -L /usr/aarch64-linux-gnu "$tmp/test_kernels") || { echo "$out"; exit 1; }
echo "$out"
grep -q "NEON RoPE kernels" <<<"$out"

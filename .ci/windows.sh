#!/usr/bin/env bash
# Windows (the AMD64 wheels, built by MSVC): the kernels are valid C11 with
# no GNU extension where MSVC would reject one.  mingw-w64 (Debian) compiles
# every kernel twice: as ISO C11 with -pedantic-errors and no VLAs (MSVC has
# none), then as MSVC sees it (.ci/msvc_view.h hides __GNUC__ and poisons
# GCC's extensions); and links the C kernel tests into a Windows executable
# (run under wine when it is installed).
source "$(dirname "$0")/c_common.sh"
apt_ensure mingw-w64
CC=x86_64-w64-mingw32-gcc
STRICT=(-pedantic-errors -Werror=vla -Werror=pointer-arith)
compile_each "$CC" "${STRICT[@]}"
compile_each "$CC" "${STRICT[@]}" -include "$root/.ci/msvc_view.h" -Wno-error=unknown-pragmas
"$CC" "${FLAGS[@]}" "${INCLUDES[@]}" "${STRICT[@]}" "$DRIVER" "${KERNELS[@]}" -lm \
  -o "$tmp/test_kernels.exe"
echo "linked: test_kernels.exe ($(stat -c %s "$tmp/test_kernels.exe") bytes)"
if command -v wine > /dev/null; then
  wine "$tmp/test_kernels.exe"
fi

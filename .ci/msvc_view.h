/*
 * Forced-included by .ci/windows.sh for its second pass: the C library
 * headers are read first (as mingw-w64 has them), then GCC's identity is
 * hidden and its extensions are poisoned, so the kernels are compiled along
 * the branches MSVC takes (no __GNUC__) and any GNU extension left outside
 * an #if defined(__GNUC__) is an error, as it would be under MSVC.
 */
#include <limits.h>
#include <math.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#undef __GNUC__
#undef __GNUC_MINOR__
#undef __GNUC_PATCHLEVEL__
#undef __SSE2__
#pragma GCC poison __attribute__ __builtin_prefetch __builtin_cpu_init
#pragma GCC poison __builtin_cpu_supports __builtin_expect __builtin_unreachable
#pragma GCC poison __builtin_assume_aligned __builtin_clz __builtin_ctz
#pragma GCC poison __builtin_popcount __typeof__ typeof __asm__ asm __int128

#!/usr/bin/env bash
# Build posemb's extension with AddressSanitizer + UndefinedBehaviorSanitizer
# in a scratch copy of the tree and run the whole test suite against it, the
# ASan runtime preloaded into the ordinary Python.  Any report fails the run.
set -euo pipefail
san="-fsanitize=address,undefined -fno-sanitize-recover=all -fno-omit-frame-pointer -g -O1"
export CFLAGS="$san" LDFLAGS="$san"
source "$(dirname "$0")/scratch_build.sh"
export LD_PRELOAD="$(gcc -print-file-name=libasan.so) $(gcc -print-file-name=libubsan.so)"
# CPython and torch keep memory until exit on purpose: leak reports would be noise.
export ASAN_OPTIONS="detect_leaks=0:abort_on_error=1:halt_on_error=1:allocator_may_return_null=1"
export UBSAN_OPTIONS="print_stacktrace=1:halt_on_error=1"
check_scratch_import sanitized
python -m pytest -q -p no:cacheprovider tests "$@"

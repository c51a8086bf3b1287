#!/usr/bin/env bash
# Build posemb's extension with AddressSanitizer + UndefinedBehaviorSanitizer
# in a scratch copy of the tree and run the whole test suite against it, the
# ASan runtime preloaded into the ordinary Python.  Any report fails the run.
set -euo pipefail
cd "$(dirname "$0")/.."
root=$(pwd)
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
git ls-files -z | xargs -0 -I{} cp --parents {} "$tmp/"
cd "$tmp"
san="-fsanitize=address,undefined -fno-sanitize-recover=all -fno-omit-frame-pointer -g -O1"
CFLAGS="$san" LDFLAGS="$san" python setup.py -q build_ext --inplace > build.log 2>&1 \
  || { cat build.log; exit 1; }
grep -E ": warning:" build.log && { echo "sanitizer build has warnings"; exit 1; }
export LD_PRELOAD="$(gcc -print-file-name=libasan.so) $(gcc -print-file-name=libubsan.so)"
# CPython and torch keep memory until exit on purpose: leak reports would be noise.
export ASAN_OPTIONS="detect_leaks=0:abort_on_error=1:halt_on_error=1:allocator_may_return_null=1"
export UBSAN_OPTIONS="print_stacktrace=1:halt_on_error=1"
export PYTHONPATH="$tmp"
python -c "import posemb, os; f = posemb._core.__file__; \
assert f.startswith(os.environ['PYTHONPATH']), f; print('sanitized posemb from', f)"
python -m pytest -q -p no:cacheprovider tests "$@"

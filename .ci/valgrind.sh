#!/usr/bin/env bash
# valgrind memcheck over a representative subset: .ci/valgrind_driver.py makes
# one call of each kernel family (every dtype, odd layouts, the thread pool, the
# error paths) against a -g build of the extension in a scratch copy of the
# tree.  PYTHONMALLOC=malloc lets memcheck see every Python allocation.  Any
# memcheck error fails the run (suppressions: .ci/valgrind.supp, CPython only).
set -euo pipefail
export CFLAGS="-g"
source "$(dirname "$0")/scratch_build.sh"
export PYTHONMALLOC=malloc POSEMB_NUM_THREADS=2
check_scratch_import valgrind
py=$(python -c "import sys; print(sys.executable)")   # the binary, not a pyenv shim
valgrind --tool=memcheck --error-exitcode=1 --errors-for-leak-kinds=definite \
  --leak-check=full --show-leak-kinds=definite --num-callers=30 ${VALGRIND_EXTRA:-} \
  --suppressions="$root/.ci/valgrind.supp" \
  "$py" .ci/valgrind_driver.py

# Sourced by the C-only CI scripts (.ci/c_kernels.sh, aarch64.sh, musl.sh,
# windows.sh).  Sets root, tmp (removed on exit), KERNELS (every C file under
# src/ that does not include Python.h: the kernels and the runtime, found by
# glob so files may move), INCLUDES (-I for every folder under src/), FLAGS
# (setup.py's, warnings as errors) and DRIVER (tests/c/test_kernels.c).
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$root"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
source "$root/.ci/apt_ensure.sh"
mapfile -t KERNELS < <(find src -name '*.c' -print0 | xargs -0 grep -L 'Python\.h' | sort)
mapfile -t INCLUDES < <(find src -type d | sort | sed 's/^/-I/')
[ ${#KERNELS[@]} -gt 0 ] || { echo "no kernel sources under src/"; exit 1; }
FLAGS=(-std=c11 -O3 -Wall -Wextra -Werror -ffp-contract=off -fno-math-errno -falign-functions=64)
DRIVER=tests/c/test_kernels.c

# compile_each CC [flags...]: every kernel on its own (names the file that fails)
compile_each() {
  local cc=$1 f
  shift
  for f in "${KERNELS[@]}"; do
    "$cc" "${FLAGS[@]}" "${INCLUDES[@]}" "$@" -c "$f" -o "$tmp/$(basename "$f" .c).o" \
      || { echo "$cc: $f does not compile"; exit 1; }
  done
  echo "$cc: ${#KERNELS[@]} files compile: ${KERNELS[*]}"
}

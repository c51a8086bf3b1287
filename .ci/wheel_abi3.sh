#!/usr/bin/env bash
# One wheel for every CPython >= 3.10: POSEMB_ABI3=1 builds posemb's extension
# against the limited API (Py_LIMITED_API=3.10; NumPy >= 2 headers allow it).
# abi3audit checks that the extension uses only stable-ABI symbols, auditwheel
# repairs the wheel into manylinux, and the one wheel is installed and tested
# (numpy + pytest only) under the oldest and newest other CPythons found here
# (pyenv or python3.X on PATH; .ci/wheel_linux.sh already tests 3.11).
set -euo pipefail
cd "$(dirname "$0")/.."
root=$PWD
source .ci/wheel_tools.sh      # wheel_setup ($tmp), test_installed_wheel
wheel_setup
python -m venv "$tmp/tools"
"$tmp/tools/bin/python" -m pip install -q abi3audit

# sdist first, the wheel from it: a clean tree (no stale build/ of an in-place build)
POSEMB_ABI3=1 python -m build --no-isolation --outdir "$tmp/dist" . > "$tmp/build.log" 2>&1 \
  || { cat "$tmp/build.log"; exit 1; }
wheel=$(ls "$tmp"/dist/posemb-*-cp310-abi3-linux_x86_64.whl)
echo "built: $(basename "$wheel")"
check_one_extension "$wheel"
"$tmp/tools/bin/abi3audit" --strict --verbose "$wheel"
auditwheel repair -w "$tmp/wheelhouse" "$wheel" > "$tmp/repair.log" 2>&1 \
  || { cat "$tmp/repair.log"; exit 1; }
repaired=$(ls "$tmp"/wheelhouse/posemb-*.whl)
case "$(basename "$repaired")" in
  *-cp310-abi3-manylinux_*_x86_64.whl) ;;
  *) echo "not an abi3 manylinux wheel: $repaired"; exit 1 ;;
esac
auditwheel show "$repaired"

tested=0
for v in 3.10 3.13 3.12; do
  py=""
  for c in "$(pyenv root 2>/dev/null)"/versions/"$v".*/bin/python "python$v"; do
    if command -v "$c" > /dev/null 2>&1; then py=$c; break; fi
  done
  [ -n "$py" ] || { echo "no Python $v here: skipped"; continue; }
  echo "=== the abi3 wheel on $("$py" -V)"
  test_installed_wheel "$py" "$repaired" "$tmp/py$v" "$@"
  tested=$((tested + 1))
  [ "$tested" -lt 2 ] || break
done
[ "$tested" -gt 0 ] || { echo "no other CPython found to test the abi3 wheel on"; exit 1; }

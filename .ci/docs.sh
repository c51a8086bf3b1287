#!/usr/bin/env bash
# The API reference: Sphinx (autodoc + napoleon) over the docstrings, with
# warnings as errors, into a scratch directory.  The docstring examples
# themselves run as doctests in the test suite (tests/test_docs.py).
set -euo pipefail
cd "$(dirname "$0")/.."
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
python -m sphinx -W --keep-going -q -b html -d "$tmp/doctrees" docs "$tmp/html"
test -s "$tmp/html/api.html" && test -s "$tmp/html/torch.html" && test -s "$tmp/html/plot.html"
echo "docs: built with no warnings ($(ls "$tmp"/html/*.html | wc -l) pages)"

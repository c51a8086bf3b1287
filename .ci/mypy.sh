#!/usr/bin/env bash
# Type hints: mypy over the package with the configuration in pyproject.toml
# ([tool.mypy]: every function annotated; posemb/_core.pyi types the C extension).
set -euo pipefail
cd "$(dirname "$0")/.."
python -m mypy --cache-dir "$(mktemp -d)" posemb

#!/usr/bin/env bash
# Run the kernel tests at every CPU level this machine runs (POSEMB_CPU=
# tests/test_cpu_dispatch.py's ORDER of levels,
# up to what show_config() reports as
# supported), so every family's SIMD kernels -- not only the best one --
# are checked against the same references.  Extra arguments go to pytest.
set -euo pipefail
cd "$(dirname "$0")/.."
levels=$(python -c "
import sys
sys.path.insert(0, 'tests')
import posemb
from test_cpu_dispatch import ORDER as order   # (the tests' list of levels)
best = posemb.show_config(print_=False)['supported']
print(' '.join(order[:order.index(best) + 1]))")
echo "cpu_levels: $levels"
for level in $levels; do
  echo "=== POSEMB_CPU=$level"
  POSEMB_CPU=$level python -m pytest -q -p no:cacheprovider tests/test_cpu_dispatch.py \
    tests/test_rope.py tests/test_rope_overlap.py tests/test_rope_variants.py tests/test_rope_layouts.py \
    tests/test_rope_halfprec.py tests/test_relative.py \
    tests/test_sinusoidal.py tests/test_learned.py "$@"
done

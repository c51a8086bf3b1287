#!/usr/bin/env bash
# Build posemb's extension with -DPOSEMB_NO_CLONES (portable C kernels only:
# no AVX2/AVX-512 clones or intrinsics chosen at run time) in a scratch copy
# and run the kernel tests against it, so the paths that CPUs without those
# instructions take are tested on this one too.
set -euo pipefail
export CFLAGS="-DPOSEMB_NO_CLONES" LDFLAGS=""
source "$(dirname "$0")/scratch_build.sh"
check_scratch_import portable
python -m pytest -q -p no:cacheprovider tests/test_rope.py tests/test_rope_variants.py \
  tests/test_rope_scaling.py tests/test_sinusoidal.py tests/test_learned.py \
  tests/test_relative.py tests/test_alibi.py tests/test_masks.py tests/test_properties.py "$@"

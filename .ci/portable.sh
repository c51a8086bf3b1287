#!/usr/bin/env bash
# Build posemb's extension with -DPOSEMB_NO_CLONES (portable C kernels only:
# no SIMD intrinsics, no streaming stores, no per-ISA functions) in a scratch
# copy; check with objdump that the binary holds no instruction beyond the
# x86-64 baseline (no AVX/AVX2/AVX-512 register, no non-temporal store), and
# run the kernel tests against it, so the paths that CPUs without those
# instructions take are tested on this one too.
set -euo pipefail
export CFLAGS="-DPOSEMB_NO_CLONES" LDFLAGS=""
source "$(dirname "$0")/scratch_build.sh"
check_scratch_import portable
python - <<'PY'
import posemb
cfg = posemb.show_config(print_=False)
assert cfg["supported"] == cfg["level"] == "baseline", cfg
PY
if [ "$(uname -m)" = x86_64 ] && command -v objdump > /dev/null; then
  so=$(python -c "import posemb._core as c; print(c.__file__)")
  # ymm/zmm/k registers: AVX and up; movnt*: streaming stores
  bad=$(objdump -d --no-show-raw-insn "$so" | grep -E '%[yz]mm[0-9]|%k[0-7]\b|movnt|vfn?m(add|sub)' || true)
  if [ -n "$bad" ]; then
    echo "portable build holds ISA-specific instructions:"; echo "$bad" | head -20; exit 1
  fi
  echo "portable: objdump finds no AVX, AVX-512, FMA or streaming-store instruction"
fi
python -m pytest -q -p no:cacheprovider tests/test_rope.py tests/test_rope_variants.py \
  tests/test_rope_scaling.py tests/test_sinusoidal.py tests/test_learned.py \
  tests/test_relative.py tests/test_alibi.py tests/test_masks.py tests/test_properties.py \
  tests/test_cpu_dispatch.py "$@"

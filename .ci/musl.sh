#!/usr/bin/env bash
# musl (the musllinux wheels): the kernels build with musl-gcc (Debian
# musl-tools) without ifunc/target_clones -- musl's loader rejects IRELATIVE
# relocations, so posemb.h enables the AVX2 clones on glibc only -- and the C
# kernel tests, linked dynamically against musl, load and pass.
source "$(dirname "$0")/c_common.sh"
apt_ensure musl-tools
compile_each musl-gcc -pthread
musl-gcc "${FLAGS[@]}" "${INCLUDES[@]}" -pthread "$DRIVER" "${KERNELS[@]}" -lm -o "$tmp/test_kernels"
if readelf -r "$tmp/test_kernels" | grep -q IRELATIV; then
  echo "ifunc (IRELATIVE) relocations in a musl build"; exit 1
fi
"$tmp/test_kernels"
# the binding (the files that include Python.h) against this Python's and NumPy's headers
mapfile -t BINDING < <(find src -name '*.c' -print0 | xargs -0 grep -l 'Python\.h' | sort)
py_inc=$(python -c "import sysconfig; print(sysconfig.get_paths()['include'])")
np_inc=$(python -c "import numpy; print(numpy.get_include())")
for f in "${BINDING[@]}"; do
  musl-gcc "${FLAGS[@]}" "${INCLUDES[@]}" -I"$py_inc" -I"$np_inc" \
    -DNPY_TARGET_VERSION=NPY_2_1_API_VERSION -c "$f" -o "$tmp/binding.o" \
    || { echo "musl-gcc: $f does not compile"; exit 1; }
done
echo "musl-gcc: the binding compiles: ${BINDING[*]}"

#!/bin/bash
# Run 25, call 5 (the library's code is ce6b378's): gpu_bench micro 3 with the device time left.
set -u
OUT=${OUT:-/tmp/out}; mkdir -p $OUT
exec > >(tee -a $OUT/log5.txt) 2>&1
echo "== $(date -u +%FT%TZ) commit $(git rev-parse --short HEAD 2>/dev/null || echo '?')"
cmake -S . -B build-gpu -DCMAKE_BUILD_TYPE=Release -DTIDE_WERROR=ON >/dev/null && cmake --build build-gpu -j16 2>&1 | grep -E " error |Error"
bench/build_gpu_bench.sh build-gpu 2>&1 | tail -1
echo "== $(date -u +%FT%TZ) gpu_bench micro 3"
build-gpu/gpu_bench micro 3 > $OUT/micro3.md; cat $OUT/micro3.md
echo "== done $(date -u +%FT%TZ)"

#!/bin/bash
# Run 27, call 6: gpu_bench turns 101 five times on the committed code, to see how often the large
# random pattern's 8x holds (call 4's one run of 61 rounds read 7.95x).
set -u
OUT=${OUT:-/tmp/out}; mkdir -p $OUT
exec > >(tee -a $OUT/log6.txt) 2>&1
echo "== $(date -u +%FT%TZ) commit $(git rev-parse --short HEAD 2>/dev/null || echo '?')"
cmake -S . -B build-gpu -DCMAKE_BUILD_TYPE=Release -DTIDE_WERROR=ON >/dev/null && cmake --build build-gpu -j16 --target tidepool_static 2>&1 | grep -E " error |Error"
bench/build_gpu_bench.sh build-gpu 2>&1 | tail -1
for i in 1 2 3 4 5; do
  echo "== $(date -u +%FT%TZ) gpu_bench turns 101 ($i)"
  timeout 90 build-gpu/gpu_bench turns 101 > $OUT/turns_$i.md; cat $OUT/turns_$i.md
done
echo "== done $(date -u +%FT%TZ)"

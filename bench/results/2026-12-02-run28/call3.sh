#!/bin/bash
# Run 28, call 3: gpu_bench (which shares bench/micro_patterns.h, changed in 9c47eb9) built and run on
# the committed code: the three allocators' replays of every trace in one process, then turns 101 twice.
set -u
OUT=${OUT:-/tmp/out}; mkdir -p $OUT
exec > >(tee -a $OUT/log3.txt) 2>&1
echo "== $(date -u +%FT%TZ) start"
cmake -S . -B build-gpu -DCMAKE_BUILD_TYPE=Release -DTIDE_WERROR=ON >/dev/null && cmake --build build-gpu -j16 --target tidepool_static 2>&1 | grep -E " error |Error"
bench/build_gpu_bench.sh build-gpu 2>&1 | tail -1
echo "== $(date -u +%FT%TZ) gpu_bench replay (all allocators)"
timeout 300 build-gpu/gpu_bench replay traces/*.csv.gz > $OUT/replay.md; cat $OUT/replay.md
for i in 1 2; do
  echo "== $(date -u +%FT%TZ) gpu_bench turns 101 ($i)"
  timeout 90 build-gpu/gpu_bench turns 101 > $OUT/turns_$i.md; cat $OUT/turns_$i.md
done
echo "== done $(date -u +%FT%TZ)"

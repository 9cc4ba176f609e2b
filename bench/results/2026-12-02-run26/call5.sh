#!/bin/bash
# Run 26, call 5: gpu_bench turns with its new threaded part (eight threads over one, in turns), three
# times; then the replays through all three allocators once more.
set -u
OUT=${OUT:-/tmp/out}; mkdir -p $OUT
exec > >(tee -a $OUT/log5.txt) 2>&1
echo "== $(date -u +%FT%TZ) commit $(git rev-parse --short HEAD 2>/dev/null || echo '?') (+ working tree: bench/gpu_bench.cpp)"
cmake -S . -B build-gpu -DCMAKE_BUILD_TYPE=Release -DTIDE_WERROR=ON >/dev/null && cmake --build build-gpu -j16 2>&1 | grep -E " error |Error"
bench/build_gpu_bench.sh build-gpu 2>&1 | tail -3
for i in 1 2 3; do
  echo "== $(date -u +%FT%TZ) gpu_bench turns 101 ($i)"
  timeout 60 build-gpu/gpu_bench turns 101 | tee $OUT/turns_$i.md
done
echo "== $(date -u +%FT%TZ) replay, all three allocators, one process"
timeout 60 build-gpu/gpu_bench replay traces/*.csv.gz | tee $OUT/replay.md
echo "== done $(date -u +%FT%TZ)"

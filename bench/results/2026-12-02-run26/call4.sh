#!/bin/bash
# Run 26, call 4 (the machine still warm from call 3, its build kept): the replays through all three
# allocators three times, and gpu_bench turns 101 twice.
set -u
OUT=${OUT:-/tmp/out}; mkdir -p $OUT
exec > >(tee -a $OUT/log4.txt) 2>&1
echo "== $(date -u +%FT%TZ) commit $(git rev-parse --short HEAD 2>/dev/null || echo '?') (+ working tree: bench/gpu_bench.cpp)"
[ -x build-gpu/gpu_bench ] || { cmake -S . -B build-gpu -DCMAKE_BUILD_TYPE=Release -DTIDE_WERROR=ON >/dev/null && cmake --build build-gpu -j16 2>&1 | grep -E " error |Error"; bench/build_gpu_bench.sh build-gpu 2>&1 | tail -3; }
for i in 1 2 3; do
  echo "== $(date -u +%FT%TZ) replay, all three allocators, one process ($i)"
  timeout 100 build-gpu/gpu_bench replay traces/*.csv.gz | tee $OUT/replay_$i.md
done
for i in 1 2; do
  echo "== $(date -u +%FT%TZ) gpu_bench turns 101 ($i)"
  timeout 100 build-gpu/gpu_bench turns 101 | tee $OUT/turns_$i.md
done
echo "== done $(date -u +%FT%TZ)"

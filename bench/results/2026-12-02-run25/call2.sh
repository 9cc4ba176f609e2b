#!/bin/bash
# Run 25, call 2 (the library's code is ce6b378's): gpu_bench micro 7 and the replays through all three
# allocators once more, on the same code as call 1.
set -u
OUT=${OUT:-/tmp/out}; mkdir -p $OUT
exec > >(tee -a $OUT/log2.txt) 2>&1
echo "== $(date -u +%FT%TZ) commit $(git rev-parse --short HEAD 2>/dev/null || echo '?')"
cmake -S . -B build-gpu -DCMAKE_BUILD_TYPE=Release -DTIDE_WERROR=ON >/dev/null && cmake --build build-gpu -j16 2>&1 | grep -E " error |Error"
bench/build_gpu_bench.sh build-gpu 2>&1 | tail -1
echo "== $(date -u +%FT%TZ) gpu_bench micro 7"
timeout 330 build-gpu/gpu_bench micro 7 > $OUT/micro7.md; cat $OUT/micro7.md
echo "== $(date -u +%FT%TZ) replay, all three allocators, one process"
timeout 100 build-gpu/gpu_bench replay traces/*.csv.gz | tee $OUT/replay.md
echo "== done $(date -u +%FT%TZ)"

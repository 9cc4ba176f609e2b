#!/bin/bash
# Run 25, call 1 (27a13e8: the library's code is ce6b378's, after the canary change): the GPU build and
# tests; gpu_bench replay of the four traces through all three allocators; tidepool's replays with
# expandable_segments:True; gpu_bench micro 7.
set -u
OUT=${OUT:-/tmp/out}; mkdir -p $OUT
exec > >(tee -a $OUT/log1.txt) 2>&1
echo "== $(date -u +%FT%TZ) commit $(git rev-parse --short HEAD 2>/dev/null || echo '?')"
lscpu | grep -E "^Model name|^CPU\(s\)|MHz" | tr -s ' '
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
gcc --version | head -1
cmake -S . -B build-gpu -DCMAKE_BUILD_TYPE=Release -DTIDE_WERROR=ON >/dev/null && cmake --build build-gpu -j16 2>&1 | grep -E " error |Error"
bench/build_gpu_bench.sh build-gpu 2>&1 | tail -1
echo "== canary references in the hot functions"
objdump -d --no-show-raw-insn build-gpu/libtidepool.so | awk '/^[0-9a-f]+ <(tide_free|tide_malloc|allocator_malloc|free_located|lifecycle_free|heap_take_fit|heap_take_block|heap_settle)>:/{f=$2} /^$/{f=""} f && /%fs:0x28/{n[f]++} END{for(k in n) print k, n[k]; print "done"}'
echo "== GPU tests"
timeout 150 ctest --test-dir build-gpu -L gpu --output-on-failure 2>&1 | grep -E "Test +#|tests passed|Failed|FAIL"
echo "== $(date -u +%FT%TZ) replay, all three allocators, one process"
timeout 100 build-gpu/gpu_bench replay traces/*.csv.gz | tee $OUT/replay.md
echo "== $(date -u +%FT%TZ) replay, tidepool, expandable_segments:True"
TIDEPOOL_CONF=expandable_segments:True timeout 100 build-gpu/gpu_bench replay --only tidepool traces/*.csv.gz | tee $OUT/replay_expandable.md
echo "== $(date -u +%FT%TZ) gpu_bench micro 7"
timeout 300 build-gpu/gpu_bench micro 7 > $OUT/micro7.md; cat $OUT/micro7.md
echo "== done $(date -u +%FT%TZ)"

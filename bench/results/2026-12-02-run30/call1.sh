#!/bin/bash
# Run 30, call 1: the high-water mark's memories forgotten when the mark restarts. The GPU build and
# tests; the replays through all three allocators in one process (traces in order, each after
# empty_cache and a reset of the peaks), tidepool's expandable segments, and the same replays with
# each trace alone in its own process (what a new allocator does), to show that the order no longer
# moves tidepool's figures.
set -u
OUT=${OUT:-/tmp/out}; mkdir -p $OUT
exec > >(tee -a $OUT/log1.txt) 2>&1
echo "== $(date -u +%FT%TZ) commit $(git rev-parse --short HEAD 2>/dev/null || echo '?')"
nproc; grep -m1 "model name" /proc/cpuinfo
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
cmake -S . -B build-gpu -DCMAKE_BUILD_TYPE=Release -DTIDE_WERROR=ON >/dev/null && cmake --build build-gpu -j16 2>&1 | grep -E " error |Error"
bench/build_gpu_bench.sh build-gpu 2>&1 | tail -1
echo "== $(date -u +%FT%TZ) GPU tests"
timeout 150 ctest --test-dir build-gpu -L gpu --output-on-failure 2>&1 | grep -E "Test +#|tests passed|Failed|FAIL"
echo "== $(date -u +%FT%TZ) replay, all three allocators, one process"
timeout 100 build-gpu/gpu_bench replay traces/*.csv.gz > $OUT/replay.md; cat $OUT/replay.md
echo "== $(date -u +%FT%TZ) replay, tidepool expandable_segments:True, one process"
TIDEPOOL_CONF=expandable_segments:True timeout 60 build-gpu/gpu_bench replay --only tidepool traces/*.csv.gz > $OUT/replay_expandable.md; cat $OUT/replay_expandable.md
echo "== $(date -u +%FT%TZ) replay, tidepool, each trace in a process of its own (default, then expandable)"
for conf in "" expandable_segments:True; do
  for t in traces/*.csv.gz; do
    if [ -z "$conf" ]; then unset TIDEPOOL_CONF; else export TIDEPOOL_CONF=$conf; fi
    timeout 40 build-gpu/gpu_bench replay --only tidepool $t | tail -1
  done
done > $OUT/replay_alone.md; cat $OUT/replay_alone.md
echo "== done $(date -u +%FT%TZ)"

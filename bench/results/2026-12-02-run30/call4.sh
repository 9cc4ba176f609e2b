#!/bin/bash
# Run 30, call 4: the high-water trim giving back the smallest idle segment that covers the overshoot
# (commit 16fc56e): the replays through all three allocators in one process, each
# trace in a process of its own, and tidepool's expandable segments (which this does not touch).
set -u
OUT=${OUT:-/tmp/out}; mkdir -p $OUT
exec > >(tee -a $OUT/log4.txt) 2>&1
echo "== $(date -u +%FT%TZ) start"
cmake -S . -B build-gpu -DCMAKE_BUILD_TYPE=Release -DTIDE_WERROR=ON >/dev/null && cmake --build build-gpu -j16 2>&1 | grep -E " error |Error"
bench/build_gpu_bench.sh build-gpu 2>&1 | tail -1
echo "== $(date -u +%FT%TZ) GPU tests"
timeout 150 ctest --test-dir build-gpu -L gpu --output-on-failure 2>&1 | grep -E "Test +#|tests passed|Failed|FAIL"
echo "== $(date -u +%FT%TZ) replay, all three allocators, one process"
timeout 100 build-gpu/gpu_bench replay traces/*.csv.gz > $OUT/replay.md; cat $OUT/replay.md
echo "== $(date -u +%FT%TZ) replay, tidepool, each trace alone"
for t in traces/*.csv.gz; do timeout 40 build-gpu/gpu_bench replay --only tidepool $t | tail -1; done > $OUT/replay_alone.md; cat $OUT/replay_alone.md
echo "== $(date -u +%FT%TZ) replay, tidepool expandable_segments:True"
TIDEPOOL_CONF=expandable_segments:True timeout 60 build-gpu/gpu_bench replay --only tidepool traces/*.csv.gz > $OUT/replay_expandable.md; cat $OUT/replay_expandable.md
echo "== done $(date -u +%FT%TZ)"

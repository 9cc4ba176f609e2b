#!/bin/bash
# Run 13, call 4: map units on the GPU: the GPU tests, tidepool's expandable replays, and the seed's loop
# with both allocators' expandable segments (bench/gpu_run.sh expandable-seed).
set -u
OUT=${OUT:-/tmp/out}; mkdir -p $OUT
exec > >(tee -a $OUT/log.txt) 2>&1
T0=$(date +%s); t() { echo "[$(( $(date +%s) - T0 )) s] $*"; }
date -u +%FT%TZ
cmake -S . -B build-gpu -DCMAKE_BUILD_TYPE=Release -DTIDE_WERROR=ON >/dev/null && cmake --build build-gpu -j16 2>&1 | grep -E " error |warning|Error"
bench/build_gpu_bench.sh build-gpu >/dev/null || exit 1
t built
ctest --test-dir build-gpu -L gpu --output-on-failure 2>&1 | tail -12
build-gpu/tests/gpu_expandable 2>&1 | tail -8
t "tests done"
TIDEPOOL_CONF=expandable_segments:True build-gpu/gpu_bench replay --only tidepool traces/*.csv.gz
t "replays done"
OUT=$OUT/seed bash bench/gpu_run.sh expandable-seed 1000 2>&1 | grep -vE "^\s*$" | tail -30
t "seed done"

#!/bin/bash
# Run 13, call 6: the final code (map pairs) on the GPU: GPU tests, compute-sanitizer over the
# expandable test, tidepool's expandable replays.
set -u
OUT=${OUT:-/tmp/out}; mkdir -p $OUT
exec > >(tee -a $OUT/log.txt) 2>&1
T0=$(date +%s); t() { echo "[$(( $(date +%s) - T0 )) s] $*"; }
cmake -S . -B build-gpu -DCMAKE_BUILD_TYPE=Release -DTIDE_WERROR=ON >/dev/null && cmake --build build-gpu -j16 2>&1 | grep -E " error |warning|Error"
bench/build_gpu_bench.sh build-gpu >/dev/null || exit 1
t built
ctest --test-dir build-gpu -L gpu --output-on-failure 2>&1 | tail -8
build-gpu/tests/gpu_expandable 2>&1 | tail -7
TIDE_GPU_OPS=500 compute-sanitizer --tool memcheck --error-exitcode 9 build-gpu/tests/gpu_expandable 2>&1 | tail -3
t "tests done"
TIDEPOOL_CONF=expandable_segments:True build-gpu/gpu_bench replay --only tidepool traces/*.csv.gz
t "replays done"

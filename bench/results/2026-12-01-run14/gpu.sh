#!/bin/bash
# Run 14, call 1: the code as it stands after the map units (cd4abf7) on the GPU: GPU tests, the micro
# patterns and replays against the anchors (also with expandable segments), and the history's cost.
set -u
OUT=${OUT:-/tmp/out}; mkdir -p $OUT
exec > >(tee -a $OUT/log.txt) 2>&1
T0=$(date +%s); t() { echo "[$(( $(date +%s) - T0 )) s] $*"; }
date -u +%FT%TZ
lscpu | grep -E "^Model name|^CPU\(s\)|L2|L3" | tr -s ' '
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader
cmake -S . -B build-gpu -DCMAKE_BUILD_TYPE=Release -DTIDE_WERROR=ON >/dev/null && cmake --build build-gpu -j16 2>&1 | grep -E " error |warning|Error"
bench/build_gpu_bench.sh build-gpu >/dev/null || exit 1
t "built"
ctest --test-dir build-gpu -L gpu --output-on-failure 2>&1 | tail -12 > $OUT/ctest_gpu.txt
cat $OUT/ctest_gpu.txt
t "ctest gpu done"
build-gpu/gpu_bench micro 5 > $OUT/micro.md 2>&1; cat $OUT/micro.md
t "micro done"
{ build-gpu/gpu_bench replay traces/*.csv.gz
  PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True build-gpu/gpu_bench replay --only torch traces/*.csv.gz | tail -n +3
  TIDEPOOL_CONF=expandable_segments:True build-gpu/gpu_bench replay --only tidepool traces/*.csv.gz | tail -n +3
} > $OUT/replay.md 2>&1; cat $OUT/replay.md
t "replay done"
for round in $(seq 1 12); do
  for n in 1024 4096 65536; do
    echo "== round $round" >> $OUT/history_$n.md
    build-gpu/gpu_bench history $n traces/*.csv.gz >> $OUT/history_$n.md 2>&1
  done
done
t "history done"

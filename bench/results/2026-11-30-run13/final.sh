#!/bin/bash
# Run 13, call 2: the final code's GPU tests, CUDA's map cost by handle size, the micro patterns and
# replays against the anchors, and the history's cost over many rounds.
set -u
OUT=${OUT:-/tmp/out}; mkdir -p $OUT
exec > >(tee -a $OUT/log.txt) 2>&1
T0=$(date +%s); t() { echo "[$(( $(date +%s) - T0 )) s] $*"; }
date -u +%FT%TZ; git log --oneline -1 2>/dev/null
lscpu | grep -E "^Model name|^CPU\(s\)|L2|L3" | tr -s ' '
cmake -S . -B build-gpu -DCMAKE_BUILD_TYPE=Release -DTIDE_WERROR=ON >/dev/null && cmake --build build-gpu -j16 2>&1 | grep -E " error |warning|Error"
bench/build_gpu_bench.sh build-gpu >/dev/null || exit 1
t "built"
ctest --test-dir build-gpu -L gpu --output-on-failure 2>&1 | tail -12 | tee $OUT/ctest_gpu.txt
t "ctest gpu done"
cc -O2 -I/usr/local/cuda/include bench/vm_cost.c -o build-gpu/vm_cost -L/usr/local/cuda/lib64/stubs -lcuda && build-gpu/vm_cost 31 | tee $OUT/vm_cost.md
t "vm_cost done"
build-gpu/gpu_bench micro 5 | tee $OUT/micro.md
t "micro done"
build-gpu/gpu_bench replay traces/*.csv.gz | tee $OUT/replay.md
PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True build-gpu/gpu_bench replay --only torch traces/*.csv.gz | tail -n +3 | tee -a $OUT/replay.md
t "replay done"
for round in $(seq 1 12); do
  for n in 1024 4096 65536; do
    build-gpu/gpu_bench history $n traces/*.csv.gz > $OUT/h_${n}_$round.md 2>&1
  done
done
t "history done"

#!/bin/bash
# the micro patterns with the threaded pattern's controls: unpinned, pinned, unpinned
set -u
OUT=${OUT:-/tmp/out}; mkdir -p $OUT
date -u +%FT%TZ
cmake -S . -B build-gpu -DCMAKE_BUILD_TYPE=Release -DTIDE_WERROR=ON >/dev/null && cmake --build build-gpu -j16 2>&1 | grep -E " error |warning|Error"
bench/build_gpu_bench.sh build-gpu >/dev/null || exit 1
for run in scheduler-1 pinned-1 scheduler-2; do
  echo "== $run $(date -u +%T)"
  case $run in pinned*) export BENCH_PIN=1;; *) unset BENCH_PIN;; esac
  build-gpu/gpu_bench micro 5 2>&1 | tee -a $OUT/micro_controls.md
done
date -u +%FT%TZ

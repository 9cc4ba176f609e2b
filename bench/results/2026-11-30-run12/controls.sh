#!/bin/bash
# the threaded pattern beside its controls (arithmetic; an allocator per thread), tidepool alone, GPU and simulated device
set -u
OUT=${OUT:-/tmp/out}; mkdir -p $OUT
date -u +%FT%TZ
lscpu -e 2>&1 | head -20; cat /sys/devices/system/cpu/cpu0/topology/thread_siblings_list
cmake -S . -B build-gpu -DCMAKE_BUILD_TYPE=Release -DTIDE_WERROR=ON >/dev/null && cmake --build build-gpu -j16 2>&1 | grep -E " error |warning|Error"
bench/build_gpu_bench.sh build-gpu >/dev/null || exit 1
for run in scheduler-1 pinned-1 scheduler-2 pinned-2; do
  echo "== gpu_bench micro, tidepool only, $run $(date -u +%T)"
  case $run in pinned*) export BENCH_PIN=1;; *) unset BENCH_PIN;; esac
  build-gpu/gpu_bench micro 5 --only tidepool 2>&1 | grep -E "^\| [0-9r]|^\| same|controls|throughput" | cut -d"|" -f1-3 | tee -a $OUT/controls_gpu.md
  echo "== micro_sim, $run" | tee -a $OUT/controls_sim.txt
  build-gpu/bench/micro_sim 5 2>&1 | tee -a $OUT/controls_sim.txt
done
date -u +%FT%TZ

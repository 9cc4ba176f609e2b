#!/bin/bash
# Run 20, call 1: on 9c7c500 (the final code of run 19): the GPU tests; gpu_bench micro 7 (issue 4's
# 8x, again on the final code); gpt2_varlen's spread with expandable segments (run 18): tidepool-only
# replays, reserved and expandable in turn, three processes of each, the traces in both orders.
set -u
OUT=${OUT:-/tmp/out}; mkdir -p $OUT
exec > >(tee -a $OUT/log1.txt) 2>&1
echo "== $(date -u +%FT%TZ)"
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
lscpu | grep -E "^Model name|^CPU\(s\)|MHz" | tr -s ' '
cmake -S . -B build-gpu -DCMAKE_BUILD_TYPE=Release -DTIDE_WERROR=ON >/dev/null && cmake --build build-gpu -j16 2>&1 | grep -E " error |Error"
bench/build_gpu_bench.sh build-gpu 2>&1 | tail -2
echo "== GPU tests"
ctest --test-dir build-gpu -L gpu --output-on-failure 2>&1 | grep -E "Test +#|tests passed|Failed|FAIL"
echo "== $(date -u +%FT%TZ) gpu_bench micro 7"
build-gpu/gpu_bench micro 7 > $OUT/micro7.md; cat $OUT/micro7.md
echo "== $(date -u +%FT%TZ) replays, tidepool only, reserved (R) and expandable (E) in turn"
FWD="traces/gpt2_varlen.csv.gz traces/lstm_loop.csv.gz traces/seed_loop_250.csv.gz traces/seed_transformer.csv.gz"
REV="traces/seed_transformer.csv.gz traces/seed_loop_250.csv.gz traces/lstm_loop.csv.gz traces/gpt2_varlen.csv.gz"
for i in 1 2 3; do
  for order in FWD REV; do
    for conf in R E; do
      echo "-- round $i, $conf, order $order"
      if [ $conf = E ]; then export TIDEPOOL_CONF=expandable_segments:True; else unset TIDEPOOL_CONF; fi
      build-gpu/gpu_bench replay --only tidepool ${!order} 2>&1 | grep -E "^\| (gpt2|lstm|seed)"
    done
  done
done
unset TIDEPOOL_CONF
echo "== done $(date -u +%FT%TZ)"

#!/bin/bash
# Run 14, call 4: are the host's slow phases the scheduler's? Replays through tidepool alone, the
# process unpinned and pinned to one CPU (taskset) in turns.
set -u
OUT=${OUT:-/tmp/out}; mkdir -p $OUT
exec > >(tee -a $OUT/pin_log.txt) 2>&1
T0=$(date +%s); t() { echo "[$(( $(date +%s) - T0 )) s] $*"; }
lscpu | grep -E "^Model name|^CPU\(s\)|NUMA|^Socket|^Thread|^Core|MHz" | tr -s ' '
cmake -S . -B build-gpu -DCMAKE_BUILD_TYPE=Release -DTIDE_WERROR=ON >/dev/null && cmake --build build-gpu -j16 2>&1 | grep -E " error |Error"
bench/build_gpu_bench.sh build-gpu >/dev/null || exit 1
grep -c PREFETCH src/history.c  # 0: the committed code, not call 3's variant
t built
for round in $(seq 1 8); do
  echo "== round $round unpinned" >> $OUT/pin_replay.md
  build-gpu/gpu_bench replay --only tidepool traces/*.csv.gz >> $OUT/pin_replay.md 2>&1
  echo "== round $round pinned to CPU 5" >> $OUT/pin_replay.md
  taskset -c 5 build-gpu/gpu_bench replay --only tidepool traces/*.csv.gz >> $OUT/pin_replay.md 2>&1
done
t "replays done"
for round in $(seq 1 5); do
  echo "== round $round unpinned" >> $OUT/pin_history.md
  build-gpu/gpu_bench history 65536 traces/*.csv.gz >> $OUT/pin_history.md 2>&1
  echo "== round $round pinned to CPU 5" >> $OUT/pin_history.md
  taskset -c 5 build-gpu/gpu_bench history 65536 traces/*.csv.gz >> $OUT/pin_history.md 2>&1
done
t "history done"

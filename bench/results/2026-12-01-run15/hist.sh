#!/bin/bash
# Run 15, call 6: the history's cost on the code as it now is (after the branch changes), three ring
# sizes taking turns, 10 rounds each: gpu_bench history N traces/*.csv.gz.
set -u
exec > >(tee -a $OUT/hist_log.txt) 2>&1
T0=$(date +%s); t() { echo "[$(( $(date +%s) - T0 )) s] $*"; }
( cmake -S . -B build-gpu -DCMAKE_BUILD_TYPE=Release -DTIDE_WERROR=ON >/dev/null && cmake --build build-gpu -j16 2>&1 | grep -E " error |Error"; bench/build_gpu_bench.sh build-gpu >/dev/null ) &
wait $!
ls -la build-gpu/gpu_bench || exit 1
t built
for round in $(seq 1 10); do
  for n in 1024 4096 65536; do
    echo "== round $round" >> $OUT/history_$n.md; build-gpu/gpu_bench history $n traces/*.csv.gz >> $OUT/history_$n.md 2>&1
  done
  t "round $round"
done
t done

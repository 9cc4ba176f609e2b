#!/bin/bash
# Run 13, call 3: the history's cost, many rounds, one file per ring size.
set -u
OUT=${OUT:-/tmp/out}; mkdir -p $OUT
[ -x build-gpu/gpu_bench ] || { cmake -S . -B build-gpu -DCMAKE_BUILD_TYPE=Release -DTIDE_WERROR=ON >/dev/null && cmake --build build-gpu -j16 2>&1 | grep -E " error |Error"; bench/build_gpu_bench.sh build-gpu >/dev/null; }
date -u +%FT%TZ > $OUT/history_log.txt
for round in $(seq 1 15); do
  for n in 1024 4096 65536; do
    echo "== round $round" >> $OUT/history_$n.md
    build-gpu/gpu_bench history $n traces/*.csv.gz >> $OUT/history_$n.md 2>&1
  done
done
date -u +%FT%TZ >> $OUT/history_log.txt

#!/bin/bash
# Run 14, call 2: the history's ring fetched ahead for writing (B, .run14/prefetch.patch) against the
# code without it (A), taking turns, with a 65,536-event ring.
set -u
OUT=${OUT:-/tmp/out}; mkdir -p $OUT
exec > >(tee -a $OUT/ab_log.txt) 2>&1
T0=$(date +%s); t() { echo "[$(( $(date +%s) - T0 )) s] $*"; }
rm -rf /tmp/a && mkdir /tmp/a && cp -r CMakeLists.txt Makefile bench include src tests tools traces python fuzz /tmp/a/ && (cd /tmp/a && patch -s -R -p1 < $OLDPWD/.run14/prefetch.patch) || exit 1
grep -c PREFETCH src/history.c /tmp/a/src/history.c
( cmake -S . -B build-gpu -DCMAKE_BUILD_TYPE=Release -DTIDE_WERROR=ON >/dev/null && cmake --build build-gpu -j8 2>&1 | grep -E " error |Error"; bench/build_gpu_bench.sh build-gpu >/dev/null ) &
PA=$!
( cd /tmp/a && cmake -S . -B build-gpu -DCMAKE_BUILD_TYPE=Release -DTIDE_WERROR=ON >/dev/null && cmake --build build-gpu -j8 2>&1 | grep -E " error |Error"; bench/build_gpu_bench.sh build-gpu >/dev/null ) &
PB=$!
wait $PA $PB  # (a plain wait would wait for the tee above too)
ls -la build-gpu/gpu_bench /tmp/a/build-gpu/gpu_bench || exit 1
t built
for round in $(seq 1 14); do
  echo "== round $round A" >> $OUT/ab_A.md; /tmp/a/build-gpu/gpu_bench history 65536 traces/*.csv.gz >> $OUT/ab_A.md 2>&1
  echo "== round $round B" >> $OUT/ab_B.md; build-gpu/gpu_bench history 65536 traces/*.csv.gz >> $OUT/ab_B.md 2>&1
done
t "history A/B done"

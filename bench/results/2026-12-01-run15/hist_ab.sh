#!/bin/bash
# Run 15, call 7: does the history cost more after the branch changes? The code before them (A:
# branches.patch reversed) and after (B) taking turns, gpu_bench history 1024 and 65536, 8 rounds each.
set -u
exec > >(tee -a $OUT/hist_ab_log.txt) 2>&1
T0=$(date +%s); t() { echo "[$(( $(date +%s) - T0 )) s] $*"; }
rm -rf /tmp/a && mkdir /tmp/a && cp -r CMakeLists.txt Makefile bench include src tests tools traces python fuzz /tmp/a/ && (cd /tmp/a && patch -s -R -p1 < $OLDPWD/.run15/branches.patch) || exit 1
grep -c "busy" src/heap.c /tmp/a/src/heap.c
( cmake -S . -B build-gpu -DCMAKE_BUILD_TYPE=Release -DTIDE_WERROR=ON >/dev/null && cmake --build build-gpu -j8 --target tidepool_static 2>&1 | grep -E " error |Error"; bench/build_gpu_bench.sh build-gpu >/dev/null ) &
PB=$!
( cd /tmp/a && cmake -S . -B build-gpu -DCMAKE_BUILD_TYPE=Release -DTIDE_WERROR=ON >/dev/null && cmake --build build-gpu -j8 --target tidepool_static 2>&1 | grep -E " error |Error"; bench/build_gpu_bench.sh build-gpu >/dev/null ) &
PA=$!
wait $PA $PB
ls -la build-gpu/gpu_bench /tmp/a/build-gpu/gpu_bench || exit 1
t built
for round in $(seq 1 8); do
  for n in 1024 65536; do
    echo "== round $round A" >> $OUT/hist_A_$n.md; /tmp/a/build-gpu/gpu_bench history $n traces/*.csv.gz >> $OUT/hist_A_$n.md 2>&1
    echo "== round $round B" >> $OUT/hist_B_$n.md; build-gpu/gpu_bench history $n traces/*.csv.gz >> $OUT/hist_B_$n.md 2>&1
  done
  t "round $round"
done
t done

#!/bin/bash
# Run 15, call 4: the segment's busy count and the branch-free back link (B, the tree as it is) against
# the code before them (A: branches.patch reversed), taking turns: the micro patterns (tidepool only) and
# the replays (tidepool only).
set -u
exec > >(tee -a $OUT/ab_log.txt) 2>&1
T0=$(date +%s); t() { echo "[$(( $(date +%s) - T0 )) s] $*"; }
rm -rf /tmp/a && mkdir /tmp/a && cp -r CMakeLists.txt Makefile bench include src tests tools traces python fuzz /tmp/a/ && (cd /tmp/a && patch -s -R -p1 < $OLDPWD/.run15/branches.patch) || exit 1
grep -c "busy" src/heap.c /tmp/a/src/heap.c
( cmake -S . -B build-gpu -DCMAKE_BUILD_TYPE=Release -DTIDE_WERROR=ON >/dev/null && cmake --build build-gpu -j8 2>&1 | grep -E " error |Error"; bench/build_gpu_bench.sh build-gpu >/dev/null ) &
PB=$!
( cd /tmp/a && cmake -S . -B build-gpu -DCMAKE_BUILD_TYPE=Release -DTIDE_WERROR=ON >/dev/null && cmake --build build-gpu -j8 --target tidepool_static 2>&1 | grep -E " error |Error"; bench/build_gpu_bench.sh build-gpu >/dev/null ) &
PA=$!
wait $PA $PB
ls -la build-gpu/gpu_bench /tmp/a/build-gpu/gpu_bench || exit 1
t built
for round in $(seq 1 10); do
  echo "== round $round A" >> $OUT/micro_ab.txt; /tmp/a/build-gpu/gpu_bench micro 5 --only tidepool 2>&1 | grep -E "same 1 MiB|random" | cut -d'|' -f2,3 >> $OUT/micro_ab.txt
  echo "== round $round B" >> $OUT/micro_ab.txt; build-gpu/gpu_bench micro 5 --only tidepool 2>&1 | grep -E "same 1 MiB|random" | cut -d'|' -f2,3 >> $OUT/micro_ab.txt
  t "micro round $round"
done
for round in $(seq 1 5); do
  echo "== round $round A" >> $OUT/replay_ab.txt; /tmp/a/build-gpu/gpu_bench replay --only tidepool traces/*.csv.gz 2>&1 | grep -E "^\| [a-z]" >> $OUT/replay_ab.txt
  echo "== round $round B" >> $OUT/replay_ab.txt; build-gpu/gpu_bench replay --only tidepool traces/*.csv.gz 2>&1 | grep -E "^\| [a-z]" >> $OUT/replay_ab.txt
  t "replay round $round"
done
t done

#!/bin/bash
# Run 15, call 3: an upper bound on what halving the history's entry would gain with a 65,536-event ring:
# B drops the size from each entry (8 bytes, h8_upper_bound.patch: not a working history, a measurement),
# A is the code as it is; taking turns, gpu_bench history 65536, 10 rounds each.
set -u
exec > >(tee -a $OUT/h8_log.txt) 2>&1
T0=$(date +%s); t() { echo "[$(( $(date +%s) - T0 )) s] $*"; }
rm -rf /tmp/b && mkdir /tmp/b && cp -r CMakeLists.txt Makefile bench include src tests tools traces python fuzz /tmp/b/ && (cd /tmp/b && patch -s -p1 < $OLDPWD/.run15/h8_upper_bound.patch) || exit 1
grep -c "uint64_t size;" src/internal.h /tmp/b/src/internal.h
( [ -x build-gpu/gpu_bench ] || { cmake -S . -B build-gpu -DCMAKE_BUILD_TYPE=Release -DTIDE_WERROR=ON >/dev/null && cmake --build build-gpu -j8 2>&1 | grep -E " error |Error"; bench/build_gpu_bench.sh build-gpu >/dev/null; } ) &
PA=$!
( cd /tmp/b && cmake -S . -B build-gpu -DCMAKE_BUILD_TYPE=Release >/dev/null && cmake --build build-gpu -j8 --target tidepool_static 2>&1 | grep -E " error |Error"; bench/build_gpu_bench.sh build-gpu >/dev/null ) &
PB=$!
wait $PA $PB
ls -la build-gpu/gpu_bench /tmp/b/build-gpu/gpu_bench || exit 1
t built
for round in $(seq 1 10); do
  echo "== round $round A" >> $OUT/h8_A.md; build-gpu/gpu_bench history 65536 traces/*.csv.gz >> $OUT/h8_A.md 2>&1
  echo "== round $round B" >> $OUT/h8_B.md; /tmp/b/build-gpu/gpu_bench history 65536 traces/*.csv.gz >> $OUT/h8_B.md 2>&1
  t "round $round"
done
t done

#!/bin/bash
# Run 16, call 4: the history's ring with a prefetch four lines ahead (B, prefetch.patch) against HEAD
# (A): gpu_bench history at 1024 and 65,536 events, A and B taking turns, 10 rounds; then
# gpu_bench micro 7 on HEAD again.
set -u
OUT=${OUT:-/tmp/out}; mkdir -p $OUT
ROOT=$PWD
exec > >(tee -a $OUT/call4_log.txt) 2>&1
T0=$(date +%s); t() { echo "[$(( $(date +%s) - T0 )) s] $*"; }
( cmake -S . -B build-gpu -DCMAKE_BUILD_TYPE=Release -DTIDE_WERROR=ON >/dev/null && cmake --build build-gpu -j16 2>&1 | grep -E " error |Error"; bench/build_gpu_bench.sh build-gpu >/dev/null ) &
wait $!
rm -rf /tmp/v_pf; mkdir -p /tmp/v_pf; cp -r src include CMakeLists.txt tools bench tests python fuzz /tmp/v_pf/ 2>/dev/null
( cd /tmp/v_pf && patch -s -p1 < $ROOT/.run16/prefetch.patch && cmake -S . -B b -DCMAKE_BUILD_TYPE=Release -DTIDE_WERROR=ON >/dev/null && cmake --build b -j16 --target tidepool_static 2>&1 | grep -E " error |Error"; bench/build_gpu_bench.sh b >/dev/null ) &
wait $!
ls -la build-gpu/gpu_bench /tmp/v_pf/b/gpu_bench || exit 1
t built
for round in $(seq 1 10); do
  for n in 1024 65536; do
    order="A B"; [ $((round % 2)) -eq 0 ] && order="B A"
    for v in $order; do
      if [ $v = A ]; then G=build-gpu/gpu_bench; else G=/tmp/v_pf/b/gpu_bench; fi
      echo "== round $round" >> $OUT/hist_${v}_$n.md; $G history $n traces/*.csv.gz >> $OUT/hist_${v}_$n.md 2>&1
    done
  done
  t "history round $round"
done
echo "== gpu_bench micro 7"
build-gpu/gpu_bench micro 7 | tee $OUT/micro.md
t micro

#!/bin/bash
# Run 21, call 1 (17dcb2a: peaks exact between calls): the GPU build and tests; gpu_bench replay of the
# four traces through all three allocators, then tidepool with expandable segments; ab_micro of this
# commit against 25f42e0 (the last of run 20) on this host, both orders; gpu_bench micro 7.
set -u
OUT=${OUT:-/tmp/out}; mkdir -p $OUT
exec > >(tee -a $OUT/log1.txt) 2>&1
echo "== $(date -u +%FT%TZ)"
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
lscpu | grep -E "^Model name|^CPU\(s\)|MHz" | tr -s ' '
cmake -S . -B build-gpu -DCMAKE_BUILD_TYPE=Release -DTIDE_WERROR=ON >/dev/null && cmake --build build-gpu -j16 2>&1 | grep -E " error |Error"
bench/build_gpu_bench.sh build-gpu 2>&1 | tail -1
(rm -rf /tmp/base && mkdir -p /tmp/base && tar -xzf .run21/base.tar.gz -C /tmp/base && cd /tmp/base && cmake -S . -B b -DCMAKE_BUILD_TYPE=Release >/dev/null && cmake --build b -j8 --target tidepool_shared 2>&1 | grep -E " error |Error") &
BASE=$!
echo "== GPU tests"
ctest --test-dir build-gpu -L gpu --output-on-failure 2>&1 | grep -E "Test +#|tests passed|Failed|FAIL"
wait $BASE
echo "== $(date -u +%FT%TZ) replay, all three allocators, one process"
build-gpu/gpu_bench replay traces/*.csv.gz | tee $OUT/replay.md
echo "== $(date -u +%FT%TZ) replay, tidepool, expandable_segments:True"
TIDEPOOL_CONF=expandable_segments:True build-gpu/gpu_bench replay --only tidepool traces/*.csv.gz | tee $OUT/replay_expandable.md
echo "== $(date -u +%FT%TZ) ab_micro: A, B = 25f42e0 (base), 17dcb2a (head), both orders, twice"
for order in "base head" "head base" "base head" "head base"; do
  set -- $order
  lib() { if [ $1 = base ]; then echo /tmp/base/b/libtidepool.so; else echo build-gpu/libtidepool.so; fi; }
  echo "-- A=$1 B=$2"
  build-gpu/bench/ab_micro $(lib $1) $(lib $2) 61 2>&1 | tail -3
done
echo "== $(date -u +%FT%TZ) gpu_bench micro 7"
build-gpu/gpu_bench micro 7 > $OUT/micro7.md; cat $OUT/micro7.md
echo "== done $(date -u +%FT%TZ)"

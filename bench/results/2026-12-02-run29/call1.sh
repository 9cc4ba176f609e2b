#!/bin/bash
# Run 29, call 1: the committed code (e4e34f4; src/ unchanged since run 26): turns 101 twice, then
# micro 7 --only tidepool (which times one to eight threads) three times, to add to the counts of issue 4's thin margins.
set -u
OUT=${OUT:-/tmp/out}; mkdir -p $OUT
exec > >(tee -a $OUT/log1.txt) 2>&1
echo "== $(date -u +%FT%TZ) start $(git rev-parse --short HEAD 2>/dev/null)"
nproc; grep -m1 "model name" /proc/cpuinfo
cmake -S . -B build-gpu -DCMAKE_BUILD_TYPE=Release -DTIDE_WERROR=ON >/dev/null && cmake --build build-gpu -j16 --target tidepool_static 2>&1 | grep -E " error |Error"
bench/build_gpu_bench.sh build-gpu 2>&1 | tail -1
phase() { echo "== $(date -u +%FT%TZ) gpu_bench replay --only tidepool ($1): the host's phase"
  timeout 60 build-gpu/gpu_bench replay --only tidepool traces/*.csv.gz > $OUT/replay_$1.md; cat $OUT/replay_$1.md; }
phase before
for i in 1 2 3; do
  echo "== $(date -u +%FT%TZ) gpu_bench turns 101 ($i)"
  timeout 100 build-gpu/gpu_bench turns 101 > $OUT/turns_$i.md; cat $OUT/turns_$i.md
  echo "== $(date -u +%FT%TZ) gpu_bench micro 7 --only tidepool ($i)"
  timeout 120 build-gpu/gpu_bench micro 7 --only tidepool > $OUT/micro7_$i.md; cat $OUT/micro7_$i.md
done
phase after
echo "== done $(date -u +%FT%TZ)"

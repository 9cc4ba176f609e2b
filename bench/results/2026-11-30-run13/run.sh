#!/bin/bash
# Run 13: the history's cost and tidepool's speed, today's library (HEAD) against 71e63ee (reverse
# patch .run13/today.patch), in turn.
set -u
OUT=${OUT:-/tmp/out}; mkdir -p $OUT
ROOT=$PWD
exec > >(tee -a $OUT/log.txt) 2>&1
date -u +%FT%TZ
lscpu | grep -E "^Model name|^CPU\(s\)|L2|L3" | tr -s ' '
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
cmake -S . -B build-gpu -DCMAKE_BUILD_TYPE=Release -DTIDE_WERROR=ON >/dev/null && cmake --build build-gpu -j16 2>&1 | grep -E " error |warning|Error"
bench/build_gpu_bench.sh build-gpu >/dev/null || exit 1
rm -rf /tmp/old; mkdir -p /tmp/old && tar --exclude="./build*" --exclude=./.run13 -cf - . | tar -xf - -C /tmp/old
(cd /tmp/old && patch -R -p1 < $ROOT/.run13/today.patch >/dev/null && cmake -S . -B build-gpu -DCMAKE_BUILD_TYPE=Release >/dev/null && cmake --build build-gpu -j16 2>&1 | grep -E " error |Error"; bench/build_gpu_bench.sh build-gpu >/dev/null) || exit 1
echo "built both: $(date -u +%T)"
for round in 1 2 3; do
for n in 1024 65536; do
  echo "== before, ring $n, round $round"; (cd /tmp/old && build-gpu/gpu_bench history $n traces/*.csv.gz 2>&1) | tee -a $OUT/before_$n.md
  echo "== after, ring $n, round $round"; build-gpu/gpu_bench history $n traces/*.csv.gz 2>&1 | tee -a $OUT/after_$n.md
done
echo "round $round done: $(date -u +%T)"
done
for round in 1 2; do
  echo "== micro before, round $round"; (cd /tmp/old && build-gpu/gpu_bench micro 3 --only tidepool 2>&1) | tee -a $OUT/micro_before.md
  echo "== micro after, round $round"; build-gpu/gpu_bench micro 3 --only tidepool 2>&1 | tee -a $OUT/micro_after.md
done
echo "done: $(date -u +%T)"

#!/bin/bash
# the history's cost: filled chunks demoted to L3 (CLDEMOTE) (this tree) against HEAD (reverse patch), in turn
set -u
OUT=${OUT:-/tmp/out}; mkdir -p $OUT
ROOT=$PWD
date -u +%FT%TZ
lscpu | grep -E "^Model name|^CPU\(s\)|L2|L3" | tr -s ' '
grep -o -w -m1 cldemote /proc/cpuinfo || echo "no cldemote flag in /proc/cpuinfo"
cmake -S . -B build-gpu -DCMAKE_BUILD_TYPE=Release -DTIDE_WERROR=ON >/dev/null && cmake --build build-gpu -j16 2>&1 | grep -E " error |warning|Error"
bench/build_gpu_bench.sh build-gpu >/dev/null || exit 1
rm -rf /tmp/old; mkdir -p /tmp/old && tar --exclude="./build*" --exclude=./.run12 -cf - . | tar -xf - -C /tmp/old
(cd /tmp/old && patch -R -p1 < $ROOT/.run12/cldemote.patch >/dev/null && cmake -S . -B build-gpu -DCMAKE_BUILD_TYPE=Release >/dev/null && cmake --build build-gpu -j16 2>&1 | grep -E " error |Error"; bench/build_gpu_bench.sh build-gpu >/dev/null) || exit 1
for round in 1 2 3 4; do
for n in 65536 1024; do
  echo "== head, ring $n, round $round"; (cd /tmp/old && build-gpu/gpu_bench history $n traces/*.csv.gz 2>&1) | tee -a $OUT/head_$n.md
  echo "== demote, ring $n, round $round"; build-gpu/gpu_bench history $n traces/*.csv.gz 2>&1 | tee -a $OUT/demote_$n.md
done
done

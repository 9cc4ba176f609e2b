#!/bin/bash
# Run 28, call 1: what reuse without merging gives in time, as an upper bound.
# A: HEAD; B: size_cache.patch (freed blocks kept by exact size, merged only when a fit fails, unbounded);
# C: size_cache_nostats.patch (B, with the statistics' two hot events emptied: wrong statistics);
# D: B's library run with PMAX=1048576 PDEPTH=4 (only blocks of 1 MiB or less, 4 of a size).
# Every trace through tidepool alone, the four in rotating order, 12 rounds.
set -u
OUT=${OUT:-/tmp/out}; mkdir -p $OUT
exec > >(tee -a $OUT/log1.txt) 2>&1
echo "== $(date -u +%FT%TZ) start"
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader; nproc
lib() { # source dir
  (cd $1 && cmake -S . -B build-gpu -DCMAKE_BUILD_TYPE=Release -DTIDE_WERROR=ON >/dev/null &&
   cmake --build build-gpu -j5 --target tidepool_static 2>&1 | grep -E " error |Error";
   bench/build_gpu_bench.sh build-gpu 2>&1 | tail -1)
}
R=$(pwd)
for v in A B C; do mkdir -p /tmp/$v && tar -xf .run28/A.tar -C /tmp/$v; done
(cd /tmp/B && patch -p1 -s < $R/.run28/size_cache.patch)
(cd /tmp/C && patch -p1 -s < $R/.run28/size_cache_nostats.patch)
lib /tmp/A & p1=$!
lib /tmp/B & p2=$!
lib /tmp/C & p3=$!
wait $p1; wait $p2; wait $p3
echo "== $(date -u +%FT%TZ) built"
one() { # A, B, C or D
  local bin=/tmp/$1/build-gpu/gpu_bench env=""
  [ $1 = D ] && bin=/tmp/B/build-gpu/gpu_bench env="PMAX=1048576 PDEPTH=4"
  env $env $bin replay --only tidepool traces/*.csv.gz > $OUT/$1.md
  echo "$(grep tidepool $OUT/$1.md | awk -F'|' -v v=$1 '{printf "%s %s %s %s ", v, $2, $4, $7}')"
}
for r in $(seq 1 12); do
  echo "== $(date -u +%FT%TZ) round $r"
  case $((r % 4)) in
    1) one A; one B; one C; one D ;;
    2) one B; one C; one D; one A ;;
    3) one C; one D; one A; one B ;;
    0) one D; one A; one B; one C ;;
  esac
done
echo "== done $(date -u +%FT%TZ)"

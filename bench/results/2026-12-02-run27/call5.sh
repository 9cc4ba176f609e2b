#!/bin/bash
# Run 27, call 5: is call 3-4's gain the huge pages, or the patch's other changes (layout, code)?
# A: HEAD (from .run27/A.tar); B: the patch, tables of 16 KiB or more on huge pages; C: the same patch
# built with HOST_PAGES_HUGE_FROM=SIZE_MAX, so every table comes from the C library, on 4 KiB pages.
# Every trace through tidepool alone, the three builds in rotating order, 18 rounds.
set -u
OUT=${OUT:-/tmp/out}; mkdir -p $OUT
exec > >(tee -a $OUT/log5.txt) 2>&1
echo "== $(date -u +%FT%TZ) commit $(git rev-parse --short HEAD 2>/dev/null || echo '?') + working tree"
lib() { # source dir, build dir, extra C flags
  (cd $1 && cmake -S . -B $2 -DCMAKE_BUILD_TYPE=Release -DTIDE_WERROR=ON "-DCMAKE_C_FLAGS=$3" >/dev/null &&
   cmake --build $2 -j8 --target tidepool_static 2>&1 | grep -E " error |Error";
   bench/build_gpu_bench.sh $2 2>&1 | tail -1)
}
mkdir -p /tmp/A && tar -xf .run27/A.tar -C /tmp/A
lib /tmp/A build-gpu "" & p1=$!
lib . build-gpu "" & p2=$!
lib . build-gpu-c "-DHOST_PAGES_HUGE_FROM=SIZE_MAX" & p3=$!
wait $p1; wait $p2; wait $p3
echo "== $(date -u +%FT%TZ) built"
sample() { while kill -0 $1 2>/dev/null; do grep -hE "^(Rss|AnonHugePages)" /proc/$1/smaps_rollup 2>/dev/null | tr -s ' ' | tr '\n' ' '; echo; sleep 0.5; done; }
one() { # A, B or C
  local bin=build-gpu/gpu_bench
  [ $1 = A ] && bin=/tmp/A/build-gpu/gpu_bench
  [ $1 = C ] && bin=build-gpu-c/gpu_bench
  $bin replay --only tidepool traces/*.csv.gz > $OUT/$1.md & local pid=$!
  local s=$(sample $pid | sort -t: -k3 -n | tail -1); wait $pid
  echo "$(grep tidepool $OUT/$1.md | awk -F'|' -v v=$1 '{printf "%s %s %s ", v, $2, $4}') $s"
}
for r in $(seq 1 18); do
  echo "== $(date -u +%FT%TZ) round $r"
  case $((r % 3)) in
    1) one A; one B; one C ;;
    2) one B; one C; one A ;;
    0) one C; one A; one B ;;
  esac
done
echo "== done $(date -u +%FT%TZ)"

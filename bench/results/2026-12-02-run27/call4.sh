#!/bin/bash
# Run 27, call 4: call 3 again (every table on huge pages against none), 24 rounds
# (src/host_pages.c, B: the working tree) against the same code without (A: HEAD, from .run27/A.tar),
# replaying every trace through tidepool alone, the two builds in alternating order, 24 rounds; then
# gpu_bench turns 61 with each.
set -u
OUT=${OUT:-/tmp/out}; mkdir -p $OUT
exec > >(tee -a $OUT/log4.txt) 2>&1
echo "== $(date -u +%FT%TZ) commit $(git rev-parse --short HEAD 2>/dev/null || echo '?') + working tree"
cat /sys/kernel/mm/transparent_hugepage/enabled /sys/kernel/mm/transparent_hugepage/defrag
lscpu | grep -E "^Model name|^CPU\(s\)" | tr -s ' '
build() { # source dir
  (cd $1 && cmake -S . -B build-gpu -DCMAKE_BUILD_TYPE=Release -DTIDE_WERROR=ON >/dev/null &&
   cmake --build build-gpu -j16 --target tidepool_static 2>&1 | grep -E " error |Error";
   bench/build_gpu_bench.sh build-gpu 2>&1 | tail -1)
}
mkdir -p /tmp/A && tar -xf .run27/A.tar -C /tmp/A
build . & pb=$!
build /tmp/A & pa=$!
wait $pb; wait $pa
echo "== $(date -u +%FT%TZ) built"
sample() { while kill -0 $1 2>/dev/null; do grep -hE "^(Rss|AnonHugePages)" /proc/$1/smaps_rollup 2>/dev/null | tr -s ' ' | tr '\n' ' '; echo; sleep 0.5; done; }
one() { # A or B, round
  local bin=build-gpu/gpu_bench; [ $1 = A ] && bin=/tmp/A/build-gpu/gpu_bench
  $bin replay --only tidepool traces/*.csv.gz > $OUT/$1_$2.md & local pid=$!
  sample $pid > $OUT/smaps_$1_$2.txt; wait $pid
  grep tidepool $OUT/$1_$2.md | awk -F'|' -v v=$1 '{printf "%s %s %s\n", v, $2, $4}'
  sort -t: -k3 -n $OUT/smaps_$1_$2.txt | tail -1
}
for r in $(seq 1 24); do
  echo "== $(date -u +%FT%TZ) round $r"
  if [ $((r % 2)) = 1 ]; then one A $r; one B $r; else one B $r; one A $r; fi
done
echo "== $(date -u +%FT%TZ) gpu_bench turns 61, A then B"
timeout 60 /tmp/A/build-gpu/gpu_bench turns 61 > $OUT/turns_A.md; cat $OUT/turns_A.md
timeout 60 build-gpu/gpu_bench turns 61 > $OUT/turns_B.md; cat $OUT/turns_B.md
echo "== done $(date -u +%FT%TZ)"

#!/bin/bash
# Run 27, call 2: does expandable_segments:True cost time per operation? tidepool alone replays every
# trace with the default segments (D) and with expandable segments (E), in alternating order, 12
# rounds; each process about 1.5 s, so that a round's two mostly share one phase of the host.
set -u
OUT=${OUT:-/tmp/out}; mkdir -p $OUT
exec > >(tee -a $OUT/log2.txt) 2>&1
echo "== $(date -u +%FT%TZ) commit $(git rev-parse --short HEAD 2>/dev/null || echo '?')"
cmake -S . -B build-gpu -DCMAKE_BUILD_TYPE=Release -DTIDE_WERROR=ON >/dev/null && cmake --build build-gpu -j16 --target tidepool_static 2>&1 | grep -E " error |Error"
bench/build_gpu_bench.sh build-gpu 2>&1 | tail -1
one() { # D or E, round
  if [ $1 = E ]; then TIDEPOOL_CONF=expandable_segments:True timeout 60 build-gpu/gpu_bench replay --only tidepool traces/*.csv.gz > $OUT/$1_$2.md
  else timeout 60 build-gpu/gpu_bench replay --only tidepool traces/*.csv.gz > $OUT/$1_$2.md; fi
  grep tidepool $OUT/$1_$2.md | awk -F'|' -v v=$1 '{printf "%s |%s|%s|%s|%s|%s|%s\n", v, $2, $4, $5, $6, $8, $9}'
}
for r in $(seq 1 12); do
  echo "== $(date -u +%FT%TZ) round $r"
  if [ $((r % 2)) = 1 ]; then one D $r; one E $r; else one E $r; one D $r; fi
done
echo "== done $(date -u +%FT%TZ)"

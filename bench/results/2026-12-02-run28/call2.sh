#!/bin/bash
# Run 28, call 2: what the exact statistics alone cost a replay operation, in time.
# A: HEAD; E: HEAD with run 20's nostats.patch (the statistics' two hot events emptied: wrong
# statistics, an upper bound). Every trace through tidepool alone, the two in alternating order, 16 rounds.
set -u
OUT=${OUT:-/tmp/out}; mkdir -p $OUT
exec > >(tee -a $OUT/log2.txt) 2>&1
echo "== $(date -u +%FT%TZ) start"
lib() { # source dir
  (cd $1 && cmake -S . -B build-gpu -DCMAKE_BUILD_TYPE=Release -DTIDE_WERROR=ON >/dev/null &&
   cmake --build build-gpu -j8 --target tidepool_static 2>&1 | grep -E " error |Error";
   bench/build_gpu_bench.sh build-gpu 2>&1 | tail -1)
}
R=$(pwd)
for v in A E; do rm -rf /tmp/$v; mkdir -p /tmp/$v && tar -xf .run28/A.tar -C /tmp/$v; done
(cd /tmp/E && patch -p1 -s < $R/.run28/nostats.patch)
lib /tmp/A & p1=$!
lib /tmp/E & p2=$!
wait $p1; wait $p2
echo "== $(date -u +%FT%TZ) built"
one() { # A or E
  /tmp/$1/build-gpu/gpu_bench replay --only tidepool traces/*.csv.gz > $OUT/$1.md
  echo "$(grep tidepool $OUT/$1.md | awk -F'|' -v v=$1 '{printf "%s %s %s %s ", v, $2, $4, $8}')"
}
for r in $(seq 1 16); do
  echo "== $(date -u +%FT%TZ) round $r"
  if [ $((r % 2)) = 1 ]; then one A; one E; else one E; one A; fi
done
echo "== done $(date -u +%FT%TZ)"

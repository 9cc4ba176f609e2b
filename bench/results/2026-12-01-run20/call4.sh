#!/bin/bash
# Run 20, call 4 (ce99e95): where a large random pair's time goes on this host, by upper bounds that are
# not correct code (patches in .run20/patches/): nolock (the heap lock taken without a locked
# instruction), nostats (the statistics' two hot events emptied), noparking (TIDE_NO_PARKING: a freed
# block goes straight to the free index). ab_micro of HEAD against each, both orders, 61 rounds.
set -u
OUT=${OUT:-/tmp/out}; mkdir -p $OUT
ROOT=$PWD
exec > >(tee -a $OUT/log4.txt) 2>&1
echo "== $(date -u +%FT%TZ)"
variant() { # name [patch] [cflags]
    rm -rf /tmp/v_$1; mkdir -p /tmp/v_$1; cp -r src include CMakeLists.txt tools bench tests python fuzz traces /tmp/v_$1/ 2>/dev/null
    (cd /tmp/v_$1 && if [ -n "${2:-}" ]; then patch -s -p1 < $ROOT/.run20/patches/$2.patch || echo "PATCH $2 FAILED"; fi
     cmake -S . -B b -DCMAKE_BUILD_TYPE=Release ${3:+-DCMAKE_C_FLAGS=$3} >/dev/null && cmake --build b -j4 --target tidepool_shared ab_micro 2>&1 | grep -E " error|warning:")
}
variant head & P1=$!
variant nolock nolock & P2=$!
variant nostats nostats & P3=$!
variant noparking "" -DTIDE_NO_PARKING=1 & P4=$!
wait $P1 $P2 $P3 $P4
AB=/tmp/v_head/b/bench/ab_micro
for v in nolock nostats noparking; do
  for order in "head $v" "$v head" "head $v" "$v head"; do
    set -- $order
    echo "-- A=$1 B=$2"
    $AB /tmp/v_$1/b/libtidepool.so /tmp/v_$2/b/libtidepool.so 61 2>&1 | tail -3
  done
done
echo "== done $(date -u +%FT%TZ)"

#!/bin/bash
# Run 17, call 7: ab_micro of HEAD against make_free telling its four merge cases apart by a switch
# (merge_switch.patch) and by one computed jump (merge_goto.patch).
set -u
OUT=${OUT:-/tmp/out}; mkdir -p $OUT
ROOT=$PWD
exec > >(tee -a $OUT/log7.txt) 2>&1
echo "== $(date -u +%FT%TZ)"
variant() { # name [patch]
    rm -rf /tmp/v_$1; mkdir -p /tmp/v_$1; cp -r src include CMakeLists.txt tools bench tests python fuzz /tmp/v_$1/ 2>/dev/null
    (cd /tmp/v_$1 && if [ -n "${2:-}" ]; then patch -s -p1 < $ROOT/.run17/$2 || echo "PATCH FAILED $1"; fi
     cmake -S . -B b -DCMAKE_BUILD_TYPE=Release >/dev/null && cmake --build b -j5 --target tidepool_shared ab_micro 2>&1 | grep -E " error|warning:")
}
variant head & P1=$!; variant sw merge_switch.patch & P2=$!; variant goto merge_goto.patch & P3=$!
wait $P1 $P2 $P3
AB=/tmp/v_head/b/bench/ab_micro
for pair in "head sw" "sw head" "head goto" "goto head" "head goto"; do
    set -- $pair
    echo "-- A=$1 B=$2"
    $AB /tmp/v_$1/b/libtidepool.so /tmp/v_$2/b/libtidepool.so 101 2>&1 | tail -4
done
echo "== done $(date -u +%FT%TZ)"

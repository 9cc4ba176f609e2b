#!/bin/bash
# Run 19, call 4: the history's record laid out in line (inline.patch: no "unlikely" hint on the
# history's tests, so the recording path is straight-line code and the path with no history jumps over
# it) against HEAD; and, as an upper bound only, HEAD without the per-allocation tags test
# (notag_upper_bound.patch: tags would then never be recorded). gpu_bench history (the new method)
# for each build in turn, two rounds at 65,536 events and one at 1024; then ab_micro of HEAD against
# the in-line build, both orders (the micro patterns run with no history: the cost of the layout when off).
set -u
OUT=${OUT:-/tmp/out}; mkdir -p $OUT
ROOT=$PWD
exec > >(tee -a $OUT/log4.txt) 2>&1
echo "== $(date -u +%FT%TZ) $(git log --oneline -1 2>/dev/null)"
variant() { # name [patch]
    rm -rf /tmp/v_$1; mkdir -p /tmp/v_$1; cp -r src include CMakeLists.txt tools bench tests python fuzz traces /tmp/v_$1/ 2>/dev/null
    (cd /tmp/v_$1 && if [ -n "${2:-}" ]; then patch -s -p1 < $ROOT/.run19/$2 || echo "PATCH FAILED $1"; fi
     cmake -S . -B build-gpu -DCMAKE_BUILD_TYPE=Release -DTIDE_WERROR=ON >/dev/null && cmake --build build-gpu -j5 2>&1 | grep -E " error |Error"
     bench/build_gpu_bench.sh build-gpu >/dev/null)
}
variant head & P1=$!
variant inl inline.patch & P2=$!
variant notag notag_upper_bound.patch & P3=$!
wait $P1 $P2 $P3
ls -la /tmp/v_*/build-gpu/gpu_bench /tmp/v_*/build-gpu/bench/ab_micro | awk '{print $5, $9}'
for round in 1 2; do
  for v in head inl notag; do
    echo "-- $v, 65536 events, round $round"
    (cd /tmp/v_$v && build-gpu/gpu_bench history 65536 traces/*.csv.gz) | tee $OUT/history_65536_${v}_$round.md
  done
done
for v in head inl notag; do
    echo "-- $v, 1024 events"
    (cd /tmp/v_$v && build-gpu/gpu_bench history 1024 traces/*.csv.gz) | tee $OUT/history_1024_$v.md
done
echo "== ab_micro (no history)"
AB=/tmp/v_head/build-gpu/bench/ab_micro
for pair in "head inl" "inl head"; do
    set -- $pair
    echo "-- A=$1 B=$2"
    $AB /tmp/v_$1/build-gpu/libtidepool.so /tmp/v_$2/build-gpu/libtidepool.so 61 2>&1 | tail -4
done
echo "== done $(date -u +%FT%TZ)"

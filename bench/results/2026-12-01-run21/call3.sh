#!/bin/bash
# Run 21, call 3 (deed830, the final code): how much of a large random pair the three levers of run 20
# could give together: ab_micro of HEAD against "all3" (the heap lock without a locked instruction, the
# statistics' two hot events emptied, parking off: not correct code, an upper bound), both orders,
# twice; then gpu_bench micro 7 a third time this session. .run21/patches/ held run 20's patches
# (bench/results/2026-12-01-run20/patches/nolock.patch and nostats.patch).
set -u
OUT=${OUT:-/tmp/out}; mkdir -p $OUT
ROOT=$PWD
exec > >(tee -a $OUT/log3.txt) 2>&1
echo "== $(date -u +%FT%TZ)"
variant() { # name [cflags] [patches...]
    local name=$1 flags=$2; shift 2
    rm -rf /tmp/v_$name; mkdir -p /tmp/v_$name; cp -r src include CMakeLists.txt tools bench tests python fuzz traces /tmp/v_$name/ 2>/dev/null
    (cd /tmp/v_$name && for p in "$@"; do patch -s -p1 < $ROOT/.run21/patches/$p.patch || echo "PATCH $p FAILED"; done
     cmake -S . -B b -DCMAKE_BUILD_TYPE=Release ${flags:+-DCMAKE_C_FLAGS=$flags} >/dev/null && cmake --build b -j8 --target tidepool_shared ab_micro 2>&1 | grep -E " error|warning:")
}
variant head "" & P1=$!
variant all3 -DTIDE_NO_PARKING=1 nolock nostats & P2=$!
cmake -S . -B build-gpu -DCMAKE_BUILD_TYPE=Release -DTIDE_WERROR=ON >/dev/null && cmake --build build-gpu -j16 2>&1 | grep -E " error |Error"
bench/build_gpu_bench.sh build-gpu 2>&1 | tail -1
wait $P1 $P2
AB=/tmp/v_head/b/bench/ab_micro
for order in "head all3" "all3 head" "head all3" "all3 head"; do
  set -- $order
  echo "-- A=$1 B=$2"
  $AB /tmp/v_$1/b/libtidepool.so /tmp/v_$2/b/libtidepool.so 61 2>&1 | tail -3
done
echo "== $(date -u +%FT%TZ) gpu_bench micro 7"
build-gpu/gpu_bench micro 7 > $OUT/micro7.md; cat $OUT/micro7.md
echo "== done $(date -u +%FT%TZ)"

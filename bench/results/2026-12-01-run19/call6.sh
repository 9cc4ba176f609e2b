#!/bin/bash
# Run 19, call 6: the hot path's layout (layout.patch: hints where GCC put the common path out of
# line, peaks stored out of line, the pointer map's growth test one compare): taken jumps per
# alloc+free pair under callgrind 41.6 -> 16.8 (large random), 40.4 -> 17.0 (small), 20.0 -> 13.5
# (same size). ab_micro of HEAD (fc11201: .run19/old_src/) against it, both orders, twice; then
# gpu_bench micro 7 on it.
set -u
OUT=${OUT:-/tmp/out}; mkdir -p $OUT
ROOT=$PWD
exec > >(tee -a $OUT/log6.txt) 2>&1
echo "== $(date -u +%FT%TZ)"
variant() { # name [old]
    rm -rf /tmp/v_$1; mkdir -p /tmp/v_$1; cp -r src include CMakeLists.txt tools bench tests python fuzz traces /tmp/v_$1/ 2>/dev/null
    (cd /tmp/v_$1 && if [ -n "${2:-}" ]; then cp $ROOT/.run19/old_src/* src/; fi
     cmake -S . -B b -DCMAKE_BUILD_TYPE=Release >/dev/null && cmake --build b -j8 --target tidepool_shared ab_micro 2>&1 | grep -E " error|warning:")
}
( cmake -S . -B build-gpu -DCMAKE_BUILD_TYPE=Release -DTIDE_WERROR=ON >/dev/null && cmake --build build-gpu -j8 2>&1 | grep -E " error |Error"; bench/build_gpu_bench.sh build-gpu ) & P0=$!
variant new & P1=$!
variant old old & P2=$!
wait $P0 $P1 $P2
AB=/tmp/v_new/b/bench/ab_micro
for pair in "old new" "new old" "old new" "new old"; do
    set -- $pair
    echo "-- A=$1 B=$2"
    $AB /tmp/v_$1/b/libtidepool.so /tmp/v_$2/b/libtidepool.so 61 2>&1 | tail -4
done
echo "== gpu_bench micro 7 (new)"
build-gpu/gpu_bench micro 7 > $OUT/micro7.md; cat $OUT/micro7.md
echo "== done $(date -u +%FT%TZ)"

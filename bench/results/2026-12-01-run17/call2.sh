#!/bin/bash
# Run 17, call 2: ab_micro of HEAD against HEAD with next_class without its branch (nextclass.patch),
# both orders, and HEAD against itself; then the history's cost on the GPU at 1024 and 65,536 events.
set -u
OUT=${OUT:-/tmp/out}; mkdir -p $OUT
ROOT=$PWD
exec > >(tee -a $OUT/log2.txt) 2>&1
echo "== $(date -u +%FT%TZ)"
( cmake -S . -B build-gpu -DCMAKE_BUILD_TYPE=Release -DTIDE_WERROR=ON >/dev/null && cmake --build build-gpu -j16 2>&1 | grep -E " error |Error"; bench/build_gpu_bench.sh build-gpu ) &
BPID=$!
variant() { # name [patch]
    rm -rf /tmp/v_$1; mkdir -p /tmp/v_$1; cp -r src include CMakeLists.txt tools bench tests python fuzz /tmp/v_$1/ 2>/dev/null
    (cd /tmp/v_$1 && if [ -n "${2:-}" ]; then patch -s -p1 < $ROOT/.run17/$2 || echo "PATCH FAILED $1"; fi
     cmake -S . -B b -DCMAKE_BUILD_TYPE=Release >/dev/null && cmake --build b -j8 --target tidepool_shared ab_micro 2>&1 | grep -E " error|warning:")
}
variant head
variant nc nextclass.patch
wait $BPID
AB=/tmp/v_head/b/bench/ab_micro
for pair in "head nc" "nc head" "head head" "head nc"; do
    set -- $pair
    echo "-- A=$1 B=$2"
    $AB /tmp/v_$1/b/libtidepool.so /tmp/v_$2/b/libtidepool.so 101 2>&1 | tail -4
done
echo "== history on the GPU"
build-gpu/gpu_bench history 1024 traces/*.csv.gz | tee $OUT/history_1024.md
build-gpu/gpu_bench history 65536 traces/*.csv.gz | tee $OUT/history_65536.md
echo "== done $(date -u +%FT%TZ)"

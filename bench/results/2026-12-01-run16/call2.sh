#!/bin/bash
# Run 16, call 2: upper bounds on HEAD, in one process (ab_micro): no lock, no statistics on the hot
# path (measurement only, not correct code).
set -u
OUT=${OUT:-/tmp/out}; mkdir -p $OUT
ROOT=$PWD
exec > >(tee -a $OUT/call2_ab_log.txt) 2>&1
variant() { # name [patch [-R]]
    rm -rf /tmp/v_$1; mkdir -p /tmp/v_$1; cp -r src include CMakeLists.txt tools bench tests python fuzz /tmp/v_$1/ 2>/dev/null
    (cd /tmp/v_$1 && if [ -n "${2:-}" ]; then patch -s -p1 ${3:-} < $ROOT/.run16/$2 || echo "PATCH FAILED $1"; fi
     cmake -S . -B b -DCMAKE_BUILD_TYPE=Release >/dev/null && cmake --build b -j16 --target tidepool_shared ab_micro 2>&1 | grep -E "error|warning:")
    ls -la /tmp/v_$1/b/libtidepool.so.0.1.0
}
variant head
variant nolock nolock.patch
variant nostats nostats.patch
AB=/tmp/v_head/b/bench/ab_micro
for pair in "head nolock" "nolock head" "head nostats" "nostats head"; do
    set -- $pair
    echo "== A=$1 B=$2"
    $AB /tmp/v_$1/b/libtidepool.so /tmp/v_$2/b/libtidepool.so 101 2>&1 | tail -3
done

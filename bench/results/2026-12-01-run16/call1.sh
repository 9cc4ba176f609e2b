#!/bin/bash
# Run 16, call 1: the GPU tests on the new code (HEAD), then in one process (ab_micro, the .so loaded
# with dlopen): the code before the thread-local change against HEAD, and two upper bounds on HEAD
# (no lock, no statistics: measurement only, not correct code).
set -u
OUT=${OUT:-/tmp/out}; mkdir -p $OUT
ROOT=$PWD
OUT=$OUT bash bench/gpu_run.sh tests > $OUT/tests_console.txt 2>&1
tail -5 $OUT/tests_console.txt
exec > >(tee -a $OUT/ab_log.txt) 2>&1
lscpu | grep -E "^Model name|^CPU\(s\)" | tr -s ' '
variant() { # name patch [reverse]
    rm -rf /tmp/v_$1; mkdir -p /tmp/v_$1; cp -r src include CMakeLists.txt tools bench tests python fuzz /tmp/v_$1/ 2>/dev/null
    (cd /tmp/v_$1 && if [ -n "$2" ]; then patch -s -p1 $3 < $ROOT/.run16/$2 || echo "PATCH FAILED $1"; fi
     cmake -S . -B b -DCMAKE_BUILD_TYPE=Release >/dev/null && cmake --build b -j16 --target tidepool_shared ab_micro 2>&1 | grep -E "error|warning:")
    ls -la /tmp/v_$1/b/libtidepool.so.0.1.0
}
variant head ""
variant old tls.patch -R
variant nolock nolock.patch
variant nostats nostats.patch
readelf -lW /tmp/v_head/b/libtidepool.so | grep " TLS"; readelf -lW /tmp/v_old/b/libtidepool.so | grep " TLS"
AB=/tmp/v_head/b/bench/ab_micro
for pair in "old head" "head old" "head nolock" "head nostats" "head head"; do
    set -- $pair
    echo "== A=$1 B=$2"
    $AB /tmp/v_$1/b/libtidepool.so /tmp/v_$2/b/libtidepool.so 101 2>&1 | tail -3
done

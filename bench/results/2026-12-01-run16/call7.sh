#!/bin/bash
# Run 16, call 7: gpu_bench micro 7 on the final code, a third sample of the micro patterns.
set -u
OUT=${OUT:-/tmp/out}; mkdir -p $OUT
( cmake -S . -B build-gpu -DCMAKE_BUILD_TYPE=Release -DTIDE_WERROR=ON >/dev/null && cmake --build build-gpu -j16 2>&1 | grep -E " error |Error"; bench/build_gpu_bench.sh build-gpu >/dev/null ) &
wait $!
build-gpu/gpu_bench micro 7 > $OUT/micro7_call7.md 2>&1

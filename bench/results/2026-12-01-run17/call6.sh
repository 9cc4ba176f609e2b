#!/bin/bash
# Run 17, call 6: a second gpu_bench micro 7 on the final code.
set -u
OUT=${OUT:-/tmp/out}; mkdir -p $OUT
exec > >(tee -a $OUT/log6.txt) 2>&1
echo "== $(date -u +%FT%TZ)"
( cmake -S . -B build-gpu -DCMAKE_BUILD_TYPE=Release -DTIDE_WERROR=ON >/dev/null && cmake --build build-gpu -j16 2>&1 | grep -E " error |Error"; bench/build_gpu_bench.sh build-gpu ) &
wait $!
build-gpu/gpu_bench micro 7 | tee $OUT/micro7_call6.md
echo "== done $(date -u +%FT%TZ)"

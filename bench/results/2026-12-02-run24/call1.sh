#!/bin/bash
# Run 24, call 1 (c12519c; the library's code is 43a0138's): the GPU build and tests; gpu_bench replay of
# the four traces through all three allocators; gpu_bench micro 7.
set -u
OUT=${OUT:-/tmp/out}; mkdir -p $OUT
exec > >(tee -a $OUT/log1.txt) 2>&1
echo "== $(date -u +%FT%TZ)"
lscpu | grep -E "^Model name|^CPU\(s\)|MHz" | tr -s ' '
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
cmake -S . -B build-gpu -DCMAKE_BUILD_TYPE=Release -DTIDE_WERROR=ON >/dev/null && cmake --build build-gpu -j16 2>&1 | grep -E " error |Error"
bench/build_gpu_bench.sh build-gpu 2>&1 | tail -1
echo "== GPU tests"
timeout 150 ctest --test-dir build-gpu -L gpu --output-on-failure 2>&1 | grep -E "Test +#|tests passed|Failed|FAIL"
echo "== $(date -u +%FT%TZ) replay, all three allocators, one process"
timeout 100 build-gpu/gpu_bench replay traces/*.csv.gz | tee $OUT/replay.md
echo "== $(date -u +%FT%TZ) gpu_bench micro 7"
timeout 300 build-gpu/gpu_bench micro 7 > $OUT/micro7.md; cat $OUT/micro7.md
echo "== done $(date -u +%FT%TZ)"

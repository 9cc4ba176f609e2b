#!/bin/bash
# Run 21, call 2 (d8341e7: the validator checks the peaks too): the GPU build and tests; gpu_bench
# replay of the four traces through all three allocators; gpu_bench micro 7 a second time this session.
set -u
OUT=${OUT:-/tmp/out}; mkdir -p $OUT
exec > >(tee -a $OUT/log2.txt) 2>&1
echo "== $(date -u +%FT%TZ)"
lscpu | grep -E "^Model name|^CPU\(s\)|MHz" | tr -s ' '
cmake -S . -B build-gpu -DCMAKE_BUILD_TYPE=Release -DTIDE_WERROR=ON >/dev/null && cmake --build build-gpu -j16 2>&1 | grep -E " error |Error"
bench/build_gpu_bench.sh build-gpu 2>&1 | tail -1
echo "== GPU tests"
ctest --test-dir build-gpu -L gpu --output-on-failure 2>&1 | grep -E "Test +#|tests passed|Failed|FAIL"
echo "== $(date -u +%FT%TZ) replay, all three allocators, one process"
build-gpu/gpu_bench replay traces/*.csv.gz | tee $OUT/replay.md
echo "== $(date -u +%FT%TZ) gpu_bench micro 7"
build-gpu/gpu_bench micro 7 > $OUT/micro7.md; cat $OUT/micro7.md
echo "== done $(date -u +%FT%TZ)"

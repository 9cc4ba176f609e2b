#!/bin/bash
# Run 26, call 6: gpu_bench's argument checks (bad counts refused before the GPU is set up), and a
# short turns run.
set -u
OUT=${OUT:-/tmp/out}; mkdir -p $OUT
exec > >(tee -a $OUT/log6.txt) 2>&1
echo "== $(date -u +%FT%TZ) commit $(git rev-parse --short HEAD 2>/dev/null || echo '?') (+ working tree: bench/gpu_bench.cpp)"
cmake -S . -B build-gpu -DCMAKE_BUILD_TYPE=Release -DTIDE_WERROR=ON >/dev/null && cmake --build build-gpu -j16 --target tidepool_static 2>&1 | grep -E " error |Error"
bench/build_gpu_bench.sh build-gpu 2>&1 | tail -3
for args in "micro 0" "micro 40" "turns 2" "turns x" "turns 2000"; do
  echo "-- gpu_bench $args"; build-gpu/gpu_bench $args; echo "rc=$?"
done
echo "-- gpu_bench turns 5"; timeout 60 build-gpu/gpu_bench turns 5; echo "rc=$?"
echo "== done $(date -u +%FT%TZ)"

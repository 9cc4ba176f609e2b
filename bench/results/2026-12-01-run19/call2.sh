#!/bin/bash
# Run 19, call 2: the history's cost measured two ways in one call, taking turns: the method before
# (gpu_bench from HEAD's source: the "on" replay right after tide_history_start, always second) and the
# new one (each turn replays once untimed in its state first; the order alternates). Then gpu_bench
# micro 7 on the library as it is (the 8x targets).
set -u
OUT=${OUT:-/tmp/out}; mkdir -p $OUT
exec > >(tee -a $OUT/log2.txt) 2>&1
echo "== $(date -u +%FT%TZ) $(git log --oneline -1 2>/dev/null)"
git status --short | head
cmake -S . -B build-gpu -DCMAKE_BUILD_TYPE=Release -DTIDE_WERROR=ON >/dev/null && cmake --build build-gpu -j16 2>&1 | grep -E " error |Error"
bench/build_gpu_bench.sh build-gpu
# the method before: HEAD's gpu_bench.cpp, built the same way as bench/build_gpu_bench.sh does
git show HEAD:bench/gpu_bench.cpp > bench/gpu_bench_before.cpp
TORCH=$(python3 -c 'import torch, os; print(os.path.dirname(torch.__file__))')
ABI=$(python3 -c 'import torch; print(int(torch._C._GLIBCXX_USE_CXX11_ABI))')
CUDA=${CUDA_HOME:-/usr/local/cuda}
c++ -O2 -flto=auto -std=c++17 -D_GLIBCXX_USE_CXX11_ABI="$ABI" -Iinclude -Itools -Ibench -Itests/gpu \
    -I"$TORCH/include" -I"$TORCH/include/torch/csrc/api/include" -I"$CUDA/include" \
    bench/gpu_bench_before.cpp build-gpu/trace_bench.o -o build-gpu/gpu_bench_before \
    -L"$TORCH/lib" -lc10_cuda -lc10 -L"$CUDA/lib64" -lcudart build-gpu/libtidepool.a -lpthread -ldl -lm \
    -Wl,-rpath,"$TORCH/lib" -Wl,-rpath,"$CUDA/lib64" && echo "built build-gpu/gpu_bench_before"
rm -f bench/gpu_bench_before.cpp
for events in 65536 1024; do
  for round in 1 2; do
    echo "-- $events events, method before, round $round"
    build-gpu/gpu_bench_before history $events traces/*.csv.gz | tee $OUT/history_${events}_before_$round.md
    echo "-- $events events, new method, round $round"
    build-gpu/gpu_bench history $events traces/*.csv.gz | tee $OUT/history_${events}_new_$round.md
  done
done
echo "== gpu_bench micro 7"
build-gpu/gpu_bench micro 7 | tee $OUT/micro7.md
echo "== done $(date -u +%FT%TZ)"

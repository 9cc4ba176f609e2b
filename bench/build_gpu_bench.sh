#!/bin/sh
# Builds bench/gpu_bench against the installed PyTorch (its c10 libraries and headers) and the CUDA
# runtime, and libtidepool from build-gpu/ (bench/gpu_run.sh builds that first).
set -eu
BUILD=${1:-build-gpu}
TORCH=$(python3 -c 'import torch, os; print(os.path.dirname(torch.__file__))')
ABI=$(python3 -c 'import torch; print(int(torch._C._GLIBCXX_USE_CXX11_ABI))')
CUDA=${CUDA_HOME:-/usr/local/cuda}
cc -O2 -std=c11 -D_POSIX_C_SOURCE=200809L -D_DEFAULT_SOURCE -Iinclude -Itools -c tools/trace.c -o "$BUILD/trace_bench.o"
# -flto: libtidepool.a's objects carry GCC's LTO bytecode (TIDE_LTO), so its hot path is inlined
# across files here as in libtidepool.so; PyTorch's and CUDA's libraries are shared, so unaffected.
c++ -O2 -flto=auto -std=c++17 -D_GLIBCXX_USE_CXX11_ABI="$ABI" -Iinclude -Itools -Ibench -Itests/gpu \
    -I"$TORCH/include" -I"$TORCH/include/torch/csrc/api/include" -I"$CUDA/include" \
    bench/gpu_bench.cpp "$BUILD/trace_bench.o" -o "$BUILD/gpu_bench" \
    -L"$TORCH/lib" -lc10_cuda -lc10 -L"$CUDA/lib64" -lcudart "$BUILD/libtidepool.a" -lpthread -ldl -lm \
    -Wl,-rpath,"$TORCH/lib" -Wl,-rpath,"$CUDA/lib64"
echo "built $BUILD/gpu_bench"

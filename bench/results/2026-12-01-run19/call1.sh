#!/bin/bash
# Run 19, call 1: the GPU tests and compute-sanitizer on HEAD (436404b..4b5e476 never ran on the GPU);
# is tidepool slower on the CUDA backend than on the simulated device (.run19/backend_ab.c)?; the
# replays of all three allocators; the history's cost at 65,536 events.
set -u
OUT=${OUT:-/tmp/out}; mkdir -p $OUT
exec > >(tee -a $OUT/log1.txt) 2>&1
echo "== $(date -u +%FT%TZ) $(git log --oneline -1 2>/dev/null)"
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
lscpu | grep -E "^Model name|^CPU\(s\)|MHz" | tr -s ' '
cmake -S . -B build-gpu -DCMAKE_BUILD_TYPE=Release -DTIDE_WERROR=ON >/dev/null && cmake --build build-gpu -j16 2>&1 | grep -E " error |Error"
bench/build_gpu_bench.sh build-gpu
CUDA=${CUDA_HOME:-/usr/local/cuda}
cc -O2 -flto=auto -std=c11 -D_DEFAULT_SOURCE -Iinclude -Ibench -I$CUDA/include .run19/backend_ab.c build-gpu/libtidepool.a \
   -L$CUDA/lib64 -lcudart -Wl,-rpath,$CUDA/lib64 -lpthread -ldl -lm -o /tmp/backend_ab || echo "backend_ab BUILD FAILED"
echo "== GPU tests"
ctest --test-dir build-gpu -L gpu --output-on-failure 2>&1 | grep -E "Test +#|tests passed|Failed|FAIL"
TIDE_GPU_OPS=500 timeout 100 compute-sanitizer --tool memcheck --error-exitcode 9 build-gpu/tests/gpu_expandable \
    2>&1 | grep -E "ERROR SUMMARY|all checks|FAILED" | tail -3
echo "compute-sanitizer exit status: ${PIPESTATUS[0]} for gpu_expandable"
echo "== backend_ab (tidepool on the simulated device and on CUDA, one process, 11 reps)"
/tmp/backend_ab 11 | tee $OUT/backend_ab.md
echo "== gpu_bench micro 3, tidepool only"
build-gpu/gpu_bench micro 3 --only tidepool | head -6 | tee $OUT/micro3_tidepool.md
echo "== backend_ab again"
/tmp/backend_ab 11 | tee $OUT/backend_ab2.md
echo "== replay, all three allocators, one process"
build-gpu/gpu_bench replay traces/*.csv.gz | tee $OUT/replay.md
echo "== history 65536"
build-gpu/gpu_bench history 65536 traces/*.csv.gz | tee $OUT/history_65536.md
echo "== done $(date -u +%FT%TZ)"

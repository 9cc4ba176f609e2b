#!/bin/bash
# Run 17, call 4: the final code (HEAD): GPU tests, gpu_bench micro 7, the replays against PyTorch and
# cudaMallocAsync in one process, and PyTorch's and tidepool's expandable segments each in its own.
set -u
OUT=${OUT:-/tmp/out}; mkdir -p $OUT
exec > >(tee -a $OUT/log4.txt) 2>&1
echo "== $(date -u +%FT%TZ)"
( cmake -S . -B build-gpu -DCMAKE_BUILD_TYPE=Release -DTIDE_WERROR=ON >/dev/null && cmake --build build-gpu -j16 2>&1 | grep -E " error |Error"; bench/build_gpu_bench.sh build-gpu ) &
wait $!
echo "== GPU tests"
ctest --test-dir build-gpu -L gpu --output-on-failure 2>&1 | grep -E "Test +#|tests passed|Failed|Skipped"
echo "== micro 7"
build-gpu/gpu_bench micro 7 | tee $OUT/micro7.md
echo "== replay, all three allocators, one process"
build-gpu/gpu_bench replay traces/*.csv.gz | tee $OUT/replay.md
PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True build-gpu/gpu_bench replay --only pytorch traces/*.csv.gz | tail -n +3 | tee -a $OUT/replay.md
echo "== replay, tidepool expandable_segments:True"
TIDEPOOL_CONF=expandable_segments:True build-gpu/gpu_bench replay --only tidepool traces/*.csv.gz | tee $OUT/replay_expandable.md
echo "== done $(date -u +%FT%TZ)"

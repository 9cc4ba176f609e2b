#!/bin/bash
# Run 26, call 1 (the session's starting commit, 85b2646; library code of ce6b378): the GPU build and
# tests; gpu_bench micro 7; the replays through all three allocators in one process, PyTorch's
# expandable segments in a process of its own, and tidepool's expandable segments.
set -u
OUT=${OUT:-/tmp/out}; mkdir -p $OUT
exec > >(tee -a $OUT/log1.txt) 2>&1
echo "== $(date -u +%FT%TZ) commit $(git rev-parse --short HEAD 2>/dev/null || echo '?')"
lscpu | grep -E "^Model name|^CPU\(s\)|MHz" | tr -s ' '
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
gcc --version | head -1
cmake -S . -B build-gpu -DCMAKE_BUILD_TYPE=Release -DTIDE_WERROR=ON >/dev/null && cmake --build build-gpu -j16 2>&1 | grep -E " error |Error"
bench/build_gpu_bench.sh build-gpu 2>&1 | tail -1
echo "== $(date -u +%FT%TZ) GPU tests"
timeout 150 ctest --test-dir build-gpu -L gpu --output-on-failure 2>&1 | grep -E "Test +#|tests passed|Failed|FAIL"
echo "== $(date -u +%FT%TZ) replay, all three allocators, one process"
timeout 100 build-gpu/gpu_bench replay traces/*.csv.gz | tee $OUT/replay.md
echo "== $(date -u +%FT%TZ) replay, PyTorch expandable_segments:True"
PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True timeout 100 build-gpu/gpu_bench replay --only pytorch traces/*.csv.gz | tee $OUT/replay_pytorch_expandable.md
echo "== $(date -u +%FT%TZ) replay, tidepool expandable_segments:True"
TIDEPOOL_CONF=expandable_segments:True timeout 100 build-gpu/gpu_bench replay --only tidepool traces/*.csv.gz | tee $OUT/replay_expandable.md
echo "== $(date -u +%FT%TZ) gpu_bench micro 7"
timeout 280 build-gpu/gpu_bench micro 7 > $OUT/micro7.md; cat $OUT/micro7.md
echo "== done $(date -u +%FT%TZ)"

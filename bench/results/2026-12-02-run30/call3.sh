#!/bin/bash
# Run 30, call 3: gpu_bench replay with its new column, the driver calls of the warm passes after the
# first (the steady state): all three allocators in one process, then tidepool's and PyTorch's
# expandable segments.
set -u
OUT=${OUT:-/tmp/out}; mkdir -p $OUT
exec > >(tee -a $OUT/log3.txt) 2>&1
echo "== $(date -u +%FT%TZ) start"
cmake -S . -B build-gpu -DCMAKE_BUILD_TYPE=Release -DTIDE_WERROR=ON >/dev/null && cmake --build build-gpu -j16 --target tidepool_static 2>&1 | grep -E " error |Error"
bench/build_gpu_bench.sh build-gpu 2>&1 | tail -3
echo "== $(date -u +%FT%TZ) replay, all three allocators, one process"
timeout 100 build-gpu/gpu_bench replay traces/*.csv.gz > $OUT/replay.md; cat $OUT/replay.md
echo "== $(date -u +%FT%TZ) replay, tidepool expandable_segments:True"
TIDEPOOL_CONF=expandable_segments:True timeout 60 build-gpu/gpu_bench replay --only tidepool traces/*.csv.gz > $OUT/replay_expandable.md; cat $OUT/replay_expandable.md
echo "== $(date -u +%FT%TZ) replay, PyTorch expandable_segments:True"
PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True timeout 100 build-gpu/gpu_bench replay --only pytorch traces/*.csv.gz > $OUT/replay_pytorch_expandable.md; cat $OUT/replay_pytorch_expandable.md
echo "== done $(date -u +%FT%TZ)"

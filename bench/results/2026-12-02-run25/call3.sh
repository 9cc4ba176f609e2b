#!/bin/bash
# Run 25, call 3 (the library's code is ce6b378's): issue 7 on the current code: gpu_expandable (the cost
# of a map and an unmap), then the seed's loop under PyTorch with both allocators' expandable segments,
# 1000 steps a run, in turn, two rounds.
set -u
OUT=${OUT:-/tmp/out}; mkdir -p $OUT
exec > >(tee -a $OUT/log3.txt) 2>&1
echo "== $(date -u +%FT%TZ) commit $(git rev-parse --short HEAD 2>/dev/null || echo '?')"
python3 -c 'import torch; print("torch", torch.__version__, "cuda", torch.version.cuda)'
[ -x build-gpu/tests/gpu_expandable ] || { cmake -S . -B build-gpu -DCMAKE_BUILD_TYPE=Release -DTIDE_WERROR=ON >/dev/null && cmake --build build-gpu -j16 2>&1 | grep -E " error |Error"; }
echo "== gpu_expandable"
timeout 60 build-gpu/tests/gpu_expandable 2>&1 | tail -10
export PYTHONUNBUFFERED=1 TIDEPOOL_LIBRARY="$PWD/build-gpu/libtidepool.so"
echo "== $(date -u +%FT%TZ) the seed's loop, expandable segments, 1000 steps, two rounds"
for round in 1 2; do
  for alloc in expandable tidepool-expandable; do
    timeout 120 python3 bench/seed_loop.py --allocator $alloc --steps 1000 --json $OUT/alt_${alloc}_$round.json 2>&1 | tail -1
  done
done
python3 bench/summarize_seed.py $OUT/alt_expandable_1.json $OUT/alt_tidepool-expandable_1.json | tee $OUT/seed_round1.md
python3 bench/summarize_seed.py $OUT/alt_expandable_2.json $OUT/alt_tidepool-expandable_2.json | tee $OUT/seed_round2.md
python3 bench/summarize_alternating.py $OUT expandable tidepool-expandable | tee $OUT/seed_alternating.md
echo "== done $(date -u +%FT%TZ)"

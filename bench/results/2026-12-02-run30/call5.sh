#!/bin/bash
# Run 30, call 5: the seed's loop live, 250 steps (empty_cache after steps 100 and 200), under
# PyTorch's allocator and tidepool, after the smallest-that-covers trim (16fc56e): peak reserved.
set -u
OUT=${OUT:-/tmp/out}; mkdir -p $OUT
exec > >(tee -a $OUT/log5.txt) 2>&1
echo "== $(date -u +%FT%TZ) start"
cmake -S . -B build-gpu -DCMAKE_BUILD_TYPE=Release -DTIDE_WERROR=ON >/dev/null && cmake --build build-gpu -j16 --target tidepool_shared 2>&1 | grep -E " error |Error"
export PYTHONUNBUFFERED=1 TIDEPOOL_LIBRARY="$PWD/build-gpu/libtidepool.so"
for alloc in native tidepool; do
  timeout 200 python3 bench/seed_loop.py --allocator $alloc --steps 250 --json "$OUT/seed_$alloc.json" 2>&1 | tail -1
done
echo "== done $(date -u +%FT%TZ)"

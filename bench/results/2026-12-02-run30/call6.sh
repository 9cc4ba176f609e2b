#!/bin/bash
# Run 30, call 6: the seed's loop's step time, PyTorch's allocator against tidepool (16fc56e), six
# rounds of 300 steps, who goes first alternating from round to round (bench/summarize_alternating.py).
set -u
OUT=${OUT:-/tmp/out}; mkdir -p $OUT
exec > >(tee -a $OUT/log6.txt) 2>&1
echo "== $(date -u +%FT%TZ) start"
cmake -S . -B build-gpu -DCMAKE_BUILD_TYPE=Release -DTIDE_WERROR=ON >/dev/null && cmake --build build-gpu -j16 --target tidepool_shared 2>&1 | grep -E " error |Error"
export PYTHONUNBUFFERED=1 TIDEPOOL_LIBRARY="$PWD/build-gpu/libtidepool.so"
for round in 1 2 3 4 5 6; do
  if [ $((round % 2)) = 1 ]; then order="native tidepool"; else order="tidepool native"; fi
  for alloc in $order; do
    timeout 100 python3 bench/seed_loop.py --allocator $alloc --steps 300 --json "$OUT/alt_${alloc}_$round.json" 2>&1 | tail -1
  done
done
python3 bench/summarize_alternating.py "$OUT" native tidepool
echo "== done $(date -u +%FT%TZ)"

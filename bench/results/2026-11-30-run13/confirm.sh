#!/bin/bash
# Run 13, call 7: the committed code (map pairs) against PyTorch's expandable segments, the seed's loop,
# 1000 steps each, in turn.
set -u
OUT=${OUT:-/tmp/out}; mkdir -p $OUT
cmake -S . -B build-gpu -DCMAKE_BUILD_TYPE=Release -DTIDE_WERROR=ON >/dev/null && cmake --build build-gpu -j16 --target tidepool_shared 2>&1 | grep -E " error |Error"
export TIDEPOOL_LIBRARY=$PWD/build-gpu/libtidepool.so
for round in 1 2; do
  python3 bench/seed_loop.py --allocator expandable --steps 1000 --json $OUT/exp_$round.json 2>&1 | tail -1
  python3 bench/seed_loop.py --allocator tidepool-expandable --steps 1000 --json $OUT/pairs_$round.json 2>&1 | tail -1
done

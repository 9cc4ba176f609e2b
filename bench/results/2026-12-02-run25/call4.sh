#!/bin/bash
# Run 25, call 4: the seed's loop with both allocators' expandable segments, three more rounds (tidepool
# first in each, the reverse of call 3's order), 1000 steps a run.
set -u
OUT=${OUT:-/tmp/out}; mkdir -p $OUT
exec > >(tee -a $OUT/log4.txt) 2>&1
echo "== $(date -u +%FT%TZ) commit $(git rev-parse --short HEAD 2>/dev/null || echo '?')"
export PYTHONUNBUFFERED=1 TIDEPOOL_LIBRARY="$PWD/build-gpu/libtidepool.so"
for round in 3 4 5; do
  for alloc in tidepool-expandable expandable; do
    timeout 120 python3 bench/seed_loop.py --allocator $alloc --steps 1000 --json $OUT/alt_${alloc}_$round.json 2>&1 | tail -1
  done
done
python3 bench/summarize_alternating.py $OUT expandable tidepool-expandable | tee $OUT/seed_alternating.md
echo "== done $(date -u +%FT%TZ)"

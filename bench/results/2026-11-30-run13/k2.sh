#!/bin/bash
# Run 13, call 5: the seed's loop with expandable segments: PyTorch's, tidepool's (HEAD: a page per map
# call) and tidepool with map units of at most 2 pages (units_k2.patch), in turn, 1000 steps each.
set -u
OUT=${OUT:-/tmp/out}; mkdir -p $OUT
exec > >(tee -a $OUT/log.txt) 2>&1
T0=$(date +%s); t() { echo "[$(( $(date +%s) - T0 )) s] $*"; }
ROOT=$PWD
cmake -S . -B build-gpu -DCMAKE_BUILD_TYPE=Release -DTIDE_WERROR=ON >/dev/null && cmake --build build-gpu -j16 --target tidepool_shared 2>&1 | grep -E " error |Error"
rm -rf /tmp/k2; mkdir -p /tmp/k2 && tar --exclude="./build*" --exclude=./.run13 -cf - . | tar -xf - -C /tmp/k2
(cd /tmp/k2 && patch -p1 < $ROOT/.run13/units_k2.patch >/dev/null && cmake -S . -B build-gpu -DCMAKE_BUILD_TYPE=Release >/dev/null && cmake --build build-gpu -j16 --target tidepool_shared 2>&1 | grep -E " error |Error") 
ls -la build-gpu/libtidepool.so /tmp/k2/build-gpu/libtidepool.so | awk '{print $5, $9}'
t built
for round in 1 2; do
  python3 bench/seed_loop.py --allocator expandable --steps 1000 --json $OUT/exp_$round.json 2>&1 | tail -1
  TIDEPOOL_LIBRARY=$ROOT/build-gpu/libtidepool.so python3 bench/seed_loop.py --allocator tidepool-expandable --steps 1000 --json $OUT/head_$round.json 2>&1 | tail -1
  TIDEPOOL_LIBRARY=/tmp/k2/build-gpu/libtidepool.so python3 bench/seed_loop.py --allocator tidepool-expandable --steps 1000 --json $OUT/k2_$round.json 2>&1 | tail -1
  t "round $round"
done

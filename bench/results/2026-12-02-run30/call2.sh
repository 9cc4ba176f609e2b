#!/bin/bash
# Run 30, call 2: the seed's loop live under PyTorch after the high-water fix (de89999): 250 steps
# (empty_cache every 100) under four allocators, then step time alternating PyTorch's allocator and
# tidepool, three rounds of 300 steps (bench/gpu_run.sh seed 250).
set -u
OUT=${OUT:-/tmp/out}; mkdir -p $OUT
timeout 560 bench/gpu_run.sh seed 250 > /dev/null 2>&1
echo "rc=$?"
cat $OUT/log-seed.txt | grep -v "^\s*$" | tail -60

#!/bin/bash
# Run 20, call 2 (9c7c500, build-gpu kept from call 1): what the host's slow phase slows down
# (host_phase.c: a time series of fixed CPU and memory work beside tidepool's replays on the simulated
# device, with the CPU and the steal time), then gpu_bench micro 7 again, the replays of all three
# allocators, and the history's cost at 65,536 events.
set -u
OUT=${OUT:-/tmp/out}; mkdir -p $OUT
exec > >(tee -a $OUT/log2.txt) 2>&1
echo "== $(date -u +%FT%TZ)"
cmake -S . -B build-gpu -DCMAKE_BUILD_TYPE=Release -DTIDE_WERROR=ON >/dev/null && cmake --build build-gpu -j16 2>&1 | grep -E " error |Error"
[ -x build-gpu/gpu_bench ] || bench/build_gpu_bench.sh build-gpu 2>&1 | tail -1
gcc -O2 -std=c11 -D_GNU_SOURCE -Iinclude -Ibench -Itools .run20/host_phase.c tools/trace.c build-gpu/libtidepool.a -ldl -lm -lpthread -o /tmp/host_phase || echo "host_phase BUILD FAILED"
echo "== $(date -u +%FT%TZ) host_phase 100 s"
/tmp/host_phase 100 traces/lstm_loop.csv.gz traces/gpt2_varlen.csv.gz > $OUT/host_phase.md; cat $OUT/host_phase.md
echo "== $(date -u +%FT%TZ) gpu_bench micro 7"
build-gpu/gpu_bench micro 7 > $OUT/micro7.md; cat $OUT/micro7.md
echo "== $(date -u +%FT%TZ) replay, all three allocators, one process"
build-gpu/gpu_bench replay traces/*.csv.gz | tee $OUT/replay.md
echo "== $(date -u +%FT%TZ) history 65536"
build-gpu/gpu_bench history 65536 traces/*.csv.gz | tee $OUT/history_65536.md
echo "== done $(date -u +%FT%TZ)"

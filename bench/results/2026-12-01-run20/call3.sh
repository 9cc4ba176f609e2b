#!/bin/bash
# Run 20, call 3 (ce99e95: the shared replay pass in gpu_bench, the segment helpers): the GPU build and
# tests; gpu_bench replay of all three allocators through the shared pass; host_phase again with two
# more controls (eight independent chains; 800 static branches in 22 KB of code, frontend.c) to see
# what the host's slow phase is made of; gpu_bench micro 7 a third time on the final hot path.
set -u
OUT=${OUT:-/tmp/out}; mkdir -p $OUT
exec > >(tee -a $OUT/log3.txt) 2>&1
echo "== $(date -u +%FT%TZ)"
lscpu | grep -E "^Thread|^Core|^Socket|^NUMA node\(s\)|^L1i|^L1d" | tr -s ' '
cat /sys/kernel/mm/transparent_hugepage/enabled; grep -E "AnonHugePages" /proc/meminfo
cmake -S . -B build-gpu -DCMAKE_BUILD_TYPE=Release -DTIDE_WERROR=ON >/dev/null && cmake --build build-gpu -j16 2>&1 | grep -E " error |Error"
bench/build_gpu_bench.sh build-gpu 2>&1 | tail -1
gcc -O2 -std=c11 -D_GNU_SOURCE -Iinclude -Ibench -Itools .run20/host_phase.c .run20/frontend.c tools/trace.c build-gpu/libtidepool.a -ldl -lm -lpthread -o /tmp/host_phase || echo "host_phase BUILD FAILED"
echo "== GPU tests"
ctest --test-dir build-gpu -L gpu --output-on-failure 2>&1 | grep -E "Test +#|tests passed|Failed|FAIL"
echo "== $(date -u +%FT%TZ) replay, all three allocators, one process (the shared pass)"
build-gpu/gpu_bench replay traces/*.csv.gz | tee $OUT/replay.md
echo "== $(date -u +%FT%TZ) host_phase 90 s"
/tmp/host_phase 90 traces/lstm_loop.csv.gz traces/gpt2_varlen.csv.gz > $OUT/host_phase.md; cat $OUT/host_phase.md
echo "== $(date -u +%FT%TZ) gpu_bench micro 7"
build-gpu/gpu_bench micro 7 > $OUT/micro7.md; cat $OUT/micro7.md
echo "== done $(date -u +%FT%TZ)"

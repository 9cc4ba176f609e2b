#!/bin/bash
# Run 19, call 3: more samples of the numeric targets on the final library (unchanged since 4b5e476):
# gpu_bench micro 7 and the history's cost (the new method) at 65,536 and 1024 events; and whether the
# host exposes hardware counters (perf) for the large random pattern.
set -u
OUT=${OUT:-/tmp/out}; mkdir -p $OUT
exec > >(tee -a $OUT/log3.txt) 2>&1
echo "== $(date -u +%FT%TZ) $(git log --oneline -1 2>/dev/null)"
cmake -S . -B build-gpu -DCMAKE_BUILD_TYPE=Release -DTIDE_WERROR=ON >/dev/null && cmake --build build-gpu -j16 2>&1 | grep -E " error |Error"
bench/build_gpu_bench.sh build-gpu
cc -O2 -flto=auto -Iinclude -Ibench bench/results/2026-12-01-run14/rnd.c build-gpu/libtidepool.a -lpthread -ldl -lm -o /tmp/rnd
echo "== perf?"
command -v perf && perf stat -e cycles,instructions,branches,branch-misses /tmp/rnd 2 2000000 2>&1 | tail -12 || echo "no perf on this host"
/tmp/rnd 2 2000000
echo "== history, new method"
for events in 65536 1024; do
    build-gpu/gpu_bench history $events traces/*.csv.gz | tee $OUT/history_$events.md
done
echo "== gpu_bench micro 7"
build-gpu/gpu_bench micro 7 > $OUT/micro7.md; cat $OUT/micro7.md
echo "== done $(date -u +%FT%TZ)"

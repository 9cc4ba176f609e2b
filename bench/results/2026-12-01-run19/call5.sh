#!/bin/bash
# Run 19, call 5: the final code. The GPU tests and compute-sanitizer; the history's cost, HEAD against
# the code before this session's change (4b5e476's src/internal.h: old_internal.h) taking turns, two
# rounds at 65,536 events and two at 1024; gpu_bench micro 7.
set -u
OUT=${OUT:-/tmp/out}; mkdir -p $OUT
ROOT=$PWD
exec > >(tee -a $OUT/log5.txt) 2>&1
echo "== $(date -u +%FT%TZ) $(git log --oneline -1 2>/dev/null)"
git show 4b5e476:src/internal.h > /tmp/old_internal.h
variant() { # name [old]
    rm -rf /tmp/v_$1; mkdir -p /tmp/v_$1; cp -r src include CMakeLists.txt tools bench tests python fuzz traces /tmp/v_$1/ 2>/dev/null
    (cd /tmp/v_$1 && if [ -n "${2:-}" ]; then cp /tmp/old_internal.h src/internal.h; fi
     cmake -S . -B build-gpu -DCMAKE_BUILD_TYPE=Release -DTIDE_WERROR=ON >/dev/null && cmake --build build-gpu -j8 2>&1 | grep -E " error |Error"
     bench/build_gpu_bench.sh build-gpu >/dev/null)
}
variant head & P1=$!
variant old old & P2=$!
wait $P1 $P2
echo "== GPU tests (HEAD)"
(cd /tmp/v_head && ctest --test-dir build-gpu -L gpu --output-on-failure 2>&1 | grep -E "Test +#|tests passed|Failed|FAIL")
(cd /tmp/v_head && TIDE_GPU_OPS=500 timeout 100 compute-sanitizer --tool memcheck --error-exitcode 9 build-gpu/tests/gpu_expandable 2>&1 | grep -E "ERROR SUMMARY|all checks|FAILED" | tail -3)
echo "== history"
for events in 65536 1024; do
  for round in 1 2; do
    for v in old head; do
      echo "-- $v, $events events, round $round" | tee -a $OUT/history.txt
      (cd /tmp/v_$v && build-gpu/gpu_bench history $events traces/*.csv.gz) | tee -a $OUT/history.txt
    done
  done
done
echo "== gpu_bench micro 7 (HEAD)"
(cd /tmp/v_head && build-gpu/gpu_bench micro 7) | tee $OUT/micro7.md
echo "== done $(date -u +%FT%TZ)"

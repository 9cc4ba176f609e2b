#!/bin/bash
# Run 18, call 1 (the session's one call: 350 s of device time were left): the GPU tests on HEAD, and
# compute-sanitizer over gpu_expandable (expandable_grow now gets what a join needs before it maps);
# ab_micro of the session's start (f47ed02) against HEAD, and of the commit before the branchless
# next_class (e59a1e6^) against it (e59a1e6), both orders; the replays, all three allocators in one
# process, and tidepool with expandable segments.
set -u
OUT=${OUT:-/tmp/out}; mkdir -p $OUT
ROOT=$PWD
exec > >(tee -a $OUT/log.txt) 2>&1
echo "== $(date -u +%FT%TZ)"
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
lscpu | grep -E "^Model name|^CPU\(s\)" | tr -s ' '
( cmake -S . -B build-gpu -DCMAKE_BUILD_TYPE=Release -DTIDE_WERROR=ON >/dev/null && cmake --build build-gpu -j16 2>&1 | grep -E " error |Error"; bench/build_gpu_bench.sh build-gpu ) &
BPID=$!
variant() { # name [reverse patch]
    rm -rf /tmp/v_$1; mkdir -p /tmp/v_$1; cp -r src include CMakeLists.txt tools bench tests python fuzz /tmp/v_$1/ 2>/dev/null
    (cd /tmp/v_$1 && if [ -n "${2:-}" ]; then patch -s -p1 -R < $ROOT/.run18/$2 || echo "PATCH FAILED $1"; fi
     cmake -S . -B b -DCMAKE_BUILD_TYPE=Release >/dev/null && cmake --build b -j4 --target tidepool_shared ab_micro 2>&1 | grep -E " error|warning:")
}
variant head & P1=$!
variant start start.patch & P2=$!
variant ncb nc_before.patch & P3=$!
variant nca nc_after.patch & P4=$!
wait $BPID $P1 $P2 $P3 $P4
echo "== GPU tests"
ctest --test-dir build-gpu -L gpu --output-on-failure 2>&1 | grep -E "Test +#|tests passed|Failed|FAIL"
TIDE_GPU_OPS=500 timeout 100 compute-sanitizer --tool memcheck --error-exitcode 9 build-gpu/tests/gpu_expandable \
    2>&1 | grep -E "ERROR SUMMARY|all checks|FAILED" | tail -3
echo "compute-sanitizer exit status: ${PIPESTATUS[0]} for gpu_expandable"
echo "== ab_micro (simulated device, .so by dlopen)"
AB=/tmp/v_head/b/bench/ab_micro
for pair in "start head" "head start" "ncb nca" "nca ncb"; do
    set -- $pair
    echo "-- A=$1 B=$2"
    $AB /tmp/v_$1/b/libtidepool.so /tmp/v_$2/b/libtidepool.so 101 2>&1 | tail -5
done
echo "== replay, all three allocators, one process"
build-gpu/gpu_bench replay traces/*.csv.gz | tee $OUT/replay.md
echo "== replay, tidepool expandable_segments:True, own process"
TIDEPOOL_CONF=expandable_segments:True build-gpu/gpu_bench replay --only tidepool traces/*.csv.gz | tee $OUT/replay_expandable.md
echo "== done $(date -u +%FT%TZ)"

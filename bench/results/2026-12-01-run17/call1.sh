#!/bin/bash
# Run 17, call 1: the GPU tests on HEAD; ab_micro of the code the session began with (c553830) against
# HEAD; the trace replays with the warm passes' driver calls counted, default and expandable segments;
# the simulated device's replays on this host, to tell the allocator's cost from CUDA's.
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
    (cd /tmp/v_$1 && if [ -n "${2:-}" ]; then patch -s -p1 -R < $ROOT/.run17/$2 || echo "PATCH FAILED $1"; fi
     cmake -S . -B b -DCMAKE_BUILD_TYPE=Release >/dev/null && cmake --build b -j8 --target tidepool_shared ab_micro 2>&1 | grep -E " error|warning:")
}
variant head
variant old old.patch
wait $BPID
echo "== GPU tests"
ctest --test-dir build-gpu -L gpu --output-on-failure 2>&1 | tail -15
TIDE_GPU_OPS=500 timeout 300 compute-sanitizer --tool memcheck --error-exitcode 9 build-gpu/tests/gpu_expandable \
    2>&1 | grep -E "ERROR SUMMARY|all checks|FAILED" | tail -3
echo "compute-sanitizer exit status: ${PIPESTATUS[0]} for gpu_expandable"
echo "== ab_micro (simulated device, .so by dlopen)"
AB=/tmp/v_head/b/bench/ab_micro
for pair in "old head" "head old" "head head"; do
    set -- $pair
    echo "-- A=$1 B=$2"
    $AB /tmp/v_$1/b/libtidepool.so /tmp/v_$2/b/libtidepool.so 101 2>&1 | tail -4
done
echo "== replay, all three allocators, one process"
build-gpu/gpu_bench replay traces/*.csv.gz | tee $OUT/replay.md
echo "== replay, tidepool expandable_segments:True, own process"
TIDEPOOL_CONF=expandable_segments:True build-gpu/gpu_bench replay --only tidepool traces/*.csv.gz | tee $OUT/replay_expandable.md
TIDEPOOL_CONF=expandable_segments:True,trim_on_growth:False build-gpu/gpu_bench replay --only tidepool traces/*.csv.gz | tail -n +3 | tee -a $OUT/replay_expandable.md
build-gpu/gpu_bench replay --only tidepool traces/*.csv.gz | tail -n +3 | tee -a $OUT/replay_expandable.md
echo "== simulated device on this host, 16 passes, ns per op (tidepool replay --device-work none)"
for r in 1 2 3; do for c in "" "--conf expandable_segments:True"; do
  for t in traces/lstm_loop.csv.gz traces/gpt2_varlen.csv.gz; do
    printf "%s %s " "$(basename $t)" "${c:-default}"
    build-gpu/tidepool replay --device-work none --no-chart --json --no-progress --passes 16 $c $t | tr ',' '\n' | grep -E '"ns_per_op"|"device_allocs"' | tr -d ' \n'; echo
  done; done; done
echo "== done $(date -u +%FT%TZ)"

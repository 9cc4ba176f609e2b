#!/bin/bash
# Run 16, call 3: the opaque-pointer change (4f6c9ab) against the code before it (896330d) in one
# process (ab_micro), then gpu_bench micro 7, the replays, and the history's cost at 1024 and 65,536
# events (10 rounds each, taking turns), all on HEAD.
set -u
OUT=${OUT:-/tmp/out}; mkdir -p $OUT
ROOT=$PWD
exec > >(tee -a $OUT/call3_log.txt) 2>&1
T0=$(date +%s); t() { echo "[$(( $(date +%s) - T0 )) s] $*"; }
( cmake -S . -B build-gpu -DCMAKE_BUILD_TYPE=Release -DTIDE_WERROR=ON >/dev/null && cmake --build build-gpu -j16 2>&1 | grep -E " error |Error"; bench/build_gpu_bench.sh build-gpu >/dev/null ) &
wait $!
ls -la build-gpu/gpu_bench || exit 1
t built
variant() { # name [patch [-R]]
    rm -rf /tmp/v_$1; mkdir -p /tmp/v_$1; cp -r src include CMakeLists.txt tools bench tests python fuzz /tmp/v_$1/ 2>/dev/null
    (cd /tmp/v_$1 && if [ -n "${2:-}" ]; then patch -s -p1 ${3:-} < $ROOT/.run16/$2 || echo "PATCH FAILED $1"; fi
     cmake -S . -B b -DCMAKE_BUILD_TYPE=Release >/dev/null && cmake --build b -j16 --target tidepool_shared 2>&1 | grep -E " error |warning:")
}
variant prepin pins.patch -R
AB=build-gpu/bench/ab_micro
for pair in "/tmp/v_prepin/b build-gpu" "build-gpu /tmp/v_prepin/b"; do
    set -- $pair
    echo "== A=$1 B=$2"
    $AB $1/libtidepool.so $PWD/$2/libtidepool.so 101 2>&1 | tail -3
done
t ab
echo "== gpu_bench micro 7"
build-gpu/gpu_bench micro 7 | tee $OUT/micro.md
t micro
echo "== gpu_bench replay"
build-gpu/gpu_bench replay traces/*.csv.gz | tee $OUT/replay.md
t replay
for round in $(seq 1 10); do
  for n in 1024 65536; do
    echo "== round $round" >> $OUT/history_$n.md; build-gpu/gpu_bench history $n traces/*.csv.gz >> $OUT/history_$n.md 2>&1
  done
  t "history round $round"
done

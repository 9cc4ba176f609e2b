#!/bin/bash
# Run 16, call 5: the GPU tests on the final code (HEAD), then the opaque-pointer change again in one
# process, in both orders this time (call 3 ran one order only): the code without it (pins.patch
# reversed on HEAD) against HEAD, and HEAD against itself.
set -u
OUT=${OUT:-/tmp/out}; mkdir -p $OUT
ROOT=$PWD
exec > >(tee -a $OUT/call5_log.txt) 2>&1
T0=$(date +%s); t() { echo "[$(( $(date +%s) - T0 )) s] $*"; }
( cmake -S . -B build-gpu -DCMAKE_BUILD_TYPE=Release -DTIDE_WERROR=ON >/dev/null && cmake --build build-gpu -j16 2>&1 | grep -E " error |Error" ) &
wait $!
rm -rf /tmp/v_prepin; mkdir -p /tmp/v_prepin; cp -r src include CMakeLists.txt tools bench tests python fuzz /tmp/v_prepin/ 2>/dev/null
( cd /tmp/v_prepin && patch -s -p1 -R < $ROOT/.run16/pins.patch && cmake -S . -B b -DCMAKE_BUILD_TYPE=Release >/dev/null && cmake --build b -j16 --target tidepool_shared 2>&1 | grep -E " error |warning:" ) &
wait $!
t built
echo "== GPU tests"
ctest --test-dir build-gpu -L gpu --output-on-failure 2>&1 | grep -E "Test +#|tests passed|Failed|Skipped"
t gpu tests
AB=build-gpu/bench/ab_micro
H=$PWD/build-gpu/libtidepool.so; P=/tmp/v_prepin/b/libtidepool.so
for pair in "$P $H" "$H $P" "$P $H" "$H $P" "$H $H"; do
    set -- $pair
    echo "== A=$1 B=$2"
    $AB $1 $2 101 2>&1 | tail -3
done
t ab

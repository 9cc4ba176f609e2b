#!/bin/bash
# Run 23, call 1: the install test on the GPU machine (consumers on CUDA device 0 too); ab_micro of the
# head against parking only where it pays (adaptive_parking.patch) and against no parking, both orders;
# gpu_bench micro 7 on the head.
set -u
OUT=${OUT:-/tmp/out}; mkdir -p $OUT
exec > >(tee -a $OUT/log1.txt) 2>&1
echo "== $(date -u +%FT%TZ) $(git log --oneline -1 2>/dev/null)"
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
lscpu | grep -E "^Model name|^CPU\(s\)" | tr -s ' '
cmake -S . -B build-gpu -DCMAKE_BUILD_TYPE=Release -DTIDE_WERROR=ON >/dev/null && cmake --build build-gpu -j16 2>&1 | grep -E " error |Error"
bench/build_gpu_bench.sh build-gpu 2>&1 | tail -1
variant() { # name, cmake C flags, patch or ""
  rm -rf /tmp/$1 && mkdir -p /tmp/$1 && tar -c CMakeLists.txt cmake src include tests bench tools fuzz | tar -x -C /tmp/$1 &&
  (cd /tmp/$1 && { [ -z "$3" ] || patch -p1 -s < "$OLDPWD/$3"; } && cmake -S . -B b -DCMAKE_BUILD_TYPE=Release -DCMAKE_C_FLAGS="$2" >/dev/null && cmake --build b -j8 --target tidepool_shared 2>&1 | grep -E " error |Error")
}
variant adaptive "" .run23/adaptive_parking.patch &
variant nopark "-DTIDE_NO_PARKING=1" "" &
echo "== $(date -u +%FT%TZ) install_and_use"
ctest --test-dir build-gpu -R install_and_use -V 2>&1 | grep -E "^[0-9]+: |tests passed|Failed" | tee $OUT/install_and_use.txt
wait
lib() { case $1 in head) echo build-gpu/libtidepool.so;; *) echo /tmp/$1/b/libtidepool.so;; esac; }
for order in "head adaptive" "adaptive head" "head adaptive" "adaptive head" "head nopark" "nopark head"; do
  set -- $order
  echo "-- $(date -u +%T) A=$1 B=$2"
  build-gpu/bench/ab_micro $(lib $1) $(lib $2) 61 2>&1 | tail -3
done
echo "== $(date -u +%FT%TZ) gpu_bench micro 7"
build-gpu/gpu_bench micro 7 > $OUT/micro7.md; cat $OUT/micro7.md
echo "== done $(date -u +%FT%TZ)"

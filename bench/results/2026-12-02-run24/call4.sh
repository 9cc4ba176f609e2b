#!/bin/bash
# Run 24, call 4: the hot path without stack canaries (the working tree) against cd41165 (canary.patch
# reversed), both built with the machine's GCC defaults (Ubuntu: -fstack-protector-strong): ab_micro
# both orders, twice; the GPU tests and gpu_bench micro 7 on the new code.
set -u
OUT=${OUT:-/tmp/out}; mkdir -p $OUT
exec > >(tee -a $OUT/log4.txt) 2>&1
echo "== $(date -u +%FT%TZ)"
rm -rf /tmp/old && mkdir -p /tmp/old && tar -c CMakeLists.txt cmake src include tests bench tools fuzz | tar -x -C /tmp/old &&
  (cd /tmp/old && patch -R -p1 -s < "$OLDPWD/.run24/canary.patch" && cmake -S . -B b -DCMAKE_BUILD_TYPE=Release >/dev/null &&
   cmake --build b -j8 --target tidepool_shared 2>&1 | grep -E " error |Error") & P1=$!
cmake -S . -B build-gpu -DCMAKE_BUILD_TYPE=Release -DTIDE_WERROR=ON >/dev/null && cmake --build build-gpu -j12 2>&1 | grep -E " error |Error"
wait $P1
bench/build_gpu_bench.sh build-gpu 2>&1 | tail -1
for l in /tmp/old/b/libtidepool.so build-gpu/libtidepool.so; do
  echo "$l: canary references $(objdump -d $l | grep -c 'fs:0x28'), in allocator_malloc/tide_free/lifecycle_free/heap_*: $(objdump -d --no-show-raw-insn $l | awk '/^[0-9a-f]+ <.*>:$/ {fn=$2} /fs:0x28/ {print fn}' | grep -cE '<(allocator_malloc|tide_free|lifecycle_free|heap_take|heap_park|heap_settle|make_free|heap_make_free)')"
done
for order in "old new" "new old" "old new" "new old"; do
  set -- $order
  A=/tmp/old/b/libtidepool.so; B=build-gpu/libtidepool.so; [ $1 = new ] && { A=build-gpu/libtidepool.so; B=/tmp/old/b/libtidepool.so; }
  echo "-- $(date -u +%T) A=$1 B=$2"
  timeout 70 build-gpu/bench/ab_micro $A $B 61 2>&1 | tail -4
done
echo "== GPU tests"
timeout 150 ctest --test-dir build-gpu -L gpu --output-on-failure 2>&1 | grep -E "Test +#|tests passed|Failed|FAIL"
echo "== $(date -u +%FT%TZ) gpu_bench micro 7"
timeout 280 build-gpu/gpu_bench micro 7 > $OUT/micro7_call4.md; cat $OUT/micro7_call4.md
echo "== done $(date -u +%FT%TZ)"

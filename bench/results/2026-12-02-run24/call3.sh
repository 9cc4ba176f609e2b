#!/bin/bash
# Run 24, call 3: what the device's compiler adds by default (Ubuntu-style hardening?), and what it costs
# tidepool there: ab_micro of the head against the same code built without the hardening defaults.
set -u
OUT=${OUT:-/tmp/out}; mkdir -p $OUT
exec > >(tee -a $OUT/log3.txt) 2>&1
echo "== $(date -u +%FT%TZ)"
grep -E "^(NAME|VERSION)=" /etc/os-release; gcc --version | head -1
gcc -Q --help=common 2>/dev/null | grep -E "fstack-protector|fcf-protection|fstack-clash-protection|fPIE |fpie " | tr -s ' '
echo | gcc -O2 -dM -E - | grep -E "FORTIFY|__SSP" ; echo "(end of predefined hardening macros)"
echo 'void g(int*); int f(void){int x; g(&x); return x;}' > /tmp/sp.c && gcc -O2 -S -o - /tmp/sp.c | grep -cE "fs:40|%fs:0x28|__stack_chk" ; echo "(canary references in a test function)"
cmake -S . -B build-gpu -DCMAKE_BUILD_TYPE=Release -DTIDE_WERROR=ON >/dev/null && cmake --build build-gpu -j16 2>&1 | grep -E " error |Error"
which objdump && objdump -d --no-show-raw-insn build-gpu/libtidepool.so | awk '/^[0-9a-f]+ <.*>:$/ {fn=$2} /fs:0x28/ {print fn}' | sort | uniq -c | sort -rn | grep -E "tide_free|allocator_malloc|tide_malloc|heap_|lifecycle" 
which objdump && echo "endbr64 in the library: $(objdump -d build-gpu/libtidepool.so | grep -c endbr64)"
rm -rf /tmp/plain && mkdir -p /tmp/plain && tar -c CMakeLists.txt cmake src include tests bench tools fuzz | tar -x -C /tmp/plain && (cd /tmp/plain && cmake -S . -B b -DCMAKE_BUILD_TYPE=Release "-DCMAKE_C_FLAGS=-fno-stack-protector -fcf-protection=none -fno-stack-clash-protection -U_FORTIFY_SOURCE" >/dev/null && cmake --build b -j16 --target tidepool_shared 2>&1 | grep -E " error |Error")
which objdump && echo "plain build: canary refs $(objdump -d /tmp/plain/b/libtidepool.so | grep -c 'fs:0x28'), endbr64 $(objdump -d /tmp/plain/b/libtidepool.so | grep -c endbr64)"
cmake --build build-gpu -j16 --target ab_micro 2>&1 | grep -E " error |Error"; ls build-gpu/bench/ab_micro
for order in "head plain" "plain head" "head plain" "plain head"; do
  set -- $order
  A=build-gpu/libtidepool.so; B=/tmp/plain/b/libtidepool.so; [ $1 = plain ] && { A=/tmp/plain/b/libtidepool.so; B=build-gpu/libtidepool.so; }
  echo "-- $(date -u +%T) A=$1 B=$2"
  timeout 70 build-gpu/bench/ab_micro $A $B 61 2>&1 | tail -4
done
echo "== done $(date -u +%FT%TZ)"

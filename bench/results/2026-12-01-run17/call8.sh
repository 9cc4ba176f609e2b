#!/bin/bash
# Run 17, call 8: the GPU tests on the session's final library code.
set -u
OUT=${OUT:-/tmp/out}; mkdir -p $OUT
exec > >(tee -a $OUT/log8.txt) 2>&1
echo "== $(date -u +%FT%TZ)"
( cmake -S . -B build-gpu -DCMAKE_BUILD_TYPE=Release -DTIDE_WERROR=ON >/dev/null && cmake --build build-gpu -j16 2>&1 | grep -E " error |Error" ) &
wait $!
ctest --test-dir build-gpu -L gpu --output-on-failure 2>&1 | grep -E "Test +#|tests passed|Failed|Skipped"
echo "== done $(date -u +%FT%TZ)"

#!/bin/bash
# Run 15, call 9: gpu_bench micro 7 on the code as it is, with the median of the repetitions' ratios
# printed beside the ratio of the medians.
set -u
( cmake -S . -B build-gpu -DCMAKE_BUILD_TYPE=Release -DTIDE_WERROR=ON >/dev/null && cmake --build build-gpu -j16 2>&1 | grep -E " error |Error"; bench/build_gpu_bench.sh build-gpu 2>&1 | grep -E "error|built" ) &
wait $!
[ -x build-gpu/gpu_bench ] || exit 1
build-gpu/gpu_bench micro 7 > $OUT/micro7.md 2>&1
cat $OUT/micro7.md

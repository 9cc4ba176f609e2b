#!/bin/sh
# Run 22, one device call: the final code's GPU tests (Release), then which lines the GPU tests run.
cd "$(dirname "$0")/.."
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
date -u
start=$(date +%s)
cmake -S . -B build-gpu -DCMAKE_BUILD_TYPE=Release -DTIDE_WERROR=ON >/dev/null && cmake --build build-gpu -j16 >"$OUT/build_log.txt" 2>&1 || { tail -30 "$OUT/build_log.txt"; exit 1; }
echo "built in $(( $(date +%s) - start )) s"
ctest --test-dir build-gpu -L gpu --output-on-failure >"$OUT/gpu_tests.txt" 2>&1; echo "gpu tests rc=$?"
grep -E "Test +#|tests passed|Skipped" "$OUT/gpu_tests.txt"
echo "after the GPU tests: $(( $(date +%s) - start )) s"
scripts/coverage.sh build-coverage --gpu --lines >"$OUT/gpu_coverage.txt" 2>&1; echo "coverage rc=$?"
cp build-coverage/coverage-ctest.log "$OUT/gpu_coverage_ctest.log" 2>/dev/null
grep -A22 "^file " "$OUT/gpu_coverage.txt"
echo "done: $(( $(date +%s) - start )) s"

#!/bin/sh
# scripts/skip_reasons.sh, on a LastTest.log as ctest writes it: each skipped test's reason is printed
# under its name, and a run with nothing skipped prints nothing.
set -eu
script="$1"
work="$2"
rm -rf "$work"
mkdir -p "$work/Testing/Temporary"
log="$work/Testing/Temporary/LastTest.log"
cat >"$log" <<'LOG'
1/2 Testing: gpu_torch
1/2 Test: gpu_torch
Output:
----------------------------------------------------------
skipped: PyTorch is not installed
<end of output>
Test Passed.
2/2 Testing: test_sim
2/2 Test: test_sim
Output:
----------------------------------------------------------
ok   test_sim_streams
<end of output>
Test Passed.
LOG
out=$("$script" "$work")
echo "$out"
echo "$out" | grep -q "^  gpu_torch  *PyTorch is not installed$" || { echo "reason missing"; exit 1; }
echo "$out" | grep -q test_sim && { echo "a test that ran is listed"; exit 1; }
sed -i '/^skipped:/d' "$log"
[ -z "$("$script" "$work")" ] || { echo "printed something with nothing skipped"; exit 1; }
echo "skip reasons shown"

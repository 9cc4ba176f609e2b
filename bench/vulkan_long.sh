#!/bin/sh
# The Vulkan backend's long runs (docs/reliability.md), on whatever Vulkan driver is here (Mesa's
# lavapipe on the CPU: scripts/install-deps.sh vulkan): 10,000 gated rounds with the blocks held by
# their submissions (none may be reused early), the 10,000 rounds of the negative control (every one
# must be corrupted), the training loop for 4,200 steps, then bench/vulkan_refs beside the simulated device.
#   bench/vulkan_long.sh [BUILD]        (default build)
set -eu
build=${1:-build}
cd "$(dirname "$0")/.."
cmake --build "$build" --target test_vulkan vulkan_refs >/dev/null
"$build/tests/test_vulkan" --rounds 10000 --steps 4200
"$build/tests/test_vulkan" --without-references --rounds 10000
"$build/bench/vulkan_refs" 20000

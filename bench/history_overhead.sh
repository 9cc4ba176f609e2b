#!/bin/sh
# What the history costs on every shipped trace, on the simulated device without kernels (the allocator
# alone, where any cost shows most): build/bench/history_replay, which measures as gpu_bench history
# does on the GPU (off and on in turn in one process, each turn after an untimed replay in its state),
# with a ring of 65,536 events, of 1024, and of 1024 with native stacks.
#   bench/history_overhead.sh [ROUNDS]     (default 15; stacks get a third of them; needs make build)
set -eu
cd "$(dirname "$0")/.."
rounds=${1:-15}
tool=build/bench/history_replay
[ -x $tool ] || { echo "build first: make build" >&2; exit 1; }
$tool --rounds "$rounds" --events 65536 traces/*.csv.gz
$tool --rounds "$rounds" --events 1024 traces/*.csv.gz
$tool --rounds "$(( (rounds + 2) / 3 ))" --events 1024 --stacks traces/*.csv.gz

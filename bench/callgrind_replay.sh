#!/bin/sh
# Instructions per allocator operation, counted by valgrind's callgrind: a figure that does not move
# with machine noise, so speed regressions show without a GPU. Replays each shipped trace on the
# simulated device with no simulated kernels, counting only the replay loop (the trace is read first,
# outside the count).
#
#   bench/callgrind_replay.sh [build-dir]      (default: build)
set -eu
BUILD=${1:-build}
TOOL="$BUILD/tidepool"
[ -x "$TOOL" ] || { echo "build first: make build" >&2; exit 1; }
command -v valgrind >/dev/null || { echo "valgrind is not installed (apt-get install valgrind)" >&2; exit 1; }
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
printf "%-24s %12s %16s %14s\n" trace operations instructions "per operation"
for trace in traces/*.csv.gz; do
    valgrind --tool=callgrind --callgrind-out-file="$tmp/out" --toggle-collect=replay_passes \
        "$TOOL" replay --device-work none --no-chart --json "$trace" > "$tmp/json" 2> "$tmp/log"
    ops=$(sed -n 's/.*"ops": \([0-9]*\).*/\1/p' "$tmp/json")
    ir=$(sed -n 's/^summary: *\([0-9]*\).*/\1/p' "$tmp/out")
    [ -n "$ir" ] || ir=$(sed -n 's/^totals: *\([0-9]*\).*/\1/p' "$tmp/out")
    printf "%-24s %12s %16s %14.1f\n" "$(basename "$trace")" "$ops" "$ir" "$(echo "$ir $ops" | awk '{print $1/$2}')"
done

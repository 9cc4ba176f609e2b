#!/bin/sh
# Instructions per alloc+free pair of the one-thread micro patterns on the simulated device,
# counted by valgrind's callgrind (does not move with machine noise): the same 1 MiB again and again;
# random sizes 256 B-4 MiB, 64 live; random sizes 1-256 MiB, 16 live; and past the high-water mark,
# blocks the fit rules keep for larger requests taken by smaller ones. Only the two calls into
# tidepool are counted (build/bench/micro_sim --count; the sizes are drawn outside them).
#
#   bench/callgrind_micro.sh [--budget FILE] [build-dir]      (default: build)
#
# --budget FILE: then fail (exit 1) if a pattern takes more instructions per pair than its line in FILE
# ("micro_same", "micro_small", "micro_large", "micro_past_mark"), or has none. `make check-speed` runs this with
# bench/callgrind_budget.txt, in CI.
set -eu
. "$(dirname "$0")/callgrind_common.sh"
if [ "${1:-}" = --budget ]; then
    budget_open "${2:-}"
    shift 2
fi
BUILD=${1:-build}
BENCH="$BUILD/bench/micro_sim"
PAIRS=${PAIRS:-50000}
[ -x "$BENCH" ] || { echo "build first: make build" >&2; exit 1; }
command -v valgrind >/dev/null || { echo "valgrind is not installed (apt-get install valgrind)" >&2; exit 1; }
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
printf "%-14s %12s %16s %14s\n" pattern pairs instructions "per pair"
for pattern in same small large past_mark; do
    # The adapters of bench/tidepool_bench.h, called through pointers: never inlined, whatever LTO does.
    if ! valgrind --tool=callgrind --callgrind-out-file="$tmp/out" \
        --toggle-collect='bench_tide_alloc*' --toggle-collect='bench_tide_free*' \
        "$BENCH" --count "$pattern" "$PAIRS" > "$tmp/stdout" 2> "$tmp/log"; then
        cat "$tmp/log" >&2
        echo "callgrind_micro.sh: micro_sim --count $pattern failed" >&2
        exit 1
    fi
    pairs=$(sed -n 's/^pairs \([0-9]*\)$/\1/p' "$tmp/stdout")
    ir=$(callgrind_total "$tmp/out")
    per_pair=$(echo "$ir $pairs" | awk '{printf "%.1f", $1/$2}')
    printf "%-14s %12s %16s %14s\n" "micro_$pattern" "$pairs" "$ir" "$per_pair"
    budget_check "micro_$pattern" "$per_pair"
done
budget_finish

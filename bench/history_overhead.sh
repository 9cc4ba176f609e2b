#!/bin/sh
# What the history costs on a replay: each shipped trace replayed on the simulated device without
# kernels (the allocator alone, where any cost shows most), ROUNDS times each with the history off, on,
# and on with native stacks, interleaved; prints the median ns per operation and the ratio to off.
#   bench/history_overhead.sh [ROUNDS]     (default 7; needs make build; TIDEPOOL_TOOL=path for another
#                                          build's tidepool)
set -eu
cd "$(dirname "$0")/.."
rounds=${1:-7}
tool=${TIDEPOOL_TOOL:-build/tidepool}
[ -x $tool ] || { echo "build first: make build" >&2; exit 1; }
ns() { $tool replay --json --no-progress --device-work none "$@" | sed -n 's/.*"ns_per_op": \([0-9.]*\).*/\1/p'; }
median() { sort -n | awk '{v[NR]=$1} END {print v[int((NR+1)/2)]}'; }
printf "%-26s %12s %12s %8s %14s %8s\n" trace "off ns/op" "on ns/op" ratio "stacks ns/op" ratio
for trace in traces/*.csv.gz; do
    off=""; on=""; stacks=""
    for r in $(seq "$rounds"); do
        off="$off $(ns "$trace")"
        on="$on $(ns --history 1000000 "$trace")"
        stacks="$stacks $(ns --history 1000000 --history-stacks "$trace")"
    done
    m_off=$(echo $off | tr ' ' '\n' | median)
    m_on=$(echo $on | tr ' ' '\n' | median)
    m_st=$(echo $stacks | tr ' ' '\n' | median)
    awk -v t="$(basename "$trace")" -v a="$m_off" -v b="$m_on" -v c="$m_st" \
        'BEGIN { printf "%-26s %12s %12s %8.3f %14s %8.3f\n", t, a, b, b / a, c, c / a }'
done

#!/bin/sh
# Instructions (and taken jumps) per allocator operation, counted by valgrind's callgrind: a figure that does not move
# with machine noise, so speed regressions show without a GPU. Replays each shipped trace on the
# simulated device with no simulated kernels, counting only the replay loop (the trace is read first,
# outside the count).
#
#   bench/callgrind_replay.sh [--budget FILE] [build-dir [trace...]]   (default: build, traces/*.csv.gz)
#
# --budget FILE: then fail (exit 1) if any trace takes more instructions per operation than FILE allows
# it, or has no line there. FILE holds one line per trace, "name instructions-per-operation"; '#' starts
# a comment. `make check-speed` runs this with bench/callgrind_budget.txt, in CI.
set -eu
. "$(dirname "$0")/callgrind_common.sh"
if [ "${1:-}" = --budget ]; then
    budget_open "${2:-}"
    shift 2
fi
BUILD=${1:-build}
[ $# -gt 0 ] && shift
[ $# -gt 0 ] || set -- traces/*.csv.gz
TOOL="$BUILD/tidepool"
[ -x "$TOOL" ] || { echo "build first: make build" >&2; exit 1; }
command -v valgrind >/dev/null || { echo "valgrind is not installed (apt-get install valgrind)" >&2; exit 1; }
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
# Taken jumps: those of the tidepool binary itself (the library and the replay loop; the C library's
# memset and memcpy left out), summed from callgrind's jump lines. A jump taken on the hot path costs
# time beyond its instruction on the H200 machine's host; callgrind_annotate
# --inclusive=yes on a profile made with --collect-jumps=yes shows where. --dump-instr=yes: without it, callgrind records a jump only
# between two source lines, and a build without debug information (make's) has none, so it counted 0.
taken_jumps() {
    awk -v tool="$(basename "$TOOL")" '
        /^c?ob=/ { id = $1; sub(/^c?ob=/, "", id); if (NF > 1) name[id] = $2 }  # a name is given once, by ob= or cob=
        /^ob=/ { n = split(name[id], p, "/"); mine = (p[n] == tool) }
        /^(jcnd|jump)=/ && mine { split($1, a, "[=/]"); taken += a[2] }
        END { print taken + 0 }' "$1"
}
printf "%-24s %12s %16s %14s %14s\n" trace operations instructions "per operation" "taken jumps/op"
for trace in "$@"; do
    if ! valgrind --tool=callgrind --collect-jumps=yes --dump-instr=yes --callgrind-out-file="$tmp/out" \
        --toggle-collect=replay_passes \
        "$TOOL" replay --device-work none --no-chart --json "$trace" > "$tmp/json" 2> "$tmp/log"; then
        cat "$tmp/log" >&2
        echo "callgrind_replay.sh: the replay of $trace failed" >&2
        exit 1
    fi
    ops=$(sed -n 's/.*"ops": \([0-9]*\).*/\1/p' "$tmp/json")
    ir=$(callgrind_total "$tmp/out")
    per_op=$(echo "$ir $ops" | awk '{printf "%.1f", $1/$2}')
    printf "%-24s %12s %16s %14s %14.1f\n" "$(basename "$trace")" "$ops" "$ir" "$per_op" \
        "$(echo "$(taken_jumps "$tmp/out") $ops" | awk '{print $1/$2}')"
    budget_check "$(basename "$trace")" "$per_op"
done
budget_finish

#!/bin/sh
# Run 28, section 7, on the simulated device: size_cache_neighbours.patch, the size cache with a cached
# neighbour merged before a free's own merge (as HEAD would have merged it), under its switches:
#   PLONELY=1  keep only a block with no FREE or cached neighbour;
#   PREACH=1   on a miss, merge first every cached block as large as the request or larger;
#   PBYTES=N   keep at most N bytes in all.
# Peak reserved / peak live of every shipped trace for each; instructions for two. Run from the
# repository's root; builds in a temporary folder.
#   sh bench/results/2026-12-02-run28/neighbours_local.sh > bench/results/2026-12-02-run28/neighbours_local.txt
set -eu
HERE=$(cd "$(dirname "$0")" && pwd)
ROOT=$(pwd)
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
git -C "$ROOT" archive HEAD | tar -x -C "$tmp"
(cd "$tmp" && patch -p1 -s < "$HERE/size_cache_neighbours.patch")
cmake -S "$tmp" -B "$tmp/build" >/dev/null
cmake --build "$tmp/build" -j2 --target tidepool_cli micro_sim >/dev/null
peaks() {
    for t in "$ROOT"/traces/*.csv.gz; do
        env "$@" "$tmp/build/tidepool" replay --device-work none --no-chart --json "$t" |
            sed -n 's/.*"peak_reserved_over_live": \([0-9.]*\).*/ \1/p' | tr -d '\n'
    done
    echo
}
echo "peak reserved / peak live (gpt2_varlen lstm_loop seed_loop_250 seed_transformer):"
for switches in "P=" "PLONELY=1" "PREACH=1" "PLONELY=1 PREACH=1" "PBYTES=16777216" "PBYTES=67108864" \
                "PBYTES=268435456" "PBYTES=1073741824"; do
    printf "  %-22s" "$switches"
    peaks $switches
done
cd "$tmp"
for switches in "PREACH=1" "PLONELY=1 PREACH=1"; do
    echo "== $switches"
    env $switches bench/callgrind_replay.sh build
    env $switches bench/callgrind_micro.sh build
done

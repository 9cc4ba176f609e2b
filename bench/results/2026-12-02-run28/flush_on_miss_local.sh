#!/bin/sh
# Run 28, on the simulated device: size_cache_flush_on_miss.patch under PFLUSHMISS=1 (a miss in the
# cache merges all of it before the search, so that the search sees the free space as HEAD's would):
# peak reserved / peak live of every shipped trace, instructions per operation and per micro pair.
# Run from the repository's root; builds in a temporary folder.
#   sh bench/results/2026-12-02-run28/flush_on_miss_local.sh > bench/results/2026-12-02-run28/flush_on_miss_local.txt
set -eu
HERE=$(cd "$(dirname "$0")" && pwd)
ROOT=$(pwd)
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
git -C "$ROOT" archive HEAD | tar -x -C "$tmp"
(cd "$tmp" && patch -p1 -s < "$HERE/size_cache_flush_on_miss.patch")
cmake -S "$tmp" -B "$tmp/build" >/dev/null
cmake --build "$tmp/build" -j2 --target tidepool_cli micro_sim >/dev/null
printf "peak reserved / peak live (gpt2_varlen lstm_loop seed_loop_250 seed_transformer):"
for t in "$ROOT"/traces/*.csv.gz; do
    PFLUSHMISS=1 "$tmp/build/tidepool" replay --device-work none --no-chart --json "$t" |
        sed -n 's/.*"peak_reserved_over_live": \([0-9.]*\).*/ \1/p' | tr -d '\n'
done
echo
cd "$tmp"
PFLUSHMISS=1 bench/callgrind_replay.sh build
PFLUSHMISS=1 bench/callgrind_micro.sh build

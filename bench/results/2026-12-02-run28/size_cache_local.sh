#!/bin/sh
# Run 28, on the simulated device: instructions per operation (bench/callgrind_replay.sh) and peak
# reserved / peak live of every shipped trace, for HEAD and for the two measurement patches of this
# folder, and for size_cache.patch under its bounds (PMAX: the largest block kept; PDEPTH: how many
# of one size), and for size_cache_bytes.patch (the same with PBYTES: the most bytes kept in all). Run from the repository's root; builds in a temporary folder.
#   sh bench/results/2026-12-02-run28/size_cache_local.sh > bench/results/2026-12-02-run28/size_cache_local.txt
set -eu
HERE=$(cd "$(dirname "$0")" && pwd)
ROOT=$(pwd)
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
peaks() { # build dir
    for t in "$ROOT"/traces/*.csv.gz; do
        "$1/tidepool" replay --device-work none --no-chart --json "$t" |
            sed -n 's/.*"peak_reserved_over_live": \([0-9.]*\).*/\1/p' | tr '\n' ' '
    done
    echo
}
for variant in head size_cache size_cache_nostats size_cache_bytes; do
    mkdir "$tmp/$variant"
    git -C "$ROOT" archive HEAD src include tools bench traces CMakeLists.txt cmake tests python |
        tar -x -C "$tmp/$variant"
    [ "$variant" = head ] || (cd "$tmp/$variant" && patch -p1 -s < "$HERE/$variant.patch")
    cmake -S "$tmp/$variant" -B "$tmp/$variant/build" >/dev/null
    cmake --build "$tmp/$variant/build" -j2 --target tidepool_cli >/dev/null
    echo "== $variant"
    [ "$variant" = size_cache_bytes ] && continue
    echo "peak reserved / peak live (gpt2_varlen lstm_loop seed_loop_250 seed_transformer): $(peaks "$tmp/$variant/build")"
    (cd "$tmp/$variant" && bench/callgrind_replay.sh build | sed 's/^/    /')
done
for bounds in "1048576 1000000" "1048576 4" "65536 1000000" "1000000000000 1" "1000000000000 2"; do
    set -- $bounds
    echo "== size_cache with PMAX=$1 PDEPTH=$2"
    echo "peak reserved / peak live: $(PMAX=$1 PDEPTH=$2 peaks "$tmp/size_cache/build")"
    if [ "$1 $2" = "1048576 4" ]; then
        (cd "$tmp/size_cache" && PMAX=$1 PDEPTH=$2 bench/callgrind_replay.sh build | sed 's/^/    /')
    fi
done
for bytes in 16777216 67108864 268435456 1073741824; do
    echo "== size_cache_bytes with PBYTES=$bytes"
    echo "peak reserved / peak live: $(PBYTES=$bytes peaks "$tmp/size_cache_bytes/build")"
done

#!/usr/bin/env python3
"""Run 28: how many allocations an unbounded cache of freed blocks by exact size would serve. Each
freed size is kept (rounded up to 512 B, as tidepool rounds), and each allocation takes one of its size
if there is one; an empty_cache line empties the cache. Streams are not told apart (every shipped trace
has one).

    python3 bench/results/2026-12-02-run28/hit_rate.py traces/*.csv.gz"""
import collections
import gzip
import sys

for path in sys.argv[1:]:
    kept, sizes, hits, allocs = collections.Counter(), {}, 0, 0
    opener = gzip.open if path.endswith(".gz") else open
    with opener(path, "rt") as f:
        for line in f:
            kind, ident, size = line.strip().split(",")[:3]
            if kind == "a":
                rounded = (int(size) + 511) // 512 * 512
                sizes[ident] = rounded
                allocs += 1
                if kept[rounded] > 0:
                    kept[rounded] -= 1
                    hits += 1
            elif kind == "f":
                kept[sizes.pop(ident)] += 1
            elif kind == "e":
                kept.clear()
    print(f"{path}: {allocs} allocations, {hits} served by the cache ({100 * hits / allocs:.1f}%)")

#!/usr/bin/env python3
"""Run 27: the tables of sections 4 and 5 from the device logs. Each log holds rounds ("round N" lines)
and, per process, a variant letter with each trace's warm median (ns per operation) as gpu_bench replay
printed it. For every trace: each variant's median over the rounds and its fastest process, and the
median over the rounds of each variant's ratio to the first variant named (and of the second to the third,
where three are given).

    python3 bench/results/2026-12-02-run27/ab_summary.py LOG VARIANTS     (e.g. call5_log.txt ABC, call2_log.txt DE)"""
import re
import statistics
import sys


def read(path, variants):
    times, rnd = {v: {} for v in variants}, None
    pattern = re.compile(r"\b([%s])\s+\|?\s*(\S+)\.csv\.gz\s+\|?\s*([\d.]+)" % variants)
    for line in open(path):
        m = re.search(r"round (\d+)", line)
        if m:
            rnd = int(m.group(1))
        for v, trace, ns in pattern.findall(line):
            times[v][(rnd, trace)] = float(ns)
    return times


def main():
    if len(sys.argv) != 3 or not 2 <= len(sys.argv[2]) <= 3:
        sys.exit(__doc__)
    variants = sys.argv[2]
    times = read(sys.argv[1], variants)
    first = times[variants[0]]
    rounds = sorted({r for r, _ in first})
    traces = sorted({t for _, t in first})
    pairs = [(v, variants[0]) for v in variants[1:]] + ([(variants[1], variants[2])] if len(variants) == 3 else [])
    print(f"{len(rounds)} rounds")
    print("| trace | " + " | ".join(f"{v}: median (fastest)" for v in variants) + " | "
          + " | ".join(f"{a} / {b}, median of the rounds | {a} faster" for a, b in pairs) + " |")
    for t in traces:
        cells = []
        for v in variants:
            xs = [times[v][(r, t)] for r in rounds]
            cells.append(f"{statistics.median(xs):.1f} ({min(xs):.1f})")
        for a, b in pairs:
            ratio = [times[a][(r, t)] / times[b][(r, t)] for r in rounds]
            faster = sum(x < 1 for x in ratio)
            cells.append(f"{statistics.median(ratio):.3f} | {faster} of {len(rounds)}")
        print(f"| {t} | " + " | ".join(cells) + " |")
    for v in variants:
        under = sum(all(times[v][(r, t)] < 50 for t in traces) for r in rounds)
        print(f"{v}: processes with every trace under 50 ns: {under} of {len(rounds)}")


if __name__ == "__main__":
    main()

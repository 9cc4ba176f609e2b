#!/usr/bin/env python3
"""Run 27 (issue 7): physical pages kept behind the virtual pages they were last mapped at, and shared
between virtual pages (CUDA lets one handle be mapped at several addresses; run 15 checked it on the
H200). A model on top of bench/placement_model.py's idealized placement.

Each virtual page keeps its physical page when no live block touches it any more. A physical page may sit
behind several virtual pages, so long as at most one of them is touched at a time. When a block lands on
a virtual page no live block touched:
- if its physical page is behind no other touched virtual page, nothing is mapped;
- otherwise it is remapped (an unmap and a map) to a physical page that no touched virtual page uses,
  chosen as the one whose other virtual pages were least often touched together with this one so far;
- a new physical page is made only when every one is in use, so the physical pages never exceed the
  most pages ever touched at once: the placement rule's peak.

The placement is fewest_pages_high with blocks of 2 MiB and more apart (lstm_loop's 37 pages, run 24).
--window N keeps each block within the first N pages of its address range when any place there will do
(else anywhere), so that the virtual pages in use stay bounded.

    python3 bench/results/2026-12-02-run27/alias_cache.py [--window N] TRACE

Prints the physical pages' peak, the remaps over the trace and per allocation over its second half, and
how many virtual pages were ever used."""
import argparse
import os
import sys
from collections import Counter, OrderedDict, defaultdict

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", ".."))
import placement_model as pm  # noqa: E402

MIB = 1 << 20


def windowed_gaps(window):
    """Space.gaps, kept to the first `window` pages of the stream's range where any candidate is."""
    def gaps(space, units, stream):
        every = list(space.gaps(units, stream))
        inside = [c for c in every if c[1] + units <= stream * pm.STREAM_SPACE + window * pm.PAGE]
        return inside or every
    return gaps


def run(ops, window=None):
    gaps = windowed_gaps(window) if window else pm.Space.gaps
    space, where = pm.Space(), {}
    physical_of = {}          # virtual page -> physical page behind it
    user = {}                 # physical page -> the touched virtual page using it
    free = OrderedDict()      # physical pages no touched virtual page uses
    behind = defaultdict(set)  # physical page -> virtual pages it is mapped at
    together = defaultdict(Counter)  # virtual page -> virtual page -> times touched together
    made = live = peak_live = remaps = late_remaps = late_allocations = 0
    half = len(ops) // 2
    for t, (op, ident, units, size, stream) in enumerate(ops):
        if op == "f":
            addr, units, size = where.pop(ident)
            space.remove(addr, units)
            for v in pm.pages_of(addr, units):
                if v not in space.touched:
                    p = physical_of[v]
                    del user[p]
                    free[p] = None
            live -= size
            continue
        key = lambda c: (space.new_pages(c[1], units), -c[1])  # noqa: E731 (fewest_pages_high)
        addr = min(gaps(space, units, stream), key=key)[1]
        newly = [v for v in pm.pages_of(addr, units) if v not in space.touched]
        space.place(addr, units)
        for v in newly:
            for u in space.touched:
                if u != v:
                    together[v][u] += 1
                    together[u][v] += 1
        n = 0
        for v in newly:
            p = physical_of.get(v)
            if p is not None and p not in user:
                del free[p]
                user[p] = v
                continue
            if free:
                q = min(free, key=lambda q: (sum(together[v][u] for u in behind[q]), -len(behind[q])))
                del free[q]
            else:
                q, made = made, made + 1
            if p is not None:
                behind[p].discard(v)
            physical_of[v] = q
            behind[q].add(v)
            user[q] = v
            n += 1
        remaps += n
        if t >= half:
            late_remaps += n
            late_allocations += 1
        where[ident] = (addr, units, size)
        live += size
        peak_live = max(peak_live, live)
    return made, made * 2 * MIB / peak_live, remaps, late_remaps / max(late_allocations, 1), len(physical_of)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--window", type=int, metavar="N", help="pages per address range to stay within")
    parser.add_argument("trace")
    args = parser.parse_args()
    if args.window is not None and args.window < 1:
        sys.exit("--window must be a positive number of pages")
    ops = pm.with_large_apart(pm.read_trace(args.trace), 2 * MIB)
    made, ratio, remaps, late, virtual = run(ops, args.window)
    print(f"{os.path.basename(args.trace)}, window {args.window or 'none'}: {made} physical pages "
          f"({ratio:.4f}), {remaps} maps in all, {late:.3f} per allocation in the second half, "
          f"{virtual} virtual pages used")


if __name__ == "__main__":
    main()

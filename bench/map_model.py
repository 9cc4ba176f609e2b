"""How many map calls expandable segments need on a trace, in a model that favours the allocator.

    python3 bench/map_model.py [--steps N] [--ratios 1.03,1.10,1.25] TRACE.csv.gz [TRACE...]

Expandable segments keep each stream's blocks in an address range of 2 MiB pages, mapped as needed. A
block must lie on contiguous addresses, and an allocator that holds at most r x peak live memory
must, when a block lands on pages that are not mapped and it holds its cap already, unmap idle pages
elsewhere to map those: driver calls, each tens of microseconds. How many such allocations a program
forces depends on where blocks are placed. This model grants the allocator what none has:
- it knows the program's peak live memory from the start, and holds up to r x that in pages;
- an idle page (touched by no live block) moves to where it is needed at once, and what is mapped
  counts whole pages only (no units);
- the placement sees every gap between the stream's live blocks, including unmapped addresses: each
  block goes where it touches the fewest unmapped pages, then in the smallest gap, then lowest.
What it counts: the allocations after the warm-up that touch an unmapped page (each needs at least
one map call, and past the cap an unmap too), per 100 steps and in the last half, with the pages they
map. A count above 1 per 100 steps says this kind of greedy placement cannot meet the fragmentation
table's calls target at that ratio, even with these gifts; it is a model, not a bound over every
policy (a placement that knew the future could do better).

Sizes are rounded up to 512 bytes. Each trace needs its steps JSON beside it (bench/workloads
writes one; warmup_steps and step_begins_at_line). Pure Python: about a minute per 800 steps of a
large trace; --steps keeps the first N steps. The standard library only.
"""
import argparse
import bisect
import itertools
import json
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import call_bound  # noqa: E402
from workloads.common import steps_path  # noqa: E402

UNIT = 512
PAGE = (2 << 20) // UNIT        # a page, in units
STREAM_SPACE = 1 << 40          # units between two streams' address ranges


def read_ops(trace, nlines=None):
    """[(op, id, units, stream)] of the first nlines operations: allocations, frees, and empty_cache
    lines kept as such so that indices match the steps JSON (in this model nothing is given back)."""
    ops = []
    for op, ident, size, stream in itertools.islice(call_bound.read_ops(trace), nlines):
        units = max(1, -(-int(size) // UNIT)) if op == "a" else 0
        ops.append((op if op in ("a", "f") else "e", ident, units, int(stream)))
    return ops


def pages_of(addr, units):
    return range(addr // PAGE, (addr + units - 1) // PAGE + 1)


class Model:
    def __init__(self, cap_pages):
        self.cap = cap_pages
        self.blocks = []      # sorted (start, end) of live blocks, every stream
        self.touched = {}     # page -> live blocks on it
        self.mapped = set()
        self.idle = {}        # mapped pages no live block touches, in the order they became idle
        self.idle_sorted = []
        self.peak_mapped = 0

    def unmapped(self, addr, units):
        return sum(1 for p in pages_of(addr, units) if p not in self.mapped)

    def candidates(self, units, stream):
        """(gap, address) where the block fits: each gap's ends and page boundaries, and the first idle
        mapped page in it."""
        base = stream * STREAM_SPACE
        lo = bisect.bisect_left(self.blocks, (base, base))
        hi = bisect.bisect_left(self.blocks, (base + STREAM_SPACE, base))
        prev = base
        for start, end in self.blocks[lo:hi] + [(base + STREAM_SPACE, base + STREAM_SPACE)]:
            if start - prev >= units:
                spots = {prev, -(-prev // PAGE) * PAGE, start - units, start // PAGE * PAGE - units}
                k = bisect.bisect_left(self.idle_sorted, -(-prev // PAGE))
                if k < len(self.idle_sorted):
                    spots.add(self.idle_sorted[k] * PAGE)
                for a in spots:
                    if prev <= a and a + units <= start:
                        yield start - prev, a
            prev = max(prev, end)

    def allocate(self, units, stream):
        """Places a block; returns (address, pages it had to map)."""
        gap, addr = min(self.candidates(units, stream),
                        key=lambda c: (self.unmapped(c[1], units), c[0], c[1]))
        bisect.insort(self.blocks, (addr, addr + units))
        need = 0
        for p in pages_of(addr, units):
            self.touched[p] = self.touched.get(p, 0) + 1
            if p in self.idle:
                del self.idle[p]
                self.idle_sorted.pop(bisect.bisect_left(self.idle_sorted, p))
        for p in pages_of(addr, units):
            if p in self.mapped:
                continue
            need += 1
            if len(self.mapped) >= self.cap and self.idle:
                moved = next(iter(self.idle))  # the page idle longest
                del self.idle[moved]
                self.idle_sorted.pop(bisect.bisect_left(self.idle_sorted, moved))
                self.mapped.discard(moved)
            self.mapped.add(p)
        self.peak_mapped = max(self.peak_mapped, len(self.mapped))
        return addr, need

    def free(self, addr, units):
        self.blocks.pop(bisect.bisect_left(self.blocks, (addr, addr + units)))
        for p in pages_of(addr, units):
            self.touched[p] -= 1
            if not self.touched[p]:
                del self.touched[p]
                if p in self.mapped:
                    self.idle[p] = None
                    bisect.insort(self.idle_sorted, p)


def peak_live(ops):
    """The most units live at once over ops (read_ops')."""
    live = peak = 0
    sizes = {}
    for op, ident, units, _ in ops:
        if op == "a":
            sizes[ident] = units
            live += units
            peak = max(peak, live)
        elif op == "f" and ident in sizes:
            live -= sizes.pop(ident)
    return peak


def run(ops, begins, warm, ratio):
    """The model at one ratio: events (allocations that map) after the warm-up and in the last half,
    pages mapped after the warm-up, and the peak of mapped pages over peak live."""
    peak = peak_live(ops)
    peak_pages = -(-peak // PAGE)
    m = Model(max(1, int(ratio * peak_pages)))
    warm_op = begins[warm] if warm < len(begins) else len(ops)
    half_op = begins[len(begins) // 2]
    where, events, last_half, pages = {}, 0, 0, 0
    for i, (op, ident, units, stream) in enumerate(ops):
        if op == "a":
            addr, need = m.allocate(units, stream)
            where[ident] = (addr, units)
            if need and i >= warm_op:
                events += 1
                pages += need
                last_half += i >= half_op
        elif op == "f" and ident in where:
            m.free(*where.pop(ident))
    steps_after = max(1, len(begins) - warm)
    return {"ratio": ratio, "cap_pages": m.cap, "peak_live_pages": peak_pages,
            "mapped_over_live": m.peak_mapped * PAGE / peak if peak else 0.0,
            "events_per_100_steps": 100.0 * events / steps_after, "events_last_half": last_half,
            "pages_per_100_steps": 100.0 * pages / steps_after}


def model_trace(trace, steps, ratios, nsteps=None):
    begins = steps["step_begins_at_line"]
    if nsteps is not None and nsteps < len(begins):
        ops = read_ops(trace, begins[nsteps])
        begins = begins[:nsteps]
    else:
        ops = read_ops(trace)
    return [run(ops, begins, steps["warmup_steps"], r) for r in ratios]


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("traces", nargs="+")
    ap.add_argument("--steps", type=int, help="the first N steps of each trace only")
    ap.add_argument("--ratios", default="1.03,1.10,1.25", help="held pages over peak live, comma-separated")
    args = ap.parse_args()
    ratios = [float(r) for r in args.ratios.split(",")]
    print("| trace | steps | held at most | allocations that map / 100 steps after the warm-up | in the last half "
          "| pages mapped / 100 steps |")
    print("|---|---|---|---|---|---|")
    for trace in args.traces:
        with open(steps_path(trace)) as f:
            steps = json.load(f)
        n = min(args.steps, len(steps["step_begins_at_line"])) if args.steps else len(steps["step_begins_at_line"])
        for r in model_trace(trace, steps, ratios, args.steps):
            print("| %s | %d | %.2fx | %.2f | %d | %.0f |" % (
                os.path.basename(trace).replace(".csv.gz", ""), n, r["ratio"], r["events_per_100_steps"],
                r["events_last_half"], r["pages_per_100_steps"]), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())

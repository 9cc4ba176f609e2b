#!/usr/bin/env python3
"""How few device pages a placement rule could need on a trace, in an idealized model of segments that
grow (expandable_segments:True).

    python3 bench/placement_model.py [--rules NAME,...] [--large-from MIB] TRACE...

The model grants what no allocator has: a page is mapped exactly while a live block touches it (unmapping
and mapping again cost nothing and happen at once), and the address range is endless. What is left is
the placement rule: where each block goes, fixed for its life, chosen when it is allocated without
knowing the future. The figure is the most pages ever touched at once, times the page size, over the
peak of live bytes (requested), as `tidepool replay` reports peak reserved over peak live; beside it,
the operation (counting allocations and frees from 0) at which that many pages were first touched, and
what the grant hides: how many pages a real allocator would have had to map to follow the rule (each
page a block touches that no live block touched before it), per allocation over the trace's second
half. A real map costs tens of microseconds (bench/results/2026-11-30-run13.md). The last column is what
an allocator could get away with: one that keeps a page mapped once no live block touches it, and when a
block needs a page that is not mapped, moves an idle page there (unmapped, then mapped again at the new
address: no new memory) or, if none is idle, maps a new one. It reaches the same peak of memory as the
grant, for the same placements (it maps a new page only when every mapped page is touched), and maps only
the pages the block lands on that are not mapped; the idle page moved is the one freed last, which
mapped the fewest of the orders tried on lstm_loop (bench/results/2026-12-02-run25.md).

--large-from MIB gives blocks of at least MIB MiB an address range of their own (in each stream), apart
from the smaller ones, for every rule.

Rules (each block goes in a gap between live blocks: at its low or high end, or at a page boundary):
  first_fit             the lowest address
  best_fit              the smallest gap, then the lowest address
  fewest_pages          the fewest pages not touched yet, then the lowest address
  fewest_pages_best     the fewest pages not touched yet, then the smallest gap
  fewest_pages_high     the fewest pages not touched yet, then the highest address
  same_place            where the last freed block of the same size was, if free; else fewest_pages_best
  offline_by_size       not an online rule, for comparison: knowing every block's lifetime beforehand,
                        blocks by size, largest first, each at the lowest address free throughout its
                        life (a static memory plan, as compilers make for a known graph); computed for
                        traces of up to 20,000 allocations, as it is quadratic

The lower bound printed beside them is the peak of live bytes in whole pages: no placement needs fewer.
Sizes are rounded to 512 bytes and pages are 2 MiB, as tidepool does on today's GPUs. Streams keep
their own pages, as in tidepool. Each rule takes seconds on lstm_loop and up to a minute on the larger
traces.
"""
import argparse
import bisect
import gzip
import sys
from collections import Counter, namedtuple

UNIT = 512
PAGE = (2 << 20) // UNIT  # in units
STREAM_SPACE = 1 << 40    # units between two streams' address ranges
END = 1 << 62             # past every address


def read_trace(path):
    """(op, id, units, requested bytes, stream) for each allocation and free of a tidepool trace CSV
    (op,id,size,stream; plain or .gz, as `tidepool replay` reads it); empty_cache lines are skipped.
    Exits with the line number on anything malformed."""
    opener = gzip.open if path.endswith(".gz") else open
    ops, live = [], set()
    with opener(path, "rt") as f:
        header = f.readline().strip()
        if header != "op,id,size,stream":
            sys.exit(f"{path}:1: not a tidepool trace: the first line should be \"op,id,size,stream\" "
                     "(convert other formats with tidepool's tools)")
        for number, line in enumerate(f, start=2):
            fields = line.strip().split(",")
            if len(fields) != 4 or fields[0] not in ("a", "f", "e"):
                sys.exit(f"{path}:{number}: expected op (a, f or e),id,size,stream: {line.strip()}")
            op, ident = fields[0], fields[1]
            if op == "e":
                continue
            try:
                size, stream = int(fields[2]), int(fields[3] or 0)
            except ValueError as e:
                sys.exit(f"{path}:{number}: {e}: {line.strip()}")
            if op == "a":
                if size <= 0 or ident in live:
                    sys.exit(f"{path}:{number}: " + (f"size {size} is not positive" if size <= 0
                                                     else f"allocation id {ident} appears twice"))
                live.add(ident)
            elif ident not in live:
                sys.exit(f"{path}:{number}: free of id {ident}, which is not allocated at this point")
            else:
                live.remove(ident)
            ops.append((op, ident, -(-size // UNIT), size, stream))
    if not any(op == "a" for op, *_ in ops):
        sys.exit(f"{path}:1: no allocations in the trace")
    return ops


def pages_of(addr, units):
    return range(addr // PAGE, (addr + units - 1) // PAGE + 1)


def gaps_between(intervals, base, units, limit=None):
    """(gap size, address) candidates for a block of `units` among sorted (start, end) intervals, from
    base up: in each gap, at its low end, at its first page boundary, ending at its last page boundary,
    and at its high end. Past the last interval, the gap ends at `limit`, or with no limit, only its low
    end and first page boundary are candidates."""
    prev_end = base
    for start, end in list(intervals) + [(limit, limit) if limit is not None else (END, END)]:
        gap = start - prev_end
        if gap >= units:
            candidates = {prev_end, -(-prev_end // PAGE) * PAGE}
            if start != END:
                candidates |= {start - units, start // PAGE * PAGE - units}
            for addr in candidates:
                if addr >= prev_end and addr + units <= start:
                    yield gap, addr
        prev_end = max(prev_end, end)


class Space:
    """The live blocks (sorted intervals) and the pages they touch."""

    def __init__(self):
        self.blocks = []          # sorted (start, end) of live blocks
        self.touched = Counter()  # page -> live blocks touching it

    def gaps(self, units, stream):
        """gaps_between() the live blocks of the stream's address range."""
        base = stream * STREAM_SPACE
        lo = bisect.bisect_left(self.blocks, (base, base))
        hi = bisect.bisect_left(self.blocks, (base + STREAM_SPACE, base))
        return gaps_between(self.blocks[lo:hi], base, units)

    def is_free(self, addr, units):
        k = bisect.bisect_left(self.blocks, (addr, addr))
        return (k == 0 or self.blocks[k - 1][1] <= addr) and (k == len(self.blocks) or self.blocks[k][0] >= addr + units)

    def new_pages(self, addr, units):
        return sum(1 for p in pages_of(addr, units) if p not in self.touched)

    def place(self, addr, units):
        """Returns how many of the block's pages no live block touched before."""
        fresh = self.new_pages(addr, units)
        bisect.insort(self.blocks, (addr, addr + units))
        for p in pages_of(addr, units):
            self.touched[p] += 1
        return fresh

    def remove(self, addr, units):
        self.blocks.pop(bisect.bisect_left(self.blocks, (addr, addr + units)))
        for p in pages_of(addr, units):
            self.touched[p] -= 1
            if not self.touched[p]:
                del self.touched[p]


def choose(rule, space, units, stream, last_freed):
    if rule == "same_place":
        addr = last_freed.get((stream, units))
        if addr is not None and space.is_free(addr, units):
            return addr
        rule = "fewest_pages_best"
    keys = {
        "first_fit": lambda gap, a: (a,),
        "best_fit": lambda gap, a: (gap, a),
        "fewest_pages": lambda gap, a: (space.new_pages(a, units), a),
        "fewest_pages_best": lambda gap, a: (space.new_pages(a, units), gap, a),
        "fewest_pages_high": lambda gap, a: (space.new_pages(a, units), -a),
    }
    key = keys[rule]
    return min(space.gaps(units, stream), key=lambda c: key(*c))[1]


Result = namedtuple("Result", "peak_pages peak_at peak_live maps_per_allocation kept_maps_per_allocation")


class KeptMapped:
    """The pages an allocator keeps mapped when it moves idle pages where they are needed (the module's
    last column): mapped pages, and among them the idle ones (touched by no live block), oldest first."""

    def __init__(self):
        self.mapped = set()
        self.idle = {}  # page -> None, in the order the pages became idle

    def freed(self, space, addr, units):
        for p in pages_of(addr, units):
            if p not in space.touched:  # a touched page is never idle, so p is not in idle yet
                self.idle[p] = None

    def placed(self, addr, units):
        """Maps what the block at addr needs; returns how many pages it mapped."""
        pages = pages_of(addr, units)
        for p in pages:
            self.idle.pop(p, None)
        maps = 0
        for p in pages:
            if p in self.mapped:
                continue
            maps += 1
            if self.idle:
                moved = self.pick(p)
                del self.idle[moved]
                self.mapped.remove(moved)
            self.mapped.add(p)
        return maps

    def pick(self, page):
        """The idle page to move to page: the one freed last."""
        return next(reversed(self.idle))


def replay(ops, place, freed=None, kept_mapped=KeptMapped):
    """A Result: the peak of pages touched, the operation (from 0) that first touched that many, the peak
    of live bytes, and per allocation over the second half of the trace, the pages newly touched and
    the pages an allocator that keeps them mapped would map (KeptMapped); each block put where
    place(space, id, units, stream) says. freed(stream, units, addr, id) is told of each free."""
    space, where, kept = Space(), {}, kept_mapped()
    live = peak_live = peak_pages = peak_at = 0
    half, maps, kept_maps, allocations = len(ops) // 2, 0, 0, 0
    for t, (op, ident, units, size, stream) in enumerate(ops):
        if op == "f":
            addr, units, size, stream = where.pop(ident)
            space.remove(addr, units)
            kept.freed(space, addr, units)
            if freed:
                freed(stream, units, addr, ident)
            live -= size
            continue
        addr = place(space, ident, units, stream)
        fresh = space.place(addr, units)
        mapped_here = kept.placed(addr, units)
        if t >= half:
            maps += fresh
            kept_maps += mapped_here
            allocations += 1
        where[ident] = (addr, units, size, stream)
        live += size
        peak_live = max(peak_live, live)
        if len(space.touched) > peak_pages:
            peak_pages, peak_at = len(space.touched), t
        # What the module's docstring claims: moving idle pages never needs more memory than the grant.
        assert len(kept.mapped) <= peak_pages, (t, len(kept.mapped), peak_pages)
    return Result(peak_pages, peak_at, peak_live, maps / max(allocations, 1), kept_maps / max(allocations, 1))


def with_large_apart(ops, large_from):
    """ops with each stream split in two address ranges: blocks of at least large_from bytes (rounded
    to units) in one, the others in the other."""
    return [(op, ident, units, size, 2 * stream + (units * UNIT >= large_from))
            for op, ident, units, size, stream in ops]


def online(rule, ops, kept_mapped=KeptMapped):
    """replay() with an online rule: each placement sees only what has happened so far."""
    last_freed = {}  # (stream, units) -> where the last block of that size was freed (same_place)

    def place(space, ident, units, stream):
        return choose(rule, space, units, stream, last_freed)

    def freed(stream, units, addr, ident):
        last_freed[(stream, units)] = addr

    return replay(ops, place, freed, kept_mapped)


def offline_by_size(ops):
    """replay() with a static plan made knowing every lifetime: blocks by size, largest first, each at
    the lowest address where it overlaps no block already planned that is live at the same time."""
    life = {}  # id -> [allocated at, freed at (or the end), units, stream]
    for t, (op, ident, units, size, stream) in enumerate(ops):
        if op == "a":
            life[ident] = [t, len(ops), units, stream]
        else:
            life[ident][1] = t
    planned, addr_of = [], {}
    for ident, (born, died, units, stream) in sorted(life.items(), key=lambda kv: (-kv[1][2], kv[1][0])):
        taken = sorted((a, a + n) for b, d, a, n, s in planned if s == stream and b < died and born < d)
        addr = stream * STREAM_SPACE
        for lo, hi in taken:
            if lo - addr >= units:
                break
            addr = max(addr, hi)
        planned.append((born, died, addr, units, stream))
        addr_of[ident] = addr
    return replay(ops, lambda space, ident, units, stream: addr_of[ident])


RULES = ["first_fit", "best_fit", "fewest_pages", "fewest_pages_best", "fewest_pages_high", "same_place",
         "offline_by_size"]
OFFLINE_MAX_ALLOCATIONS = 20000  # the plan is quadratic in the number of blocks


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rules", default=",".join(RULES), help="comma-separated, of: " + ", ".join(RULES))
    parser.add_argument("--large-from", type=float, metavar="MIB",
                        help="blocks of at least MIB MiB get an address range of their own")
    parser.add_argument("traces", nargs="+")
    args = parser.parse_args()
    rules = args.rules.split(",")
    for r in rules:
        if r not in RULES:
            sys.exit(f"unknown rule {r!r}; the rules are: {', '.join(RULES)}")
    if args.large_from is not None and not args.large_from > 0:
        sys.exit(f"--large-from must be a positive number of MiB, not {args.large_from}")
    traces = [(path.rsplit("/", 1)[-1], read_trace(path)) for path in args.traces]  # all checked first
    if args.large_from is not None:
        traces = [(name, with_large_apart(ops, int(args.large_from * (1 << 20)))) for name, ops in traces]
    print("| trace | rule | peak pages | first at operation | peak pages x 2 MiB / peak live "
          "| pages mapped per allocation, second half | the same, idle pages kept mapped and moved |")
    print("|---|---|---|---|---|---|---|")
    for name, ops in traces:
        peak_live = None
        for rule in rules:
            if rule == "offline_by_size":
                allocations = sum(op == "a" for op, *_ in ops)
                if allocations > OFFLINE_MAX_ALLOCATIONS:
                    print(f"| {name} | {rule} | not computed: {allocations} allocations | | | | |", flush=True)
                    continue
                r = offline_by_size(ops)
            else:
                r = online(rule, ops)
            peak_live = r.peak_live
            print(f"| {name} | {rule} | {r.peak_pages} | {r.peak_at} | {r.peak_pages * PAGE * UNIT / peak_live:.4f} "
                  f"| {r.maps_per_allocation:.2f} | {r.kept_maps_per_allocation:.2f} |", flush=True)
        if peak_live is None:
            continue
        bound = -(-peak_live // (PAGE * UNIT))
        print(f"| {name} | lower bound (peak live in whole pages) | {bound} | | {bound * PAGE * UNIT / peak_live:.4f} | | |",
              flush=True)


if __name__ == "__main__":
    main()

"""How many driver calls default segments need on a trace, in a model that favours the allocator.

    python3 bench/segment_model.py [--steps N] [--ratios 1.10,1.25,1.50] TRACE.csv.gz [TRACE...]

By default a caching allocator keeps blocks in segments, each one driver allocation that never moves
or grows: a block lies inside one segment, and a segment goes back to the device only when no block
is left in it. An allocator that holds at most r x peak live memory must, when no free stretch of a
segment holds a request and it holds its cap already, give back wholly free segments to reserve one
that fits: driver calls, each a synchronization of the device. How many such calls a program forces
depends on where blocks are placed. This model grants the allocator what none has:
- it knows the program's peak live memory from the start, and holds up to r x that in segments;
- one pool for every stream and size: any block may lie in any segment (no stream's segments are its
  own, no small and large pools); with --streams-apart, each stream's blocks lie in its own segments,
  as PyTorch's allocator and tidepool keep them, but a wholly free segment moves to another stream
  at no cost;
- a segment is reserved at the request's size rounded up to 2 MiB, no more;
- each block goes in the smallest free stretch that holds it (best fit, then the lowest address), and
  free stretches next to each other in one segment merge at once;
- at the cap, the wholly free segments idle longest go back first, only as many as the new one needs.
  Where giving back every wholly free segment still leaves no room, the model reserves past its cap,
  and its peak says by how much.
What it counts, twice: the reservations and releases after the warm-up, per 100 steps and in the last
half, and the peak of reserved memory over peak live,
- with the program's own empty_cache ignored (the model keeps its segments through it), so that every
  call counted is one the placement forced;
- with it honoured (each gives back every wholly free segment), counted as bench/fragmentation.py
  counts tidepool's calls: the empty_cache's releases and the refills after it apart; and whether
  reserved memory stayed flat over the last tenth, as that command's table says it.
A count above 1 per 100 steps at r = 1.10 says that this kind of placement cannot meet the
fragmentation table's targets for the default (within 1.10x, at most 1 call per 100 steps) together,
even with these gifts. It is a model, not a bound over every policy: a placement that knew each block's
lifetime could do better.

Sizes are rounded up to 512 bytes. Each trace needs its steps JSON beside it (bench/workloads writes
one). Pure Python, about a minute per million operations. The standard library only.
"""
import argparse
import bisect
import json
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from fragmentation import call_figures  # noqa: E402
from map_model import PAGE, UNIT, peak_live, read_ops  # noqa: E402  (512-byte units; a page is 2 MiB)
from workloads.common import steps_path  # noqa: E402


class Model:
    def __init__(self, cap_units, streams_apart=False):
        self.cap = cap_units
        self.streams_apart = streams_apart
        self.by_size = {}        # pool -> sorted (units, addr) of its free stretches
        self.free_at = {}        # start -> (units, segment)
        self.free_ending = {}    # end -> start
        self.segments = {}       # segment -> [base, units, blocks in it, pool]
        self.idle = {}           # wholly free segments, longest idle first
        self.next_addr = 0
        self.reserved = 0
        self.peak_reserved = 0
        self.calls = []          # (operation, bytes reserved or released: negative)
        self.now = 0             # the operation being served

    def _add_free(self, start, units, seg):
        self.free_at[start] = (units, seg)
        self.free_ending[start + units] = start
        bisect.insort(self.by_size.setdefault(self.segments[seg][3], []), (units, start))

    def _drop_free(self, start):
        units, seg = self.free_at.pop(start)
        del self.free_ending[start + units]
        stretches = self.by_size[self.segments[seg][3]]
        stretches.pop(bisect.bisect_left(stretches, (units, start)))
        return units, seg

    def _reserve(self, units, pool):
        size = -(-units // PAGE) * PAGE
        while self.reserved + size > self.cap and self.idle:
            self._release(next(iter(self.idle)))
        base = self.next_addr
        self.next_addr += size + 1   # never adjoining the next segment: stretches merge within one
        self.segments[base] = [base, size, 0, pool]
        self._add_free(base, size, base)
        self.reserved += size
        self.peak_reserved = max(self.peak_reserved, self.reserved)
        self.calls.append((self.now, size * UNIT))

    def _release(self, seg):
        del self.idle[seg]
        self._drop_free(seg)
        units = self.segments.pop(seg)[1]
        self.reserved -= units
        self.calls.append((self.now, -units * UNIT))

    def _adopt(self, units, pool):
        """With streams apart: the smallest wholly free segment of another stream that holds the
        request moves to this one, at no cost (a fence on that stream would do). Whether one did."""
        fits = [(self.segments[seg][1], seg) for seg in self.idle
                if self.segments[seg][1] >= units and self.segments[seg][3] != pool]
        if not fits:
            return False
        seg = min(fits)[1]
        self._drop_free(seg)
        self.segments[seg][3] = pool
        self._add_free(seg, self.segments[seg][1], seg)
        return True

    def empty_cache(self):
        while self.idle:
            self._release(next(iter(self.idle)))

    def allocate(self, units, stream):
        pool = stream if self.streams_apart else 0
        stretches = self.by_size.setdefault(pool, [])
        k = bisect.bisect_left(stretches, (units, -1))
        if k == len(stretches):
            if not self._adopt(units, pool):
                self._reserve(units, pool)
            k = bisect.bisect_left(stretches, (units, -1))
        start = stretches[k][1]
        have, seg = self._drop_free(start)
        if have > units:
            self._add_free(start + units, have - units, seg)
        self.segments[seg][2] += 1
        self.idle.pop(seg, None)
        return start, seg

    def free(self, start, units, seg):
        if start + units in self.free_at:
            after, _ = self._drop_free(start + units)
            units += after
        if start in self.free_ending:
            before = self.free_ending[start]
            units += self._drop_free(before)[0]
            start = before
        self._add_free(start, units, seg)
        self.segments[seg][2] -= 1
        if not self.segments[seg][2]:
            self.idle[seg] = None


def run(ops, steps, ratio, honour_empty_cache, streams_apart=False):
    """The model at one ratio: bench/fragmentation.py's call figures, and peak reserved over peak live."""
    peak = peak_live(ops)
    m = Model(int(ratio * peak), streams_apart)
    where, empties = {}, []
    for i, (op, ident, units, stream) in enumerate(ops):
        m.now = i
        if op == "a":
            start, seg = m.allocate(units, stream)
            where[ident] = (start, units, seg)
        elif op == "f" and ident in where:
            m.free(*where.pop(ident))
        elif op == "e":
            empties.append(i)
            if honour_empty_cache:
                m.empty_cache()
    figures = call_figures(m.calls, steps, "default", len(ops), empties if honour_empty_cache else [])
    figures.update(ratio=ratio, peak_reserved_over_live=m.peak_reserved / peak if peak else 0.0)
    return figures


def model_trace(trace, steps, ratios, nsteps=None, streams_apart=False):
    """[(ignoring empty_cache, honouring it)] per ratio."""
    begins = steps["step_begins_at_line"]
    if nsteps is not None and nsteps < len(begins):
        ops = read_ops(trace, begins[nsteps])
        steps = dict(steps, step_begins_at_line=begins[:nsteps],
                     step_peak_live=steps.get("step_peak_live", [])[:nsteps])
    else:
        ops = read_ops(trace)
    return [(run(ops, steps, r, False, streams_apart), run(ops, steps, r, True, streams_apart)) for r in ratios]


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("traces", nargs="+")
    ap.add_argument("--steps", type=int, help="the first N steps of each trace only")
    ap.add_argument("--ratios", default="1.10,1.25,1.50", help="reserved over peak live, comma-separated")
    ap.add_argument("--streams-apart", action="store_true",
                    help="each stream's blocks in its own segments, as PyTorch's allocator and tidepool keep them "
                         "(a wholly free segment still moves to another stream at no cost)")
    args = ap.parse_args()
    ratios = [float(r) for r in args.ratios.split(",")]
    print("| trace | steps | held at most | empty_cache ignored: peak reserved / peak live, calls / 100 steps "
          "after the warm-up, in the last half | honoured: the same, refills, flat |")
    print("|---|---|---|---|---|")
    for trace in args.traces:
        has_steps = os.path.exists(steps_path(trace))
        if has_steps:
            with open(steps_path(trace)) as f:
                steps = json.load(f)
        else:  # the peak only: one step, all of it warm-up
            steps = {"step_begins_at_line": [0], "warmup_steps": 1}
        n = len(steps["step_begins_at_line"])
        n = min(args.steps, n) if args.steps else n
        name = os.path.basename(trace).replace(".csv.gz", "")
        for ignored, honoured in model_trace(trace, steps, ratios, args.steps if has_steps else None,
                                             args.streams_apart):
            if has_steps:
                print("| %s | %d | %.2fx | %.3f, %.2f, %d | %.3f, %.2f, %d, %d, %s |" % (
                    name, n, ignored["ratio"], ignored["peak_reserved_over_live"], ignored["calls_per_100_steps"],
                    ignored["calls_last_half"], honoured["peak_reserved_over_live"],
                    honoured["calls_per_100_steps"], honoured["calls_last_half"], honoured["refill_calls"],
                    "yes" if honoured["flat"] else "no"),
                    flush=True)
            else:
                print("| %s | - | %.2fx | %.3f | %.3f |" % (
                    name, ignored["ratio"], ignored["peak_reserved_over_live"],
                    honoured["peak_reserved_over_live"]), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())

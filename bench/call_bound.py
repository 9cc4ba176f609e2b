"""Lower bounds computed from a trace alone, for two of bench/fragmentation.py's targets.

    python3 bench/call_bound.py TRACE.csv.gz [TRACE...]   # each with its steps JSON beside it

1. Driver calls forced by live memory rising. A program's live memory that passes every level it has
   reached before must be met with memory reserved (or pages mapped) for it. A policy that does not
   know where the program will stop can keep its reserved memory within r x the highest live memory
   seen so far only; if it reserved more, a program ending there would be above r. The fewest calls
   such a policy makes: one each time live memory passes r x the live peak at its last call (each call
   reserving all it may). Counted after the warm-up and in the last half, as the fragmentation table
   counts them. The program's own empty_cache (an `e` line) leaves this reserve as it was: the
   fragmentation table counts apart only reservations up to what an empty_cache gave back, so a
   policy that gives memory back and reserves it again can hold no more than this one without a
   counted call; r = 1.10 (the default segments' target) and 1.03
   (expandable segments'). Where this bound is above 1 per 100 steps, no policy meets both that
   ratio and the calls target on the trace.

2. The page bound for expandable segments. Where each stream keeps its small blocks (1 MiB or less)
   and its large blocks in pages of their own, 2 MiB each, as PyTorch's allocator and tidepool both
   do, reserved memory is at least the sum over streams and pools of their live bytes rounded up to a
   page. Its peak over the trace's peak live is the least ratio such a design can reach.

Sizes are rounded up to 512 bytes, as both allocators round them. The standard library only.
"""
import argparse
import gzip
import json
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from workloads.common import steps_path  # noqa: E402

MiB = 1 << 20
PAGE = 2 * MiB
SMALL_MAX = 1 * MiB
RATIOS = {"default": 1.10, "expandable": 1.03}


def steps_json(trace):
    """The steps JSON beside the trace, or None."""
    path = steps_path(trace)
    if not os.path.exists(path):
        return None
    with open(path) as f:
        return json.load(f)


def read_ops(trace):
    """Every operation as (op, id, size, stream); ops are counted from 0, the header left out."""
    opener = gzip.open if trace.endswith(".gz") else open
    with opener(trace, "rt") as f:
        next(f)
        for line in f:
            op, ident, size, stream = (line.rstrip("\n").split(",") + ["", "", "0"])[:4]
            yield op, ident, size, stream or "0"


def bounds(trace, steps):
    begins = steps["step_begins_at_line"] if steps else []
    nsteps = len(begins)
    warm = steps["warmup_steps"] if steps else 0
    warm_end = begins[warm] if steps and warm < nsteps else None
    half = begins[nsteps // 2] if nsteps else None

    live, sizes = 0, {}
    by_pool, page_live, page_peak, peak = {}, 0, 0, 0
    # per ratio: reserved level, calls after the warm-up, in the last half
    state = {mode: {"reserved": 0.0, "after": 0, "last_half": 0} for mode in RATIOS}
    for i, (op, ident, size, stream) in enumerate(read_ops(trace)):
        if op == "a":
            n = max(512, (int(size) + 511) // 512 * 512)
            key = (stream, n <= SMALL_MAX)
            sizes[ident] = (n, key)
            live += n
        elif op == "f" and ident in sizes:
            n, key = sizes.pop(ident)
            live -= n
            n = -n
        else:
            continue
        old = by_pool.get(key, 0)
        by_pool[key] = old + n
        page_live += -(-by_pool[key] // PAGE) * PAGE - -(-old // PAGE) * PAGE
        page_peak = max(page_peak, page_live)
        peak = max(peak, live)
        if n <= 0:
            continue
        for mode, st in state.items():
            if live > st["reserved"]:
                st["reserved"] = RATIOS[mode] * peak  # all the policy may hold now
                if warm_end is not None and i >= warm_end:
                    st["after"] += 1
                    if i >= half:
                        st["last_half"] += 1
    after_steps = max(1, nsteps - warm) if nsteps else 0
    out = {"trace": trace, "steps": nsteps, "warmup_steps": warm, "peak_live_bytes": peak,
           "page_bound_ratio": page_peak / peak if peak else 0.0}
    for mode, st in state.items():
        out[mode] = {"ratio": RATIOS[mode], "calls_after_warmup": st["after"],
                     "calls_per_100_steps": 100.0 * st["after"] / after_steps if nsteps else None,
                     "calls_last_half": st["last_half"]}
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("traces", nargs="+")
    ap.add_argument("--json", help="also write the figures as JSON here")
    args = ap.parse_args()
    rows = []
    print("| trace | steps | peak live MiB | forced calls/100 steps, last half: reserved <= 1.10 x live peak so far "
          "| the same, <= 1.03 x | page bound (expandable) |")
    print("|---|---|---|---|---|---|")
    for trace in args.traces:
        steps = steps_json(trace)
        b = bounds(trace, steps)
        rows.append(b)
        name = os.path.basename(trace).replace(".csv.gz", "")

        def calls(m):
            if b[m]["calls_per_100_steps"] is None:
                return "- (no steps)"
            return "%.2f, %d" % (b[m]["calls_per_100_steps"], b[m]["calls_last_half"])
        print("| %s | %s | %.0f | %s | %s | %.3f |" % (name, b["steps"] or "-", b["peak_live_bytes"] / MiB,
                                                       calls("default"), calls("expandable"),
                                                       b["page_bound_ratio"]))
    if args.json:
        with open(args.json, "w") as f:
            json.dump(rows, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""A recorded training loop made long: some of its steps, repeated, as one trace for the simulated device.

    python3 bench/repeat_steps.py TRACE.csv.gz --steps STEPS.json --times N OUT.csv.gz [--first F] [--last L]

A recorded run (bench/train.py --record) is a few dozen steps; what an allocator does over thousands
of them (memory that creeps, address space used up, calls that come back) shows only in a longer one.
This writes the trace's operations up to step F, then steps F to L-1 N times, then an empty_cache.
Steps F and L must begin with the same live allocations (the weights, gradients and optimizer state
a loop keeps between steps: the window frees all it allocates and nothing made before it), so that
the window can follow itself; the defaults are the end of the warm-up and the last step. Each
repetition allocates under new ids.

Writes OUT and OUT's name with .json for .csv.gz (step starts and the warm-up's length, as
bench/calls_by_step.py reads them). Exit status 2 if the window cannot follow itself.
"""
import argparse
import gzip
import json
import sys


def read_ops(path):
    opener = gzip.open if path.endswith(".gz") else open
    with opener(path, "rt") as f:
        header = f.readline().rstrip("\n")
        return header, [line.rstrip("\n").split(",") for line in f if line.strip()]


def live_before(ops, end):
    """{id: size} of the allocations made and not freed before operation `end`."""
    live = {}
    for op, ident, size, _ in ops[:end]:
        if op == "a":
            live[ident] = int(size)
        elif op == "f":
            live.pop(ident, None)
    return live


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("trace")
    ap.add_argument("out")
    ap.add_argument("--steps", required=True, help="STEPS.json: step_begins_at_line, warmup_steps")
    ap.add_argument("--times", type=int, required=True, help="how many times the window is replayed")
    ap.add_argument("--first", type=int, help="the window's first step (default: the warm-up's end)")
    ap.add_argument("--last", type=int, help="the step after the window (default: the last step)")
    args = ap.parse_args()
    header, ops = read_ops(args.trace)
    with open(args.steps) as f:
        meta = json.load(f)
    begins = meta["step_begins_at_line"]
    first = meta.get("warmup_steps", 0) if args.first is None else args.first
    last = len(begins) - 1 if args.last is None else args.last
    if not 0 <= first < last < len(begins) or args.times < 1:
        sys.exit("repeat_steps: a window of steps %d to %d of %d, %d times, is not one" %
                 (first, last, len(begins), args.times))
    lo, hi = begins[first], begins[last]
    at_lo, at_hi = live_before(ops, lo), live_before(ops, hi)
    if at_lo != at_hi:
        print("repeat_steps: steps %d and %d begin with different live allocations (%d and %d); "
              "try another --first or --last" % (first, last, len(at_lo), len(at_hi)), file=sys.stderr)
        sys.exit(2)

    out_ops = [",".join(op) for op in ops[:lo]]
    out_begins = begins[:first]
    next_id = 1 + max(int(op[1]) for op in ops if op[0] == "a")
    for _ in range(args.times):
        base = len(out_ops)
        out_begins += [base + b - lo for b in begins[first:last]]
        made = {}  # this repetition's allocations: recorded id -> new id; all freed within it
        for op, ident, size, stream in ops[lo:hi]:
            if op == "a":
                made[ident] = str(next_id)
                next_id += 1
                ident = made[ident]
            elif op == "f":
                ident = made.pop(ident)
            out_ops.append(",".join((op, ident, size, stream)))
    out_ops.append("e,0,0,0")

    opener = gzip.open if args.out.endswith(".gz") else open
    with opener(args.out, "wt") as f:
        f.write(header + "\n" + "\n".join(out_ops) + "\n")
    steps_out = args.out[:-len(".csv.gz")] if args.out.endswith(".csv.gz") else args.out.rsplit(".", 1)[0]
    with open(steps_out + ".json", "w") as f:
        json.dump({"step_begins_at_line": out_begins, "warmup_steps": first}, f)
    print("%s: %d steps (%d to %d, %d times after %d), %d operations" %
          (args.out, len(out_begins), first, last - 1, args.times, first, len(out_ops)))


if __name__ == "__main__":
    main()

"""ns per operation of two builds of the command-line tool, in alternating rounds on every trace: the
speed a change costs or buys, measured where both builds see the same host.

    python3 bench/ns_per_op.py --base OLD/tidepool --candidate NEW/tidepool [--rounds 11] [TRACE...]

With no TRACE: the shipped traces (traces/*.csv.gz, traces/train/*.csv.gz) and the workload suite's
(build/fragmentation/*.csv.gz, as bench/fragmentation.py writes them). Each replay is
`tidepool replay --device-work none --json` in a process of its own pinned to one CPU (taskset, where
there is one), and its figure is the replay's own: the time of the loop over the operations, trace
loading left out, over the number of operations. A short trace is replayed in passes back to back, so
that each replay times at least about half a million operations; the passes are the same for both
builds. A replay's passes end with every block freed, as a program that lets go of everything, so
that with tidepool's phase ends each pass may reserve its segments again (`--passes 1` times the
trace once). In each round every trace is replayed by both builds back to back, the first of the two
alternating from round to round, so that a drift of the host's speed falls on both. Prints, per trace,
each build's median over the rounds and their ratio (candidate / base).

Build a base with `git worktree add /tmp/base COMMIT && cmake -S /tmp/base -B /tmp/base/build &&
cmake --build /tmp/base/build --target tidepool_cli`. The standard library only.
"""
import argparse
import glob
import json
import os
import shutil
import statistics
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
MIN_TIMED_OPS = 500_000


def default_traces():
    return (sorted(glob.glob(os.path.join(ROOT, "traces", "*.csv.gz")))
            + sorted(glob.glob(os.path.join(ROOT, "traces", "train", "*.csv.gz")))
            + sorted(glob.glob(os.path.join(ROOT, "build", "fragmentation", "*.csv.gz"))))


def replay(tool, trace, passes, pin):
    cmd = (["taskset", "-c", pin] if pin else []) + [
        tool, "replay", "--json", "--device-work", "none", "--passes", str(passes), trace]
    out = subprocess.run(cmd, capture_output=True, text=True)
    if out.returncode != 0:
        sys.exit("%s failed on %s: %s" % (tool, trace, out.stderr.strip()))
    return json.loads(out.stdout)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--base", required=True, help="the tidepool command-line tool to compare against")
    ap.add_argument("--candidate", required=True, help="the tidepool command-line tool measured")
    ap.add_argument("--rounds", type=int, default=11)
    ap.add_argument("--cpu", default=None, help="the CPU to pin each replay to (default: the last one)")
    ap.add_argument("--passes", type=int, default=None,
                    help="replay every trace this many times back to back (default: enough for half a million "
                    "operations timed)")
    ap.add_argument("traces", nargs="*")
    args = ap.parse_args()
    traces = args.traces or default_traces()
    if not traces:
        sys.exit("no traces: give some, or run bench/fragmentation.py first for the suite's")
    pin = args.cpu if args.cpu is not None else (str(os.cpu_count() - 1) if shutil.which("taskset") else None)
    passes = {t: args.passes or max(1, -(-MIN_TIMED_OPS // replay(args.base, t, 1, pin)["ops"])) for t in traces}
    ns = {t: {"base": [], "candidate": []} for t in traces}
    for r in range(args.rounds):
        for t in traces:
            order = ("base", "candidate") if r % 2 == 0 else ("candidate", "base")
            for which in order:
                ns[t][which].append(replay(getattr(args, which), t, passes[t], pin)["ns_per_op"])
        print("round %d of %d" % (r + 1, args.rounds), file=sys.stderr, flush=True)
    print("| trace | passes | base, ns per operation (median of %d) | candidate | candidate / base |" % args.rounds)
    print("|---|---|---|---|---|")
    for t in traces:
        b, c = statistics.median(ns[t]["base"]), statistics.median(ns[t]["candidate"])
        print("| %s | %d | %.1f | %.1f | %.3f |" % (os.path.relpath(t, ROOT).replace(".csv.gz", ""), passes[t], b, c, c / b))
    return 0


if __name__ == "__main__":
    sys.exit(main())

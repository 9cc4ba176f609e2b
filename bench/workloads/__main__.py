"""Writes the workload suite's traces: python3 bench/workloads OUTDIR [--family NAME]... [--steps N] [--seed S]

One trace per family, OUTDIR/FAMILY.csv.gz, with its steps JSON beside it (workloads/common.py).
"""
import argparse
import os
import random
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from workloads import families  # noqa: E402
from workloads.common import Recorder  # noqa: E402


def generate(family_module, out_dir, steps, seed):
    """Writes one family's trace; returns (its path, the steps JSON's dict)."""
    path = os.path.join(out_dir, family_module.FAMILY + ".csv.gz")
    rec = Recorder(path, family_module.FAMILY, seed)
    family_module.generate(rec, random.Random("%s/%d" % (family_module.FAMILY, seed)), steps)
    return path, rec.close()


def main():
    known = families()
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("out_dir")
    ap.add_argument("--family", action="append", choices=sorted(known), help="default: every family")
    ap.add_argument("--steps", type=int, help="steps per trace (default: each family's DEFAULT_STEPS)")
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args()
    if args.steps is not None and args.steps < 2:
        ap.error("--steps must be 2 or more")
    os.makedirs(args.out_dir, exist_ok=True)
    for name in args.family or list(known):
        m = known[name]
        started = time.time()
        path, steps = generate(m, args.out_dir, args.steps or m.DEFAULT_STEPS, args.seed)
        print("%-22s %6d steps (warm-up %4d)  %9d lines  peak live %8.1f MiB  %5.1f s  %s" % (
            name, steps["steps"], steps["warmup_steps"], steps["step_begins_at_line"][-1] if steps["step_begins_at_line"] else 0,
            steps["peak_live_bytes"] / 2**20, time.time() - started, path))


if __name__ == "__main__":
    main()

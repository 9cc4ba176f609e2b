"""Where in a training loop tidepool calls the driver: a trace replayed on the simulated device, its
segment reservations and releases (page maps and unmaps, with expandable segments) by step.

    python3 bench/calls_by_step.py TRACE.csv.gz [--steps STEPS.json] [--conf STR]... [--tool build/tidepool]

STEPS.json is what bench/periodic_trace.py and bench/train.py --record write beside their traces:
"step_begins_at_line", and "warmup_steps" (else --warmup). Each free is reusable at once, as on one
CUDA stream (--device-work none). Prints, per config: peak reserved over peak live, the driver calls
during the warm-up and after it, and each later step that made any; the releases of the program's own
empty_cache calls (the trace's `e` lines; bench/train.py --record ends with one) are counted apart.
Exit status 1 if any config made a driver call after the warm-up (so a script can hold a policy to
zero).
"""
import argparse
import bisect
import json
import os
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "python"))
from tidepool import trace  # noqa: E402 - the standard library alone; no GPU library is imported


def replay(tool, trace, conf):
    """(the replay's JSON summary, the ordered history's events)."""
    with tempfile.TemporaryDirectory() as tmp:
        history = os.path.join(tmp, "history.json")
        p = subprocess.run([tool, "replay", "--no-progress", "--no-chart", "--json", "--device-work", "none",
                            "--conf", conf, "--history-out", history, trace], capture_output=True, text=True)
        if p.returncode != 0:
            sys.exit("calls_by_step: %s replay failed: %s" % (tool, p.stderr.strip()[-500:]))
        summary = json.loads(p.stdout)
        with open(history) as f:
            return summary[0] if isinstance(summary, list) else summary, json.load(f)["events"]


def calls_by_step(events, step_begins):
    """({step: [reservations, releases]}, releases made by the program's own empty_cache calls, which
    are not counted by step); step -1 is before the first step began."""
    segment_events, empty_cache_lines = [], set()
    for line, e in trace.events_by_line(events):
        kind = e["kind"]
        if kind in ("segment_reserved", "segment_released"):
            segment_events.append((line, kind == "segment_released"))
        elif kind == "empty_cache":
            empty_cache_lines.add(line)  # its releases came just before it, at the same trace line
    by_step, asked = {}, 0
    for line, released in segment_events:
        if released and line in empty_cache_lines:
            asked += 1
            continue
        step = bisect.bisect_right(step_begins, line) - 1
        by_step.setdefault(step, [0, 0])[released] += 1
    return by_step, asked


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("trace")
    ap.add_argument("--steps", help="the steps JSON (default: the trace's name with .json)")
    ap.add_argument("--warmup", type=int, help="warm-up steps, where the JSON does not say")
    ap.add_argument("--conf", action="append", help="tidepool config; give several to compare")
    ap.add_argument("--tool", default=os.path.join(ROOT, "build", "tidepool"))
    args = ap.parse_args()
    steps_path = args.steps or args.trace.replace(".csv.gz", "").replace(".csv", "") + ".json"
    with open(steps_path) as f:
        steps = json.load(f)
    warmup = args.warmup if args.warmup is not None else steps.get("warmup_steps")
    if warmup is None:
        ap.error("%s gives no warmup_steps: say --warmup N" % steps_path)
    any_after = False
    for conf in args.conf or [""]:
        summary, events = replay(args.tool, args.trace, conf)
        by_step, asked = calls_by_step(events, steps["step_begins_at_line"])
        during = [sum(c[i] for s, c in by_step.items() if s < warmup) for i in (0, 1)]
        later = sorted((s, c) for s, c in by_step.items() if s >= warmup)
        after = [sum(c[i] for _, c in later) for i in (0, 1)]
        any_after |= sum(after) > 0
        print("%-28s peak reserved / live %.3f  driver calls: warm-up %d + %d, after it %d + %d, empty_cache's %d%s" % (
            conf or "(default)", summary["peak_reserved_over_live"], during[0], during[1], after[0], after[1], asked,
            "  (steps " + ", ".join("%d: %d + %d" % (s, c[0], c[1]) for s, c in later) + ")" if later else ""))
    return 1 if any_after else 0


if __name__ == "__main__":
    sys.exit(main())

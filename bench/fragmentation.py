"""Fragmentation on the workload suite and the shipped traces: tidepool beside PyTorch's policy.

    python3 bench/fragmentation.py                      # the whole suite, 5,000+ steps each, and traces/
    python3 bench/fragmentation.py --short --check      # what make check runs: a short form, exit 1 on a
                                                        # regression against bench/fragmentation_baseline.json

Each trace is replayed on the simulated device as a new user would (`tidepool replay --device-work
none`: a free is reusable at once) under default segments and expandable segments, under a limit of
1.12 x peak live (default) and 1.10 x (expandable), and with max_split_size_mb at 21, 64, 128 and 200
(default segments, the trace replayed twice back to back: a run away shows as a second pass that
reserves more than the first). Every driver call is placed in its step (`--calls-out`), so the table
says how many came after the warm-up (the first pass over every shape: the steps JSON's
warmup_steps), how many in the last half of the run, and whether reserved memory stayed flat.

PyTorch's figure beside tidepool's is its policy modelled on the CPU (`--torch-policy`, default
../shared/tools/torch_policy.py where it exists), labelled as modelled; a column of dashes where the
model is not there. The suite's traces are written by bench/workloads into --out-dir once and reused.

Targets (each checked per trace, "x" in the table where missed):
  peak reserved / peak live: default <= 1.10, expandable <= 1.03, and never above PyTorch's model;
  flat: reserved in the last tenth of the run at most one segment (default) or 2 MiB (expandable)
  above the most it reached in the warm-up (a program may empty its cache after a profiling run,
  as serving engines do, so the level at the warm-up's very end can be near nothing), live memory
  being equal: where the steps JSON gives each step's live peak (step_peak_live, as bench/workloads
  writes it), by however much the last tenth's live peak is above the warm-up's;
  no out-of-memory under the limits;
  driver calls after the warm-up, refills after the program's own empty_cache apart (its releases,
  and reservations up to as many bytes as the program's empty_cache calls gave back, where no
  release of the allocator's own came since): at most 1 per 100 steps, and none in the last half;
  max_split_size_mb: peak reserved at most 1.05 x the same two passes without it;
  no run away: a second pass over the trace peaks at most 1% above the first (with and without
  max_split_size_mb).
"""
import argparse
import concurrent.futures
import csv
import json
import os
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "bench"))
from workloads import families  # noqa: E402
from workloads.__main__ import generate  # noqa: E402
from workloads.common import steps_path  # noqa: E402

MiB = 1 << 20
SPLIT_SIZES = (21, 64, 128, 200)
LIMIT_X = {"default": 1.12, "expandable": 1.10}
TARGET_RATIO = {"default": 1.10, "expandable": 1.03}
FLAT_SLACK_EXPANDABLE = 2 * MiB
SPLIT_TARGET = 1.05
SHORT_STEPS = 400
MODES = {"default": "", "expandable": "expandable_segments:True"}


# ---- running a replay ----------------------------------------------------------------------------------

def replay(tool, trace, conf, passes=1, device_bytes=None):
    """The replay's JSON summary and its driver calls [(op, +bytes or -bytes)], or (None, error)."""
    with tempfile.TemporaryDirectory() as tmp:
        calls_path = os.path.join(tmp, "calls.csv")
        cmd = [tool, "replay", "--no-progress", "--no-chart", "--json", "--device-work", "none",
               "--passes", str(passes), "--calls-out", calls_path]
        if conf:
            cmd += ["--conf", conf]
        if device_bytes:
            cmd += ["--device-memory", str(device_bytes)]
        p = subprocess.run(cmd + [trace], capture_output=True, text=True)
        if p.returncode != 0:
            return None, p.stderr.strip().splitlines()[-1] if p.stderr.strip() else "exit %d" % p.returncode
        summary = json.loads(p.stdout)
        calls = []
        with open(calls_path) as f:
            for row in csv.DictReader(f):
                sign = 1 if row["call"] in ("reserve", "map") else -1
                calls.append((int(row["op"]), sign * int(row["bytes"])))
        return summary, calls


def torch_model(tool, trace, cache_dir, limit_x=None, split=None):
    """PyTorch's policy modelled on the CPU: its JSON, cached beside the suite's traces."""
    if not tool:
        return None
    key = "%s.torch%s%s.json" % (os.path.basename(trace), "-limit%s" % limit_x if limit_x else "",
                                 "-mss%d" % split if split else "")
    cached = os.path.join(cache_dir, key)
    if os.path.exists(cached) and os.path.getmtime(cached) >= os.path.getmtime(trace):
        with open(cached) as f:
            return json.load(f)
    cmd = [sys.executable, tool, os.path.abspath(trace)]
    if limit_x:
        cmd += ["--limit-x", str(limit_x)]
    if split:
        cmd += ["--max-split-size-mb", str(split)]
    p = subprocess.run(cmd, capture_output=True, text=True, cwd=os.path.dirname(tool))
    if p.returncode != 0:
        return None
    out = json.loads(p.stdout)
    with open(cached, "w") as f:
        json.dump(out, f)
    return out


# ---- what the calls say ----------------------------------------------------------------------------------

def empty_cache_ops(trace):
    """The operation indices of the trace's own empty_cache calls."""
    import gzip
    opener = gzip.open if trace.endswith(".gz") else open
    ops, i = [], 0
    with opener(trace, "rt") as f:
        next(f)
        for line in f:
            if line.startswith("e"):
                ops.append(i)
            i += 1
    return ops


def call_figures(calls, steps, mode, nops_per_pass, empties):
    """Driver calls after the warm-up and in the last half, and flatness, from one pass's calls."""
    begins = steps["step_begins_at_line"]
    nsteps, warm = len(begins), steps["warmup_steps"]
    warm_end = begins[warm] if warm < nsteps else nops_per_pass
    # Refills: the program's own empty_cache gives memory back, and the program reserves it again when
    # it needs it, perhaps many steps later, after other empty_cache calls (an RL loop empties its
    # cache after each rollout and after each training phase, and each phase takes back what the one
    # before its last emptying gave back). The empty_cache's releases, and reservations up to as many
    # bytes as the program's empty_cache calls have given back and not yet had again, are counted
    # apart. A release of the allocator's own counts, and so do the reservations that take back as
    # many bytes after it: memory a trim gave back is the allocator's doing, not a refill.
    empty_at = set(empties)
    refill_budget = own_released = 0
    after = last_half = refills = 0
    half_op = begins[nsteps // 2]
    reserved, level_at_warm_end, largest = 0, None, 0
    tenth_op = begins[nsteps - max(1, nsteps // 10)]
    peak_last_tenth = 0
    for op, delta in calls:
        if op >= nops_per_pass:
            break  # the leftovers' frees and the final empty_cache
        reserved += delta
        if op < warm_end:
            level_at_warm_end = max(level_at_warm_end or 0, reserved)
        if delta > 0:
            largest = max(largest, delta)
        if op >= tenth_op:
            peak_last_tenth = max(peak_last_tenth, reserved)
        if op in empty_at and delta < 0:
            refill_budget -= delta
            if op >= warm_end:
                refills += 1
            continue
        if delta < 0:
            own_released -= delta
        else:
            taken_back = min(own_released, delta)
            own_released -= taken_back
            refill = taken_back == 0 and refill_budget > 0
            refill_budget = max(0, refill_budget - (delta - taken_back))
            if refill:
                if op >= warm_end:
                    refills += 1
                continue
        if op < warm_end:
            continue
        after += 1
        if op >= half_op:
            last_half += 1
    if level_at_warm_end is None:
        level_at_warm_end = 0
    # reserved when the last tenth began, if no call came in it
    if peak_last_tenth == 0:
        r = 0
        for op, delta in calls:
            if op >= tenth_op:
                break
            r += delta
        peak_last_tenth = r
    slack = largest if mode == "default" else FLAT_SLACK_EXPANDABLE
    later_steps = max(1, nsteps - warm)
    # Reserved memory may follow live memory up: a serving engine's caches and a curriculum's
    # activations grow after the warm-up's first pass over every shape.
    peaks = steps.get("step_peak_live")
    live_growth = 0
    if peaks and len(peaks) == nsteps:
        live_growth = max(0, max(peaks[nsteps - max(1, nsteps // 10):]) - max(peaks[:max(1, warm)]))
    return {
        "calls_after_warmup": after,
        "calls_per_100_steps": 100.0 * after / later_steps,
        "calls_last_half": last_half,
        "refill_calls": refills,
        "reserved_at_warmup_end": level_at_warm_end,
        "reserved_peak_last_tenth": peak_last_tenth,
        "live_growth": live_growth,
        "flat": peak_last_tenth <= level_at_warm_end + slack + live_growth,
    }


def nops_of(summary):
    return summary["ops"] // max(1, summary.get("passes", 1))


# ---- one trace, every configuration ---------------------------------------------------------------------

def display_name(trace):
    """A suite trace by its family (wherever it was written), a shipped one by its path in the repository."""
    shipped = os.path.join(ROOT, "traces") + os.sep
    if trace.startswith(shipped):
        return os.path.relpath(trace, ROOT)
    if os.path.basename(trace)[:-len(".csv.gz")] in families():
        return "suite/" + os.path.basename(trace)[:-len(".csv.gz")]
    return trace


def measure(trace, tool, torch_tool, cache_dir):
    sp = steps_path(trace)
    steps = None
    if os.path.exists(sp):
        with open(sp) as f:
            steps = json.load(f)
    empties = empty_cache_ops(trace) if steps else []
    row = {"trace": trace, "name": display_name(trace),
           "steps": len(steps["step_begins_at_line"]) if steps else None, "modes": {}}
    base, _ = replay(tool, trace, "")
    if base is None:
        row["error"] = _
        return row
    live = base["peak_live_bytes"]
    row["peak_live"] = live
    device = max(80 << 30, 4 * live)
    for mode, conf in MODES.items():
        m = {}
        s, calls = replay(tool, trace, conf, device_bytes=device)
        if s is None:
            m["error"] = calls
            row["modes"][mode] = m
            continue
        m["ratio"] = s["peak_reserved_over_live"]
        m["ns_per_op"] = s["ns_per_op"]
        if steps:
            m.update(call_figures(calls, steps, mode, nops_of(s), empties))
        limit = int(LIMIT_X[mode] * live)
        lconf = ",".join(x for x in (conf, "limit:%d" % limit) if x)
        ls, err = replay(tool, trace, lconf, device_bytes=device)
        m["limit_oom"] = ls is None
        m["limit_error"] = None if ls else err
        row["modes"][mode] = m
    # the reference for max_split_size_mb: the same two passes without it
    ref, err = replay(tool, trace, "", passes=2, device_bytes=device)
    row["two_passes"] = {"ratio": ref["peak_reserved_over_live"], "pass_peaks": ref["pass_peak_reserved_bytes"]} \
        if ref else {"error": err}
    splits = {}
    for mb in SPLIT_SIZES:
        s, calls = replay(tool, trace, "max_split_size_mb:%d" % mb, passes=2, device_bytes=device)
        if s is None:
            splits[mb] = {"error": calls}
            continue
        splits[mb] = {"ratio": s["peak_reserved_over_live"], "pass_peaks": s["pass_peak_reserved_bytes"]}
    row["splits"] = splits
    if torch_tool:
        tm = torch_model(torch_tool, trace, cache_dir)
        tl = torch_model(torch_tool, trace, cache_dir, limit_x=LIMIT_X["default"])
        row["torch"] = {"ratio": tm["ratio"] if tm else None, "limit_oom": tl["oom"] if tl else None}
    return row


def bounded(pass_peaks):
    """No run away: the second pass over the trace reserves at most 1% more at its peak than the first."""
    return len(pass_peaks) < 2 or pass_peaks[1] <= pass_peaks[0] * 1.01


def verdicts(row):
    """{target: bool} for one measured row (True: met)."""
    v = {}
    torch_ratio = (row.get("torch") or {}).get("ratio")
    for mode, m in row["modes"].items():
        if "error" in m:
            v[mode + " runs"] = False
            continue
        v[mode + " ratio"] = m["ratio"] <= TARGET_RATIO[mode] + 5e-4
        if torch_ratio:
            v[mode + " vs torch"] = m["ratio"] <= torch_ratio + 5e-4
        v[mode + " limit"] = not m["limit_oom"]
        if "flat" in m:
            v[mode + " flat"] = m["flat"]
            v[mode + " calls"] = m["calls_per_100_steps"] <= 1.0 and m["calls_last_half"] == 0
    ref = row.get("two_passes", {})
    if "ratio" in ref:
        v["second pass"] = bounded(ref["pass_peaks"])
    for mb, s in row.get("splits", {}).items():
        if "error" in s or "ratio" not in ref:
            v["mss%d" % mb] = False
            continue
        v["mss%d" % mb] = s["ratio"] <= SPLIT_TARGET * ref["ratio"] + 5e-4 and bounded(s["pass_peaks"])
    return v


# ---- the table -------------------------------------------------------------------------------------------

def fmt_ratio(x, ok=True):
    return "-" if x is None else "%.3f%s" % (x, "" if ok else "x")


def print_tables(rows, out=sys.stdout):
    w = out.write
    w("Peak reserved / peak live (replayed with --device-work none; PyTorch's policy modelled on the CPU)\n\n")
    w("| trace | steps | peak live MiB | default | PyTorch (modelled) | expandable | limit 1.12x default / PyTorch | limit 1.10x expandable |"
      " two passes | max_split_size_mb 21 / 64 / 128 / 200 |\n")
    w("|---|---|---|---|---|---|---|---|---|---|\n")
    for r in rows:
        if "error" in r:
            w("| %s | replay failed: %s |\n" % (r["name"], r["error"]))
            continue
        v = verdicts(r)
        d, e = r["modes"].get("default", {}), r["modes"].get("expandable", {})
        t = r.get("torch") or {}
        oom = lambda m, key: "-" if key not in m else ("OOM" if m[key] else "ok")  # noqa: E731
        torch_oom = "-" if t.get("limit_oom") is None else ("OOM" if t["limit_oom"] else "ok")
        splits = " / ".join(
            ("%.3f" % s["ratio"] if "ratio" in s else "OOM") + ("" if v.get("mss%d" % mb, True) else "x")
            for mb, s in sorted(r["splits"].items()))
        tp = r.get("two_passes", {})
        w("| %s | %s | %.0f | %s | %s | %s | %s / %s | %s | %s | %s |\n" % (
            r["name"], r["steps"] or "-", r["peak_live"] / MiB,
            fmt_ratio(d.get("ratio"), v.get("default ratio", True) and v.get("default vs torch", True)),
            fmt_ratio(t.get("ratio")),
            fmt_ratio(e.get("ratio"), v.get("expandable ratio", True) and v.get("expandable vs torch", True)),
            oom(d, "limit_oom"), torch_oom, oom(e, "limit_oom"),
            fmt_ratio(tp.get("ratio"), v.get("second pass", True)), splits))
    w("\nDriver calls after the warm-up (per 100 steps; in the last half), refills after the program's own"
      " empty_cache apart; flat: reserved in the last tenth within one segment (default) or 2 MiB"
      " (expandable) of the most it reached in the warm-up, plus how far the live peak rose since\n\n")
    w("| trace | warm-up | default: calls/100 steps, last half, refills, flat | expandable: calls/100 steps,"
      " last half, refills, flat | ns/op default / expandable |\n")
    w("|---|---|---|---|---|\n")
    for r in rows:
        if "error" in r or r["steps"] is None:
            continue
        v = verdicts(r)
        cells = []
        for mode in ("default", "expandable"):
            m = r["modes"].get(mode, {})
            if "calls_after_warmup" not in m:
                cells.append("-")
                continue
            cells.append("%.2f%s, %d, %d, %s%s" % (
                m["calls_per_100_steps"], "" if v.get(mode + " calls", True) else "x", m["calls_last_half"],
                m["refill_calls"], "yes" if m["flat"] else "no",
                "" if m["flat"] else " (+%.0f MiB)" % ((m["reserved_peak_last_tenth"] - m["reserved_at_warmup_end"]
                                                        - m.get("live_growth", 0)) / MiB)))
        with open(steps_path(r["trace"])) as f:
            warm = json.load(f)["warmup_steps"]
        w("| %s | %d | %s | %s | %.0f / %.0f |\n" % (
            r["name"], warm, cells[0], cells[1], r["modes"]["default"].get("ns_per_op", 0),
            r["modes"]["expandable"].get("ns_per_op", 0)))
    missed = [(r["name"], k) for r in rows if "error" not in r for k, ok in verdicts(r).items() if not ok]
    w("\nTargets missed (x): %d%s\n" % (len(missed), "".join("\n  %s: %s" % m for m in missed)))


# ---- the suite --------------------------------------------------------------------------------------------

def shipped_traces():
    out = []
    for sub in ("traces", os.path.join("traces", "train")):
        d = os.path.join(ROOT, sub)
        out += sorted(os.path.join(d, f) for f in os.listdir(d) if f.endswith(".csv.gz"))
    return out


def suite_traces(out_dir, steps, seed, only):
    """Writes (or reuses) the suite's traces; their paths."""
    os.makedirs(out_dir, exist_ok=True)
    paths = []
    for name, m in families().items():
        if only and name not in only:
            continue
        want = steps or m.DEFAULT_STEPS
        path = os.path.join(out_dir, name + ".csv.gz")
        sp = steps_path(path)
        fresh = False
        if os.path.exists(path) and os.path.exists(sp):
            with open(sp) as f:
                meta = json.load(f)
            src = os.path.join(ROOT, "bench", "workloads", name + ".py")
            fresh = (meta.get("steps") == want and meta.get("seed") == seed and
                     os.path.getmtime(sp) >= os.path.getmtime(src) and
                     os.path.getmtime(sp) >= os.path.getmtime(os.path.join(ROOT, "bench", "workloads", "common.py")))
        if not fresh:
            generate(m, out_dir, want, seed)
        paths.append(path)
    return paths


def check_against(rows, baseline_path):
    """Regressions against the baseline: a target met there and missed now, or a ratio more than 1%
    higher. Returns the list of what regressed."""
    with open(baseline_path) as f:
        base = json.load(f)
    regressed = []
    for r in rows:
        b = base.get(r["name"])
        if "error" in r:
            regressed.append("%s: %s" % (r["name"], r["error"]))
            continue
        if not b:
            continue
        v = verdicts(r)
        for k, ok in v.items():
            if not ok and b["verdicts"].get(k, False):
                regressed.append("%s: %s was met, now missed" % (r["name"], k))
        for mode, m in r["modes"].items():
            old = b["ratios"].get(mode)
            if old and "ratio" in m and m["ratio"] > old * 1.01 + 5e-4:
                regressed.append("%s: %s peak reserved / live %.4f, was %.4f" % (r["name"], mode, m["ratio"], old))
    return regressed


def baseline_of(rows):
    return {r["name"]: {"verdicts": verdicts(r),
                        "ratios": {mode: m.get("ratio") for mode, m in r["modes"].items()}}
            for r in rows if "error" not in r}


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--tool", default=os.path.join(ROOT, "build", "tidepool"))
    default_torch = os.path.join(os.path.dirname(ROOT), "shared", "tools", "torch_policy.py")
    ap.add_argument("--torch-policy", default=default_torch if os.path.exists(default_torch) else None,
                    help="PyTorch's policy modelled on the CPU (a script); 'none' to leave it out")
    ap.add_argument("--out-dir", default=os.path.join(ROOT, "build", "fragmentation"))
    ap.add_argument("--steps", type=int, help="steps per suite trace (default: each family's own)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--family", action="append", help="only these families (default: all)")
    ap.add_argument("--no-shipped", action="store_true", help="leave out traces/")
    ap.add_argument("--trace", action="append", default=[],
                    help="a further trace to replay (its steps JSON beside it, if it has one)")
    ap.add_argument("--short", action="store_true", help="%d steps per suite trace, without PyTorch's model" % SHORT_STEPS)
    ap.add_argument("--check", action="store_true", help="exit 1 on a regression against --baseline")
    ap.add_argument("--baseline", default=os.path.join(ROOT, "bench", "fragmentation_baseline.json"))
    ap.add_argument("--write-baseline", action="store_true", help="write --baseline from this run")
    ap.add_argument("--json", help="also write every figure as JSON here")
    ap.add_argument("--jobs", type=int, default=os.cpu_count() or 2)
    args = ap.parse_args()
    if args.short:
        args.steps = args.steps or SHORT_STEPS
        args.torch_policy = None
        args.out_dir = args.out_dir + "-short"
    if args.torch_policy == "none":
        args.torch_policy = None
    if not os.path.exists(args.tool):
        ap.error("%s does not exist: build first (make build)" % args.tool)
    traces = suite_traces(args.out_dir, args.steps, args.seed, args.family)
    if not args.no_shipped and not args.family:
        traces += shipped_traces()
    traces += [os.path.abspath(t) for t in args.trace]
    with concurrent.futures.ThreadPoolExecutor(max_workers=args.jobs) as pool:
        rows = list(pool.map(lambda t: measure(t, args.tool, args.torch_policy, args.out_dir), traces))
    print_tables(rows)
    if args.json:
        with open(args.json, "w") as f:
            json.dump(rows, f, indent=1)
    if args.write_baseline:
        with open(args.baseline, "w") as f:
            json.dump(baseline_of(rows), f, indent=1, sort_keys=True)
        print("wrote %s" % args.baseline)
    if args.check:
        regressed = check_against(rows, args.baseline)
        if regressed:
            print("\nRegressions against %s:\n  %s" % (os.path.relpath(args.baseline, ROOT), "\n  ".join(regressed)))
            return 1
        print("\nno regression against %s" % os.path.relpath(args.baseline, ROOT))
    return 0


if __name__ == "__main__":
    sys.exit(main())

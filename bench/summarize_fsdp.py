"""Compares bench/fsdp_gpt2.py runs, one per allocator configuration, rank by rank: whether each run's
losses equal the first run's (PyTorch's allocator, the reference) at every step, the device's peak used
memory, peak reserved against peak allocated, the driver calls after warm-up, the median step time; and
for the runs with NCCL's register hook, NCCL's registrations against the allocator's reservations and
releases while the hook was attached.

    python3 bench/summarize_fsdp.py OUT_NATIVE OUT_NATIVE_EXPANDABLE OUT_TIDEPOOL ...

(each OUT as given to fsdp_gpt2.py --json; OUT.rankN.json are read).
"""
import glob
import json
import os
import re
import statistics
import sys

prefixes = sys.argv[1:]
if not prefixes:
    sys.exit("usage: summarize_fsdp.py OUT_REFERENCE [OUT ...]")


def load(prefix, rank):
    path = "%s.rank%d.json" % (prefix, rank)
    if not os.path.exists(path):
        return None
    with open(path) as f:
        return json.load(f)


ranks = sorted({int(m.group(1)) for p in prefixes for path in glob.glob(glob.escape(p) + ".rank*.json")
                for m in [re.search(r"\.rank(\d+)\.json$", path)] if m})
if not ranks:
    sys.exit("summarize_fsdp.py: no OUT.rankN.json for %s" % " ".join(prefixes))


def same_losses(ref, run):
    """Whether run's losses are ref's, bit for bit (repr of a float is exact), and where they part."""
    a, b = ref["losses"], run["losses"]
    n = min(len(a), len(b))
    for i in range(n):
        if repr(a[i]) != repr(b[i]):
            return "no, from step %d (%r against %r)" % (i + 1, b[i], a[i])
    if len(a) != len(b):
        return "yes for the %d steps both ran (%d against %d)" % (n, len(b), len(a))
    return "yes, %d steps" % n


def median_ms(run):
    v = run["step_ms"][run.get("warmup", 0):] or run["step_ms"]
    return statistics.median(v) if v else float("nan")


def driver_calls(run):
    d = run["driver_calls_after_warmup"]
    return "%d (%d + %d)" % (d["alloc"] + d["free"], d["alloc"], d["free"])


def name(prefix, run):
    return run["label"] if run else os.path.basename(prefix)


for rank in ranks:
    runs = [(p, load(p, rank)) for p in prefixes]
    ref = runs[0][1]
    world = next((r["world_size"] for _, r in runs if r), "?")
    first = next((r for _, r in runs if r), {})
    print("\n### FSDP2 GPT-2 small, rank %d of %s (%s, torch %s, NCCL %s, %s steps)\n" % (
        rank, world, first.get("device", "?"), first.get("torch", "?"), first.get("nccl", "?"), first.get("steps", "?")))
    print("| configuration | losses identical to %s | device peak used (MiB) | peak reserved / peak allocated "
          "(MiB, ratio) | driver calls after warm-up (reserve + release) | median step (ms) | "
          "device used after each empty_cache (MiB) |" % name(runs[0][0], ref))
    print("|---|---|---|---|---|---|---|")
    for prefix, run in runs:
        if run is None:
            print("| %s | no result (the run failed or timed out) | | | | | |" % name(prefix, run))
            continue
        if run is ref:
            same = "reference"
        elif ref is None:
            same = "no reference run"
        else:
            same = same_losses(ref, run)
        ratio = run.get("peak_ratio")
        print("| %s | %s | %.0f | %.0f / %.0f (%s) | %s | %.1f | %s |" % (
            run["label"], same, run["device_peak_used_mib"], run["peak_reserved_mib"], run["peak_allocated_mib"],
            "%.3f" % ratio if ratio else "-", driver_calls(run), median_ms(run),
            " ".join("%.0f" % x for x in run["used_after_empty_cache_mib"])))

    hooked = [(p, r) for p, r in runs if r and r.get("registration")]
    if hooked:
        print("\nNCCL's register hook (TORCH_NCCL_USE_TENSOR_REGISTER_ALLOCATOR_HOOK=1), rank %d: NCCL's count, from "
              "its log, against the allocator's counters between init_process_group and the end.\n" % rank)
        print("| configuration | hook in effect | NCCL registered / deregistered / outstanding at destroy | "
              "allocator: held at attach + reserved since / released since / held at the end | agree |")
        print("|---|---|---|---|---|")
        for prefix, run in hooked:
            reg = run["registration"]
            n, a = reg["nccl"], reg["allocator"]
            expected = (a["segments_at_attach"] + a["reserved_since_attach"], a["released_since_attach"],
                        a["segments_at_end"])
            mine = "%d + %d / %d / %d" % (a["segments_at_attach"], a["reserved_since_attach"],
                                          a["released_since_attach"], a["segments_at_end"])
            if not n.get("found"):
                print("| %s | %s | no NCCL log (%s) | %s | - |" % (run["label"], reg["hook_in_effect"], n["log"], mine))
                continue
            ends = n["communicator_end"]
            if "Destroy" in ends:
                got = (n["registered"], n["deregistered"], n["outstanding_at_destroy"])
                theirs = "%d / %d / %d" % got
                wrong = [what for what, x, y in zip(("registered", "deregistered", "outstanding"), got, expected)
                         if x != y]
                agree = "yes" if not wrong else "no: " + ", ".join(wrong)
            else:
                # Aborted (PyTorch deregisters all before ncclCommAbort) or never destroyed: what was held at
                # the end cannot be read from the log.
                theirs = "%d / - / - (%s)" % (n["registered"], ",".join(ends) or "no destroy line")
                agree = "registered " + ("yes" if n["registered"] == expected[0] else "no")
            notes = []
            if n.get("skipped"):
                notes.append("%d declined by NCCL" % n["skipped"])
            if n.get("cleanup_never_registered"):
                notes.append("%d cleanup lines for unregistered buffers" % n["cleanup_never_registered"])
            ipc = n.get("ipc", {})
            if any(ipc.values()):
                notes.append("IPC mappings: %d made, %d undone, %d failed" % (
                    ipc.get("mapped", 0), ipc.get("unmapped", 0), ipc.get("failed", 0)))
            if n.get("comms", 1) != 1:
                notes.append("%d communicators" % n["comms"])
            print("| %s | %s | %s | %s | %s%s |" % (run["label"], "yes" if reg["hook_in_effect"] else "no", theirs,
                                                   mine, agree, " (" + "; ".join(notes) + ")" if notes else ""))

print("\nStep times come from one run of each configuration, in turn, not from alternating rounds: they show "
      "a configuration that is far off, not small differences. Driver calls count the segments reserved "
      "from and released to the device (with expandable segments, each mapping and unmapping) after the "
      "warm-up steps, the empty_cache calls and the refills after them included. Peaks are the largest "
      "of the per-step peaks; device used memory is total - free from cudaMemGetInfo after each step. With "
      "the hook, NCCL logs no deregistration: a deregistration is a registration with no cleanup line when "
      "the communicator is destroyed; those runs log NCCL at INFO, which their step times include.")

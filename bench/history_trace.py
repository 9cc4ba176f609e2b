"""tidepool under a PyTorch benchmark (train.py, ddp_gpt2.py, fsdp_gpt2.py), and its history written as
a tidepool trace (CSV, gzip'd; python/tidepool/trace.py) for `tidepool replay` and bench/'s tools, with
its steps and the driver's calls beside it. The standard library only (tidepool.torch is imported by
enable_tidepool)."""
import json
import os
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def enable_tidepool(conf, record_device=None, max_entries=4_000_000):
    """tidepool.torch, enabled with conf on every device (before CUDA is initialized), recording its
    history on record_device if one is given, its streams' events in their exact order (a trace
    needs a block's free after its allocation whatever streams they came on). Returns the module."""
    sys.path.insert(0, os.path.join(ROOT, "python"))
    import tidepool.torch as tt
    tt.enable(conf)
    if record_device is not None:
        tt.record_memory_history(max_entries=max_entries, device=record_device, ordered=True)
    return tt


def write_recording(tt, path, warmup, device=None):
    """The history tt (tidepool.torch) recorded on device, written as a trace (PATH.csv.gz, replayable by
    `tidepool replay`: allocations, frees and the program's empty_cache calls) and, beside it
    (PATH.json), the trace line where each step begins (annotations "step N", tidepool.torch.annotate),
    warmup as warmup_steps, and every segment reserved or released (the driver's calls; pages mapped
    and unmapped, with expandable segments) with its step and trace line, so that a replay can be held
    against the live run. Returns (trace lines, steps, events dropped by the history's ring)."""
    sys.path.insert(0, os.path.join(ROOT, "python"))
    from tidepool import trace
    history = json.loads(tt._require().history_json(tt._device_index(device)))
    lines, _ = trace.write_trace(history, path + ".csv.gz")
    step, steps, segments = -1, [], []
    for line, e in trace.events_by_line(history["events"]):
        kind = e["kind"]
        if kind == "annotation" and (e["tag"] or "").startswith("step "):
            step = int(e["tag"].split()[1])
            steps.append(line)
        elif kind in ("segment_reserved", "segment_released"):
            segments.append({"step": step, "line": line, "kind": kind, "size": e["size"]})
    with open(path + ".json", "w") as f:
        json.dump({"step_begins_at_line": steps, "warmup_steps": warmup, "segments": segments,
                   "dropped": history.get("dropped")}, f)
    return lines, len(steps), history.get("dropped", 0)

"""tidepool under a PyTorch benchmark (ddp_gpt2.py, fsdp_gpt2.py), and its history written as a tidepool
trace (CSV, gzip'd) for `tidepool replay` and bench/fragmentation.py's tools: one line per allocation
and per free, streams numbered in the order they first appear, and beside it TRACE.json with the
operations at which the program called empty_cache. The standard library only (tidepool.torch is
imported by enable_tidepool)."""
import gzip
import json
import os
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def enable_tidepool(conf, record_device=None, max_entries=4_000_000):
    """tidepool.torch, enabled with conf on every device (before CUDA is initialized), recording its
    history on record_device if one is given. Returns the module."""
    sys.path.insert(0, os.path.join(ROOT, "python"))
    import tidepool.torch as tt
    tt.enable(conf)
    if record_device is not None:
        tt.record_memory_history(max_entries=max_entries, device=record_device)
    return tt


def write_trace(history, path):
    """history: the parsed history_json. Returns (operations written, empty_cache positions). Beside the
    trace, PATH.segments.csv: each segment reserved or released, at which operation, its size and
    stream, so that the driver calls the program made can be set beside a replay's."""
    ids, next_id, ops, empty_cache_at = {}, 0, 0, []
    with gzip.open(path, "wt") as f, open(path + ".segments.csv", "w") as seg:
        seg.write("op,event,size,stream\n")
        f.write("op,id,size,stream\n")
        streams = {0: 0}
        for e in history["events"]:
            s = streams.setdefault(e["stream"], len(streams))
            if e["kind"] == "alloc":
                next_id += 1
                ids[e["addr"]] = (next_id, e["size"], s)
                f.write("a,%d,%d,%d\n" % (next_id, e["size"], s))
                ops += 1
            elif e["kind"] == "free_requested" and e["addr"] in ids:
                i, size, st = ids.pop(e["addr"])
                f.write("f,%d,%d,%d\n" % (i, size, st))
                ops += 1
            elif e["kind"] == "empty_cache":
                empty_cache_at.append(ops)
            elif e["kind"] in ("segment_reserved", "segment_released"):
                seg.write("%d,%s,%d,%d\n" % (ops, e["kind"][8:], e["size"], s))
    with open(path + ".json", "w") as f:
        json.dump({"dropped": history["dropped"], "ops": ops, "empty_cache_at_op": empty_cache_at}, f)
    return ops, empty_cache_at

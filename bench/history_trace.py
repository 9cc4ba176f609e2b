"""A tidepool history, as tidepool.torch's history_json gives it, written as a tidepool trace (CSV,
gzip'd) for `tidepool replay` and bench/fragmentation.py's tools: one line per allocation and per free,
streams numbered in the order they first appear, and beside it TRACE.json with the operations at
which the program called empty_cache. The standard library only."""
import gzip
import json


def write_trace(history, path):
    """history: the parsed history_json. Returns (operations written, empty_cache positions)."""
    ids, next_id, ops, empty_cache_at = {}, 0, 0, []
    with gzip.open(path, "wt") as f:
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
    with open(path + ".json", "w") as f:
        json.dump({"dropped": history["dropped"], "ops": ops, "empty_cache_at_op": empty_cache_at}, f)
    return ops, empty_cache_at

"""tidepool's history as an allocation trace: what a program asked for, replayable on any machine.

    python3 -m tidepool.trace history.json -o trace.csv.gz    # history from tide_history_json or
                                                              # tidepool replay --history-out
    tidepool.torch.dump_trace("trace.csv.gz")                 # the same, from a PyTorch program

The trace is tidepool's CSV (traces/README.md): one line per allocation ("a"), free ("f") and
empty_cache ("e"), in the order the program made them, with sizes as requested and streams numbered in
order of appearance (0 for the default stream). `tidepool replay` and `gpu_bench replay` read it.
Standard library only.
"""

import argparse
import gzip
import json
import sys


class TraceError(Exception):
    pass


def history_to_trace(history, out):
    """Writes the events of a history (the dict tide_history_json gives) to out as trace CSV lines.
    Returns (lines written, frees skipped): a free of memory allocated before the history started, or
    whose allocation the ring dropped, has no allocation to pair with and is left out."""
    if not isinstance(history, dict) or not isinstance(history.get("events"), list):
        raise TraceError("not a tidepool history: no \"events\" list")
    out.write("op,id,size,stream\n")
    live, streams = {}, {0: 0}
    next_id, lines, skipped = 1, 0, 0
    for i, e in enumerate(history["events"]):
        try:
            kind, addr, size, stream = e["kind"], int(e["addr"]), int(e["size"]), int(e["stream"])
        except (KeyError, TypeError, ValueError):
            raise TraceError("event %d: needs kind, and addr, size and stream as numbers" % i)
        s = streams.setdefault(stream, len(streams))
        if kind == "alloc":
            if size <= 0:
                raise TraceError("event %d: an allocation of %d bytes" % (i, size))
            live[addr] = (next_id, size)
            out.write("a,%d,%d,%d\n" % (next_id, size, s))
            next_id += 1
        elif kind == "free_requested":
            if addr not in live:
                skipped += 1
                continue
            ident, asked = live.pop(addr)
            out.write("f,%d,%d,%d\n" % (ident, asked, s))
        elif kind == "empty_cache":
            out.write("e,0,0,0\n")
        else:
            continue  # completions, segments, annotations: the allocator's doing, not the program's
        lines += 1
    return lines, skipped


def events_by_line(events):
    """Each event of a history with the trace line it falls before: the number of lines (allocations,
    frees paired with their allocation, empty_cache calls) that history_to_trace writes for the events
    before it. So a segment or an annotation event can be placed in the trace."""
    live, line = set(), 0
    for e in events:
        yield line, e
        kind = e.get("kind")
        if kind == "alloc":
            live.add(e["addr"])
            line += 1
        elif kind == "free_requested" and e["addr"] in live:
            live.discard(e["addr"])
            line += 1
        elif kind == "empty_cache":
            line += 1


def write_trace(history, path):
    """history_to_trace into a file; gzip'd if path ends in .gz. Returns what history_to_trace does."""
    opener = gzip.open if path.endswith(".gz") else open
    with opener(path, "wt") as f:
        return history_to_trace(history, f)


def main(argv=None):
    parser = argparse.ArgumentParser(prog="python3 -m tidepool.trace",
                                     description="Converts a tidepool history JSON into a trace CSV.")
    parser.add_argument("history", help="a history JSON (tide_history_json, tidepool replay --history-out)")
    parser.add_argument("-o", "--output", required=True, help="the trace to write (.csv or .csv.gz)")
    args = parser.parse_args(argv)
    try:
        with open(args.history) as f:
            history = json.load(f)
        lines, skipped = write_trace(history, args.output)
    except (OSError, ValueError, TraceError) as e:
        sys.stderr.write("tidepool.trace: %s: %s\n" % (args.history, e))
        return 1
    if history.get("ordered") is False:
        sys.stderr.write("tidepool.trace: the history was recorded without TIDE_HISTORY_ORDERED: each "
                         "stream's events are in order, but where several streams allocated, theirs may "
                         "interleave in blocks of up to 512\n")
    if history.get("dropped"):
        sys.stderr.write("tidepool.trace: the history's ring dropped its %d oldest events: the trace "
                         "starts later than the program did\n" % history["dropped"])
    sys.stderr.write("tidepool.trace: %d operations written to %s (%d frees of earlier allocations "
                     "left out)\n" % (lines, args.output, skipped))
    return 0


if __name__ == "__main__":
    sys.exit(main())

#!/usr/bin/env python3
"""Converts a PyTorch memory snapshot pickle (torch.cuda.memory._dump_snapshot, recorded with
torch.cuda.memory._record_memory_history) into tidepool's trace CSV, for tidepool replay.

    tools/torch_snapshot_to_csv.py snapshot.pickle [--device N] > trace.csv

Uses the snapshot's device_traces: each "alloc" becomes an allocation and each "free_requested" (or
"free_completed" where the snapshot has no free_requested for it) its free. Streams are numbered in order
of appearance, 0 for the default stream. Needs only Python's standard library: the pickle holds plain
dicts and lists. Allocations whose free the trace does not show stay live, as in the recording.
"""
import argparse
import pickle
import sys


def fail(msg):
    sys.stderr.write("torch_snapshot_to_csv: %s\n" % msg)
    sys.exit(1)


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("snapshot")
    parser.add_argument("--device", type=int, default=None,
                        help="the device whose trace to convert (default: the one with the most entries)")
    args = parser.parse_args()
    try:
        with open(args.snapshot, "rb") as f:
            snap = pickle.load(f)
    except (OSError, pickle.UnpicklingError, EOFError) as e:
        fail("%s: not a readable pickle: %s" % (args.snapshot, e))
    if not isinstance(snap, dict) or not isinstance(snap.get("device_traces"), list):
        fail("%s: no device_traces: record the history first (torch.cuda.memory._record_memory_history)"
             % args.snapshot)
    traces = snap["device_traces"]
    if args.device is None:
        device = max(range(len(traces)), key=lambda d: len(traces[d])) if traces else 0
    else:
        device = args.device
    if device >= len(traces) or not traces[device]:
        fail("%s: no trace entries for device %d" % (args.snapshot, device))
    out = sys.stdout
    out.write("op,id,size,stream\n")
    live, streams, next_id = {}, {0: 0}, 1
    freed_by_request = set()
    for i, e in enumerate(traces[device]):
        if not isinstance(e, dict) or "action" not in e:
            fail("%s: device %d, entry %d: not a trace entry (no action)" % (args.snapshot, device, i))
        action = e["action"]
        if action not in ("alloc", "free_requested", "free_completed"):
            continue
        try:
            addr, size, stream = int(e["addr"]), int(e["size"]), int(e.get("stream", 0))
        except (KeyError, TypeError, ValueError):
            fail("%s: device %d, entry %d (%s): addr and size must be numbers" % (args.snapshot, device, i, action))
        s = streams.setdefault(stream, len(streams))
        if action == "alloc":
            if size <= 0:
                fail("%s: device %d, entry %d: an allocation of %d bytes" % (args.snapshot, device, i, size))
            live[addr] = (next_id, size, s)
            out.write("a,%d,%d,%d\n" % (next_id, size, s))
            next_id += 1
        elif addr in live and (action == "free_requested" or addr not in freed_by_request):
            ident, asize, astream = live.pop(addr)
            out.write("f,%d,%d,%d\n" % (ident, asize, astream))
            if action == "free_requested":
                freed_by_request.add(addr)
        elif action == "free_completed":
            freed_by_request.discard(addr)


if __name__ == "__main__":
    main()

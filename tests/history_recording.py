"""bench/history_trace.py's write_recording on a history made here, as tidepool.torch's history_json
gives one: the trace holds the program's allocations, frees (streams numbered in order of appearance)
and empty_cache calls, and the JSON beside it the line where each annotated step begins and each
segment event with its step and line, the empty_cache's releases at its own line."""
import gzip
import json
import os
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "bench"))
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from checks import check, done  # noqa: E402
from history_trace import write_recording  # noqa: E402


def event(kind, addr=0, size=0, stream=0, tag=None):
    return {"kind": kind, "addr": addr, "size": size, "stream": stream, "tag": tag}


SIDE = 0x7f00  # a stream handle, as the history gives it
HISTORY = {"dropped": 3, "ordered": True, "events": [
    event("segment_reserved", 1 << 30, 2 << 20),
    event("alloc", 0x1000, 512),                       # line 0, before the first step
    event("annotation", tag="step 0"),
    event("alloc", 0x2000, 1024, SIDE),                # line 1
    event("free_requested", 0x1000, 512),              # line 2
    event("free_completed", 0x1000, 512),              # not the program's: no line
    event("free_requested", 0x9000, 512),              # allocated before the history: no line
    event("annotation", tag="step 1"),
    event("free_requested", 0x2000, 1024, SIDE),       # line 3
    event("segment_released", 1 << 30, 2 << 20),      # the empty_cache's release, at its line
    event("empty_cache"),                              # line 4
    event("annotation", tag="something else"),
    event("alloc", 0x3000, 2048),                      # line 5
]}


class Shim:
    def history_json(self, device):
        return json.dumps(HISTORY) if device == 2 else "{}"


class TorchModule:
    """What write_recording uses of tidepool.torch."""
    def _require(self):
        return Shim()

    def _device_index(self, device):
        return 2 if device is None else device


with tempfile.TemporaryDirectory() as tmp:
    path = os.path.join(tmp, "run")
    lines, steps, dropped = write_recording(TorchModule(), path, 1)
    with gzip.open(path + ".csv.gz", "rt") as f:
        trace = f.read().splitlines()
    with open(path + ".json") as f:
        beside = json.load(f)

check((lines, steps, dropped) == (6, 2, 3), "6 trace lines, 2 steps, 3 events dropped (%r)" % ((lines, steps, dropped),))
check(trace == ["op,id,size,stream", "a,1,512,0", "a,2,1024,1", "f,1,512,0", "f,2,1024,1", "e,0,0,0",
                "a,3,2048,0"], "the trace: allocations, frees, empty_cache, the side stream as 1 (%r)" % trace)
check(beside["step_begins_at_line"] == [1, 3] and beside["warmup_steps"] == 1,
      "steps begin at lines 1 and 3, warm-up 1 (%r)" % beside["step_begins_at_line"])
check(beside["segments"] == [
    {"step": -1, "line": 0, "kind": "segment_reserved", "size": 2 << 20},
    {"step": 1, "line": 4, "kind": "segment_released", "size": 2 << 20}],
    "segment events with their step and line, the release at the empty_cache's line (%r)" % beside["segments"])
done()

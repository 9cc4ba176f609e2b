"""bench/call_bound.py's bounds on traces made here, whose answers are worked out by hand: live memory
that passes r x its last peak at a reservation forces a call, one that stays within it does not; calls
in the warm-up are not counted, and the program's own empty_cache leaves the reserve as it was; the page bound
rounds each stream's small and large live bytes up to 2 MiB pages apart."""
import os
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "bench"))
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import call_bound  # noqa: E402
from checks import check, done  # noqa: E402
from step_traces import write_steps_trace  # noqa: E402

MiB = 1 << 20


def bounds_of(steps_ops, warmup=1):
    """Each step a list of trace lines; the bounds with the steps JSON written beside the trace."""
    with tempfile.TemporaryDirectory() as tmp:
        trace, _ = write_steps_trace(tmp, steps_ops, warmup)
        return call_bound.bounds(trace, call_bound.steps_json(trace))


def step(ident, size, stream=0, keep=False):
    """One step: a block made (kept alive when keep) and, if not kept, freed again."""
    ops = ["a,%d,%d,%d" % (ident, size, stream)]
    return ops if keep else ops + ["f,%d,,%d" % (ident, stream)]


# Every block kept, each a fifth of the last: live memory rises by 20%, then 4%, 0.8%...
growing, size = [], 100 * MiB
for i in range(10):
    growing.append(step(i + 1, size, keep=True))
    size = size // 5
b = bounds_of(growing)
# the sizes: 100, 20, 4, ... MiB: live rises by 20%, 4%, 0.8%...: only the first step after the warm-up
# passes 1.10x; at 1.03x, the first two
check(b["default"]["calls_after_warmup"] == 1, "a 20%% rise forces one call at 1.10x (%d)" % b["default"]["calls_after_warmup"])
check(b["expandable"]["calls_after_warmup"] == 2, "a 20%% and a 4%% rise force two at 1.03x (%d)" % b["expandable"]["calls_after_warmup"])

# The same sizes each step, made and freed: nothing after the warm-up passes the first peak.
b = bounds_of([step(i + 1, 50 * MiB) for i in range(10)])
check(b["default"]["calls_after_warmup"] == 0 and b["expandable"]["calls_after_warmup"] == 0,
      "a loop of the same size forces no call")
check(b["default"]["calls_per_100_steps"] == 0.0, "so 0 per 100 steps")

# Doubling each step, with 4 of 8 steps the warm-up: 4 calls after it, 2 of them in the last half
# (steps 4..7; the last half is steps 4..7 too), counted per 100 steps after the warm-up.
b = bounds_of([step(i + 1, MiB << i, keep=True) for i in range(8)], warmup=4)
check(b["default"]["calls_after_warmup"] == 4, "doubling: one call a step after the warm-up (%d)" % b["default"]["calls_after_warmup"])
check(b["default"]["calls_last_half"] == 4, "all four in the last half (%d)" % b["default"]["calls_last_half"])
check(abs(b["default"]["calls_per_100_steps"] - 100.0) < 1e-9, "100 per 100 steps")

# The program's own empty_cache leaves the bound's reserve as it was: live memory that passes it is
# still a call, in the empty_cache's step and the next as in any other.
steps_ops = [step(i + 1, MiB << i, keep=True) for i in range(8)]
steps_ops[5] = ["e"] + steps_ops[5]
b = bounds_of(steps_ops, warmup=4)
check(b["default"]["calls_after_warmup"] == 4, "an empty_cache changes nothing: 4 calls counted (%d)" % b["default"]["calls_after_warmup"])
steps_ops = [step(i + 1, 50 * MiB) for i in range(8)]
steps_ops[5] = ["e"] + steps_ops[5]
b = bounds_of(steps_ops, warmup=4)
check(b["default"]["calls_after_warmup"] == 0, "nor does it force a call where live memory stays (%d)" % b["default"]["calls_after_warmup"])

# The page bound: on one stream a 512-byte block (small pool) and a block of 1 MiB + 512 bytes (large
# pool) take a page each, 4 MiB for 1 MiB + 1 KiB live; on two streams, two pages more.
b = bounds_of([["a,1,512,0", "a,2,%d,0" % (MiB + 512)]])
check(abs(b["page_bound_ratio"] - 4 * MiB / (MiB + 1024)) < 1e-9, "two pools, a page each (%.4f)" % b["page_bound_ratio"])
b = bounds_of([["a,1,512,0", "a,2,512,1"]])
check(abs(b["page_bound_ratio"] - 4 * MiB / 1024) < 1e-9, "two streams, a page each (%.1f)" % b["page_bound_ratio"])
# sizes round up to 512 bytes: 100 blocks of 100 bytes are 50 KiB live, in one page
b = bounds_of([["a,%d,100,0" % i for i in range(1, 101)]])
check(b["peak_live_bytes"] == 100 * 512, "sizes rounded to 512 bytes (%d)" % b["peak_live_bytes"])

done()

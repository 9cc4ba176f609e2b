"""bench/segment_model.py on traces made here, whose answers are worked out by hand: a loop of one
shape reserves nothing after its first step; sizes that grow every step reserve in every step, and at
a tight cap give idle segments back to stay under it; a small block that pins the segment a large one
was made for takes the model past its cap, by as much as the hand count says; the program's own
empty_cache, honoured, gives back and refills apart from the calls the placement forces."""
import os
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "bench"))
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import segment_model  # noqa: E402
from checks import check, done  # noqa: E402
from step_traces import write_steps_trace  # noqa: E402

MiB = 1 << 20


def model(steps_ops, ratios, warmup=1, streams_apart=False):
    """[(empty_cache ignored, honoured)] per ratio."""
    with tempfile.TemporaryDirectory() as tmp:
        trace, steps = write_steps_trace(tmp, steps_ops, warmup)
        return segment_model.model_trace(trace, steps, ratios, streams_apart=streams_apart)


# One shape: a 6 MiB block made and freed each step.
same = [["a,%d,%d,0" % (i, 6 * MiB), "f,%d,,0" % i] for i in range(1, 11)]
ignored, honoured = model(same, [1.0])[0]
check(ignored["calls_after_warmup"] == 0 and ignored["peak_reserved_over_live"] == 1.0,
      "one shape: one 6 MiB segment, nothing after the first step")
check(honoured == ignored, "no empty_cache: honouring it changes nothing")

# Sizes that grow: step k makes and frees a block of 2k MiB (peak live 20 MiB in ten steps). With room
# for all (r = 10) each step reserves one segment and gives nothing back; at r = 1 (20 MiB) step 5
# (10 MiB, with 2+4+6+8 held) gives back the 2, 4 and 6 MiB segments first, the longest idle.
grow = [["a,%d,%d,0" % (k, 2 * k * MiB), "f,%d,,0" % k] for k in range(1, 11)]
tight, roomy = [r[0] for r in model(grow, [1.0, 10.0])]
check(roomy["calls_after_warmup"] == 9, "room for all: one reservation in each of the nine steps after the first"
      " (%d)" % roomy["calls_after_warmup"])
check(tight["peak_reserved_over_live"] <= 1.0, "r = 1: never more than the cap (%.3f)" % tight["peak_reserved_over_live"])
check(tight["calls_after_warmup"] > roomy["calls_after_warmup"],
      "r = 1: idle segments given back to stay under the cap (%d calls against %d)"
      % (tight["calls_after_warmup"], roomy["calls_after_warmup"]))
# Worked by hand at r = 1, steps 2-10: reserve 4, 6, 8; step 5: release 2, 4, 6, reserve 10; step 6:
# release 8 and 10, reserve 12; step 7: release 12, reserve 14; 8: 14, 16; 9: 16, 18; 10: 18, 20.
check(tight["calls_after_warmup"] == 3 + 4 + 3 + 2 * 4, "r = 1: 18 calls after the first step (%d)"
      % tight["calls_after_warmup"])

# A pin: each step makes B (4 MiB) and frees it, then makes Q (2 MiB) and frees the last step's Q.
# Q lands in B's segment (the only free space), so the next B needs a second 4 MiB segment while 6
# MiB are live: 8 MiB reserved, past a cap of 6 at r = 1, and nothing more after that (the two
# segments take turns).
def pin(k):
    return ["a,%d,%d,0" % (2 * k, 4 * MiB), "f,%d,,0" % (2 * k), "a,%d,%d,0" % (2 * k + 1, 2 * MiB)] + (
        ["f,%d,,0" % (2 * k - 1)] if k > 1 else [])


tight = model([pin(k) for k in range(1, 21)], [1.0])[0][0]
check(abs(tight["peak_reserved_over_live"] - 8 / 6) < 1e-9,
      "a pinned segment: 8 MiB reserved for 6 live, past the cap (%.3f)" % tight["peak_reserved_over_live"])
check(tight["calls_after_warmup"] == 1 and tight["calls_last_half"] == 0,
      "a pinned segment: one reservation in the second step, none after (%d)" % tight["calls_after_warmup"])

# Free stretches merge within a segment, on either side: two 2 MiB blocks in the 4 MiB segment a
# 4 MiB block left, freed in one order and then the other, leave it whole for the next 4 MiB block.
def halves(k, later_first):
    x, a, b = 3 * k, 3 * k + 1, 3 * k + 2
    order = (b, a) if later_first else (a, b)
    return ["a,%d,%d,0" % (x, 4 * MiB), "f,%d,,0" % x, "a,%d,%d,0" % (a, 2 * MiB), "a,%d,%d,0" % (b, 2 * MiB)] + [
        "f,%d,,0" % i for i in order]


r = model([halves(k, k % 2 == 0) for k in range(1, 11)], [1.0])[0][0]
check(r["calls_after_warmup"] == 0 and r["peak_reserved_over_live"] == 1.0,
      "stretches merge both ways: one 4 MiB segment serves every step (%d calls)" % r["calls_after_warmup"])

# Streams: stream 0 keeps A (2 MiB) in the first half of the 4 MiB segment its first block left, and
# stream 1 makes and frees a 2 MiB block each step. In one pool that block takes the other half (4 MiB
# reserved for 4 live); with streams apart it needs a segment of its own (6 MiB), and a wholly free
# segment of stream 0 moves to it instead of a reservation: stream 0 makes two 2 MiB blocks and frees
# the first.
streams = [["a,1,%d,0" % (4 * MiB), "f,1,,0", "a,2,%d,0" % (2 * MiB)]] + [
    ["a,%d,%d,1" % (k, 2 * MiB), "f,%d,,1" % k] for k in range(3, 12)]
one, apart = model(streams, [2.0])[0][0], model(streams, [2.0], streams_apart=True)[0][0]
check(one["peak_reserved_over_live"] == 1.0 and apart["peak_reserved_over_live"] == 1.5,
      "streams: 4 MiB reserved in one pool, 6 with streams apart (%.2f, %.2f)"
      % (one["peak_reserved_over_live"], apart["peak_reserved_over_live"]))
moved = [["a,1,%d,0" % (2 * MiB), "a,2,%d,0" % (2 * MiB), "f,1,,0"]] + [
    ["a,%d,%d,1" % (k, 2 * MiB), "f,%d,,1" % k] for k in range(3, 12)]
r = model(moved, [2.0], streams_apart=True)[0][0]
check(r["calls_after_warmup"] == 0 and r["peak_reserved_over_live"] == 1.0,
      "streams apart: stream 0's idle segment moves to stream 1, no reservation (%d calls, %.2f)"
      % (r["calls_after_warmup"], r["peak_reserved_over_live"]))

# The program's own empty_cache after every step: honoured, each gives the idle segment back and the
# next step takes it again, both counted apart as refills (nine of each after the first step);
# ignored, nothing happens.
emptied = [["a,%d,%d,0" % (i, 6 * MiB), "f,%d,,0" % i, "e,0,0,0"] for i in range(1, 11)]
ignored, honoured = model(emptied, [1.1])[0]
check(ignored["calls_after_warmup"] == 0 and ignored["refill_calls"] == 0, "empty_cache ignored: no call")
check(honoured["calls_after_warmup"] == 0 and honoured["refill_calls"] == 2 * 9,
      "empty_cache honoured: 9 refills and 9 releases, none counted as the placement's (%d, %d)"
      % (honoured["calls_after_warmup"], honoured["refill_calls"]))

done()

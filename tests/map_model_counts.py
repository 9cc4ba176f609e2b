"""bench/map_model.py on traces made here, whose answers are worked out by hand: a loop of one shape
maps nothing after its first step; a loop whose blocks need more contiguous pages than the idle ones
left holds them only with room to spare: at r = 1 (pages for peak live only) it maps in every step,
with twice the pages it maps nothing after the first; the pages held never pass the cap."""
import os
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "bench"))
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import map_model  # noqa: E402
from checks import check, done  # noqa: E402
from step_traces import write_steps_trace  # noqa: E402

MiB = 1 << 20


def model(steps_ops, ratios, warmup=1):
    with tempfile.TemporaryDirectory() as tmp:
        trace, steps = write_steps_trace(tmp, steps_ops, warmup)
        return map_model.model_trace(trace, steps, ratios)


# One shape: a 6 MiB block made and freed each step.
same = [["a,%d,%d,0" % (i, 6 * MiB), "f,%d,,0" % i] for i in range(1, 11)]
r = model(same, [1.0])[0]
check(r["events_per_100_steps"] == 0 and r["pages_per_100_steps"] == 0, "one shape: nothing mapped after the first step")
check(r["cap_pages"] == 3 and r["mapped_over_live"] == 1.0, "3 pages held for 6 MiB")

# Each step: X (4 MiB) and Y (2 MiB) live, X freed, then Z (6 MiB) beside Y: peak live 8 MiB, 4 pages.
# Z needs 3 contiguous pages, and Y sits in the middle of the 4 the loop holds at r = 1, in a new
# place each step (worked by hand: steps 2, 3 and 4 each map one page, and the fifth is the second).
def xyz(i):
    x, y, z = 3 * i + 1, 3 * i + 2, 3 * i + 3
    return ["a,%d,%d,0" % (x, 4 * MiB), "a,%d,%d,0" % (y, 2 * MiB), "f,%d,,0" % x,
            "a,%d,%d,0" % (z, 6 * MiB), "f,%d,,0" % y, "f,%d,,0" % z]


loop = [xyz(i) for i in range(10)]
tight, roomy = model(loop, [1.0, 2.0])
check(tight["cap_pages"] == 4 and tight["mapped_over_live"] == 1.0,
      "r = 1: 4 pages held, never more (%r)" % tight["mapped_over_live"])
check(abs(tight["events_per_100_steps"] - 100.0) < 1e-9,
      "r = 1: a map in every step after the first (%.1f per 100 steps)" % tight["events_per_100_steps"])
check(tight["events_last_half"] == 5, "5 of them in the last half (%d)" % tight["events_last_half"])
check(roomy["events_per_100_steps"] == 0 and roomy["mapped_over_live"] == 1.5,
      "r = 2: 6 pages mapped in the first step, nothing after (%.1f, %.2fx)"
      % (roomy["events_per_100_steps"], roomy["mapped_over_live"]))

# Streams keep their own pages: the same shape on two streams in turn maps on each once.
two = [["a,%d,%d,%d" % (i, 2 * MiB, i % 2), "f,%d,,%d" % (i, i % 2)] for i in range(1, 11)]
r = model(two, [1.0, 4.0], warmup=2)
check(r[1]["events_per_100_steps"] == 0, "two streams, room for both: nothing after their first steps")
check(r[0]["events_per_100_steps"] == 100.0, "room for one page: each stream's block needs the other's page moved")

done()

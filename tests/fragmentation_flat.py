"""bench/fragmentation.py's flatness, live memory being equal: reserved memory that rises after the
warm-up only as far as the live peak rose is flat; more than that, or a rise with live memory flat, is
not; a steps JSON without each step's live peak keeps the plain rule. The calls after the warm-up
leave out the program's own empty_cache releases and the reservations that take back as many bytes,
after later empty_cache calls too, but not those that take back a trim's.
And bench/workloads' Recorder writes each step's live peak, the first step counting what was made
before it."""
import json
import os
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "bench"))
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import fragmentation  # noqa: E402
from checks import check, done  # noqa: E402
from workloads.common import Recorder, steps_path  # noqa: E402

MiB = 1 << 20


def flat(step_peak_live, calls):
    """20 steps of 10 operations each, 2 of them the warm-up; calls are (operation, bytes)."""
    steps = {"step_begins_at_line": [10 * i for i in range(20)], "warmup_steps": 2}
    if step_peak_live is not None:
        steps["step_peak_live"] = step_peak_live
    return fragmentation.call_figures(calls, steps, "expandable", 200, [])["flat"]


warm_calls = [(0, 100 * MiB)]
check(flat([90 * MiB] * 20, warm_calls), "nothing reserved after the warm-up: flat")
check(not flat([90 * MiB] * 20, warm_calls + [(195, 50 * MiB)]),
      "50 MiB more in the last tenth, live memory as in the warm-up: not flat")
grown = [90 * MiB] * 18 + [140 * MiB] * 2
check(flat(grown, warm_calls + [(195, 50 * MiB)]), "50 MiB more as the live peak rose 50 MiB: flat")
check(not flat(grown, warm_calls + [(195, 60 * MiB)]), "60 MiB more as the live peak rose 50 MiB: not flat")
check(not flat(None, warm_calls + [(195, 50 * MiB)]), "without each step's live peak: the plain rule")


def counted(calls, empties):
    """The same 20 steps: (calls after the warm-up, refills) for calls (operation, bytes) and the
    operations of the program's own empty_cache."""
    steps = {"step_begins_at_line": [10 * i for i in range(20)], "warmup_steps": 2}
    f = fragmentation.call_figures(calls, steps, "default", 200, empties)
    return f["calls_after_warmup"], f["refill_calls"]


# Refills: the empty_cache's own releases, then reservations up to as many bytes as it gave back, in
# whatever step they come.
reserve = [(0, 60 * MiB), (1, 40 * MiB)]
emptied = reserve + [(100, -60 * MiB), (100, -40 * MiB)]
got = counted(emptied + [(130, 50 * MiB), (180, 50 * MiB)], [100])
check(got == (0, 4), "100 MiB given back and reserved again, 8 steps later too: 4 refills, none counted (%r)"
      % (got,))
check(counted(emptied + [(130, 50 * MiB), (150, 50 * MiB), (180, 30 * MiB)], [100]) == (1, 4),
      "a reservation past what was given back is counted")
check(counted(emptied + [(130, 50 * MiB), (140, -20 * MiB), (150, 50 * MiB), (160, 20 * MiB)], [100]) == (2, 4),
      "a release between the refills is counted, and gives the empty_cache's bytes no second use")
# Memory an earlier empty_cache gave back, reserved again after a later one: a loop that empties its
# cache after each of two phases, each phase taking back what it had before its last emptying.
phases = emptied + [(110, 30 * MiB), (120, -30 * MiB), (150, 50 * MiB), (160, 50 * MiB)]
got = counted(phases, [100, 120])
check(got == (0, 6), "what the first empty_cache gave back, reserved again after the second: refills (%r)" % (got,))
got = counted(emptied + [(130, 50 * MiB), (140, -50 * MiB), (150, 50 * MiB)], [100])
check(got == (2, 3), "a trim's release and the reservation that takes its bytes back both count, the "
      "empty_cache's bytes left over or not (%r)" % (got,))
check(counted(emptied + [(130, 50 * MiB)], []) == (3, 0),
      "without the program's empty_cache every call after the warm-up counts")

with tempfile.TemporaryDirectory() as d:
    r = Recorder(os.path.join(d, "t.csv.gz"), "test", 0)
    weights = r.alloc(8 * MiB)          # before the first step: counts in it
    r.step()
    x = r.alloc(4 * MiB)
    r.free(x)
    r.step()
    r.warmup_done()
    y = r.alloc(2 * MiB)
    r.free(y)
    r.free(weights)
    r.close()
    with open(steps_path(r.path)) as f:
        got = json.load(f)["step_peak_live"]
    check(got == [12 * MiB, 10 * MiB], "Recorder's step_peak_live: %r" % got)

done()

"""Step time of alternating seed-loop runs (bench/gpu_run.sh): the median ms/step of each run (its
first window left out) for a baseline and a candidate allocator, and the candidate's ratio.

    python3 bench/summarize_alternating.py OUT_DIR BASELINE CANDIDATE

reads OUT_DIR/alt_<allocator>_<round>.json, as bench/seed_loop.py --json writes them.
"""
import glob
import json
import statistics
import sys

out, base, cand = sys.argv[1:4]
ms = {}
for alloc in (base, cand):
    ms[alloc] = [statistics.median(json.load(open(p))["window_ms_per_step"][1:])
                 for p in sorted(glob.glob("%s/alt_%s_*.json" % (out, alloc)))]
    if not ms[alloc]:
        sys.exit("no alternating runs of %s in %s" % (alloc, out))
print("\nalternating runs (median ms/step of each run): %s %s, %s %s" % (
    base, ["%.3f" % v for v in ms[base]], cand, ["%.3f" % v for v in ms[cand]]))
print("%s / %s, median of the runs: %+.2f%%" % (
    cand, base, (statistics.median(ms[cand]) / statistics.median(ms[base]) - 1) * 100))
# Each round's two runs ran back to back: their ratio sees the least drift.
paired = [c / b - 1 for b, c in zip(ms[base], ms[cand])]
print("%s / %s, round by round: %s; median %+.2f%%" % (
    cand, base, ", ".join("%+.2f%%" % (100 * r) for r in paired), 100 * statistics.median(paired)))

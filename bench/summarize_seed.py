"""Tabulates bench/seed_loop.py results (one JSON per allocator) as markdown."""
import json
import statistics
import sys

runs = {}
for path in sys.argv[1:]:
    r = json.load(open(path))
    runs[r["allocator"]] = r
order = [a for a in ("native", "expandable", "async", "tidepool", "tidepool-expandable") if a in runs]
base = runs.get("native")
MiB = 2**20
print("| allocator | median ms/step | vs PyTorch | peak reserved MiB | vs PyTorch | peak device used MiB "
      "| floors after empty_cache (MiB) | reserved growth after warm-up |")
print("|---|---|---|---|---|---|---|---|")
for name in order:
    r = runs[name]
    ms = statistics.median(r["window_ms_per_step"][1:] or r["window_ms_per_step"])
    base_ms = statistics.median(base["window_ms_per_step"][1:] or base["window_ms_per_step"]) if base else ms
    # reserved sampled every 10 steps; growth = max in the last tenth minus max in the second tenth
    res = [v for _, v in r["reserved_every_10_steps"]]
    tenth = max(1, len(res) // 10)
    growth = max(res[-tenth:]) - max(res[tenth:2 * tenth]) if len(res) >= 3 * tenth else 0
    floors = sorted(set(f // MiB for f in r["floors_after_empty_cache"]))
    print("| %s | %.3f | %+.2f%% | %.1f | %.3f | %.1f | %s | %+.1f MiB |" % (
        name, ms, (ms / base_ms - 1) * 100, r["peak_reserved"] / MiB,
        r["peak_reserved"] / base["peak_reserved"] if base else 1, r["peak_device_used"] / MiB,
        ", ".join(map(str, floors)), growth / MiB))
if "expandable" in runs and "tidepool-expandable" in runs:
    e, t = runs["expandable"], runs["tidepool-expandable"]
    me = statistics.median(e["window_ms_per_step"][1:] or e["window_ms_per_step"])
    mt = statistics.median(t["window_ms_per_step"][1:] or t["window_ms_per_step"])
    print("\ntidepool-expandable against PyTorch's expandable_segments: ms/step %+.2f%%, peak reserved "
          "%.3f x, peak device used %.3f x" % ((mt / me - 1) * 100, t["peak_reserved"] / e["peak_reserved"],
                                              t["peak_device_used"] / e["peak_device_used"]))
print()
print("steps: %d; device: %s; torch %s" % (runs[order[0]]["steps"], runs[order[0]]["device"],
                                          runs[order[0]]["torch"]))

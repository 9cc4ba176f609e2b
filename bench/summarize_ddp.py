"""Compares DDP runs of bench/ddp_gpt2.py: losses bit for bit per rank, memory after warm-up, floors.

    python3 bench/summarize_ddp.py OUT_PREFIX_NATIVE OUT_PREFIX_TIDEPOOL
"""
import json
import sys

native, tidepool = sys.argv[1], sys.argv[2]
print("| rank | losses identical | reserved after warm-up (MiB, min-max), PyTorch | tidepool | "
      "most reserved, steps 20-159 / 160-299 (MiB), PyTorch | tidepool | "
      "device used after each empty_cache (MiB), PyTorch | tidepool | "
      "allocator's allocated / reserved after each empty_cache (MiB), PyTorch | tidepool |")
print("|---|---|---|---|---|---|---|---|---|---|")
for rank in (0, 1):
    a = json.load(open("%s.rank%d.json" % (native, rank)))
    b = json.load(open("%s.rank%d.json" % (tidepool, rank)))
    same = sum(x == y for x, y in zip(a["losses"], b["losses"]))
    warm = 20

    def span(r):
        v = r["reserved_mib"][warm:]
        return "%.0f-%.0f" % (min(v), max(v))

    def halves(r):
        v = r["reserved_mib"]
        mid = (warm + len(v)) // 2
        return "%.0f / %.0f" % (max(v[warm:mid]), max(v[mid:]))

    def after(r):
        return " ".join("%.0f/%.0f" % (x["allocated_mib"], x["reserved_mib"]) for x in r.get("allocator_after_empty_cache", []))

    print("| %d | %d of %d | %s | %s | %s | %s | %s | %s | %s | %s |" % (
        rank, same, len(a["losses"]), span(a), span(b), halves(a), halves(b),
        " ".join("%.0f" % x for x in a["used_after_empty_cache_mib"]),
        " ".join("%.0f" % x for x in b["used_after_empty_cache_mib"]), after(a), after(b)))
    if "tidepool_stats" in b:
        print("|  | tidepool rank %d: %s |" % (rank, b["tidepool_stats"]))

"""Compares DDP runs of bench/ddp_gpt2.py: losses bit for bit per rank, memory after warm-up, floors.

    python3 bench/summarize_ddp.py OUT_PREFIX_NATIVE OUT_PREFIX_TIDEPOOL
"""
import json
import sys

native, tidepool = sys.argv[1], sys.argv[2]
print("| rank | losses identical | reserved after warm-up (MiB, min-max), PyTorch | tidepool | "
      "used after each empty_cache (MiB), PyTorch | tidepool |")
print("|---|---|---|---|---|---|")
for rank in (0, 1):
    a = json.load(open("%s.rank%d.json" % (native, rank)))
    b = json.load(open("%s.rank%d.json" % (tidepool, rank)))
    same = sum(x == y for x, y in zip(a["losses"], b["losses"]))
    warm = 20

    def span(r):
        v = r["reserved_mib"][warm:]
        return "%.0f-%.0f" % (min(v), max(v))

    print("| %d | %d of %d | %s | %s | %s | %s |" % (
        rank, same, len(a["losses"]), span(a), span(b),
        " ".join("%.0f" % x for x in a["used_after_empty_cache_mib"]),
        " ".join("%.0f" % x for x in b["used_after_empty_cache_mib"])))
    if "tidepool_stats" in b:
        print("|  | tidepool rank %d: %s |" % (rank, b["tidepool_stats"]))

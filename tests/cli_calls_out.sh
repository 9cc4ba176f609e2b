#!/bin/sh
# tidepool replay --calls-out: one line per driver call that reserved, released, mapped or unmapped
# memory, each placed at the trace operation it came in. The lines add up to the replay's own counts,
# their bytes to zero (the run ends with everything given back), and the operations never go back.
#   cli_calls_out.sh TIDEPOOL_CLI SOURCE_DIR WORK_DIR
set -eu
cli=$1 src=$2 work=$3
mkdir -p "$work"
cd "$work"
for conf in "" "expandable_segments:True" "max_split_size_mb:64"; do
    "$cli" replay --no-chart --no-progress --device-work none --json --passes 2 --conf "$conf" \
        --calls-out calls.csv "$src/traces/lstm_loop.csv.gz" > replay.json
    python3 - calls.csv replay.json "$conf" <<'PY'
import csv, json, sys
rows = list(csv.DictReader(open(sys.argv[1])))
r = json.load(open(sys.argv[2]))
kinds = {k: [x for x in rows if x["call"] == k] for k in ("reserve", "release", "map", "unmap")}
# a growth of expandable segments counts once, and may map its pages in several calls
grown, shrunk = len(kinds["reserve"]) + len(kinds["map"]), len(kinds["release"]) + len(kinds["unmap"])
if kinds["map"]:
    assert grown >= r["device_allocs"] and shrunk >= r["device_frees"], (grown, shrunk, r)
else:
    assert grown == r["device_allocs"] and shrunk == r["device_frees"], (grown, shrunk, r)
held = sum(int(x["bytes"]) * (1 if x["call"] in ("reserve", "map") else -1) for x in rows)
assert held == 0, ("bytes left", held)
ops = [int(x["op"]) for x in rows]
assert ops == sorted(ops) and ops[0] == 0 and ops[-1] == r["ops"], (ops[:3], ops[-3:], r["ops"])
peak, now = 0, 0
for x in rows:
    now += int(x["bytes"]) * (1 if x["call"] in ("reserve", "map") else -1)
    peak = max(peak, now)
assert peak == r["peak_reserved_bytes"], (peak, r["peak_reserved_bytes"])
print("%-26s %d calls, peak %d bytes as the replay says" % (sys.argv[3] or "(default)", len(rows), peak))
PY
done
# The program's own empty_cache is an operation too: the release it makes, and the reservation after it,
# are placed at their own operations.
printf 'op,id,size,stream\na,1,31457280,0\nf,1,31457280,0\ne,0,0,0\na,2,31457280,0\nf,2,31457280,0\n' > ec.csv
"$cli" replay --no-chart --no-progress --device-work none --calls-out calls.csv ec.csv > /dev/null
printf 'op,call,bytes\n0,reserve,31457280\n2,release,31457280\n3,reserve,31457280\n5,release,31457280\n' > want.csv
cmp calls.csv want.csv || { echo "calls at the wrong operations:"; cat calls.csv; exit 1; }
# one trace and one configuration only
if "$cli" replay --calls-out x.csv --conf "" --conf "expandable_segments:True" "$src/traces/lstm_loop.csv.gz" 2> err.txt; then
    echo "--calls-out with two configurations was accepted"; exit 1
fi
grep -q "take one trace and one --conf" err.txt

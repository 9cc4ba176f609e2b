#!/bin/sh
# A replay's history, turned back into a trace (python3 -m tidepool.trace), replays to the same
# figures: the same allocations, frees and empty_cache calls, the same peaks. Then the converter's
# refusal of a malformed history.
#   history_trace_round_trip.sh TIDEPOOL_CLI TRACE PYTHON_DIR WORK_DIR
set -eu
cli=$1 trace=$2 pydir=$3 work=$4
mkdir -p "$work"
cd "$work"
opts="--no-chart --device-work none --json"
"$cli" replay $opts --empty-cache-every 5000 --history-out hist.json "$trace" > original.json
PYTHONPATH="$pydir" python3 -m tidepool.trace hist.json -o round_trip.csv.gz
"$cli" replay $opts round_trip.csv.gz > round_trip.json
for key in allocs frees peak_live_bytes peak_reserved_bytes device_allocs; do
    a=$(grep "\"$key\":" original.json) b=$(grep "\"$key\":" round_trip.json)
    if [ "$a" != "$b" ]; then
        echo "FAIL: $key differs: original $a, round trip $b"
        exit 1
    fi
    echo "same $a"
done
# The original's empty_cache calls (every 5000 operations, and the one at the end) came back as lines.
calls_original=$(grep '"empty_cache_calls":' original.json)
calls_round_trip=$(grep '"empty_cache_calls":' round_trip.json)
[ "$calls_original" = "$calls_round_trip" ] || { echo "FAIL: $calls_original vs $calls_round_trip"; exit 1; }
echo "same $calls_original"
echo '{"events": [{"kind": "alloc", "addr": 4096, "size": "many", "stream": 0}]}' > bad.json
if PYTHONPATH="$pydir" python3 -m tidepool.trace bad.json -o bad.csv 2> bad.txt; then
    echo "FAIL: a malformed history was converted"; exit 1
fi
grep -q "bad.json:1: event 0: size is \"many\", not a whole number" bad.txt
echo "malformed history refused: $(cat bad.txt)"

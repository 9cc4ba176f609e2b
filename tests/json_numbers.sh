#!/bin/sh
# JSON numbers at their extremes come back as they were written. A limit of 2^64 - 1 or of 2^63 (the
# configuration takes both; through long long they were written as -1 and -2^63) in a replay's
# snapshot, read back by tidepool stats and by Python's json, and in the statistics of the Python
# package's SimulatedDevice.
#   tests/json_numbers.sh TIDEPOOL SOURCE_DIR WORK   (TIDEPOOL_LIBRARY: libtidepool.so, for Python)
set -u
tool=$1 src=$2 work=$3
mkdir -p "$work"
fails=0
printf 'op,id,size,stream\na,1,1048576,0\na,2,4096,0\nf,1,1048576,0\n' > "$work/small.csv"
for limit in 18446744073709551615 9223372036854775808; do
    snap="$work/snap_$limit.json"
    if ! "$tool" replay --no-chart --no-progress --device-work none --conf "limit:$limit" \
            --snapshot-out "$snap" "$work/small.csv" > "$work/replay.out" 2>&1; then
        echo "FAIL: the replay under limit:$limit: $(cat "$work/replay.out")"
        fails=$((fails + 1))
        continue
    fi
    line=$("$tool" stats --bytes "$snap" | grep '^limit_bytes ')
    if [ "$(echo $line)" != "limit_bytes $limit" ]; then
        echo "FAIL: tidepool stats --bytes said '$line' for a limit of $limit"
        fails=$((fails + 1))
    fi
    if ! PYTHONPATH="$src/python" python3 - "$snap" "$limit" <<'PY'; then
import json, sys
from tidepool.sim import SimulatedDevice
snap, limit = json.load(open(sys.argv[1])), int(sys.argv[2])
assert snap["stats"]["limit_bytes"] == limit, ("the snapshot", snap["stats"]["limit_bytes"], limit)
device = SimulatedDevice(config="limit:%d" % limit)
stats = device.stats()
device.close()
assert stats["limit_bytes"] == limit, ("SimulatedDevice.stats()", stats["limit_bytes"], limit)
# every number in both is a whole number within its field's type
for key, value in list(snap["stats"].items()) + list(stats.items()):
    assert isinstance(value, int), (key, value)
    low = 0 if "." not in key else -2**63  # the flat keys are uint64_t, the per-pool ones int64_t
    assert low <= value < (2**64 if low == 0 else 2**63), (key, value)
PY
        echo "FAIL: Python read the limit of $limit otherwise"
        fails=$((fails + 1))
    fi
done
[ "$fails" = 0 ] && echo "JSON numbers come back as written"
exit "$fails"

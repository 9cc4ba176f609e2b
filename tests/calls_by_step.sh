#!/bin/sh
# bench/periodic_trace.py writes a loop of shapes taking turns as a trace with its steps, and
# bench/calls_by_step.py finds every driver call of its replay in some step: the warm-up's calls and
# the later ones add up to the replay's own counts, for both kinds of segment, and its exit status says
# whether any came after the warm-up.
#   calls_by_step.sh TIDEPOOL_CLI SOURCE_DIR WORK_DIR [LONG_LOOPS]
# LONG_LOOPS: how many times each recorded loop repeats at the end, name:times:most-calls-after-warm-up
# (make check: a few times each; make check-long: thousands of steps, the figures docs/performance.md
# gives).
set -eu
cli=$1 src=$2 work=$3
long_loops=${4:-gpt2:5:0 lstm:100:0 resnet50:10:10}
mkdir -p "$work"
cd "$work"
python3 "$src/bench/periodic_trace.py" loop.csv.gz --seed 3 --periods 3
python3 - loop.json loop.csv.gz <<'PY'
import gzip, json, sys
steps = json.load(open(sys.argv[1]))
lines = sum(1 for _ in gzip.open(sys.argv[2], "rt")) - 1
starts = steps["step_begins_at_line"]
assert steps["warmup_steps"] == 7 and len(starts) == 21, steps
assert all(a < b for a, b in zip(starts, starts[1:])) and starts[-1] < lines, (starts, lines)
print("21 steps in %d trace lines" % lines)
PY
for conf in "" "trim_on_growth:False" "expandable_segments:True"; do
    status=0
    python3 "$src/bench/calls_by_step.py" loop.csv.gz --tool "$cli" --conf "$conf" > calls.txt || status=$?
    cat calls.txt
    "$cli" replay --no-chart --no-progress --device-work none --json --conf "$conf" loop.csv.gz > replay.json
    python3 - calls.txt replay.json "$status" <<'PY'
import json, re, sys
line = open(sys.argv[1]).read()
m = re.search(r"warm-up (\d+) \+ (\d+), after it (\d+) \+ (\d+)", line)
assert m, "no counts in: " + line
warm_a, warm_f, after_a, after_f = map(int, m.groups())
r = json.load(open(sys.argv[2]))
r = r[0] if isinstance(r, list) else r
# the replay's own counts include the final empty_cache's releases, which come after the last step
assert warm_a + after_a == r["device_allocs"], (line, r["device_allocs"])
assert warm_f + after_f <= r["device_frees"], (line, r["device_frees"])
assert int(sys.argv[3]) == (1 if after_a + after_f else 0), ("exit status", sys.argv[3], line)
print("adds up: %d + %d reservations, exit status %s" % (warm_a, after_a, sys.argv[3]))
PY
done
# The training loops bench/train.py --record brought back from the H200 (traces/train), replayed with
# the default config: GPT-2 and the LSTM make no driver call after their warm-up, as on the GPU; the
# live GPT-2 run made 9 + 1 at its ninth step before small-pool segments were kept out of the
# high-water trim. ResNet-50 still makes a few (docs/performance.md): no more than now.
for loop in gpt2:0 lstm:0 resnet50:10; do
    name=${loop%%:*} most=${loop##*:}
    status=0
    python3 "$src/bench/calls_by_step.py" "$src/traces/train/$name.csv.gz" --tool "$cli" > calls.txt || status=$?
    printf "%s: " "$name"
    cat calls.txt
    python3 - calls.txt "$most" "$status" <<'PY'
import re, sys
line = open(sys.argv[1]).read()
m = re.search(r"after it (\d+) \+ (\d+)", line)
assert m, "no counts in: " + line
after = int(m.group(1)) + int(m.group(2))
assert after <= int(sys.argv[2]), ("driver calls after the warm-up", after, "at most", sys.argv[2])
assert int(sys.argv[3]) == (1 if after else 0), ("exit status", sys.argv[3], line)
PY
done
# The same loops made long (bench/repeat_steps.py: the steps after the warm-up, again and again): as
# flat over thousands of steps as over the recorded ones, with no driver call after the warm-up that
# the recorded run did not make. A window whose ends hold different live allocations is refused.
status=0
python3 "$src/bench/repeat_steps.py" "$src/traces/train/lstm.csv.gz" bad.csv.gz \
    --steps "$src/traces/train/lstm.json" --times 2 --first 0 --last 8 2> refused.txt || status=$?
grep -q "begin with different live allocations" refused.txt && [ "$status" = 2 ] ||
    { echo "repeat_steps took a window that cannot follow itself (exit status $status)"; exit 1; }
for loop in $long_loops; do
    name=${loop%%:*} rest=${loop#*:}
    times=${rest%%:*} most=${rest##*:}
    python3 "$src/bench/repeat_steps.py" "$src/traces/train/$name.csv.gz" long.csv.gz \
        --steps "$src/traces/train/$name.json" --times "$times"
    "$cli" replay --no-chart --no-progress --device-work none --json long.csv.gz > replay.json
    status=0
    python3 "$src/bench/calls_by_step.py" long.csv.gz --tool "$cli" > calls.txt || status=$?
    printf "%s, %s times: " "$name" "$times"
    cat calls.txt
    python3 - calls.txt replay.json long.json "$most" "$src/traces/train/$name.json" "$times" <<'PY'
import json, re, sys
line = open(sys.argv[1]).read()
r = json.load(open(sys.argv[2]))
r = r[0] if isinstance(r, list) else r
steps, recorded = json.load(open(sys.argv[3])), json.load(open(sys.argv[5]))
assert r["skipped_frees"] == 0 and r["reserved_after_empty_cache_bytes"] == 0, r
warmup, window = recorded["warmup_steps"], len(recorded["step_begins_at_line"]) - 1 - recorded["warmup_steps"]
starts = steps["step_begins_at_line"]
assert len(starts) == warmup + int(sys.argv[6]) * window, "steps of the long run"
assert all(a < b for a, b in zip(starts, starts[1:])) and starts[-1] < r["ops"], "step starts in order"
m = re.search(r"after it (\d+) \+ (\d+)", line)
assert m, "no counts in: " + line
after = int(m.group(1)) + int(m.group(2))
assert after <= int(sys.argv[4]), ("driver calls after the warm-up", after, "at most", sys.argv[4])
PY
done

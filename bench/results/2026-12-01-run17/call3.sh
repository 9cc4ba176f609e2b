#!/bin/bash
# Run 17, call 3: ab_micro of HEAD (e59a1e6) against two candidates: worth_splitting without branches
# (ws.patch) and a pointer map kept a sixteenth full instead of an eighth (pm16.patch), both orders;
# then the replays on the simulated device on this host (the allocator alone), builds taking turns:
# before the next_class change (old), HEAD, and HEAD with ws.
set -u
OUT=${OUT:-/tmp/out}; mkdir -p $OUT
ROOT=$PWD
exec > >(tee -a $OUT/log3.txt) 2>&1
echo "== $(date -u +%FT%TZ)"
variant() { # name [patch] [-R]
    rm -rf /tmp/v_$1; mkdir -p /tmp/v_$1; cp -r src include CMakeLists.txt tools bench tests python fuzz traces /tmp/v_$1/ 2>/dev/null
    (cd /tmp/v_$1 && if [ -n "${2:-}" ]; then patch -s -p1 ${3:-} < $ROOT/.run17/$2 || echo "PATCH FAILED $1"; fi
     cmake -S . -B b -DCMAKE_BUILD_TYPE=Release >/dev/null && cmake --build b -j4 --target tidepool_shared ab_micro tidepool_cli 2>&1 | grep -E " error|warning:")
}
variant head & P1=$!; variant ws ws.patch & P2=$!; variant pm pm16.patch & P3=$!; variant old nc_commit.patch -R & P4=$!
wait $P1 $P2 $P3 $P4
ls /tmp/v_*/b/libtidepool.so /tmp/v_*/b/tidepool
AB=/tmp/v_head/b/bench/ab_micro
for pair in "head ws" "ws head" "head pm" "pm head"; do
    set -- $pair
    echo "-- A=$1 B=$2"
    $AB /tmp/v_$1/b/libtidepool.so /tmp/v_$2/b/libtidepool.so 101 2>&1 | tail -4
done
echo "== replays, simulated device, no kernels, 8 passes; builds in turn, 9 rounds; ns per op"
for t in traces/*.csv.gz; do
  for b in old head ws; do : > /tmp/r_$b; done
  for r in $(seq 9); do for b in old head ws; do
    /tmp/v_$b/b/tidepool replay --device-work none --no-chart --json --no-progress --passes 8 $t | sed -n 's/.*"ns_per_op": \([0-9.]*\).*/\1/p' | head -1 >> /tmp/r_$b
  done; done
  python3 - $t <<'PY'
import sys, statistics as st
v = {b: [float(x) for x in open('/tmp/r_' + b).read().split()] for b in ('old', 'head', 'ws')}
r1 = st.median([h / o for h, o in zip(v['head'], v['old'])]); r2 = st.median([w / h for w, h in zip(v['ws'], v['head'])])
print("%-26s old %.1f  head %.1f  ws %.1f   head/old %.3f  ws/head %.3f (medians of the rounds' ratios)" % (sys.argv[1].split('/')[-1], st.median(v['old']), st.median(v['head']), st.median(v['ws']), r1, r2))
PY
done
echo "== done $(date -u +%FT%TZ)"

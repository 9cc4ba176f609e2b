#!/bin/sh
# Run 29: peak pages (2 MiB) and peak reserved / peak live of every trace, replayed with expandable
# segments on the simulated device by BUILD/tidepool (a build with find_variants.patch or
# growth_variants.patch applied; the variant is picked by EXP_MODE/EXP_RATIO or EXP_TIE/EXP_REL).
# usage: peaks.sh BUILD [conf]
B=$1; C=${2:-expandable_segments:True}
for t in traces/*.csv.gz; do
  out=$($B/tidepool replay --device-work none --no-chart --json --conf $C $t 2>/dev/null)
  echo "$out" | python3 -c "
import json,sys
try:
  d=json.load(sys.stdin); print('%s %d %.4f' % ('$t'.split('/')[-1][:8], round(d['peak_reserved_bytes']/2**21), d['peak_reserved_over_live']), end=' | ')
except Exception: print('FAIL', end=' | ')"
done; echo

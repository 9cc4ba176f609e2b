#!/bin/bash
# Run 23, call 3: parking by size (hint_parking.patch) and no parking (TIDE_NO_PARKING) against the head,
# on this host: ab_micro both orders, and the four traces replayed by each build's command on the
# simulated device (--device-work none, 40 passes), nine rounds taking turns.
set -u
OUT=${OUT:-/tmp/out}; mkdir -p $OUT
exec > >(tee -a $OUT/log3.txt) 2>&1
echo "== $(date -u +%FT%TZ)"
lscpu | grep -E "^Model name" | tr -s ' '
variant() { # name, cmake C flags, patch or ""
  rm -rf /tmp/$1 && mkdir -p /tmp/$1 && tar -c CMakeLists.txt cmake src include tests bench tools fuzz | tar -x -C /tmp/$1 &&
  (cd /tmp/$1 && { [ -z "$3" ] || patch -p1 -s -N < "$OLDPWD/$3" </dev/null; } && cmake -S . -B b -DCMAKE_BUILD_TYPE=Release -DCMAKE_C_FLAGS="$2" >/dev/null && cmake --build b -j5 --target tidepool_shared tidepool_cli ab_micro 2>&1 | grep -E " error |Error")
}
variant head "" "" & P1=$!
variant hint "" .run23/hint_parking.patch & P2=$!
variant nopark "-DTIDE_NO_PARKING=1" "" & P3=$!
wait $P1 $P2 $P3
ls /tmp/head/b/libtidepool.so /tmp/hint/b/libtidepool.so /tmp/nopark/b/libtidepool.so /tmp/head/b/tidepool /tmp/hint/b/tidepool /tmp/nopark/b/tidepool || exit 1
AB=/tmp/head/b/bench/ab_micro
for order in "head hint" "hint head" "head hint" "hint head" "head hint" "hint head" "head nopark" "nopark head"; do
  set -- $order
  echo "-- $(date -u +%T) A=$1 B=$2"
  timeout 60 $AB /tmp/$1/b/libtidepool.so /tmp/$2/b/libtidepool.so 61 2>&1 | tail -3
done
echo "== $(date -u +%FT%TZ) traces, ns per operation (40 passes), rounds taking turns"
for r in 1 2 3 4 5 6 7 8 9; do
  for v in head hint nopark; do
    line="round $r $v:"
    for t in traces/*.csv.gz; do
      ns=$(timeout 60 /tmp/$v/b/tidepool replay --device-work none --no-chart --json --passes 40 $t | sed -n 's/.*"ns_per_op": \([0-9.]*\).*/\1/p')
      line="$line $(basename $t .csv.gz)=$ns"
    done
    echo "$line"
  done
done
echo "== done $(date -u +%FT%TZ)"

#!/bin/bash
# Run 15, call 8: bench/ab_micro on the H200's host: the code before the branch changes (A:
# branches.patch reversed) against after (B) in one process, in both orders, and the new code against
# a copy of itself (the method's own spread), 61 rounds each.
set -u
exec > >(tee -a $OUT/ab_micro_log.txt) 2>&1
rm -rf /tmp/a && mkdir /tmp/a && cp -r CMakeLists.txt Makefile bench include src tests tools traces python fuzz /tmp/a/ && (cd /tmp/a && patch -s -R -p1 < $OLDPWD/.run15/branches.patch) || exit 1
( cmake -S . -B build-ab -DCMAKE_BUILD_TYPE=Release -DTIDE_WERROR=ON >/dev/null && cmake --build build-ab -j8 --target tidepool_shared ab_micro 2>&1 | grep -E " error |Error" ) &
PB=$!
( cd /tmp/a && cmake -S . -B build-ab -DCMAKE_BUILD_TYPE=Release -DTIDE_WERROR=ON >/dev/null && cmake --build build-ab -j8 --target tidepool_shared 2>&1 | grep -E " error |Error" ) &
PA=$!
wait $PA $PB
NEW=$PWD/build-ab/libtidepool.so OLD=/tmp/a/build-ab/libtidepool.so
cp $NEW /tmp/libtidepool_copy.so
for i in 1 2; do
  echo "== old new"; build-ab/bench/ab_micro $OLD $NEW 61
  echo "== new old"; build-ab/bench/ab_micro $NEW $OLD 61
  echo "== new copy"; build-ab/bench/ab_micro $NEW /tmp/libtidepool_copy.so 61
  echo "== copy new"; build-ab/bench/ab_micro /tmp/libtidepool_copy.so $NEW 61
done

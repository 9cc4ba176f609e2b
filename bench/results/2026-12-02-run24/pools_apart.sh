#!/bin/sh
# Builds the library with pools_apart.patch at several thresholds and replays the traces with
# expandable_segments:True (simulated device, no device work).
set -e
cd "$(dirname "$0")/../../.."
for thr in "1 * MiB" "2 * MiB" "4 * MiB" "8 * MiB"; do
  rm -rf /tmp/pa && mkdir /tmp/pa && cp -r CMakeLists.txt cmake include tests bench tools fuzz src /tmp/pa/
  sed -i "s|        return POOL_LARGE;|        return rounded < ($thr) ? POOL_SMALL : POOL_LARGE;|" /tmp/pa/src/internal.h
  (cd /tmp/pa && cmake -S . -B b -DCMAKE_BUILD_TYPE=Release >/dev/null && cmake --build b -j2 --target tidepool_cli >/dev/null)
  echo "## below ($thr): the small pool's own address range"
  /tmp/pa/b/tidepool replay --conf expandable_segments:True --device-work none traces/gpt2_varlen.csv.gz traces/lstm_loop.csv.gz traces/seed_transformer.csv.gz
done

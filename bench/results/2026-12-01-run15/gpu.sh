#!/bin/bash
# Run 15, one call: (1) vm_cost with the alias check; (2) does a profile-guided build (GCC PGO, trained
# on the trace replays on the simulated device) make tidepool's micro patterns faster on this host?
set -u
exec > >(tee "$OUT/log.txt") 2>&1
T0=$(date +%s)
el() { echo "[$(( $(date +%s) - T0 )) s] $*"; }
nproc; lscpu | grep -E "Model name|L2|L3" ; nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
git rev-parse HEAD
CUDA=/usr/local/cuda
# builds in the background while vm_cost runs
( cmake -S . -B build-gpu -DCMAKE_BUILD_TYPE=Release -DTIDE_WERROR=ON > /dev/null && cmake --build build-gpu -j8 > "$OUT/build_a.txt" 2>&1 && bench/build_gpu_bench.sh build-gpu >> "$OUT/build_a.txt" 2>&1; echo "A rc=$?" ) &
PA=$!
( set -e
  P=$PWD/pgo-prof; rm -rf "$P"
  cmake -S . -B build-pgo -DCMAKE_BUILD_TYPE=Release -DTIDE_WERROR=ON "-DCMAKE_C_FLAGS=-fprofile-generate -fprofile-update=single -fprofile-dir=$P" -DCMAKE_EXE_LINKER_FLAGS=-fprofile-generate > /dev/null
  cmake --build build-pgo -j8 --target tidepool_cli > "$OUT/build_b.txt" 2>&1
  for t in traces/*.csv.gz; do
    build-pgo/tidepool replay "$t" --device-work none --no-chart --no-progress --json > /dev/null
    build-pgo/tidepool replay "$t" --device-work none --no-chart --no-progress --json --conf expandable_segments:True > /dev/null
  done
  cmake -S . -B build-pgo "-DCMAKE_C_FLAGS=-fprofile-use -fprofile-dir=$P -Wno-missing-profile" -DCMAKE_EXE_LINKER_FLAGS= > /dev/null
  cmake --build build-pgo -j8 --target tidepool_static >> "$OUT/build_b.txt" 2>&1
  bench/build_gpu_bench.sh build-pgo >> "$OUT/build_b.txt" 2>&1; echo "B rc=$?" ) &
PB=$!
cc -O2 -Wall -I$CUDA/include bench/vm_cost.c -o vm_cost -L$CUDA/lib64/stubs -lcuda && ./vm_cost 31 | tee "$OUT/vm_cost.md"
el "vm_cost done"
wait $PA $PB
el "builds done"
tail -3 "$OUT/build_a.txt" "$OUT/build_b.txt"
[ -x build-gpu/gpu_bench ] && [ -x build-pgo/gpu_bench ] || { el "a build failed"; exit 1; }
for r in 1 2 3 4; do
  for v in gpu pgo; do
    el "round $r $v micro"
    build-$v/gpu_bench micro 5 --only tidepool > "$OUT/micro_${v}_$r.md" 2>&1
    grep -E "same 1 MiB|random" "$OUT/micro_${v}_$r.md" | cut -d'|' -f2,3
  done
done
for r in 1 2 3; do
  for v in gpu pgo; do
    el "round $r $v replay"
    build-$v/gpu_bench replay --only tidepool traces/*.csv.gz > "$OUT/replay_${v}_$r.md" 2>&1
  done
done
el done

# Run 24, call 2, as given to the device tool (the build of call 1 still there): gpu_bench micro 7 twice more.
set -u; OUT=${OUT:-/tmp/out}; for i in 2 3; do echo "== $(date -u +%FT%TZ) micro 7, call $i"; timeout 280 build-gpu/gpu_bench micro 7 > $OUT/micro7_call$i.md; cat $OUT/micro7_call$i.md; done; echo "== done $(date -u +%FT%TZ)"

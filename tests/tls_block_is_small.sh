#!/bin/sh
# libtidepool.so's thread-local block stays small: built with TIDE_TLS_INITIAL_EXEC, all of it sits in
# the static TLS that glibc keeps spare for libraries loaded with dlopen (1664 bytes by default, shared
# by every such library in the process), so a large block (an error message's buffer, say) there would
# make dlopen fail in processes that load several. Usage: tls_block_is_small.sh LIBRARY [LIMIT_BYTES]
set -eu
lib=$1
limit=${2:-256}
command -v readelf >/dev/null || { echo "readelf not found (binutils)"; exit 2; }
# The program header of type TLS; its sixth field is the size in memory (hex).
size=$(readelf -lW "$lib" | awk '$1 == "TLS" { print $6 }')
if [ -z "$size" ]; then
    echo "$lib has no thread-local block"
    exit 0
fi
bytes=$((size))
echo "$lib: thread-local block of $bytes bytes (limit $limit)"
if [ "$bytes" -gt "$limit" ]; then
    echo "too large: keep big per-thread data in host memory reached through one thread-local pointer"
    exit 1
fi

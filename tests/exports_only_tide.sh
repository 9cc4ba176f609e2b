#!/bin/sh
# The installed libraries export the public API alone: every global symbol that libtidepool.a and
# libtidepool.so define starts with tide_. Then a program that defines, as its own functions, every
# name the library uses inside (read from the build's internal archive: parse_size, heap_create, ...)
# links against the installed libtidepool.a and runs, calling its own functions and tidepool's.
# Usage: exports_only_tide.sh BUILD_DIR C_COMPILER
set -eu
build=$1 cc=$2
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
cmake --install "$build" --prefix "$work/prefix" >/dev/null
archive=$(find "$work/prefix" -name libtidepool.a | head -n 1)
shared=$(find "$work/prefix" -name 'libtidepool.so.*' -type f | head -n 1)
[ -n "$archive" ] && [ -n "$shared" ] || { echo "FAIL: libtidepool.a or libtidepool.so not installed"; exit 1; }

status=0
for lib in "$archive" "$shared"; do
    case "$lib" in *.a) list="nm -g --defined-only" ;; *) list="nm -D --defined-only" ;; esac
    $list "$lib" | awk 'NF == 3 { print $3 }' | sort -u > "$work/exported"
    grep -v '^tide_' "$work/exported" > "$work/foreign" || true
    n=$(wc -l < "$work/exported")
    if [ -s "$work/foreign" ]; then
        echo "FAIL: $(basename "$lib") exports $(wc -l < "$work/foreign") symbols without the tide_ prefix:"
        head -n 20 "$work/foreign"
        status=1
    else
        echo "$(basename "$lib"): $n symbols, every one tide_*"
    fi
    [ "$n" -gt 20 ] || { echo "FAIL: $(basename "$lib") exports only $n symbols: is the API there?"; status=1; }
done

# The names the library keeps inside, from the archive the tests link (every symbol).
internal=$(find "$build" -maxdepth 1 -name 'libtidepool_internal.a' | head -n 1)
[ -n "$internal" ] || { echo "FAIL: no libtidepool_internal.a in $build"; exit 1; }
nm -g --defined-only "$internal" | awk 'NF == 3 { print $3 }' | grep -v '^tide_' | grep -v '^_' | sort -u > "$work/inside"
count=$(wc -l < "$work/inside")
[ "$count" -gt 20 ] || { echo "FAIL: only $count internal names found in $internal"; exit 1; }
{
    echo '#include <stdio.h>'
    echo '#include "tidepool.h"'
    echo '#include "tidepool_sim.h"'
    while read -r name; do echo "int $name(void); int $name(void) { return 7; }"; done < "$work/inside"
    echo 'int main(void) {'
    echo '    tide_sim *dev; tide_allocator *t; void *p;'
    echo '    if (tide_sim_create(NULL, &dev) != TIDE_OK) return 1;'
    echo '    tide_backend backend = tide_sim_backend(dev);'
    echo '    if (tide_create(&backend, NULL, &t) != TIDE_OK) return 1;'
    echo '    if (tide_malloc(t, 4096, 0, &p) != TIDE_OK || tide_free(t, p) != TIDE_OK) return 1;'
    echo '    tide_destroy(t); tide_sim_destroy(dev);'
    echo "    if ($(head -n 1 "$work/inside")() != 7) return 1;"
    echo "    printf(\"a program with its own $count names of tidepool's insides linked and ran\\\\n\");"
    echo '    return 0;'
    echo '}'
} > "$work/neighbour.c"
if ! "$cc" -std=c11 -o "$work/neighbour" "$work/neighbour.c" -I"$work/prefix/include" "$archive" -lpthread -ldl -lm \
    2> "$work/link.log"; then
    echo "FAIL: a program with its own functions named as tidepool's internal ones does not link:"
    head -n 20 "$work/link.log"
    exit 1
fi
"$work/neighbour" || { echo "FAIL: the program linked but did not run"; exit 1; }
exit $status

#!/bin/sh
# The functions of a tide_malloc and tide_free pair carry no stack canary when the library is built with
# -fstack-protector-strong, as Ubuntu's GCC builds by default. A canary is a load and a store at entry
# and a load, a compare and a branch at exit, in every function with an array or a local whose address
# is taken, and in everything inlined into it. On the H200 machine's Ubuntu it cost an alloc+free pair
# 1-5%.
#
# Builds the library (Release, as users do) with -fstack-protector-strong into WORK, then looks for the
# canary's code (%fs:0x28 on x86-64, __stack_chk_guard elsewhere; __stack_chk_fail on both) in each hot
# function, including its compiler-made parts (.isra, .constprop, .cold...). A function that takes a
# local's address on this path must move that to an out-of-line slow path, or be marked TIDE_NO_CANARY
# where no array is on its frame (src/types.h).
#
# Usage: hot_path_has_no_canary.sh SOURCE_DIR C_COMPILER WORK
# Exit status 77 (a skip) where the compiler has no -fstack-protector-strong or objdump is missing.
set -eu
src=$1
cc=$2
work=$3
hot="tide_malloc allocator_malloc tide_free free_found lifecycle_free heap_take_fit heap_take_block
heap_reuse_parked heap_park heap_settle heap_make_free make_free free_index_find free_index_insert
free_index_remove free_index_would_find free_index_to_front ptr_map_get ptr_map_insert ptr_map_remove
history_heap_alloc"

command -v objdump >/dev/null || { echo "skipped: objdump not found (binutils)"; exit 77; }
rm -rf "$work"
mkdir -p "$work"
echo 'int f(void); int f(void) { return 0; }' >"$work/probe.c"
if ! "$cc" -fstack-protector-strong -c "$work/probe.c" -o "$work/probe.o" 2>/dev/null; then
    echo "skipped: $cc has no -fstack-protector-strong"
    exit 77
fi

cmake -S "$src" -B "$work/build" -DCMAKE_BUILD_TYPE=Release -DCMAKE_C_COMPILER="$cc" \
    -DCMAKE_C_FLAGS=-fstack-protector-strong >"$work/build.log" 2>&1 &&
    cmake --build "$work/build" --target tidepool_shared >>"$work/build.log" 2>&1 ||
    { cat "$work/build.log"; echo "building the library with -fstack-protector-strong failed"; exit 1; }
lib="$work/build/libtidepool.so"

# The functions in which the canary's code appears: each label line names the function whose
# instructions follow.
objdump -d --no-show-raw-insn "$lib" | awk '
    /^[0-9a-f]+ <.*>:$/ { name = substr($2, 2, length($2) - 3); next }
    name != "" && /%fs:0x28|__stack_chk/ { print name }' | sort -u >"$work/with_canary"
objdump -t "$lib" | awk '{ print $NF }' | sort -u >"$work/symbols"

present=0
guarded=0
for f in $hot; do
    # the function itself and its compiler-made parts: NAME, NAME.isra.0, NAME.cold, ...
    if grep -Eq "^$f(\.|\$)" "$work/symbols"; then
        present=$((present + 1))
    fi
    hits=$(grep -E "^$f(\.|\$)" "$work/with_canary" | tr '\n' ' ' || true)
    if [ -n "$hits" ]; then
        echo "stack canary in: $hits"
        guarded=$((guarded + 1))
    fi
done
echo "hot functions in the library (the others are inlined): $present; with a canary: $guarded"
if [ "$present" -eq 0 ]; then
    echo "none of the hot functions is in $lib: the list above no longer matches the code"
    exit 1
fi
[ "$guarded" -eq 0 ]

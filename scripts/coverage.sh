#!/bin/sh
# Line coverage of the library by the CPU test suite (make coverage).
#
#   scripts/coverage.sh [BUILD_DIR] [--lines] [--gpu]
#
# Builds with gcc --coverage in BUILD_DIR (default build-coverage), runs every CPU test (--gpu: every
# GPU test instead, on a machine with a GPU: the CUDA backend and tide_devices), and prints for
# each file of src/ how many of its lines that can run did run. The tests link the library in several
# builds (the plain one, and variants with host faults injected, without parking, with a broken pending
# state): a line counts as run if any build ran it. --lines also lists the lines no test ran.
#
# A test that ends its process by abort (the debug:2 check in test_check, in a forked child) leaves no
# counts, so what only such a process runs reads as not run.
set -eu
cd "$(dirname "$0")/.."
BUILD=build-coverage
LINES=0
TESTS="-LE gpu"
JOBS=$(nproc)
for arg in "$@"; do
    case "$arg" in
        --lines) LINES=1 ;;
        --gpu) TESTS="-L gpu" JOBS=1 ;; # one at a time, as make gpu-check runs them: they share the GPU
        -*) echo "coverage: unknown option $arg (known: --lines, --gpu)" >&2; exit 2 ;;
        *) BUILD=$arg ;;
    esac
done
command -v gcov >/dev/null || { echo "coverage: needs gcov (it comes with gcc)" >&2; exit 1; }

cmake -S . -B "$BUILD" -DCMAKE_BUILD_TYPE=Debug -DTIDE_WERROR=ON -DTIDE_LTO=OFF \
    -DCMAKE_C_FLAGS="--coverage -O0" -DCMAKE_EXE_LINKER_FLAGS=--coverage \
    -DCMAKE_SHARED_LINKER_FLAGS=--coverage >/dev/null
cmake --build "$BUILD" -j "$(nproc)"
BUILD=$(cd "$BUILD" && pwd) # gcov runs from elsewhere below
find "$BUILD" -name '*.gcda' -delete
# shellcheck disable=SC2086 # TESTS is two words
ctest --test-dir "$BUILD" $TESTS -j "$JOBS" --output-on-failure >"$BUILD/coverage-ctest.log" 2>&1 || {
    tail -n 40 "$BUILD/coverage-ctest.log"
    echo "coverage: a test failed (all of it: $BUILD/coverage-ctest.log)" >&2
    exit 1
}

# One gcov report per object directory that holds the library's sources.
out="$BUILD/gcov"
rm -rf "$out"
mkdir -p "$out"
n=0
for dir in $(find "$BUILD" -name '*.gcda' -path '*src*' -exec dirname {} \; | sort -u); do
    n=$((n + 1))
    mkdir -p "$out/$n"
    (cd "$out/$n" && gcov -o "$dir" "$dir"/*.gcda >/dev/null 2>&1)
done

# gcov's lines read "count: line: source": a number if the line ran, ##### or ===== if it could
# have and did not, - if it holds no code.
find "$out" -name '*.c.gcov' | sort | xargs awk -v lines="$LINES" '
    function sort_in_place(a, n,    i, j, t) { # a[1..n], ascending (insertion sort: a few hundred at most)
        for (i = 2; i <= n; i++) for (j = i; j > 1 && a[j - 1] > a[j]; j--) {
            t = a[j]; a[j] = a[j - 1]; a[j - 1] = t }
    }
    FNR == 1 { file = FILENAME; sub(/.*\//, "", file); sub(/\.gcov$/, "", file) }
    {
        count = $1; sub(/:$/, "", count)
        split($0, f, ":")
        line = f[2] + 0
        if (count == "-" || line == 0) next
        key = file SUBSEP line
        if (!(key in runnable)) {
            runnable[key] = 1; total[file]++
            source = $0; sub(/^[^:]*:[^:]*:/, "", source); text[key] = source
        }
        if (count ~ /^[0-9]/ && !(key in ran)) { ran[key] = 1; done[file]++ }
    }
    END {
        printf "%-16s %8s %8s %8s\n", "file", "lines", "run", "run %"
        for (file in total) names[++k] = file
        sort_in_place(names, k)
        for (i = 1; i <= k; i++) {
            file = names[i]; all += total[file]; hit += done[file]
            printf "%-16s %8d %8d %7.1f%%\n", file, total[file], done[file], 100 * done[file] / total[file]
        }
        printf "%-16s %8d %8d %7.1f%%\n", "all", all, hit, 100 * hit / all
        if (!lines) exit
        for (key in runnable) if (!(key in ran)) {
            split(key, p, SUBSEP); missed[++m] = sprintf("src/%s:%05d", p[1], p[2]); source_of[missed[m]] = text[key] }
        sort_in_place(missed, m)
        for (i = 1; i <= m; i++) {
            where = missed[i]; split(where, p, ":")
            printf "not run: %s:%d:%s\n", p[1], p[2] + 0, source_of[where] }
    }'

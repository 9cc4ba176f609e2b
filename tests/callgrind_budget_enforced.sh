#!/bin/sh
# bench/callgrind_replay.sh --budget (make check-speed) on lstm_loop: within a generous budget it passes;
# over a budget, with no line for the trace, with a budget that is not a number, or with no budget file
# it fails and says why. Skipped (77) without valgrind.
# Usage: callgrind_budget_enforced.sh SOURCE_DIR BUILD_DIR
set -u
src=$1
build=$2
command -v valgrind >/dev/null || { echo "valgrind is not installed: skipped"; exit 77; }
cd "$src" || exit 1
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
trace=traces/lstm_loop.csv.gz
failed=0
# expect STATUS PATTERN BUDGET_FILE: the script's exit status and a line of its output
expect() {
    bench/callgrind_replay.sh --budget "$3" "$build" "$trace" > "$tmp/out" 2>&1
    status=$?
    if [ "$status" != "$1" ] || ! grep -q "$2" "$tmp/out"; then
        echo "FAIL: budget file $3 ($(cat "$3" 2>/dev/null | tr '\n' ' ')): status $status, wanted $1 and a line matching '$2':"
        cat "$tmp/out"
        failed=1
    else
        echo "ok: status $status, '$2'"
    fi
}
printf '# generous\nlstm_loop.csv.gz 100000\n' > "$tmp/generous"
expect 0 "every trace within its budget" "$tmp/generous"
printf 'lstm_loop.csv.gz 1 # far too tight\n' > "$tmp/tight"
expect 1 "lstm_loop.csv.gz: [0-9.]* instructions per operation, over its budget of 1 " "$tmp/tight"
printf 'gpt2_varlen.csv.gz 100000\n' > "$tmp/other"
expect 1 "lstm_loop.csv.gz has no budget in" "$tmp/other"
printf 'lstm_loop.csv.gz many\n' > "$tmp/words"
expect 2 "the budget of lstm_loop.csv.gz is not a number: many" "$tmp/words"
expect 2 "cannot read the budget file" "$tmp/missing"
exit $failed

#!/bin/sh
# The --budget of bench/callgrind_replay.sh and bench/callgrind_micro.sh (make check-speed): within a
# generous budget it passes; over a budget, with no line for a figure, with a budget that is not a
# number, or with no budget file it fails and says why. On lstm_loop, and on micro patterns of a few
# pairs. Skipped (77) without valgrind.
# Usage: callgrind_budget_enforced.sh SOURCE_DIR BUILD_DIR
set -u
src=$1
build=$2
command -v valgrind >/dev/null || { echo "skipped: valgrind is not installed"; exit 77; }
cd "$src" || exit 1
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
failed=0
# expect STATUS PATTERN COMMAND...: the command's exit status, and a line of its output
expect() {
    want=$1
    pattern=$2
    shift 2
    "$@" > "$tmp/out" 2>&1
    status=$?
    if [ "$status" != "$want" ] || ! grep -q "$pattern" "$tmp/out"; then
        echo "FAIL: $*: status $status, wanted $want and a line matching '$pattern':"
        cat "$tmp/out"
        failed=1
    else
        echo "ok: status $status, '$pattern'"
    fi
}
replay() { bench/callgrind_replay.sh --budget "$1" "$build" traces/lstm_loop.csv.gz; }
micro() { PAIRS=2000 bench/callgrind_micro.sh --budget "$1" "$build"; }

printf '# generous\nlstm_loop.csv.gz 100000\n' > "$tmp/generous"
expect 0 "every figure within its budget" replay "$tmp/generous"
printf 'lstm_loop.csv.gz 1 # far too tight\n' > "$tmp/tight"
expect 1 "lstm_loop.csv.gz: [0-9.]* instructions, over its budget of 1 " replay "$tmp/tight"
printf 'gpt2_varlen.csv.gz 100000\n' > "$tmp/other"
expect 1 "lstm_loop.csv.gz has no budget in" replay "$tmp/other"
printf 'lstm_loop.csv.gz many\n' > "$tmp/words"
expect 2 "the budget of lstm_loop.csv.gz is not a number: many" replay "$tmp/words"
expect 2 "cannot read the budget file" replay "$tmp/missing"

printf 'micro_same 100000\nmicro_small 100000\nmicro_large 100000\nmicro_past_mark 100000\n' > "$tmp/micro_generous"
expect 0 "every figure within its budget" micro "$tmp/micro_generous"
printf 'micro_same 100000\nmicro_small 100000\nmicro_large 1\nmicro_past_mark 100000\n' > "$tmp/micro_tight"
expect 1 "micro_large: [0-9.]* instructions, over its budget of 1 " micro "$tmp/micro_tight"
expect 2 "usage: micro_sim --count" "$build/bench/micro_sim" --count huge 5
exit $failed

# Sourced by bench/callgrind_replay.sh and bench/callgrind_micro.sh: what both do with callgrind's
# output, and their --budget option.
#
# callgrind_total FILE: the instructions a callgrind output file counted in all.
# budget_open FILE: checks that FILE is given and can be read, and keeps it for budget_check.
# budget_check NAME COUNT: compares COUNT (instructions per operation or per pair) with NAME's line in
#   the file ("NAME NUMBER"; '#' starts a comment). Over it, or with no line for NAME, says so on
#   stderr and marks the run failed; a line whose budget is no number stops the script (status 2).
# budget_finish: with a budget, exits 1 if any check failed, else says that all passed.
BUDGET_FILE=
BUDGET_OVER=0
callgrind_total() {
    total=$(sed -n 's/^summary: *\([0-9]*\).*/\1/p' "$1")
    [ -n "$total" ] || total=$(sed -n 's/^totals: *\([0-9]*\).*/\1/p' "$1")
    echo "$total"
}
budget_open() {
    [ -n "$1" ] || { echo "$(basename "$0"): --budget needs a file" >&2; exit 2; }
    [ -r "$1" ] || { echo "$(basename "$0"): cannot read the budget file $1" >&2; exit 2; }
    BUDGET_FILE=$1
}
budget_check() {
    [ -n "$BUDGET_FILE" ] || return 0
    allowed=$(awk -v n="$1" '{sub(/#.*/, "")} $1 == n {print $2}' "$BUDGET_FILE")
    case "$allowed" in
        *[!0-9.]*) echo "$(basename "$0"): $BUDGET_FILE: the budget of $1 is not a number: $allowed" >&2
                   exit 2 ;;
    esac
    if [ -z "$allowed" ]; then
        echo "  $1 has no budget in $BUDGET_FILE: add a line \"$1 N\"" >&2
        BUDGET_OVER=1
    elif awk -v a="$2" -v b="$allowed" 'BEGIN {exit !(a > b)}'; then
        echo "  $1: $2 instructions, over its budget of $allowed ($BUDGET_FILE)" >&2
        BUDGET_OVER=1
    fi
}
budget_finish() {
    [ -n "$BUDGET_FILE" ] || return 0
    if [ "$BUDGET_OVER" = 1 ]; then
        echo "over the instruction budget: find what the hot path gained (callgrind_annotate)," >&2
        echo "or, if the cost is meant, raise the budget in the same commit and say why there" >&2
        exit 1
    fi
    echo "every figure within its budget ($BUDGET_FILE)"
}

#!/bin/sh
# Prints why each skipped test was skipped, after a ctest run: ctest's summary names skipped tests but
# not their reasons, which each test prints as a line "skipped: ...". Reads BUILD's LastTest.log.
# Usage: scripts/skip_reasons.sh BUILD
log="${1:?usage: skip_reasons.sh BUILD}/Testing/Temporary/LastTest.log"
[ -f "$log" ] || exit 0
awk '
    / Testing: / { name = $NF }
    /^skipped: / { reasons[++n] = sprintf("  %-36s %s", name, substr($0, 10)) }
    END {
        if (n == 0) exit
        print "Why the skipped tests were skipped:"
        for (i = 1; i <= n; i++) print reasons[i]
    }' "$log"

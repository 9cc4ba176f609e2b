#!/bin/sh
# Every number the command line takes is parsed strictly and range-checked: a bad one is refused with a
# message naming it and exit status 2, in flags and in the JSON tidepool stats reads; and a statistics
# file is read whole, however large.
#   tests/cli_numbers.sh TIDEPOOL TRACE WORK
set -u
tool=$1 trace=$2 work=$3
mkdir -p "$work"
fails=0
expect() { # expect STATUS WORDS COMMAND...
    status=$1 words=$2
    shift 2
    out=$("$@" 2>&1)
    got=$?
    if [ "$got" != "$status" ] || ! printf '%s' "$out" | grep -qF -- "$words"; then
        echo "FAIL: $* -> exit $got, said: $out (expected $status and \"$words\")"
        fails=$((fails + 1))
    fi
}
for v in inf nan 1e30GiB -5GiB ' 80GiB' 0x10 1e3 0 ''; do
    expect 2 "--device-memory takes a size like 80GiB, not '$v'" "$tool" replay --device-memory "$v" "$trace"
done
for v in ' 5' -1 +3 18446744073709551616 5x 0 100001 1e2; do
    expect 2 "--passes takes a number from 1 to 100000, not '$v'" "$tool" replay --passes "$v" "$trace"
done
expect 2 "--kernel-delay-us takes microseconds, not '-1'" "$tool" replay --kernel-delay-us -1 "$trace"
expect 2 "--inflight takes a number of kernels, not 'nan'" "$tool" replay --inflight nan "$trace"
expect 2 "--history takes a number of events from 1 to" "$tool" replay --history 99999999999999999999 "$trace"
expect 2 "--empty-cache-every takes a number of operations, not '1.5'" "$tool" replay --empty-cache-every 1.5 "$trace"
expect 2 "tidepool replay: --conf: bad value '0x1p-1' for garbage_collection_threshold" "$tool" replay --conf garbage_collection_threshold:0x1p-1 "$trace"
expect 2 "tidepool replay: TIDEPOOL_CONF: bad value 'zz' for limit" env TIDEPOOL_CONF=limit:zz "$tool" replay "$trace"
expect 2 "tidepool plot: TIDEPOOL_CONF: unknown key" env TIDEPOOL_CONF=nokey:1 "$tool" plot -o "$work/x.svg" "$trace"
expect 2 "tidepool plot: --passes takes" "$tool" plot --passes x -o "$work/x.svg" "$trace"

n=0
for j in '{"a.all.current": nan}' '{"a.all.current": 1e999}' '{"a.all.current": 1e300}' '{"a.all.current": 1.}' \
         '{"a.all.current": -}' '{"a.all.current": Infinity}' '{"a.all.current": +1}'; do
    n=$((n + 1))
    printf '%s' "$j" > "$work/bad$n.json"
    expect 2 "is not a number a statistic can have" "$tool" stats "$work/bad$n.json"
done
printf '{"a.all.current": 01}' > "$work/lead.json"
expect 2 "expected ',' or '}' after the value" "$tool" stats "$work/lead.json"
printf '{"a.all.current": 0x10}' > "$work/hex.json"
expect 2 "expected ',' or '}' after the value" "$tool" stats "$work/hex.json"
printf '{"a.all.current": 1,,"b.all.current": 2}' > "$work/commas.json"
expect 2 "expected a \"key\"" "$tool" stats "$work/commas.json"
# Statistics are read as whole numbers, exactly (a double would print 2^53 + 1 as ...992), from -2^63
# to 2^64 - 1, and nothing else.
printf '{"num_ooms": 9007199254740993, "num_device_free": 18446744073709551615, "num_fence_errors": -9223372036854775808}' > "$work/exact.json"
expect 0 "9007199254740993" "$tool" stats "$work/exact.json"
expect 0 "18446744073709551615" "$tool" stats "$work/exact.json"
expect 0 "-9223372036854775808" "$tool" stats "$work/exact.json"
for v in 18446744073709551616 -9223372036854775809 1.5 1e3 1.0 -0.0; do
    printf '{"num_ooms": %s}' "$v" > "$work/inexact.json"
    expect 2 "is not a number a statistic can have" "$tool" stats "$work/inexact.json"
done
# The options' numbers go through the library's parser: whole numbers of any length, exactly.
expect 2 "--device-memory takes a size like 80GiB, not '0.3B'" "$tool" replay --device-memory 0.3B "$trace"
expect 2 "--device-memory takes a size like 80GiB, not '18446744073709551616'" "$tool" replay --device-memory 18446744073709551616 "$trace"
expect 2 "--passes takes a number from 1 to 100000, not '1KiB'" "$tool" replay --passes 1KiB "$trace"
expect 2 "--passes takes a number from 1 to 100000, not '0000000000000000000000100001'" "$tool" replay --passes 0000000000000000000000100001 "$trace"
# Two megabytes of white space before the statistic: the whole file is read, not its first megabyte.
{ printf '{'; head -c 2097152 /dev/zero | tr '\0' ' '; printf '"reserved_bytes.all.current": 1048576}'; } > "$work/large.json"
expect 0 "reserved_bytes" "$tool" stats "$work/large.json"
[ "$fails" = 0 ] && echo "all numbers checked"
exit "$fails"

"""python3 -m tidepool.trace on hostile histories: each is refused with TraceError naming the event (and,
from the command line, the file's line), in one line on stderr, exit status 1, no traceback and no
trace file left behind; the limits are those `tidepool replay` applies (streams: a trace of 1,023
besides the default replays, one of 1,024 is refused by both). Standard library only; libtidepool is not
loaded, only the tidepool command is run.

    python3 tests/test_python_trace.py build/tidepool
"""
import io
import os
import re
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "python"))

from tidepool import trace  # noqa: E402
from tidepool.trace import TraceError  # noqa: E402

failures = []


def event(kind, addr, size, stream=0):
    """One event as tide_history_json writes it; the numbers are JSON text, so any token can be put."""
    return ('{"seq": 0, "time_ns": 0, "kind": "%s", "stream": %s, "addr": %s, "size": %s, "tag": null, '
            '"frames": []}' % (kind, stream, addr, size))


def history(events, ordered="true", dropped="0"):
    """A history JSON in tide_history_json's layout: event i on line i + 2."""
    return ('{"dropped": %s, "ordered": %s, "events": [' % (dropped, ordered)
            + ",".join("\n  " + e for e in events) + "\n]}\n")


A, B = event("alloc", 4096, 100), event("alloc", 8192, 200)
# (name, history text, what the message must say, the event number or None, the line or None)
HOSTILE = [
    ("size Infinity", history([A, event("alloc", 12288, "Infinity")]), "size is Infinity, not a whole number", 1, 3),
    ("size -Infinity", history([event("alloc", 12288, "-Infinity")]), "size is -Infinity", 0, 2),
    ("size NaN", history([A, B, event("alloc", 12288, "NaN")]), "size is NaN", 2, 4),
    ("size 1e30", history([A, event("alloc", 12288, "1e30")]), "size is 1e+30, not a whole number", 1, 3),
    ("size 4096.0", history([event("alloc", 12288, "4096.0")]), "size is 4096.0", 0, 2),
    ("size true", history([A, B, event("alloc", 12288, "true")]), "size is true, not a whole number", 2, 4),
    ("size a string", history([event("alloc", 4096, '"many"')]), 'size is "many", not a whole number', 0, 2),
    ("size 2^64", history([event("alloc", 4096, str(2**64))]), "size is 18446744073709551616, outside 1..", 0, 2),
    ("size 0", history([A, event("alloc", 8192, 0)]), "size is 0, outside 1..18446744073709551615", 1, 3),
    ("size negative", history([event("alloc", 8192, -5)]), "size is -5, outside", 0, 2),
    ("size missing", history(['{"kind": "alloc", "addr": 4096, "stream": 0}']), "size is missing", 0, 2),
    ("addr 1.5", history([A, event("free_requested", "1.5", 100)]), "addr is 1.5", 1, 3),
    ("addr 2^64", history([event("alloc", str(2**64), 100)]), "addr is 18446744073709551616, outside", 0, 2),
    ("stream false", history([A, event("alloc", 8192, 10, "false")]), "stream is false", 1, 3),
    ("stream -1", history([event("alloc", 8192, 10, -1)]), "stream is -1, outside", 0, 2),
    ("address still live", history([A, B, event("alloc", 4096, 50)]),
     "an allocation at 0x1000, which is still live (allocated at event 0 and not freed since)", 2, 4),
    ("address still live, unordered", history([A, event("alloc", 4096, 50)], ordered="false"),
     "recorded without TIDE_HISTORY_ORDERED", 1, 3),
    ("event not an object", history([A, "[1, 2]"]), "event 1: needs kind", 1, 3),
    ("kind not a string", history([A, B, '{"kind": 5}']), "event 2: needs kind", 2, 4),
    ("1,100 streams", history([event("alloc", 4096 * (i + 1), 10, 1000 + i) for i in range(1100)]),
     "stream 0x7e7 is the 1024th besides the default one", 1023, 1025),
    ("dropped a string", history([A], dropped='"x"'), '"dropped" is "x", not a count', None, None),
    ("ordered a number", history([A], ordered="1"), '"ordered" is 1, not true or false', None, None),
    ("no events", '{"dropped": 0}', 'no "events" list', None, None),
]


def test_history_to_trace():
    import json
    for name, text, says, index, _ in HOSTILE:
        try:
            trace.history_to_trace(json.loads(text), io.StringIO())
            failures.append("%s: converted" % name)
        except TraceError as e:
            if says not in str(e) or e.event != index or (index is not None and "event %d:" % index not in str(e)):
                failures.append("%s: TraceError %r (event %r), expected %r at event %r" % (name, str(e), e.event,
                                                                                          says, index))
        except Exception as e:  # noqa: BLE001 - anything else is the failure being reported
            failures.append("%s: %s: %s" % (name, type(e).__name__, e))
    # what replay takes passes: the largest size, an address freed and taken again, the default stream
    # beside 1,023 others
    out = io.StringIO()
    h = json.loads(history([event("alloc", 4096, 2**64 - 1), event("free_requested", 4096, 0),
                            event("alloc", 4096, 7, 5), event("empty_cache", 0, 0)]
                           + [event("alloc", 8192 * (i + 1), 1, 1000 + i) for i in range(1022)]))
    assert trace.history_to_trace(h, out) == (1026, 0), out.getvalue()[:200]
    lines = out.getvalue().splitlines()
    assert lines[1:5] == ["a,1,18446744073709551615,0", "f,1,18446744073709551615,0", "a,2,7,1", "e,0,0,0"], lines[:5]
    assert lines[-1] == "a,1024,1,1023", lines[-1]
    # the 32-bit allocation numbers of the replay, with the bound lowered to reach it
    saved, trace.MAX_ALLOCATIONS = trace.MAX_ALLOCATIONS, 3
    try:
        trace.history_to_trace(json.loads(history([event("alloc", 4096 * (i + 1), 1) for i in range(4)])),
                               io.StringIO())
        failures.append("a fourth allocation past a bound of 3: converted")
    except TraceError as e:
        assert e.event == 3 and "more than 3 allocations" in str(e), e
    finally:
        trace.MAX_ALLOCATIONS = saved


def test_limits_are_replays(cli, work):
    header = open(os.path.join(ROOT, "include", "tidepool.h")).read()
    assert int(re.search(r"#define TIDE_MAX_STREAMS (\d+)", header).group(1)) == trace.MAX_STREAMS
    # tidepool replay refuses a trace of 1,024 streams besides the default, and takes 1,023
    for streams, replays in ((trace.MAX_STREAMS - 1, True), (trace.MAX_STREAMS, False)):
        path = os.path.join(work, "streams_%d.csv" % streams)
        with open(path, "w") as f:
            f.write("op,id,size,stream\n" + "".join("a,%d,512,%d\n" % (i + 1, i + 1) for i in range(streams)))
        run = subprocess.run([cli, "replay", "--no-chart", path], capture_output=True, text=True)
        if (run.returncode == 0) != replays:
            failures.append("tidepool replay of %d streams: exit status %d (%s)" % (streams, run.returncode,
                                                                                   run.stderr.strip()))
    # and so does the converter: 1,023 come out as a trace tidepool replay takes
    path = os.path.join(work, "streams_ok.json")
    with open(path, "w") as f:
        f.write(history([event("alloc", 4096 * (i + 1), 10, 1000 + i) for i in range(trace.MAX_STREAMS - 1)]))
    run = convert(path, os.path.join(work, "streams_ok.csv.gz"))
    replay = subprocess.run([cli, "replay", "--no-chart", os.path.join(work, "streams_ok.csv.gz")],
                            capture_output=True, text=True)
    if run.returncode != 0 or replay.returncode != 0:
        failures.append("1,023 streams: conversion %d (%s), replay %d (%s)" % (
            run.returncode, run.stderr.strip(), replay.returncode, replay.stderr.strip()))


def convert(path, output):
    env = dict(os.environ, PYTHONPATH=os.path.join(ROOT, "python"))
    return subprocess.run([sys.executable, "-m", "tidepool.trace", path, "-o", output], capture_output=True,
                          text=True, env=env, timeout=300)


def test_command_line(work):
    cases = [(name, text, says, line) for name, text, says, _, line in HOSTILE]
    cases += [("100,000-deep nesting", "[" * 100000 + "]" * 100000, "nested deeper than", 1),
              ("deep nesting on line 3", '{"events": [\n\n' + "[" * 100000, "nested deeper than", 3),
              # 100,000 deep: Python 3.12's reader goes past 5,000 (the list is then the size's error)
              ("deep nesting inside an event", history([A, '{"kind": "alloc", "addr": 1, "size": '
                                                        + "[" * 100000 + "]" * 100000 + ', "stream": 0}']),
               "nested deeper than", 3),
              ("not JSON", "{", "not JSON", None),
              ("not UTF-8", "\udcff", "not UTF-8", None),
              ("not a history", "[1, 2]", 'no "events" list', None)]
    for n, (name, text, says, line) in enumerate(cases):
        path, output = os.path.join(work, "hostile_%d.json" % n), os.path.join(work, "hostile_%d.csv" % n)
        with open(path, "w", encoding="utf-8", errors="surrogateescape") as f:
            f.write(text)
        try:
            run = convert(path, output)
        except subprocess.TimeoutExpired:
            failures.append("%s: the converter ran past 300 s" % name)
            continue
        where = "%s:%d: " % (path, line) if line else "%s: " % path
        lines = run.stderr.splitlines()
        if run.returncode != 1 or len(lines) != 1 or "Traceback" in run.stderr or \
                not lines[0].startswith("tidepool.trace: " + where) or says not in lines[0]:
            failures.append("%s: exit status %d, stderr %r; expected status 1 and one line with %r and %r"
                            % (name, run.returncode, run.stderr[-600:], where, says))
        if os.path.exists(output):
            failures.append("%s: refused, but a trace was left at %s" % (name, output))


def main():
    cli = sys.argv[1]
    with tempfile.TemporaryDirectory() as work:
        for test, args in ((test_history_to_trace, ()), (test_limits_are_replays, (cli, work)),
                           (test_command_line, (work,))):
            before = len(failures)
            test(*args)
            print("%s: %s" % (test.__name__, "ok" if len(failures) == before else "FAILED"))
    for f in failures:
        print("FAIL: " + f)
    if failures:
        sys.exit(1)
    print("every hostile history refused in one line")


if __name__ == "__main__":
    main()

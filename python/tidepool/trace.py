"""tidepool's history as an allocation trace: what a program asked for, replayable on any machine.

    python3 -m tidepool.trace history.json -o trace.csv.gz    # history from tide_history_json or
                                                              # tidepool replay --history-out
    tidepool.torch.dump_trace("trace.csv.gz")                 # the same, from a PyTorch program

The trace is tidepool's CSV (traces/README.md): one line per allocation ("a"), free ("f") and
empty_cache ("e"), in the order the program made them, with sizes as requested and streams numbered in
order of appearance (0 for the default stream). `tidepool replay` and `gpu_bench replay` read it.
A history the replay could not take is refused whole, with TraceError naming the event (and, from the
command line, the line): a number that is not a whole number in its range (1e30, Infinity, true), an
allocation at an address still live, more streams than one allocator serves, JSON nested past what
Python reads. Standard library only.
"""

import argparse
import gzip
import json
import re
import sys

# What `tidepool replay` reads (tools/trace.c): sizes and ids as unsigned 64-bit numbers, an allocation
# of at least one byte, and at most TIDE_MAX_STREAMS - 1 streams besides the default one (tidepool.h:
# one allocator serves TIDE_MAX_STREAMS). Its allocations are numbered in 32 bits, UINT32_MAX unused.
MAX_SIZE = (1 << 64) - 1
MAX_STREAMS = 1024
MAX_ALLOCATIONS = (1 << 32) - 1
_HANDLE_MAX = (1 << 64) - 1  # addresses and stream handles in a history are 64-bit


class TraceError(Exception):
    """A history that cannot be a trace. event: the index of the event at fault; line: the line of the
    file at fault; each where known."""

    def __init__(self, message, event=None, line=None):
        super().__init__(message)
        self.event, self.line = event, line


def _whole(e, i, key, low, high):
    """e[key] as an int in [low, high]: a JSON integer, not a float (1e30, 4096.0, Infinity), not
    true/false, as tide_history_json writes only integers."""
    value = e.get(key)
    if isinstance(value, bool) or not isinstance(value, int):
        raise TraceError("event %d: %s is %s, not a whole number"
                         % (i, key, _shown(value) if key in e else "missing"), i)
    if not low <= value <= high:
        raise TraceError("event %d: %s is %d, outside %d..%d" % (i, key, value, low, high), i)
    return value


def _shown(value):
    """A value as JSON would write it, short (1e30 as 1e+30, inf as Infinity, True as true)."""
    if isinstance(value, dict):
        return "an object"
    if isinstance(value, list):
        return "a list"
    if isinstance(value, str):
        return json.dumps(value[:40] + ("..." if len(value) > 40 else ""))
    try:
        return json.dumps(value)
    except (TypeError, ValueError):
        return repr(value)[:40]


def history_to_trace(history, out):
    """Writes the events of a history (the dict tide_history_json gives) to out as trace CSV lines.
    Returns (lines written, frees skipped): a free of memory allocated before the history started, or
    whose allocation the ring dropped, has no allocation to pair with and is left out.

    Raises TraceError, naming the event, for what `tidepool replay` would refuse or misread: a number
    that is not a whole number in range, an allocation of 0 bytes, an allocation at an address that is
    still live, more streams than one allocator serves."""
    if not isinstance(history, dict) or not isinstance(history.get("events"), list):
        raise TraceError("not a tidepool history: no \"events\" list")
    dropped = history.get("dropped", 0)
    if isinstance(dropped, bool) or not isinstance(dropped, int) or dropped < 0:
        raise TraceError("\"dropped\" is %s, not a count" % _shown(dropped))
    if not isinstance(history.get("ordered", False), bool):
        raise TraceError("\"ordered\" is %s, not true or false" % _shown(history["ordered"]))
    unordered = history.get("ordered") is False
    out.write("op,id,size,stream\n")
    live, streams = {}, {0: 0}
    next_id, lines, skipped = 1, 0, 0
    for i, e in enumerate(history["events"]):
        if not isinstance(e, dict) or not isinstance(e.get("kind"), str):
            raise TraceError("event %d: needs kind, and addr, size and stream as numbers" % i, i)
        kind = e["kind"]
        if kind not in ("alloc", "free_requested", "empty_cache"):
            continue  # completions, segments, annotations: the allocator's doing, not the program's
        addr = _whole(e, i, "addr", 0, _HANDLE_MAX)
        size = _whole(e, i, "size", 1 if kind == "alloc" else 0, MAX_SIZE)
        stream = _whole(e, i, "stream", 0, _HANDLE_MAX)
        if kind == "alloc":
            if addr in live:
                raise TraceError(
                    "event %d: an allocation at 0x%x, which is still live (allocated at event %d and not "
                    "freed since)%s" % (i, addr, live[addr][2], ": the history was recorded without "
                                        "TIDE_HISTORY_ORDERED, so its streams' events may be out of order"
                                        if unordered else ""), i)
            if next_id > MAX_ALLOCATIONS:
                raise TraceError("event %d: more than %d allocations, the most `tidepool replay` numbers"
                                 % (i, MAX_ALLOCATIONS), i)
            s = _stream_number(streams, stream, i)
            live[addr] = (next_id, size, i)
            out.write("a,%d,%d,%d\n" % (next_id, size, s))
            next_id += 1
        elif kind == "free_requested":
            if addr not in live:
                skipped += 1
                continue
            s = _stream_number(streams, stream, i)
            ident, asked, _ = live.pop(addr)
            out.write("f,%d,%d,%d\n" % (ident, asked, s))
        else:
            out.write("e,0,0,0\n")
        lines += 1
    return lines, skipped


def _stream_number(streams, handle, i):
    """The trace's number for a stream handle: in order of appearance in the trace, 0 for the default."""
    number = streams.get(handle)
    if number is None:
        number = len(streams)
        if number >= MAX_STREAMS:
            raise TraceError("event %d: stream 0x%x is the %dth besides the default one; one allocator "
                             "serves at most %d streams, so `tidepool replay` takes at most %d besides the "
                             "default" % (i, handle, number, MAX_STREAMS, MAX_STREAMS - 1), i)
        streams[handle] = number
    return number


def events_by_line(events):
    """Each event of a history with the trace line it falls before: the number of lines (allocations,
    frees paired with their allocation, empty_cache calls) that history_to_trace writes for the events
    before it. So a segment or an annotation event can be placed in the trace."""
    live, line = set(), 0
    for e in events:
        yield line, e
        kind = e.get("kind")
        if kind == "alloc":
            live.add(e["addr"])
            line += 1
        elif kind == "free_requested" and e["addr"] in live:
            live.discard(e["addr"])
            line += 1
        elif kind == "empty_cache":
            line += 1


def write_trace(history, path):
    """history_to_trace into a file; gzip'd if path ends in .gz. Returns what history_to_trace does.
    The history is checked whole first, so a refused one leaves no part of a trace behind (its first
    lines would replay as if they were all)."""
    history_to_trace(history, _Discard())
    opener = gzip.open if path.endswith(".gz") else open
    with opener(path, "wt") as f:
        return history_to_trace(history, f)


class _Discard:
    def write(self, text):
        pass


_TOKENS = re.compile(r'"(?:[^"\\]|\\.)*"|[][{},:]')


def _line_of(text, position):
    return text.count("\n", 0, position) + 1


def _deep_line(text, depth_limit):
    """The line where the nesting of a JSON text first passes depth_limit (strings skipped)."""
    depth = 0
    for m in _TOKENS.finditer(text):
        token = m.group()
        if token in "[{":
            depth += 1
            if depth > depth_limit:
                return _line_of(text, m.start())
        elif token in "]}":
            depth -= 1
    return None


def _event_line(text, index):
    """The line on which event number index of a history's top-level "events" list starts, or None."""
    depth, after_events_key, in_events, count = 0, False, False, 0
    for m in _TOKENS.finditer(text):
        token = m.group()
        if token in "[{":
            depth += 1
            if depth == 2 and token == "[" and after_events_key:
                in_events, count = True, 0
                start = re.compile(r"\s*").match(text, m.end()).end()
                if index == 0 and text[start:start + 1] not in ("]", ""):
                    return _line_of(text, start)
        elif token in "]}":
            depth -= 1
            if depth < 2:
                in_events = False
        elif token == "," and in_events and depth == 2:
            count += 1
            if count == index:
                return _line_of(text, re.compile(r"\s*").match(text, m.end()).end())
        if token != ":":
            after_events_key = depth == 1 and token == '"events"'
    return None


def _read_history(path):
    """The history JSON at path, or TraceError saying why not (where in the file, when it can)."""
    try:
        with open(path, encoding="utf-8") as f:
            text = f.read()
    except UnicodeDecodeError as e:
        raise TraceError("not UTF-8 text (%s)" % e.reason) from None
    try:
        return text, json.loads(text)
    except RecursionError:
        raise TraceError("nested deeper than Python's JSON reader goes (a history is 4 levels deep)",
                         line=_deep_line(text, 100)) from None
    except ValueError as e:
        raise TraceError("not JSON: %s" % e) from None


def main(argv=None):
    parser = argparse.ArgumentParser(prog="python3 -m tidepool.trace",
                                     description="Converts a tidepool history JSON into a trace CSV.")
    parser.add_argument("history", help="a history JSON (tide_history_json, tidepool replay --history-out)")
    parser.add_argument("-o", "--output", required=True, help="the trace to write (.csv or .csv.gz)")
    args = parser.parse_args(argv)
    text = None
    try:
        text, history = _read_history(args.history)
        lines, skipped = write_trace(history, args.output)
    except OSError as e:
        sys.stderr.write("tidepool.trace: %s\n" % e)
        return 1
    except TraceError as e:
        line = e.line
        if line is None and text is not None and e.event is not None:
            line = _event_line(text, e.event)
        where = "%s:%d" % (args.history, line) if line else args.history
        sys.stderr.write("tidepool.trace: %s: %s\n" % (where, e))
        return 1
    if history.get("ordered") is False:
        sys.stderr.write("tidepool.trace: the history was recorded without TIDE_HISTORY_ORDERED: each "
                         "stream's events are in order, but where several streams allocated, theirs may "
                         "interleave in blocks of up to 512\n")
    if history.get("dropped"):
        sys.stderr.write("tidepool.trace: the history's ring dropped its %d oldest events: the trace "
                         "starts later than the program did\n" % history["dropped"])
    sys.stderr.write("tidepool.trace: %d operations written to %s (%d frees of earlier allocations "
                     "left out)\n" % (lines, args.output, skipped))
    return 0


if __name__ == "__main__":
    sys.exit(main())

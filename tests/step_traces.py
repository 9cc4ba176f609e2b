"""Traces for the Python tests of bench/'s trace tools: steps of trace lines written as a tidepool
trace, with the steps JSON beside it as bench/workloads writes one."""
import json
import os


def write_steps_trace(directory, steps_ops, warmup=1):
    """steps_ops: each step a list of trace lines (op,id,size,stream). Returns the trace's path and its
    steps JSON (step_begins_at_line, warmup_steps), also written beside it as t.json."""
    trace = os.path.join(directory, "t.csv")
    begins, lines = [], []
    for ops in steps_ops:
        begins.append(len(lines))
        lines.extend(ops)
    with open(trace, "w") as f:
        f.write("op,id,size,stream\n" + "\n".join(lines) + "\n")
    steps = {"step_begins_at_line": begins, "warmup_steps": warmup}
    with open(os.path.join(directory, "t.json"), "w") as f:
        json.dump(steps, f)
    return trace, steps

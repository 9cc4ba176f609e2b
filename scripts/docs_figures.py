#!/usr/bin/env python3
"""The figures and pictures README.md shows that come from tidepool's own commands, written by those
commands (make docs-figures), or checked against them (--check, the test docs_figures_current).

  - README.md's "Figures" table, tidepool's two columns: peak reserved / peak live of each shipped
    trace under `tidepool replay` (default segments and expandable_segments:True).
  - docs/plot-seed_transformer.svg, the picture under "The command line": `tidepool plot` of the
    seed trace, and its caption line below the picture.

And make demo prints the same ratio as the table's row for its trace, the same on every run.

A change of the allocator's policy changes these: --check then fails naming each figure that moved,
and `make docs-figures` writes them again.

    scripts/docs_figures.py --tool build/tidepool [--check]
"""
import argparse
import difflib
import json
import os
import re
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
TABLE_TRACES = ("seed_transformer", "gpt2_varlen", "lstm_loop", "seed_loop_250")
PLOT_TRACE = "seed_transformer"
PLOT_PATH = "docs/plot-%s.svg" % PLOT_TRACE
CAPTION_START = "*`tidepool plot traces/%s.csv.gz`:" % PLOT_TRACE


def replay_ratio(tool, trace, conf):
    out = subprocess.run([tool, "replay", "--json", "--no-progress", "--no-chart", "--conf", conf,
                          os.path.join(ROOT, "traces", trace + ".csv.gz")],
                         check=True, capture_output=True, text=True).stdout
    r = json.loads(out)
    return "%.3f" % (r["peak_reserved_bytes"] / r["peak_live_bytes"])


def demo_figure(tool):
    """The ratio make demo prints (its command, in the Makefile), run twice: it must not vary."""
    with open(os.path.join(ROOT, "Makefile")) as f:
        m = re.search(r"^\t\$\(BUILD\)/tidepool (replay traces/\S+)$", f.read(), re.M)
    if not m:
        sys.exit("docs_figures: the Makefile's demo target has no tidepool replay line")
    figures = []
    for _ in range(2):
        out = subprocess.run([tool] + m.group(1).split(), check=True, capture_output=True, text=True,
                             cwd=ROOT).stdout
        figures.append(re.search(r"peak reserved .* ([0-9.]+) x peak live", out).group(1))
    if figures[0] != figures[1]:
        sys.exit("docs_figures: make demo printed %s, then %s: it must print the same every run" % tuple(figures))
    return os.path.basename(m.group(1).split()[-1]).split(".")[0], figures[0]


def readme_table(text, tool):
    """README.md with tidepool's columns of the Figures table as the replays give them."""
    lines = text.split("\n")
    found = set()
    for i, line in enumerate(lines):
        cells = line.split("|")
        # | trace | tidepool | PyTorch | cudaMallocAsync | tidepool expandable | PyTorch expandable |
        if len(cells) == 8 and cells[1].strip() in TABLE_TRACES:
            trace = cells[1].strip()
            cells[2] = " **%s** " % replay_ratio(tool, trace, "")
            cells[5] = " **%s** " % replay_ratio(tool, trace, "expandable_segments:True")
            lines[i] = "|".join(cells)
            found.add(trace)
    missing = set(TABLE_TRACES) - found
    if missing:
        sys.exit("docs_figures: README.md's Figures table has no row for %s" % ", ".join(sorted(missing)))
    return "\n".join(lines)


def plot(tool, out):
    subprocess.run([tool, "plot", os.path.join(ROOT, "traces", PLOT_TRACE + ".csv.gz"), "-o", out],
                   check=True, capture_output=True)
    with open(out) as f:
        svg = f.read()
    # the picture's own summary line: its figures are the caption's
    summary = re.search(r'<text [^>]*fill="#555">([^<]*)</text>', svg)
    if not summary:
        sys.exit("docs_figures: the plot has no summary line")
    return svg, summary.group(1)


def readme_caption(text, summary):
    """README.md with the line under the picture saying the picture's figures."""
    caption = "%s %s.*" % (CAPTION_START, summary)
    lines = text.split("\n")
    for i, line in enumerate(lines):
        if line.startswith(CAPTION_START):
            lines[i] = caption
            return "\n".join(lines)
    sys.exit("docs_figures: README.md has no caption line starting %s" % CAPTION_START)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--tool", required=True, help="the tidepool command (build/tidepool)")
    ap.add_argument("--check", action="store_true", help="write nothing; fail if a figure or picture differs")
    args = ap.parse_args()
    readme_path = os.path.join(ROOT, "README.md")
    with open(readme_path) as f:
        readme = f.read()
    with tempfile.TemporaryDirectory() as tmp:
        svg, summary = plot(args.tool, os.path.join(tmp, "plot.svg"))
    want = readme_caption(readme_table(readme, args.tool), summary)
    svg_path = os.path.join(ROOT, PLOT_PATH)
    try:
        with open(svg_path) as f:
            svg_now = f.read()
    except FileNotFoundError:
        svg_now = ""
    if args.check:
        stale = []
        trace, demo = demo_figure(args.tool)
        row = [line for line in want.split("\n") if line.startswith("| %s |" % trace)]
        if not row or row[0].split("|")[2].strip() != "**%s**" % demo:
            stale.append("make demo prints %s x peak live for %s; README.md's table: %s" % (demo, trace, row))
        if want != readme:
            stale.append("README.md:\n" + "".join(difflib.unified_diff(
                readme.splitlines(True), want.splitlines(True), "README.md now", "the commands' output", n=0)))
        if svg != svg_now:
            stale.append("%s is not what `tidepool plot` draws now (it says: %s)" % (PLOT_PATH, summary))
        if stale:
            print("\n".join(stale))
            print("docs figures are stale: run make docs-figures")
            return 1
        print("docs figures match the commands' output")
        return 0
    with open(readme_path, "w") as f:
        f.write(want)
    with open(svg_path, "w") as f:
        f.write(svg)
    print("wrote README.md's figures and %s (%s)" % (PLOT_PATH, summary))
    return 0


if __name__ == "__main__":
    sys.exit(main())

# Run 20: splits host_phase.c's rows into the host's fast and slow samples by tidepool's lstm_loop
# replay (under or over LINE ns per operation, default 40) and prints each column's median in both,
# and their ratio.   python3 phase_summary.py host_phase.md [LINE]
import statistics
import sys

line = float(sys.argv[2]) if len(sys.argv) > 2 else 40.0
header, rows = None, []
for text in open(sys.argv[1]):
    cells = [c.strip() for c in text.strip().strip("|").split("|")]
    if text.startswith("| t "):
        header = cells
    elif text.startswith("| ") and cells[0][:1].isdigit():
        rows.append([float(c) for c in cells])
lstm = next(i for i, h in enumerate(header) if h.startswith("lstm_loop"))
fast = [r for r in rows if r[lstm] < line]
slow = [r for r in rows if r[lstm] >= line]
print(f"{len(rows)} samples: {len(fast)} fast, {len(slow)} slow (lstm_loop at {line:g} ns or more)")
print("| column | fast, median | slow, median | slow / fast |\n|---|---|---|---|")
for i, name in enumerate(header):
    if i < 3:
        continue
    f = statistics.median(r[i] for r in fast) if fast else float("nan")
    s = statistics.median(r[i] for r in slow) if slow else float("nan")
    print(f"| {name} | {f:.3f} | {s:.3f} | {s / f:.2f} |")

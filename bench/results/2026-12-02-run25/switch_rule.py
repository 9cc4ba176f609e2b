"""Run 25, issue 7: lstm_loop's 37 pages (fewest_pages_high, blocks of 2 MiB and more apart) cost 0.24 page
maps per allocation even where idle pages stay mapped and move (bench/placement_model.py's last column).
Could the rule hand over, once the first T allocations are placed, to one that prefers pages already
mapped, so that the steady state maps nothing? Four second rules, each keyed on (pages not touched by a
live block, pages not mapped, ...) or mapped pages first; the peak is over the whole trace.

    python3 bench/results/2026-12-02-run25/switch_rule.py traces/lstm_loop.csv.gz 2 0,80,200,1000,3000
"""
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", ".."))  # bench/
import placement_model as pm

SECOND = {
    "unmapped, then smallest gap": lambda new, unmapped, gap, a: (new, unmapped, gap, a),
    "unmapped, then highest": lambda new, unmapped, gap, a: (new, unmapped, -a),
    "unmapped, then lowest": lambda new, unmapped, gap, a: (new, unmapped, a),
    "unmapped first, then untouched, then highest": lambda new, unmapped, gap, a: (unmapped, new, -a),
}


def main():
    ops = pm.read_trace(sys.argv[1])
    if float(sys.argv[2]) > 0:
        ops = pm.with_large_apart(ops, int(float(sys.argv[2]) * (1 << 20)))
    print("| first T allocations by fewest_pages_high, then | T | peak pages | first at operation "
          "| peak pages x 2 MiB / peak live | pages mapped per allocation, second half (idle pages moved) |")
    print("|---|---|---|---|---|---|")
    for T in [int(x) for x in sys.argv[3].split(",")]:
        for name, key in SECOND.items():
            kept, placed = [], [0]

            class Kept(pm.KeptMapped):
                def __init__(self):
                    super().__init__()
                    kept.append(self)

            def place(space, ident, units, stream):
                placed[0] += 1
                mapped = kept[0].mapped

                def cost(c):
                    gap, a = c
                    new = space.new_pages(a, units)
                    if placed[0] <= T:
                        return (new, -a)  # fewest_pages_high
                    return key(new, sum(1 for p in pm.pages_of(a, units) if p not in mapped), gap, a)
                return min(space.gaps(units, stream), key=cost)[1]

            r = pm.replay(ops, place, None, Kept)
            print(f"| {name} | {T} | {r.peak_pages} | {r.peak_at} | {r.peak_pages * 2 * 2**20 / r.peak_live:.4f} "
                  f"| {r.kept_maps_per_allocation:.2f} |", flush=True)


if __name__ == "__main__":
    main()

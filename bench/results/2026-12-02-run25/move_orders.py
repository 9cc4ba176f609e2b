"""Run 25, issue 7: which idle page an allocator that keeps pages mapped should move where a block needs
one (bench/placement_model.py's last column). Four orders, on one trace, one rule, and optionally large
blocks apart:

    python3 bench/results/2026-12-02-run25/move_orders.py traces/lstm_loop.csv.gz fewest_pages_high 2
"""
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", ".."))  # bench/
import placement_model as pm


class Oldest(pm.KeptMapped):
    def pick(self, page):
        return next(iter(self.idle))


class Nearest(pm.KeptMapped):
    def pick(self, page):
        return min(self.idle, key=lambda q: abs(q - page))


class Farthest(pm.KeptMapped):
    def pick(self, page):
        return max(self.idle, key=lambda q: abs(q - page))


ORDERS = {"freed last (the model's)": pm.KeptMapped, "freed first": Oldest, "nearest": Nearest,
          "farthest": Farthest}


def main():
    path, rule = sys.argv[1], sys.argv[2]
    ops = pm.read_trace(path)
    if len(sys.argv) > 3:
        ops = pm.with_large_apart(ops, int(float(sys.argv[3]) * (1 << 20)))
    print(f"| {path.rsplit('/', 1)[-1]}, {rule}, large from {sys.argv[3] if len(sys.argv) > 3 else '-'} MiB "
          "| peak pages | pages mapped per allocation, second half |")
    print("|---|---|---|")
    for name, kept in ORDERS.items():
        r = pm.online(rule, ops, kept)
        print(f"| {name} | {r.peak_pages} | {r.kept_maps_per_allocation:.2f} |", flush=True)


if __name__ == "__main__":
    main()

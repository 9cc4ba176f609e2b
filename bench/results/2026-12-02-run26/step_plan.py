"""Issue 7: each step of the loop planned from the step before. Step boundaries are given: the prelude
(step 0) is [0, START), then steps of PERIOD operations. Step k's blocks are keyed by (size, how many of
that size the step allocated before); at step k's start, a static plan for its blocks is packed from
step k-1's lifetimes under the same keys, around every block live at the step's start (held for the
whole step). A block goes to its planned place if it is free when it comes, else the online rule
places it. The online rule also places step 0.

    python3 step_plan.py TRACE START PERIOD RULE LARGE_FROM_MIB
    python3 bench/results/2026-12-02-run26/step_plan.py traces/lstm_loop.csv.gz 86 74 fewest_pages_high 0
"""
import os
import random
import sys
from collections import Counter

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", ".."))  # bench/
import placement_model as pm
from learned_plan import pack

TRIES = int(os.environ.get("TRIES", "0"))


def main():
    path, start, period, rule = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), sys.argv[4]
    ops = pm.read_trace(path)
    if float(sys.argv[5]) > 0:
        ops = pm.with_large_apart(ops, int(float(sys.argv[5]) * (1 << 20)))
    born, died = {}, {}
    for t, (op, ident, *_r) in enumerate(ops):
        (born if op == "a" else died)[ident] = t

    def step_of(t):
        return 0 if t < start else 1 + (t - start) // period

    def step_start(k):
        return 0 if k == 0 else start + (k - 1) * period

    # keys: id -> (size units, occurrence of that size in its step)
    key, seen = {}, {}
    for t, (op, ident, units, size, stream) in enumerate(ops):
        if op == "a":
            k = step_of(t)
            c = seen.setdefault(k, Counter())
            key[ident] = (units, stream, c[(units, stream)])
            c[(units, stream)] += 1
    by_step = {}
    for ident, t in born.items():
        by_step.setdefault(step_of(t), []).append(ident)

    where, plan, state = {}, {}, {"step": -1, "taken": 0, "fell_back": 0}
    last_step = step_of(len(ops) - 1)

    def make_plan(k):
        plan.clear()
        s0, prev0 = step_start(k), step_start(k - 1)
        obstacles = [(where[i], ops[born[i]][2], ops[born[i]][4]) for i in where]
        blocks = []
        for ident in by_step.get(k - 1, []):
            b0 = born[ident] - prev0
            b1 = died.get(ident, len(ops)) - prev0
            blocks.append((b0, b1, key[ident][0], key[ident][1], key[ident]))
        rng = random.Random(1)
        orders = [sorted(blocks, key=lambda b: (-b[2], b[0])), sorted(blocks, key=lambda b: (-(b[1] - b[0]), -b[2])),
                  sorted(blocks, key=lambda b: (-(b[1] - b[0]) * b[2], b[0]))]
        for _ in range(TRIES):
            o = list(orders[0])
            for _k in range(rng.randint(1, 8)):
                a, b = rng.randrange(len(o)), rng.randrange(len(o))
                o[a], o[b] = o[b], o[a]
            orders.append(o)
        pages, placed = min((pack(o, obstacles, lambda b, other: b[0] < other[1] and other[0] < b[1]) for o in orders),
                            key=lambda r: r[0])
        for block, addr, stream in placed:
            plan[block[4]] = addr

    def online_place(space, units, stream):
        return pm.choose(rule, space, units, stream, {})

    def place(space, ident, units, stream):
        t = born[ident]
        k = step_of(t)
        if k != state["step"]:
            state["step"] = k
            if k >= 1 and k < last_step:
                make_plan(k)
            else:
                plan.clear()
        addr = plan.get(key[ident])
        if addr is not None and space.is_free(addr, units):
            state["taken"] += 1
        else:
            if k >= 1:
                state["fell_back"] += 1
            addr = online_place(space, units, stream)
        where[ident] = addr
        return addr

    def freed(stream, units, addr, ident):
        where.pop(ident, None)

    r = pm.replay(ops, place, freed)
    print(f"{os.path.basename(path)} rule {rule} large-from {sys.argv[5]}: peak pages {r.peak_pages} (first at {r.peak_at}), "
          f"x 2 MiB / peak live {r.peak_pages * 2 * 2**20 / r.peak_live:.4f}; maps per allocation, second half, idle "
          f"pages moved: {r.kept_maps_per_allocation:.4f}; planned {state['taken']}, fell back {state['fell_back']}")


if __name__ == "__main__":
    main()

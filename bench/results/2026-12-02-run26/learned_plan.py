"""Issue 7: lstm_loop repeats a loop of 74 operations (37 allocations) from operation 86 to its end. After
the loop has run for a while, an allocator has seen every lifetime of one stretch of it, and could plan
where each block of the loop goes from then on: a static plan over a super-period of P operations (two
loops, since some blocks outlive one loop), packed knowing every lifetime, around the blocks that were
live all along. Until the switch, and for any block whose planned place is taken when it comes (the
blocks placed before the switch that are still live), the online rule fewest_pages_high places it (the
model's best: 37 pages at operation 146). Where idle pages stay mapped and move (KeptMapped): the peak of
pages, and the pages mapped per allocation over the trace's second half (0: the plan needs no maps).

The plan is packed greedily, each block where it touches the fewest pages not yet used by the plan and
the blocks live all along, then at the highest address, in any of the stream's address ranges; of three
orders (by size, by lifetime, by size x lifetime) the one touching the fewest pages is kept. The loop's
start and period are given, found by looking at the trace (a library would have to detect them).

    python3 learned_plan.py TRACE LOOP_START PERIOD LOOPS_PER_PLAN LARGE_FROM_MIB
    python3 bench/results/2026-12-02-run26/learned_plan.py traces/lstm_loop.csv.gz 86 74 2 2

Environment: PLAN_RULE=lowest (the lowest address instead of the highest, ties after fewest pages);
ANY_RANGE=0 (each block planned in its own range only); TRIES=N (N more orders, random swaps of the
by-size order).
"""
import os
import random
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", ".."))  # bench/
import placement_model as pm


def pack(order, obstacles, meets, any_range=True, lowest=False):
    """A static plan for the blocks of `order`, placed one after another: each (.., .., units, home range,
    ...) where it touches the fewest pages not yet used by the plan and the obstacles ((addr, units,
    range), there all along), then at the highest address (the lowest if `lowest`), among the gaps left
    by the obstacles and the blocks already planned that it meets(block, planned block) in time; in any
    range, or only in its home range. Returns (pages used, [(block, addr, range)])."""
    used = set(q for a, n, s in obstacles for q in pm.pages_of(a, n))
    ranges = sorted({b[3] for b in order} | {s for a, n, s in obstacles})
    placed = []
    for block in order:
        units, best = block[2], None
        for stream in (ranges if any_range else [block[3]]):
            taken = sorted([(a, a + n) for a, n, s in obstacles if s == stream] +
                           [(a, a + other[2]) for other, a, s in placed if s == stream and meets(block, other)])
            base = stream * pm.STREAM_SPACE
            for _gap, a in pm.gaps_between(taken, base, units, limit=base + pm.STREAM_SPACE // 2):
                k = (sum(1 for q in pm.pages_of(a, units) if q not in used), a if lowest else -a)
                if best is None or k < best[0]:
                    best = (k, a, stream)
        _, addr, stream = best
        used.update(pm.pages_of(addr, units))
        placed.append((block, addr, stream))
    return len(used), placed


RULE = os.environ.get("PLAN_RULE", "pages")
ANY_RANGE = os.environ.get("ANY_RANGE", "1") == "1"
TRIES = int(os.environ.get("TRIES", "0"))


def main():
    path, start, period, supers = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
    ops = pm.read_trace(path)
    if float(sys.argv[5]) > 0:
        ops = pm.with_large_apart(ops, int(float(sys.argv[5]) * (1 << 20)))
    P = supers * period
    born, died = {}, {}
    for t, (op, ident, *_r) in enumerate(ops):
        (born if op == "a" else died)[ident] = t
    # The super-period the plan learns from, and the switch: once every block of it has been freed.
    src = start + P
    last_free = max(died.get(ops[t][1], len(ops)) for t in range(src, src + P) if ops[t][0] == "a")
    switch = start + (-(-(last_free - start) // P)) * P
    print(f"loop from {start}, period {period}, plan over {P} operations learned from [{src}, {src + P}), "
          f"whose blocks are all freed by {last_free}; the plan serves from operation {switch}")

    where = {}      # id -> address, as placed (filled by the replay)
    plan = {}       # phase in the super-period -> planned address
    state = {"planned": False, "taken": 0, "fell_back": 0}

    def make_plan():
        # Obstacles: the blocks live now that were allocated before the loop (live all along).
        obstacles = [(where[i], ops[born[i]][2], ops[born[i]][4]) for i in where
                     if born[i] < start and died.get(i, len(ops)) > switch]
        blocks = []  # (phase, duration, units, stream)
        for t in range(src, src + P):
            op, ident, units, size, stream = ops[t]
            if op == "a":
                blocks.append((t - src, died[ident] - t, units, stream))
        def meets(b, other):  # do their lifetimes meet, each repeated every P operations?
            return any(b[0] < other[0] + shift + other[1] and other[0] + shift < b[0] + b[1] for shift in (-P, 0, P))
        pages, packed = min((pack(order, obstacles, meets, ANY_RANGE, RULE == "lowest") for order in orders_of(blocks)),
                           key=lambda r: r[0])
        placed = [(b[0], b[1], addr, b[2], stream) for b, addr, stream in packed]
        for phase, dur, addr, units, stream in placed:
            plan[phase] = addr
        for st in sorted({s for *_x, s in placed} | {s for a, n, s in obstacles}):
            opages = set(q for a, n, s in obstacles if s == st for q in pm.pages_of(a, n))
            ppages = set(q for ph, d, a, n, s in placed if s == st for q in pm.pages_of(a, n))
            print(f"  range {st}: obstacles {sum(n for a, n, s in obstacles if s == st) * 512 / 2**20:.2f} MiB on "
                  f"{len(opages)} pages; the plan's blocks touch {len(ppages)} pages, {len(ppages - opages)} "
                  f"beyond the obstacles'; together {len(opages | ppages)}")
        print(f"  best of {len(orders_of(blocks))} orders: the plan and the obstacles touch {pages} pages")
        state["planned"] = True

    def orders_of(blocks):
        rng = random.Random(1)
        by_size = sorted(blocks, key=lambda b: (-b[2], b[0]))
        orders = [by_size, sorted(blocks, key=lambda b: (-b[1], -b[2])), sorted(blocks, key=lambda b: (-b[1] * b[2], b[0]))]
        for _ in range(TRIES):
            o = list(by_size)
            for _k in range(rng.randint(1, 8)):
                a, b = rng.randrange(len(o)), rng.randrange(len(o))
                o[a], o[b] = o[b], o[a]
            orders.append(o)
        return orders

    def place(space, ident, units, stream):
        t = born[ident]
        if t >= switch:
            if not state["planned"]:
                make_plan()
            addr = plan.get((t - start) % P)
            if addr is not None and space.is_free(addr, units):
                state["taken"] += 1
                where[ident] = addr
                return addr
            state["fell_back"] += 1
        addr = min(space.gaps(units, stream), key=lambda c: (space.new_pages(c[1], units), -c[1]))[1]
        where[ident] = addr
        return addr

    def freed(stream, units, addr, ident):
        where.pop(ident, None)

    maps = []  # (allocations placed so far, pages mapped) for every allocation that mapped pages

    class Kept(pm.KeptMapped):
        def placed(self, addr, units):
            n = super().placed(addr, units)
            state["allocations"] = state.get("allocations", 0) + 1
            if n:
                maps.append((state["allocations"], n))
            return n

    r = pm.replay(ops, place, freed, Kept)
    before = sum(n for k, n in maps if k <= sum(1 for t in range(switch) if ops[t][0] == "a"))
    print(f"pages mapped, idle pages moved: {before} before the plan serves, {sum(n for k, n in maps) - before} after; "
          f"the last at allocation {maps[-1][0] if maps else 0} of {state.get('allocations', 0)}")
    print(f"peak pages {r.peak_pages} (first at operation {r.peak_at}), x 2 MiB / peak live "
          f"{r.peak_pages * 2 * 2**20 / r.peak_live:.4f}; pages mapped per allocation over the second half, "
          f"idle pages moved: {r.kept_maps_per_allocation:.4f}; planned places taken {state['taken']}, "
          f"fell back {state['fell_back']}")


if __name__ == "__main__":
    main()

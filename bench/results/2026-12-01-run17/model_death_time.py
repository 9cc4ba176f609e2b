"""Run 17, issue 7: a placement rule that learns lifetimes, in bench/placement_model.py's idealized model.

    python3 bench/results/2026-12-01-run17/model_death_time.py traces/lstm_loop.csv.gz
"""
import bisect
import os
import sys
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", ".."))  # bench/placement_model.py
import placement_model as pm

def run(ops, mode):
    learned = {}
    born = {}
    death = {}   # (start) -> predicted death time of the live block starting there
    space, where = pm.Space(), {}
    live = peak_live = peak_pages = peak_at = 0
    for i, (op, ident, units, size, stream) in enumerate(ops):
        if op == "f":
            addr, units, size, stream = where.pop(ident)
            space.remove(addr, units)
            learned[(stream, units)] = i - born[ident]
            death.pop(addr, None)
            live -= size
            continue
        born[ident] = i
        life = learned.get((stream, units), 10**9)
        d = i + life
        def neighbour_gap(a):
            k = bisect.bisect_left(space.blocks, (a, a))
            best = 10**12
            if k > 0:
                s, e = space.blocks[k-1]
                best = min(best, abs(death.get(s, 10**9) - d) + (a - e) * 0)
            if k < len(space.blocks):
                s, e = space.blocks[k]
                best = min(best, abs(death.get(s, 10**9) - d))
            return best
        cands = list(space.gaps(units, stream))
        if mode == 0:
            key = lambda c: (space.new_pages(c[1], units), neighbour_gap(c[1]), c[0], c[1])
        elif mode == 1:
            key = lambda c: (space.new_pages(c[1], units), c[0], neighbour_gap(c[1]), c[1])
        else:
            key = lambda c: (neighbour_gap(c[1]) > 50, space.new_pages(c[1], units), c[0], c[1])
        addr = min(cands, key=key)[1]
        space.place(addr, units)
        death[addr] = d
        where[ident] = (addr, units, size, stream)
        live += size
        peak_live = max(peak_live, live)
        if len(space.touched) > peak_pages:
            peak_pages, peak_at = len(space.touched), i
    return peak_pages, peak_at, peak_live

ops = pm.read_trace(sys.argv[1])
for mode in (0, 1, 2):
    p, at, live = run(ops, mode)
    print(mode, p, at, round(p * pm.PAGE * pm.UNIT / live, 4))

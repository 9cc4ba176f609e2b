"""Run 17, issue 7: a placement rule that learns lifetimes, in bench/placement_model.py's idealized model.

    python3 bench/results/2026-12-01-run17/model_learned_lifetime.py traces/lstm_loop.csv.gz
"""
import os
import sys
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", ".."))  # bench/placement_model.py
import placement_model as pm

def lifetime_rule(ops, L, short_rule="fewest_pages_high", long_rule="fewest_pages_best"):
    learned = {}   # (stream, units) -> last lifetime
    born = {}
    t = [0]
    def place(space, ident, units, stream):
        born[ident] = t[0]
        life = learned.get((stream, units))
        rule = short_rule if (life is not None and life <= L) else long_rule
        return pm.choose(rule, space, units, stream, {})
    # need lifetimes at free: wrap replay manually
    space, where = pm.Space(), {}
    live = peak_live = peak_pages = peak_at = 0
    for i, (op, ident, units, size, stream) in enumerate(ops):
        t[0] = i
        if op == "f":
            addr, units, size, stream = where.pop(ident)
            space.remove(addr, units)
            learned[(stream, units)] = i - born[ident]
            live -= size
            continue
        addr = place(space, ident, units, stream)
        space.place(addr, units)
        where[ident] = (addr, units, size, stream)
        live += size
        peak_live = max(peak_live, live)
        if len(space.touched) > peak_pages:
            peak_pages, peak_at = len(space.touched), i
    return peak_pages, peak_at, peak_live

ops = pm.read_trace(sys.argv[1])
for L in (5, 10, 20, 40, 80):
    for sr, lr in (("fewest_pages_high", "fewest_pages_best"), ("fewest_pages_high", "first_fit"), ("fewest_pages_high","fewest_pages")):
        p, at, live = lifetime_rule(ops, L, sr, lr)
        print(L, sr, lr, p, at, round(p * pm.PAGE * pm.UNIT / live, 4))

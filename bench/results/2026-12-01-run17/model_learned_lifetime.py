"""Run 17, issue 7: a placement rule that learns lifetimes, in bench/placement_model.py's idealized model.

    python3 bench/results/2026-12-01-run17/model_learned_lifetime.py traces/lstm_loop.csv.gz
"""
import os
import sys
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", ".."))  # bench/placement_model.py
import placement_model as pm

def lifetime_rule(ops, L, short_rule="fewest_pages_high", long_rule="fewest_pages_best"):
    """pm.replay with blocks whose size last lived at most L operations placed by short_rule, the
    others (and sizes not seen freed yet) by long_rule."""
    learned = {}  # (stream, units) -> the last lifetime seen, in operations
    born = {}
    clock = [0]   # operations so far: each one is a place or a freed call

    def place(space, ident, units, stream):
        born[ident] = clock[0]
        clock[0] += 1
        life = learned.get((stream, units))
        rule = short_rule if (life is not None and life <= L) else long_rule
        return pm.choose(rule, space, units, stream, {})

    def freed(stream, units, addr, ident):
        learned[(stream, units)] = clock[0] - born[ident]
        clock[0] += 1

    return pm.replay(ops, place, freed)


ops = pm.read_trace(sys.argv[1])
for L in (5, 10, 20, 40, 80):
    for sr, lr in (("fewest_pages_high", "fewest_pages_best"), ("fewest_pages_high", "first_fit"), ("fewest_pages_high","fewest_pages")):
        p, at, live = lifetime_rule(ops, L, sr, lr)[:3]  # (placement_model.replay has a fourth field since run 24)
        print(L, sr, lr, p, at, round(p * pm.PAGE * pm.UNIT / live, 4))

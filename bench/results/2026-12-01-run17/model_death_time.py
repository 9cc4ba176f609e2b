"""Run 17, issue 7: a placement rule that learns lifetimes, in bench/placement_model.py's idealized model.

    python3 bench/results/2026-12-01-run17/model_death_time.py traces/lstm_loop.csv.gz
"""
import bisect
import os
import sys
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", ".."))  # bench/placement_model.py
import placement_model as pm

def run(ops, mode):
    """pm.replay with each block placed next to the live block whose predicted end is nearest its own
    (the last lifetime seen for its size), the keys ordered by mode."""
    learned, born = {}, {}
    death = {}    # start address -> predicted end of the live block there
    clock = [0]   # operations so far: each one is a place or a freed call

    def place(space, ident, units, stream):
        i = clock[0]
        clock[0] += 1
        born[ident] = i
        d = i + learned.get((stream, units), 10**9)

        def neighbour_gap(a):
            k = bisect.bisect_left(space.blocks, (a, a))
            best = 10**12
            if k > 0:
                best = min(best, abs(death.get(space.blocks[k - 1][0], 10**9) - d))
            if k < len(space.blocks):
                best = min(best, abs(death.get(space.blocks[k][0], 10**9) - d))
            return best

        if mode == 0:
            key = lambda c: (space.new_pages(c[1], units), neighbour_gap(c[1]), c[0], c[1])
        elif mode == 1:
            key = lambda c: (space.new_pages(c[1], units), c[0], neighbour_gap(c[1]), c[1])
        else:
            key = lambda c: (neighbour_gap(c[1]) > 50, space.new_pages(c[1], units), c[0], c[1])
        addr = min(space.gaps(units, stream), key=key)[1]
        death[addr] = d
        return addr

    def freed(stream, units, addr, ident):
        learned[(stream, units)] = clock[0] - born[ident]
        death.pop(addr, None)
        clock[0] += 1

    return pm.replay(ops, place, freed)


ops = pm.read_trace(sys.argv[1])
for mode in (0, 1, 2):
    p, at, live = run(ops, mode)[:3]  # (placement_model.replay has a fourth field since run 24)
    print(mode, p, at, round(p * pm.PAGE * pm.UNIT / live, 4))

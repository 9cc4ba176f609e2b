#!/usr/bin/env python3
"""Run 27 (issue 7): online placement rules whose tie-break depends on the block's size, in the idealized
model of bench/placement_model.py, with blocks of 2 MiB and more in an address range of their own. Each
block goes where it touches the fewest pages not touched yet; among those places:

  high            the highest address (the model's fewest_pages_high: lstm_loop's 37 pages)
  best            the smallest gap, then the lowest address (fewest_pages_best)
  mult_best       a block of whole pages: best; any other: high
  tiny_best       a block of whole pages or under 1 MiB: best; any other: high
  tiny_page_high  whole pages: best; 1 MiB or more: high; under 1 MiB: the highest page, then the
                  smallest gap, then the lowest address

    python3 bench/results/2026-12-02-run27/tie_breaks.py TRACE [RULE,...]

Prints the peak of pages touched, where it was first reached, and that peak x 2 MiB / peak live."""
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", ".."))
import placement_model as pm  # noqa: E402

MIB = 1 << 20
HALF_PAGE = pm.PAGE // 2


def high(space, units, gap, addr):
    return (space.new_pages(addr, units), -addr)


def best(space, units, gap, addr):
    return (space.new_pages(addr, units), gap, addr)


def sized(whole, large, tiny):
    """A key for blocks of whole pages, for others of 1 MiB or more, and for others under 1 MiB."""
    def key(space, units, gap, addr):
        if units % pm.PAGE == 0:
            return whole(space, units, gap, addr)
        return (large if units >= HALF_PAGE else tiny)(space, units, gap, addr)
    return key


def page_high_then_best(space, units, gap, addr):
    return (space.new_pages(addr, units), -(addr // pm.PAGE), gap, addr)


RULES = {
    "high": high,
    "best": best,
    "mult_best": sized(best, high, high),
    "tiny_best": sized(best, high, best),
    "tiny_page_high": sized(best, high, page_high_then_best),
}


def run(ops, key):
    def place(space, ident, units, stream):
        return min(space.gaps(units, stream), key=lambda c: key(space, units, *c))[1]
    return pm.replay(ops, place)


def main():
    if len(sys.argv) not in (2, 3):
        sys.exit(__doc__)
    names = sys.argv[2].split(",") if len(sys.argv) == 3 else list(RULES)
    for name in names:
        if name not in RULES:
            sys.exit(f"unknown rule {name!r}; the rules are: {', '.join(RULES)}")
    ops = pm.with_large_apart(pm.read_trace(sys.argv[1]), 2 * MIB)
    trace = os.path.basename(sys.argv[1])
    print("| trace | rule | peak pages | first at operation | x 2 MiB / peak live |")
    print("|---|---|---|---|---|")
    for name in names:
        r = run(ops, RULES[name])
        print(f"| {trace} | {name} | {r.peak_pages} | {r.peak_at} | {r.peak_pages * 2 * MIB / r.peak_live:.4f} |",
              flush=True)


if __name__ == "__main__":
    main()

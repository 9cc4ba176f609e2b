"""Exploration: physical pages packed by in-page offset, virtual addresses free (each block gets its own
virtual range; its first and last pages may alias physical pages shared with other blocks)."""
import os, sys, bisect
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), '..', '..'))  # bench/
import placement_model as pm
PAGE = pm.PAGE

class Phys:
    def __init__(self):
        self.used = {}   # page id -> sorted list of (start, end)
        self.next = 0
        self.maps = 0
    def holes(self, p):
        prev = 0
        for s, e in self.used[p] + [(PAGE, PAGE)]:
            if s > prev:
                yield prev, s
            prev = max(prev, e)
    def new(self):
        p = self.next; self.next += 1; self.used[p] = []; self.maps += 1; return p
    def put(self, p, s, e):
        bisect.insort(self.used[p], (s, e))
    def take(self, p, s, e):
        self.used[p].remove((s, e))
        if not self.used[p]:
            del self.used[p]

def plan_large(ph, L):
    """Where a block of more than a page goes: its head [s, PAGE) on a held page p whose end is free (or
    on a fresh page, p None, h = 0), k fresh full pages, and its tail [0, y) on a held page whose start
    is free (or a fresh one, tail None). Fewest fresh pages, then the longest head. Returns
    (new pages, h, p, s, k, y, tail)."""
    heads = [(PAGE - s, p, s) for p in ph.used for s, e in ph.holes(p) if e == PAGE]
    tails = {p: e for p in ph.used for s, e in ph.holes(p) if s == 0}
    best = None
    for h, p, s in heads + [(0, None, 0)]:
        k, y = divmod(L - h, PAGE)
        tail = None
        if y:
            fits = [(e, q) for q, e in tails.items() if e >= y and q != p]
            if fits:
                tail = min(fits)[1]
        new = k + (1 if y and tail is None else 0)
        if best is None or (new, -h) < (best[0], -best[1]):
            best = (new, h, p, s, k, y, tail)
    return best

def alloc(ph, L, policy):
    """returns list of (page, s, e) pieces"""
    if L <= PAGE:
        best = None
        for p in ph.used:
            for s, e in ph.holes(p):
                if e - s >= L:
                    key = (e - s) if policy == 'best' else p
                    if best is None or key < best[0]:
                        best = (key, p, s)
        if best is None:
            p = ph.new(); ph.put(p, 0, L); return [(p, 0, L)]
        _, p, s = best
        ph.maps += 0  # the page's existing alias serves it
        ph.put(p, s, s + L); return [(p, s, s + L)]
    _, h, p, s, k, y, tail = plan_large(ph, L)
    pieces = []
    if p is not None:
        ph.put(p, s, PAGE); pieces.append((p, s, PAGE)); ph.maps += 1
    for _ in range(k):
        q = ph.new(); ph.put(q, 0, PAGE); pieces.append((q, 0, PAGE))
    if y:
        if tail is None:
            tail = ph.new()
        else:
            ph.maps += 1
        ph.put(tail, 0, y); pieces.append((tail, 0, y))
    return pieces

def run(path, policy):
    ops = pm.read_trace(path)
    ph, where = Phys(), {}
    live = peak_live = peak = at = 0
    for t, (op, ident, units, size, stream) in enumerate(ops):
        if op == 'f':
            for p, s, e in where.pop(ident)[0]:
                ph.take(p, s, e)
            live -= size
            continue
        where[ident] = (alloc(ph, units, policy), size)
        live += size
        peak_live = max(peak_live, live)
        if len(ph.used) > peak:
            peak, at = len(ph.used), t
    n = sum(1 for o in ops if o[0] == 'a')
    print(f"{path.rsplit('/',1)[-1]} {policy}: peak phys {peak} at {at}, ratio {peak*PAGE*pm.UNIT/peak_live:.4f}, "
          f"maps {ph.maps} for {n} allocations", flush=True)

if __name__ == '__main__':
    for path in sys.argv[2:]:
        for policy in sys.argv[1].split(','):
            run(path, policy)

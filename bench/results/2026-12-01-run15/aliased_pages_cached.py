"""aliased_pages.py with caches: empty physical pages stay mapped (reused without cuMemCreate), freed ranges of
more than a page stay mapped for an allocation of the same size; both are evicted before the pool grows.
Counts: peak physical pages held (in use, empty, or in cached ranges), creates, alias maps."""
import os, sys, bisect
from collections import OrderedDict, defaultdict
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), '..', '..'))  # bench/
import placement_model as pm
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from aliased_pages import plan_large, Phys as PackedPages
PAGE = pm.PAGE

class Phys(PackedPages):
    """aliased_pages.Phys (its holes), keeping empty pages"""
    def __init__(self):
        self.used = {}        # page -> sorted pieces (start, end)
        self.empty = []       # empty pages, kept
        self.next = 0
        self.creates = self.aliases = 0
    def held(self):
        return len(self.used) + len(self.empty)
    def fresh(self, grow):
        if self.empty:
            p = self.empty.pop(); self.used[p] = []; return p
        if not grow:
            return None
        p = self.next; self.next += 1; self.used[p] = []; self.creates += 1; return p
    def put(self, p, s, e):
        bisect.insort(self.used[p], (s, e))
    def take(self, p, s, e):
        self.used[p].remove((s, e))
        if not self.used[p]:
            del self.used[p]; self.empty.append(p)

def plan(ph, L):
    """(new pages needed, pieces-to-be) without growing"""
    if L <= PAGE:
        best = None
        for p in ph.used:
            for s, e in ph.holes(p):
                if e - s >= L and (best is None or e - s < best[0]):
                    best = (e - s, p, s)
        if best:
            return 0, ('small', best[1], best[2])
        return 1, ('small', None, 0)
    new, h, p, s, k, y, tail = plan_large(ph, L)
    return new, ('large', h, p, s, k, y, tail)

def realize(ph, L, how, grow):
    pieces = []
    if how[0] == 'small':
        _, p, s = how
        if p is None:
            p = ph.fresh(grow)
        ph.put(p, s, s + L); return [(p, s, s + L)]
    _, h, p, s, k, y, tail = how
    if p is not None:
        ph.put(p, s, PAGE); pieces.append((p, s, PAGE)); ph.aliases += 1
    for _ in range(k):
        q = ph.fresh(grow); ph.put(q, 0, PAGE); pieces.append((q, 0, PAGE)); ph.aliases += 1
    if y:
        if tail is None:
            tail = ph.fresh(grow)
        ph.put(tail, 0, y); pieces.append((tail, 0, y)); ph.aliases += 1
    return pieces

EVICT_NEWEST = False  # which cached range goes first when pages are needed
def run(path, cache_ranges):
    ops = pm.read_trace(path)
    ph, where = Phys(), {}
    cached = defaultdict(list)   # units -> [pieces], for ranges of more than a page
    order = OrderedDict()        # (units, idx) eviction order
    live = peak_live = peak = at = 0
    serial = 0
    for t, (op, ident, units, size, stream) in enumerate(ops):
        if op == 'f':
            pieces, u = where.pop(ident)
            if cache_ranges and u > PAGE:
                serial += 1; cached[u].append((serial, pieces)); order[serial] = u
            else:
                for p, s, e in pieces:
                    ph.take(p, s, e)
            live -= size
            continue
        if cache_ranges and cached[units]:
            sid, pieces = cached[units].pop(); del order[sid]
        else:
            while True:
                new, how = plan(ph, units)
                if new <= len(ph.empty) or not order:
                    break
                sid, u = order.popitem(last=EVICT_NEWEST)
                lst = cached[u]
                for i, (s2, pcs) in enumerate(lst):
                    if s2 == sid:
                        for p, s, e in pcs:
                            ph.take(p, s, e)
                        del lst[i]; break
            pieces = realize(ph, units, how, True)
        where[ident] = (pieces, units)
        live += size
        peak_live = max(peak_live, live)
        if ph.held() > peak:
            peak, at = ph.held(), t
    n = sum(1 for o in ops if o[0] == 'a')
    print(f"{path.rsplit('/',1)[-1]} cache_ranges={cache_ranges}: peak held {peak} at {at}, ratio "
          f"{peak*PAGE*pm.UNIT/peak_live:.4f}, creates {ph.creates}, alias maps {ph.aliases} for {n} allocations",
          flush=True)

if __name__ == '__main__':
    # Alias maps and page creations per fresh placement, counted over the trace's second half too.
    counted = []
    plain_realize = realize

    def counting_realize(ph, L, how, grow):
        before = ph.aliases + ph.creates
        pieces = plain_realize(ph, L, how, grow)
        counted.append(ph.aliases + ph.creates - before)
        return pieces

    realize = counting_realize
    for path in sys.argv[1:]:
        for cache, newest in ((False, False), (True, False), (True, True)):
            counted.clear()
            EVICT_NEWEST = newest
            print("ranges cached, evicted " + ("newest" if newest else "oldest") + " first:" if cache
                  else "no ranges cached:", end=" ")
            run(path, cache)
            n = len(counted)
            print(f"    maps in the second half: {sum(counted[n // 2:])} for {n - n // 2} fresh placements")

"""Exploration: tidepool's expandable segments as they are (pages stay mapped once mapped; best fit in
what is mapped; growth only when nothing fits, extending the run that needs the fewest new pages), plus
one thing at growth: a block may start or end on a physical page already held, mapped again at a fresh
virtual page (an alias), where no live block in any view of that page uses those offsets.
Physical pages are never unmapped (no empty_cache in these traces), so the peak is the final count."""
import os, sys, bisect
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), '..', '..'))  # bench/
import placement_model as pm
PAGE = pm.PAGE

def union(iv):
    out = []
    for s, e in sorted(iv):
        if out and s <= out[-1][1]:
            out[-1] = (out[-1][0], max(out[-1][1], e))
        else:
            out.append((s, e))
    return out

def minus(iv, cut):
    """intervals iv minus intervals cut (both sorted, disjoint)"""
    out = []
    for s, e in iv:
        cur = s
        for cs, ce in cut:
            if ce <= cur or cs >= e:
                continue
            if cs > cur:
                out.append((cur, cs))
            cur = max(cur, ce)
        if cur < e:
            out.append((cur, e))
    return out

class Model:
    def __init__(self, alias):
        self.alias = alias
        self.live = []            # sorted (start, end) VA of live blocks
        self.phys_of = {}         # mapped VA page -> phys
        self.views = {}           # phys -> set of VA pages
        self.blocked = {}         # VA page -> offsets owned by other views (union)
        self.top = 0              # next fresh VA page
        self.new_pages = self.alias_maps = 0

    def live_in_page(self, v):
        lo, hi = v * PAGE, (v + 1) * PAGE
        k = bisect.bisect_left(self.live, (lo, lo))
        if k:
            k -= 1
        out = []
        while k < len(self.live) and self.live[k][0] < hi:
            s, e = self.live[k]
            if e > lo:
                out.append((max(s, lo) - lo, min(e, hi) - lo))
            k += 1
        return out

    def runs(self):
        pages = sorted(self.phys_of)
        i = 0
        while i < len(pages):
            j = i
            while j + 1 < len(pages) and pages[j + 1] == pages[j] + 1:
                j += 1
            yield pages[i], pages[j] + 1
            i = j + 1

    def free_intervals(self):
        """(start, end) VA intervals free to use: mapped, not live, not owned by another view"""
        out = []
        for a, b in self.runs():
            occupied = [(s, e) for s, e in self.live if e > a * PAGE and s < b * PAGE]
            for v in range(a, b):
                occupied += [(v * PAGE + s, v * PAGE + e) for s, e in self.blocked.get(v, [])]
            out += minus([(a * PAGE, b * PAGE)], union(occupied))
        return out, list(self.runs())

    def phys_free(self, p):
        """offsets of phys p no live block in any of its views uses"""
        used = []
        for v in self.views[p]:
            used += self.live_in_page(v)
        return minus([(0, PAGE)], union(used))

    def map_page(self, v, p=None, blocked=None):
        if p is None:
            p = self.new_pages          # ids never reused
            self.views[p] = set()
            self.new_pages += 1
        else:
            self.alias_maps += 1
        self.views[p].add(v)
        self.phys_of[v] = p
        if blocked:
            self.blocked[v] = blocked

    def claim(self, p, v_new, s, e):
        """offsets [s, e) of phys p now belong to view v_new: blocked in every other view"""
        for w in self.views[p]:
            if w != v_new:
                self.blocked[w] = union(self.blocked.get(w, []) + [(s, e)])
        self.blocked[v_new] = minus([(0, PAGE)], [(s, e)]) if v_new not in self.blocked else \
            minus(self.blocked[v_new], [(s, e)])

    def alloc(self, L):
        free, runs = self.free_intervals()
        fits = [(e - s, s) for s, e in free if e - s >= L]
        if fits:
            return min(fits)[1]
        # growth, option A: a run's free top extended, or a fresh run
        best = (-(-L // PAGE), 0, ('fresh',))
        for a, b in runs:
            tops = [(s, e) for s, e in free if e == b * PAGE]
            have = tops[0][1] - tops[0][0] if tops else 0
            k = -(-(L - have) // PAGE)
            if any(b + i in self.phys_of for i in range(k)):
                continue          # would run into the next run (tidepool merges them; not modelled)
            if (k, 0) < best[:2]:
                best = (k, 0, ('extend', b, b * PAGE - have, k))
        if self.alias:
            best = self.alias_candidate(L, best)
        how = best[2]
        if how[0] == 'fresh':
            v0 = self.top
            for i in range(best[0]):
                self.map_page(v0 + i)
            self.top += best[0] + 1
            return v0 * PAGE
        if how[0] == 'extend':
            _, b, start, k = how
            assert all(b + i not in self.phys_of for i in range(k)), "arena collision"
            for i in range(k):
                self.map_page(b + i)
            self.top = max(self.top, b + k + 1)
            return start
        return self.realize_alias(L, how)

    def alias_candidate(self, L, best):
        """best, or a cheaper (new pages, alias maps, how) that puts the block, or its first and last
        pages, on physical pages already held: ('small', p, s) or ('head', p, s, k, y, tail)"""
        holes = {p: self.phys_free(p) for p in self.views}
        for p, hs in holes.items():
            for s, e in hs:
                if e - s >= L:        # the whole block on one held page, through a new view
                    if (0, 1) < best[:2]:
                        best = (0, 1, ('small', p, s))
                if e == PAGE and s > 0 and L > PAGE - s:
                    k, y = divmod(L - (PAGE - s), PAGE)
                    tail = None
                    if y:
                        for q, qs in holes.items():
                            if q != p and qs and qs[0][0] == 0 and qs[0][1] >= y:
                                tail = q
                                break
                    new = k + (1 if y and tail is None else 0)
                    maps = 1 + (tail is not None)
                    if (new, maps) < best[:2]:
                        best = (new, maps, ('head', p, s, k, y, tail))
        return best

    def realize_alias(self, L, how):
        """maps what alias_candidate chose, at fresh virtual pages above everything mapped"""
        self.top = max([self.top] + [v + 2 for v in self.phys_of])
        if how[0] == 'small':
            _, p, s = how
            v = self.top; self.top += 2
            self.map_page(v, p)
            self.claim(p, v, s, s + L)
            return v * PAGE + s
        _, p, s, k, y, tail = how
        v = self.top
        self.map_page(v, p)
        self.claim(p, v, s, PAGE)
        for i in range(k):
            self.map_page(v + 1 + i)
        if y:
            vt = v + 1 + k
            if tail is None:
                self.map_page(vt)
                self.blocked.pop(vt, None)
            else:
                self.map_page(vt, tail)
                self.claim(tail, vt, 0, y)
        self.top = v + k + 3
        return v * PAGE + s

def run(path, alias):
    ops = pm.read_trace(path)
    m, where = Model(alias), {}
    live = peak_live = 0
    growth_at = []
    for t, (op, ident, units, size, stream) in enumerate(ops):
        if op == 'f':
            a, u, s = where.pop(ident)
            m.live.pop(bisect.bisect_left(m.live, (a, a + u)))
            live -= s
            continue
        before = m.new_pages + m.alias_maps
        a = m.alloc(units)
        if m.new_pages + m.alias_maps > before:
            growth_at.append(t)
        bisect.insort(m.live, (a, a + units))
        where[ident] = (a, units, size)
        live += size
        peak_live = max(peak_live, live)
    pages = len(m.views)
    print(f"{path.rsplit('/',1)[-1]} alias={alias}: physical pages {pages}, ratio {pages*PAGE*pm.UNIT/peak_live:.4f}, "
          f"new pages {m.new_pages}, alias maps {m.alias_maps}, last growth at op {growth_at[-1] if growth_at else None} of {len(ops)}",
          flush=True)

if __name__ == '__main__':
    for path in sys.argv[1:]:
        for alias in (False, True):
            run(path, alias)

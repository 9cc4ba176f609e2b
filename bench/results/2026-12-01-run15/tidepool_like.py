"""Exploration: tidepool's expandable segments as they behave (pages stay mapped; best fit in what is
mapped; growth only when nothing fits, by the fewest new pages; growing past the high-water mark first
unmaps wholly free pages elsewhere, largest stretches first, unless the pages to be mapped were unmapped
for that lately, when the mark rises), with or without one addition at growth: a block's first or last
page (or a block within one page) may be a physical page already held, mapped again at a fresh virtual
page, where no live block in any of that page's views uses those offsets."""
import os, sys, bisect
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import grow_alias as ga
pm, PAGE = ga.pm, ga.PAGE

class TP(ga.Model):
    def __init__(self, alias):
        super().__init__(alias)
        self.high_water = 0
        self.recent = []          # VA page ranges unmapped for the mark lately (last 8)
        self.unmaps = 0

    def held(self):
        return len(self.views)

    def plain_plan(self, L, free, runs):
        best = None
        for i in range(len(runs) + 1):
            left = runs[i - 1] if i else None
            right = runs[i] if i < len(runs) else None
            lo = left[1] if left else 0
            hi = right[0] if right else 1 << 40
            tail = [f for f in free if left and f[1] == left[1] * PAGE]
            head = [f for f in free if right and f[0] == right[0] * PAGE]
            tf = tail[0][1] - tail[0][0] if tail else 0
            hf = head[0][1] - head[0][0] if head else 0
            up = -(-(L - tf) // PAGE) if L > tf else 0
            if up <= hi - lo and (left or up):
                cand = (up, 0, ('pages', lo, up, lo * PAGE - tf))
                best = cand if best is None or cand[0] < best[0] else best
            down = -(-(L - hf) // PAGE) if L > hf else 0
            if right and down and down <= hi - lo:
                if L <= hf + down * PAGE:
                    # the block ends at the top of the run's free head
                    cand = (down, 0, ('pages', hi - down, down, hi * PAGE + hf - L))
                    best = cand if best is None or cand[0] < best[0] else best
            if left and right and hi > lo and tf + (hi - lo) * PAGE + hf >= L:
                cand = (hi - lo, 0, ('pages', lo, hi - lo, lo * PAGE - tf))
                best = cand if best is None or cand[0] < best[0] else best
        return best

    def release(self, want, keep):
        """unmap up to `want` wholly free, unaliased VA pages outside keep, largest stretches first"""
        free, runs = self.free_intervals()
        stretches = []
        for s, e in free:
            a, b = -(-s // PAGE), e // PAGE
            pages = [v for v in range(a, b) if v not in keep and len(self.views[self.phys_of[v]]) == 1
                     and v not in self.blocked]
            run = []
            for v in pages + [None]:
                if v is not None and (not run or v == run[-1] + 1):
                    run.append(v)
                else:
                    if run:
                        stretches.append(run)
                    run = [v] if v is not None else []
        stretches.sort(key=len, reverse=True)
        gone = 0
        for run in stretches:
            for v in run:
                if gone >= want:
                    return gone
                p = self.phys_of.pop(v)
                del self.views[p]
                gone += 1
                self.unmaps += 1
            self.recent = (self.recent + [(run[0], run[-1] + 1)])[-8:]
        return gone

    def alloc(self, L):
        free, runs = self.free_intervals()
        fits = [(e - s, s) for s, e in free if e - s >= L]
        if fits:
            return min(fits)[1]
        trimmed = False
        while True:
            free, runs = self.free_intervals()
            best = self.plain_plan(L, free, runs)
            if self.alias:
                best = self.alias_candidate(L, best)
            need = best[0]
            if not trimmed and need and self.held() + need > self.high_water:
                lo_v = best[2][1] if best[2][0] == 'pages' else self.top
                span = (lo_v, lo_v + max(need, 1))
                if any(a < span[1] and span[0] < b for a, b in self.recent):
                    self.high_water = self.held() + need
                else:
                    keep = set(range(span[0], span[1]))
                    if best[2][0] == 'pages' and best[2][3] is not None:
                        keep |= set(range(best[2][3] // PAGE, (best[2][3] + L) // PAGE + 1))
                    self.release(self.held() + need - self.high_water, keep)
                    trimmed = True
                    continue
            trimmed = True
            break
        how = best[2]
        if how[0] == 'pages':
            _, v0, k, addr = how
            for i in range(k):
                self.map_page(v0 + i)
                self.blocked.pop(v0 + i, None)
            self.top = max(self.top, v0 + k + 1)
            self.high_water = max(self.high_water, self.held())
            return addr if addr is not None else v0 * PAGE
        a = self.realize_alias(L, how)
        self.high_water = max(self.high_water, self.held())
        return a

def run(path, alias):
    ops = pm.read_trace(path)
    m, where = TP(alias), {}
    live = peak_live = peak = 0
    for t, (op, ident, units, size, stream) in enumerate(ops):
        if op == 'f':
            a, u, s = where.pop(ident)
            m.live.pop(bisect.bisect_left(m.live, (a, a + u)))
            live -= s
            continue
        a = m.alloc(units)
        assert all(v in m.phys_of for v in pm.pages_of(a, units)), (t, a, units)
        bisect.insort(m.live, (a, a + units))
        where[ident] = (a, units, size)
        live += size
        peak_live = max(peak_live, live)
        if m.held() > peak:
            peak, peak_at = m.held(), t
    print(f"{path.rsplit('/',1)[-1]} alias={alias}: peak physical pages {peak} (op {peak_at}), ratio "
          f"{peak*PAGE*pm.UNIT/peak_live:.4f}, new pages {m.new_pages}, alias maps {m.alias_maps}, unmaps {m.unmaps}",
          flush=True)

if __name__ == '__main__':
    for path in sys.argv[1:]:
        for alias in (False, True):
            run(path, alias)

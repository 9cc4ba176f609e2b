"""Run 24: placement_model.py's rules in tidepool's own regime instead of the idealized one.

    python3 bench/results/2026-12-02-run24/kept_mapped_model.py TRACE    (from the repository's root)

Pages stay mapped after their blocks are freed, as in tidepool: a block goes where it needs the fewest
pages not mapped yet, ties broken by the rule (high: the highest address; low: the lowest; best: the
smallest gap; touch_*: then the fewest pages no live block touches). A growth that would take the mapped
pages past their high-water mark first unmaps every mapped page no live block touches (outside the new
block's), as trim_on_growth does. Printed per large-from threshold (MiB; 0: one address range) and rule:
peak pages mapped, pages mapped and pages unmapped over the whole trace."""
import os
import sys
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", ".."))
import placement_model as pm
def run(ops, thr_mib, tie, trim=True):
    thr=int(thr_mib*2**20)//pm.UNIT
    space=pm.Space(); where={}; mapped=set(); mark=0; peak=0; maps=0; unmaps=0
    for t,(op,ident,units,size,stream) in enumerate(ops):
        if op=='f':
            a,u,s,st=where.pop(ident); space.remove(a,u); continue
        sp=stream*2+(units>=thr if thr else 0)
        def newp(a): return sum(1 for p in pm.pages_of(a,units) if p not in mapped)
        keys={'high':lambda g,a:(newp(a),-a),'low':lambda g,a:(newp(a),a),'best':lambda g,a:(newp(a),g,a),
              'touch_high':lambda g,a:(newp(a),space.new_pages(a,units),-a),
              'touch_best':lambda g,a:(newp(a),space.new_pages(a,units),g,a)}
        g,a=min(space.gaps(units,sp),key=lambda c:keys[tie](*c))
        need=[p for p in pm.pages_of(a,units) if p not in mapped]
        if need and trim and len(mapped)+len(need)>mark:
            mine=set(pm.pages_of(a,units))
            drop=[p for p in mapped if p not in space.touched and p not in mine]
            for p in drop: mapped.discard(p)
            unmaps+=len(drop)
        for p in need: mapped.add(p)
        maps+=len(need)
        space.place(a,units); where[ident]=(a,units,size,stream)
        mark=max(mark,len(mapped)); peak=max(peak,len(mapped))
    return peak,maps,unmaps
path=sys.argv[1]; ops=pm.read_trace(path)
for thr in (0,2,4):
    for tie in ('high','low','best','touch_high','touch_best'):
        p,m,u=run(ops,thr,tie)
        print(path.split('/')[-1],thr,tie,p,m,u,flush=True)

"""Run 24: kept_mapped_model.py (pages stay mapped, trim at growth past the mark) with the reservations
of reserve_model.py.

    python3 bench/results/2026-12-02-run24/kept_mapped_reserve_model.py TRACE    (from the repository's root)

Ties: res_first (avoid reserved ranges, then the fewest pages not mapped), new_first (the reverse), none
(no avoidance; a recurring size still goes back to its reservation when no page need be mapped). Prints
BIG, the tie, KEEP, the peak of pages mapped, the operation that reached it and the pages mapped.
"""
import os
import sys
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", ".."))
import placement_model as pm
def run(ops, big_mib, tie, keep_ops):
    big=int(big_mib*2**20)//pm.UNIT
    space=pm.Space(); where={}; mapped=set(); mark=0; peak=0; maps=0; reserved={}; pk_at=0
    for t,(op,ident,units,size,stream) in enumerate(ops):
        if op=='f':
            a,u,s,st=where.pop(ident); space.remove(a,u)
            if u>=big: reserved[(st,u)]=(a,t)
            continue
        def res(a):
            for (st,u),(ra,ft) in reserved.items():
                if st==stream and u!=units and t-ft<=keep_ops and ra<a+units and a<ra+u: return 1
            return 0
        def newp(a): return sum(1 for p in pm.pages_of(a,units) if p not in mapped)
        r=reserved.get((stream,units))
        if r and space.is_free(r[0],units) and newp(r[0])==0:
            a=r[0]
        else:
            keys={'res_first':lambda g,a:(res(a),newp(a),g,a),'new_first':lambda g,a:(newp(a),res(a),g,a),
                  'none':lambda g,a:(newp(a),g,a)}
            g,a=min(space.gaps(units,stream),key=lambda c:keys[tie](*c))
        need=[p for p in pm.pages_of(a,units) if p not in mapped]
        if need and len(mapped)+len(need)>mark:
            mine=set(pm.pages_of(a,units))
            for p in [p for p in mapped if p not in space.touched and p not in mine]: mapped.discard(p)
        for p in need: mapped.add(p)
        maps+=len(need)
        space.place(a,units); where[ident]=(a,units,size,stream)
        mark=max(mark,len(mapped))
        if len(mapped)>peak: peak,pk_at=len(mapped),t
    return peak,pk_at,maps
ops=pm.read_trace(sys.argv[1])
for big in (4,8,16):
  for tie in ("res_first","new_first","none"):
    for keep in (20,80,1000000):
        print(big,tie,keep,*run(ops,big,tie,keep),flush=True)

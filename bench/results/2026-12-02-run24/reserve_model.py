"""Run 24: the idealized model of placement_model.py with a reservation for recurring large sizes.

    python3 bench/results/2026-12-02-run24/reserve_model.py TRACE    (from the repository's root)

A freed block of at least BIG MiB leaves a reservation at its address for its size, for KEEP operations.
A block of that size goes back there if it is free. Other blocks avoid reserved ranges: first (the
rules but pages_then_res), or after the fewest new pages (pages_then_res). Prints BIG, the rule, KEEP,
the peak of pages and the operation that reached it.
"""
import os
import sys
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", ".."))
import placement_model as pm
def run(ops, big_mib, base_rule, keep_ops):
    big=int(big_mib*2**20)//pm.UNIT
    reserved={}  # (stream,units)->(addr, freed_at)
    T=[0]
    def overlaps_res(a,units,stream,t):
        for (st,u),(ra,ft) in reserved.items():
            if st==stream and u!=units and t-ft<=keep_ops and ra<a+units and a<ra+u: return 1
        return 0
    def place(space,ident,units,stream):
        t=T[0]
        r=reserved.get((stream,units))
        if r and space.is_free(r[0],units): return r[0]
        keys={"fewest_pages_best":lambda g,a:(overlaps_res(a,units,stream,t),space.new_pages(a,units),g,a),
              "fewest_pages_high":lambda g,a:(overlaps_res(a,units,stream,t),space.new_pages(a,units),-a),
              "best_fit":lambda g,a:(overlaps_res(a,units,stream,t),g,a),
              "pages_then_res":lambda g,a:(space.new_pages(a,units),overlaps_res(a,units,stream,t),g,a)}
        return min(space.gaps(units,stream),key=lambda c:keys[base_rule](*c))[1]
    def freed(stream,units,addr,ident):
        if units>=big: reserved[(stream,units)]=(addr,T[0])
    # wrap ops to track time
    space=pm.Space(); where={}; peak=0; peak_at=0
    for t,(op,ident,units,size,stream) in enumerate(ops):
        T[0]=t
        if op=='f':
            a,u,s,st=where.pop(ident); space.remove(a,u); freed(st,u,a,ident); continue
        a=place(space,ident,units,stream); space.place(a,units); where[ident]=(a,units,size,stream)
        if len(space.touched)>peak: peak,peak_at=len(space.touched),t
    return peak,peak_at
ops=pm.read_trace(sys.argv[1])
for big in (4,8,16):
  for rule in ("fewest_pages_best","fewest_pages_high","best_fit","pages_then_res"):
    for keep in (20,80,1000000):
        print(big,rule,keep,*run(ops,big,rule,keep),flush=True)

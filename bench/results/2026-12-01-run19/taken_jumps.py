import re,subprocess,sys
cg, binary, pairs = sys.argv[1], sys.argv[2], float(sys.argv[3])
top = int(sys.argv[4]) if len(sys.argv) > 4 else 40
lines=open(cg).read().split('\n')
fn=None; out=[]
for i,l in enumerate(lines):
    if l.startswith('fn='): fn=l[3:]
    if l.startswith('jcnd=') or l.startswith('jump='):
        m=re.match(r'(jcnd|jump)=(\d+)(?:/(\d+))? (0x[0-9a-f]+)',l)
        src=lines[i+1].split()[0]
        k='c' if m.group(1)=='jcnd' else 'u'
        out.append((int(m.group(2)),int(m.group(3) or m.group(2)),src,m.group(4),fn,k))
mine=[o for o in out if 'bench_random' not in o[4] and 'exp' not in o[4] and o[4] not in ('main',)]
mine.sort(key=lambda o:-o[0])
for o in mine[:top]:
    if o[0]/pairs < 0.3: break
    r=subprocess.run(['addr2line','-e',binary,'-i',o[2]],capture_output=True,text=True).stdout.strip().split('\n')
    where=' < '.join(x.split('/')[-1] for x in r[:3])
    print(f"{o[5]} {o[0]/pairs:5.2f} of {o[1]/pairs:5.2f}  {o[2]}->{o[3]}  {o[4][:22]:22s} {where}")
print("taken per pair: cond %.2f uncond %.2f" % (sum(o[0] for o in mine if o[5]=='c')/pairs, sum(o[0] for o in mine if o[5]=='u')/pairs))

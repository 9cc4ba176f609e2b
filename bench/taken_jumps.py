#!/usr/bin/env python3
r"""The jumps a program took, from a callgrind profile, busiest first: where the hot path's layout puts a
taken jump (the H200 machine's host pays for each: bench/results/2026-12-01-run19.md).

    valgrind --tool=callgrind --collect-jumps=yes --dump-instr=yes --compress-pos=no \
        --compress-strings=no --callgrind-out-file=cg.out PROGRAM ARGS...
    python3 bench/taken_jumps.py [--skip REGEX] cg.out PROGRAM OPERATIONS [LINES]

--skip leaves out the jumps of functions whose name matches REGEX (a benchmark's own loop: run 19's
figures for the micro driver skip 'bench_|exp|^main$'). OPERATIONS divides every count (the
alloc+free pairs, or the operations, the profile covered); LINES (default 40) is how many jump sites
to list. Each line: c (conditional) or u (unconditional), taken per
operation, of how many executions, the jump's address and target, its function, and its source line
with the lines it was inlined into (addr2line). The last line gives the totals per operation.
"""
import re
import subprocess
import sys

JUMP = re.compile(r'(jcnd|jump)=(\d+)(?:/(\d+))? (0x[0-9a-f]+|\+\d+|-\d+|\*)')


def read_jumps(path):
    """(taken, executed, source address, target, function, 'c' or 'u') for each jump line. A jump line is
    followed by the position line of the jump's own instruction."""
    with open(path) as f:
        lines = f.read().split('\n')
    if not lines or not lines[0].startswith('# callgrind format'):
        sys.exit(f"{path}:1: not a callgrind profile (its first line should be '# callgrind format')")
    if not any(l.startswith('positions: instr') for l in lines[:40]):
        sys.exit(f"{path}: made without --dump-instr=yes: jumps have no addresses")
    jumps, fn = [], '?'
    for n, line in enumerate(lines):
        if line.startswith('fn='):
            fn = line[3:]
        elif line.startswith(('jcnd=', 'jump=')):
            m = JUMP.match(line)
            if not m or n + 1 >= len(lines) or not lines[n + 1].startswith('0x'):
                sys.exit(f"{path}:{n + 1}: a jump line this script cannot read (made without "
                         f"--compress-pos=no?): {line[:80]}")
            taken = int(m.group(2))
            executed = int(m.group(3)) if m.group(3) else taken
            kind = 'c' if m.group(1) == 'jcnd' else 'u'
            jumps.append((taken, executed, lines[n + 1].split()[0], m.group(4), fn, kind))
    return jumps


def where(binary, address):
    try:
        out = subprocess.run(['addr2line', '-i', '-e', binary, address], capture_output=True, text=True).stdout
    except FileNotFoundError:
        return '(no addr2line: binutils)'
    return ' < '.join(l.split('/')[-1] for l in out.strip().split('\n')[:3])


def main(argv):
    skip = None
    if len(argv) > 2 and argv[1] == '--skip':
        try:
            skip = re.compile(argv[2])
        except re.error as e:
            sys.exit(f"--skip {argv[2]!r}: not a regular expression ({e})")
        argv = argv[:1] + argv[3:]
    if len(argv) not in (4, 5):
        sys.exit(__doc__)
    path, binary = argv[1], argv[2]
    try:
        ops = float(argv[3])
        top = int(argv[4]) if len(argv) == 5 else 40
    except ValueError:
        sys.exit("OPERATIONS and LINES are numbers\n" + __doc__)
    if ops <= 0 or top < 0:
        sys.exit("OPERATIONS must be above 0 and LINES at least 0")
    jumps = sorted((j for j in read_jumps(path) if not (skip and skip.search(j[4]))), key=lambda j: -j[0])
    for taken, executed, source, target, fn, kind in jumps[:top]:
        print(f"{kind} {taken / ops:6.2f} of {executed / ops:6.2f}  {source}->{target}  {fn[:24]:24s} "
              f"{where(binary, source)}")
    cond = sum(j[0] for j in jumps if j[5] == 'c') / ops
    uncond = sum(j[0] for j in jumps if j[5] == 'u') / ops
    print(f"taken jumps per operation: {cond + uncond:.2f} ({cond:.2f} conditional, {uncond:.2f} unconditional)")


if __name__ == '__main__':
    main(sys.argv)

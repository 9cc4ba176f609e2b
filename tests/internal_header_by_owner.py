#!/usr/bin/env python3
"""Each declaration in src/internal.h sits under the heading of the file that defines it.

internal.h is a list of prototypes grouped under headings "/* ---- FILE.c ...", the file that defines
them (a heading may name two files: "pool.c and sleep.c"). This reads every function prototype and
extern variable there, finds the .c file under src/ that defines it, and fails naming each one filed
under another file's heading, defined nowhere, or with code (an inline body) in the header.

    tests/internal_header_by_owner.py [SRC_DIR]      (default: the src/ beside tests/)
"""
import os
import re
import sys

src = sys.argv[1] if len(sys.argv) > 1 else os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "src")


def strip_comments(text):
    # Comments and string literals become spaces, line breaks kept, so line numbers stay right.
    def blank(m):
        return re.sub(r"[^\n]", " ", m.group(0))
    return re.sub(r'/\*.*?\*/|//[^\n]*|"(?:\\.|[^"\\\n])*"', blank, text, flags=re.S)


header_path = os.path.join(src, "internal.h")
raw = open(header_path).read()
heading_re = re.compile(r"/\* ---- ([^:*]*?)(?::|-{3,}|\*/)")
headings = []  # (offset, [files])
for m in heading_re.finditer(raw):
    files = re.findall(r"[\w/]+\.c", m.group(1))
    headings.append((m.start(), files))

code = strip_comments(raw)
# Preprocessor lines (a macro's continued lines too) are no declarations.
code = re.sub(r"^[ \t]*#(?:[^\n]*\\\n)*[^\n]*", lambda m: re.sub(r"[^\n]", " ", m.group(0)), code, flags=re.M)
problems = []
declared = []  # (name, line, files of its heading)
# Top-level statements: split at ';' and '}' outside parentheses and braces.
depth_paren = depth_brace = 0
start = 0
i = 0
while i < len(code):
    c = code[i]
    if c == "(":
        depth_paren += 1
    elif c == ")":
        depth_paren -= 1
    elif c == "{":
        depth_brace += 1
    elif c == "}":
        depth_brace -= 1
        if depth_brace == 0 and depth_paren == 0:
            stmt = code[start:i + 1]
            if re.search(r"\)\s*(__attribute__\s*\(\(.*\)\)\s*)?\{", stmt, re.S) and not stmt.lstrip().startswith("#"):
                line = code.count("\n", 0, start + len(stmt) - len(stmt.lstrip())) + 1
                problems.append("internal.h:%d: a function body in the header (inline code belongs in a header "
                                "of its own)" % line)
            start = i + 1
    elif c == ";" and depth_paren == 0 and depth_brace == 0:
        stmt = code[start:i]
        stmt_start = start
        start = i + 1
        # Drop preprocessor lines.
        lines = [l for l in stmt.split("\n") if not l.strip().startswith("#")]
        s = " ".join(lines).strip()
        if not s or s.startswith("struct") and "(" not in s or s.startswith("typedef") or s.startswith("_Static_assert"):
            i += 1
            continue
        s = re.sub(r"__attribute__\s*\(\(.*?\)\)\s*", "", s)
        m = re.match(r"extern\s+.*?\b(\w+)\s*$", s)
        if not m:
            m = re.match(r"[\w\s\*\(\)]*?\b(\w+)\s*\((.*)\)\s*$", s, re.S)
        if not m:
            i += 1
            continue
        name = m.group(1)
        offset = stmt_start + stmt.rfind(name)
        line = code.count("\n", 0, offset) + 1
        files = [f for (o, f) in headings if o <= offset]
        declared.append((name, line, files[-1] if files else []))
    i += 1

# Where each name is defined: at the start of a line, a type then the name, then "(" ... "{" (a function)
# or "=" / ";" at file scope (a variable), in a .c file under src/.
definitions = {}
for root, _, names in os.walk(src):
    for fn in names:
        if not fn.endswith(".c"):
            continue
        path = os.path.join(root, fn)
        rel = os.path.relpath(path, src)
        text = strip_comments(open(path).read())
        for m in re.finditer(r"^[A-Za-z_][\w \*\(\)]*?\b(\w+)\s*\(([^;{]*)\)\s*(__attribute__\s*\(\(.*?\)\)\s*)?\{", text, re.M | re.S):
            definitions.setdefault(m.group(1), set()).add(rel)
        for m in re.finditer(r"^(?!static)(?!extern)[A-Za-z_][\w \(\)\*]*?\b(\w+)\s*(=[^;]*)?;", text, re.M):
            definitions.setdefault(m.group(1), set()).add(rel)

for name, line, files in declared:
    where = definitions.get(name)
    if not where:
        problems.append("internal.h:%d: %s is defined in no file under src/" % (line, name))
    elif not files:
        problems.append("internal.h:%d: %s comes before any heading (defined in %s)" % (line, name, ", ".join(sorted(where))))
    elif not (where & set(files)):
        problems.append("internal.h:%d: %s is under the heading of %s but defined in %s" %
                        (line, name, " and ".join(files), ", ".join(sorted(where))))

for p in problems:
    print(p)
print("%d declarations in internal.h, %d misplaced or wrong" % (len(declared), len(problems)))
sys.exit(1 if problems or not declared else 0)

#!/usr/bin/env python3
"""README.md's claims about real training are docs/performance.md's figures, in the same units: every
figure of README's "Real training under PyTorch" paragraph (numbers with a point or of three digits
or more, and driver-call counts "N + M") is written in docs/performance.md too, digits alike (commas
as thousands separators aside). A figure rounded, converted (MiB shown as GiB) or out of date fails.

    tests/readme_claims.py SOURCE_DIR
"""
import re
import sys

root = sys.argv[1]
readme = open(root + "/README.md").read()
docs = open(root + "/docs/performance.md").read().replace(",", "")
m = re.search(r"^Real training under PyTorch.*?(?=\n\n)", readme, re.S | re.M)
if not m:
    sys.exit("README.md has no paragraph beginning 'Real training under PyTorch'")
text = re.sub(r"`[^`]*`|\[[^\]]*\]\([^)]*\)|GPT-2|ResNet-50", "", m.group(0))
figures = re.findall(r"\d+ \+ \d+", text)
text = re.sub(r"\d+ \+ \d+", "", text)
figures += [f for f in re.findall(r"\d[\d,]*(?:\.\d+)?", text) if "." in f or len(f.replace(",", "")) >= 3]
# a figure stands alone there: 1.08 is not found inside 1.083
missing = [f for f in figures
           if not re.search(r"(?<![\d.])%s(?![\d])" % re.escape(f.replace(",", "")), docs)]
print("README.md's training figures: %s" % ", ".join(figures))
if missing:
    print()
    sys.exit("not in docs/performance.md: %s (README.md must give the docs' figures, in their units)"
             % ", ".join(missing))
print("every one is docs/performance.md's")

#!/bin/sh
# A plot made by PyTorch's torch/cuda/_memory_viz.py (trace_plot or segment_plot; bench/snapshot_viz.py
# keeps them), drawn by headless Chromium to a PNG, on a machine without network access.
#
#   bench/render_memory_viz.sh PLOT.html MemoryViz.js OUT.png [WIDTHxHEIGHT]
#
# The plot loads PyTorch's viewer, torch/utils/viz/MemoryViz.js, from a CDN, and the viewer loads d3
# version 5 from another. Here both come from files instead:
#   - MemoryViz.js: give its path (some PyTorch wheels ship it under torch/utils/viz/; otherwise take
#     it from a PyTorch source tree). It is used as it is, except that its five imports of d3 modules
#     are pointed at the d3 bundle below.
#   - d3: Debian's node-d3 (version 5, as the viewer asks): apt-get install node-d3.
# The page is served from a temporary folder on 127.0.0.1 (a browser will not load a module from a
# file: address) and captured once it has drawn. Nothing is kept but the PNG. Exits 1 if the browser
# writes no picture, or a blank one.
set -eu
[ $# -ge 3 ] || { echo "usage: $0 PLOT.html MemoryViz.js OUT.png [WIDTHxHEIGHT]" >&2; exit 2; }
html=$1 viewer=$2 png=$3 size=${4:-1600x1000}
d3=/usr/share/nodejs/d3/dist/d3.min.js
browser=$(command -v chromium || command -v chromium-browser || true)
[ -n "$browser" ] || { echo "$0: no chromium (apt-get install chromium)" >&2; exit 1; }
[ -f "$d3" ] || { echo "$0: no d3 version 5 at $d3 (apt-get install node-d3)" >&2; exit 1; }
for f in "$html" "$viewer"; do
    [ -f "$f" ] || { echo "$0: no such file: $f" >&2; exit 1; }
done
grep -q 'MemoryViz.js' "$html" || { echo "$0: $html does not load MemoryViz.js: not a _memory_viz.py plot" >&2; exit 1; }

dir=$(mktemp -d)
server=
cleanup() {
    [ -z "$server" ] || kill "$server" 2>/dev/null || true
    rm -rf "$dir"
}
trap cleanup EXIT

cp "$d3" "$dir/d3.min.js"
# `import * as d3 from "...d3@5"` and `import {x, y} from "...d3-axis@1"` (and the like) become reads
# of the bundle's global.
sed -E -e 's#^import \* as d3 from "[^"]*";#const d3 = window.d3;#' \
       -e 's#^import \{([^}]*)\} from "https://cdn\.skypack\.dev/d3[^"]*";#const {\1} = window.d3;#' \
       "$viewer" > "$dir/MemoryViz.js"
if grep -q '^import ' "$dir/MemoryViz.js"; then
    echo "$0: MemoryViz.js imports something other than d3:" >&2
    grep '^import ' "$dir/MemoryViz.js" >&2
    exit 1
fi
# The plot: its import of the viewer points at the copy beside it, and the d3 bundle loads first.
sed -E -e 's#"https://[^"]*/MemoryViz\.js"#"./MemoryViz.js"#' \
       -e 's#<head>#<head><script src="d3.min.js"></script>#' "$html" > "$dir/plot.html"

port=$(python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
python3 -m http.server --bind 127.0.0.1 --directory "$dir" "$port" >/dev/null 2>&1 &
server=$!
for _ in $(seq 50); do
    python3 -c "import urllib.request; urllib.request.urlopen('http://127.0.0.1:$port/plot.html')" \
        2>/dev/null && break
    sleep 0.1
done

rm -f "$png"
timeout 180 "$browser" --headless --no-sandbox --disable-gpu --hide-scrollbars \
    --window-size="$(echo "$size" | tr x ,)" --virtual-time-budget=30000 \
    --screenshot="$png" "http://127.0.0.1:$port/plot.html" >/dev/null 2>&1 || true
[ -f "$png" ] || { echo "$0: chromium wrote no PNG" >&2; exit 1; }
# What the viewer drew, from the page as the browser left it: a polygon per allocation in the trace
# plot, a rectangle per segment and block in the segment plot (the page without a snapshot has none).
timeout 180 "$browser" --headless --no-sandbox --disable-gpu --virtual-time-budget=30000 --dump-dom \
    "http://127.0.0.1:$port/plot.html" > "$dir/dom.html" 2>/dev/null || true
polygons=$(grep -o '<polygon' "$dir/dom.html" | wc -l)
rects=$(grep -o '<rect' "$dir/dom.html" | wc -l)
echo "rendered $png: $(wc -c < "$png") bytes ($size); the viewer drew $polygons polygons and $rects rectangles"
[ "$polygons" -gt 1 ] || [ "$rects" -gt 2 ] || { echo "$0: the viewer drew nothing" >&2; exit 1; }

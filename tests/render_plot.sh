#!/bin/sh
# tidepool plot, rendered as a person would see it: headless Chromium draws the SVG to a PNG. The PNG
# must be a real picture (a blank 1200x560 page compresses to a few KiB; the chart is over 30 KiB).
# Skipped (exit 77) where Chromium is not installed (scripts/install-deps.sh plot installs it).
#   render_plot.sh TIDEPOOL_BINARY TRACE OUT_DIR
set -eu
tool=$1 trace=$2 out=$3
browser=$(command -v chromium || command -v chromium-browser || true)
[ -n "$browser" ] || { echo "skipped: Chromium, which draws the plot here, is not installed (scripts/install-deps.sh plot)"; exit 77; }
mkdir -p "$out"
"$tool" plot --device-work none "$trace" -o "$out/plot.svg"
grep -q "<polygon" "$out/plot.svg" || { echo "no chart in the SVG"; exit 1; }
rm -f "$out/plot.png"
timeout 120 "$browser" --headless --no-sandbox --disable-gpu --hide-scrollbars --window-size=1200,560 \
    --screenshot="$out/plot.png" "file://$(cd "$out" && pwd)/plot.svg" >/dev/null 2>&1 || true
[ -f "$out/plot.png" ] || { echo "chromium wrote no PNG"; exit 1; }
size=$(wc -c < "$out/plot.png")
echo "rendered $out/plot.png: $size bytes"
[ "$size" -gt 30000 ] || { echo "the PNG is too small to hold the chart"; exit 1; }

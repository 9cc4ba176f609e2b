"""tidepool's snapshot of the seed's loop, rendered by PyTorch's own memory visualizer.

    python3 bench/snapshot_viz.py OUT_DIR [STEPS]

With tidepool as PyTorch's allocator and its history on (native stacks too with --stacks), runs the seed's loop
(nn.Transformer(d_model=512, nhead=8), 32x128x512, forward and backward) for STEPS steps (default 5),
then:
  - checks the snapshot against tidepool's statistics (segments add up to reserved memory, active
    blocks to allocated memory) and that every allocation in the trace is matched by its frees;
  - writes snapshot.pickle with tidepool.torch.dump_snapshot (in a temporary folder; its size is
    printed);
  - runs torch/cuda/_memory_viz.py on it: trace_plot and segment_plot (HTML, their sizes printed, and
    kept in OUT_DIR when under 8 MB, for bench/render_memory_viz.sh), stats and trace (text, into
    OUT_DIR);
  - writes snapshot_local.html, the trace plot with PyTorch's MemoryViz.js next to it instead of its
    address on a CDN, so a browser without network access can draw it (copied as MemoryViz.js);
  - prints the leak report with one tensor deliberately left alive.
"""
import os
import shutil
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "python"))

import torch  # noqa: E402
import tidepool.torch as tt  # noqa: E402

out = sys.argv[1]
steps = int(sys.argv[2]) if len(sys.argv) > 2 else 5
# Native stacks make the pickle about ten times larger (27 MB for 5 steps); off unless asked for.
STACKS = "--stacks" in sys.argv
KEEP_BELOW = 8 << 20  # plots smaller than this are kept in OUT_DIR too (without stacks they are ~1.3 MB)
os.makedirs(out, exist_ok=True)
bulky = tempfile.mkdtemp()  # the pickle and the plots that embed it: their sizes are printed

tt.enable()
tt.record_memory_history(max_entries=2_000_000, stacks=STACKS)
model = torch.nn.Transformer(d_model=512, nhead=8).cuda()
opt = torch.optim.SGD(model.parameters(), lr=1e-3)
src = torch.randn(128, 32, 512, device="cuda")
tgt = torch.randn(128, 32, 512, device="cuda")
for step in range(steps):
    opt.zero_grad(set_to_none=True)
    loss = model(src, tgt).pow(2).mean()
    loss.backward()
    opt.step()
torch.cuda.synchronize()

snap = tt.memory_snapshot()
stats = tt.memory_stats()
reserved = sum(s["total_size"] for s in snap["segments"])
allocated = sum(s["allocated_size"] for s in snap["segments"])
print("snapshot: %d segments, %d blocks, %d trace entries; reserved %d (stats %d), allocated %d (stats %d)" % (
    len(snap["segments"]), sum(len(s["blocks"]) for s in snap["segments"]), len(snap["device_traces"][0]),
    reserved, stats["reserved_bytes.all.current"], allocated, stats["allocated_bytes.all.current"]))
assert reserved == stats["reserved_bytes.all.current"], "segments do not add up to reserved memory"
assert allocated == stats["allocated_bytes.all.current"], "active blocks do not add up to allocated memory"
live = {}
for e in snap["device_traces"][0]:
    if e["action"] == "alloc":
        live[e["addr"]] = e["size"]
    elif e["action"] == "free_requested":
        live.pop(e["addr"])
print("trace: %d allocations live at the end (stats: %d)" % (len(live), stats["allocation.all.current"]))
assert len(live) == stats["allocation.all.current"]

path = os.path.join(bulky, "snapshot.pickle")
tt.dump_snapshot(path)
print("wrote %s (%d bytes)" % (path, os.path.getsize(path)))

viz = os.path.join(os.path.dirname(torch.__file__), "cuda", "_memory_viz.py")
for kind, target in (("trace_plot", "trace_plot.html"), ("segment_plot", "segment_plot.html")):
    dest = os.path.join(bulky, target)
    r = subprocess.run([sys.executable, viz, kind, path, "-o", dest], capture_output=True, text=True)
    print("_memory_viz.py %s: exit %d, %s %d bytes %s" % (kind, r.returncode, target,
          os.path.getsize(dest) if os.path.exists(dest) else -1, r.stderr.strip()[-300:]))
    assert r.returncode == 0
    if os.path.getsize(dest) < KEEP_BELOW:  # for bench/render_memory_viz.sh, on a machine with a browser
        shutil.copy(dest, os.path.join(out, target))
for kind in ("stats", "trace"):
    r = subprocess.run([sys.executable, viz, kind, path], capture_output=True, text=True)
    text = r.stdout
    print("_memory_viz.py %s: exit %d, %d lines; %s" % (kind, r.returncode, text.count("\n"), r.stderr.strip()[-300:]))
    assert r.returncode == 0
    with open(os.path.join(out, kind + ".txt"), "w") as f:
        f.write(text if kind == "stats" else "\n".join(text.splitlines()[:200]) + "\n")
    if kind == "stats":
        print("\n".join(text.splitlines()[-8:]))

js = os.path.join(os.path.dirname(torch.__file__), "utils", "viz", "MemoryViz.js")
if os.path.exists(js):
    shutil.copy(js, os.path.join(out, "MemoryViz.js"))
    html = open(os.path.join(bulky, "trace_plot.html")).read()
    start = html.index("https://")
    end = html.index("MemoryViz.js") + len("MemoryViz.js")
    with open(os.path.join(out, "snapshot_local.html"), "w") as f:
        f.write(html[:start] + "./MemoryViz.js" + html[end:])
    print("wrote snapshot_local.html with MemoryViz.js beside it")
else:
    print("no MemoryViz.js in this PyTorch (%s): the HTML loads it from the CDN" % js)

kept = torch.empty(3 << 20, dtype=torch.uint8, device="cuda")  # deliberately left alive
print(tt.leak_report())

"""The seed's training loop under one allocator, measured.

    python3 bench/seed_loop.py --allocator tidepool --steps 2000 --json out.json

nn.Transformer(d_model=512, nhead=8), input 32x128x512, forward and backward, as in the seed's
reproduction; torch.cuda.synchronize() and empty_cache() every 100 steps. --allocator picks:
native (PyTorch's caching allocator), expandable (expandable_segments:True), async (cudaMallocAsync),
tidepool. PYTORCH_CUDA_ALLOC_CONF is set here, before torch is imported, so run one process per
allocator (bench/gpu_run.sh does).

Records: time per step over windows of 100 steps (each window ends with the synchronize the loop
does anyway), the device's used memory (total - free) after every step and right after every
empty_cache, and the allocator's own peak reserved.
"""
import argparse
import json
import os
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

parser = argparse.ArgumentParser()
parser.add_argument("--allocator", choices=["native", "expandable", "async", "tidepool", "tidepool-expandable"],
                    required=True)
parser.add_argument("--steps", type=int, default=2000)
parser.add_argument("--tidepool-conf", help="tidepool's config string (for --allocator tidepool)")
parser.add_argument("--json")
parser.add_argument("--record-trace", metavar="FILE.csv.gz",
                    help="(tidepool allocators) record every allocation, free and empty_cache into a trace "
                    "that tidepool replay and gpu_bench replay read")
args = parser.parse_args()
if args.record_trace and not args.allocator.startswith("tidepool"):
    parser.error("--record-trace records through tidepool's history: use a tidepool allocator")

if args.allocator == "expandable":
    os.environ["PYTORCH_CUDA_ALLOC_CONF"] = "expandable_segments:True"
elif args.allocator == "async":
    os.environ["PYTORCH_CUDA_ALLOC_CONF"] = "backend:cudaMallocAsync"
else:
    os.environ.pop("PYTORCH_CUDA_ALLOC_CONF", None)

import torch  # noqa: E402

if args.allocator.startswith("tidepool"):
    sys.path.insert(0, os.path.join(ROOT, "python"))
    import tidepool.torch as tt
    conf = [c for c in ("expandable_segments:True" if args.allocator == "tidepool-expandable" else None,
                        args.tidepool_conf) if c]
    tt.enable(config=",".join(conf) or None)
    if args.record_trace:  # an alloc, a free and its completion per tensor; some 1200 tensors a step
        tt.record_memory_history(max_entries=4000 * args.steps + 100000, ordered=True)
    peak_reserved = tt.max_memory_reserved
    reserved = tt.memory_reserved
    stats = tt.memory_stats
else:
    peak_reserved = torch.cuda.max_memory_reserved
    reserved = torch.cuda.memory_reserved
    stats = torch.cuda.memory_stats

torch.manual_seed(0)
model = torch.nn.Transformer(d_model=512, nhead=8).to("cuda")


def used():
    free, total = torch.cuda.mem_get_info()
    return total - free


window_ms, floors, used_after_step, reserved_after_step = [], [], [], []
peak_used = 0
t_window = time.perf_counter()
for step in range(args.steps):
    x = torch.randn(32, 128, 512, device="cuda")
    output = model(x, x)
    loss = output.sum()
    loss.backward()
    if step % 10 == 0:
        u = used()
        peak_used = max(peak_used, u)
        used_after_step.append((step, u))
        reserved_after_step.append((step, reserved()))
    if step % 100 == 99:
        torch.cuda.synchronize()
        now = time.perf_counter()
        window_ms.append((now - t_window) * 1000 / 100)
        torch.cuda.empty_cache()
        floors.append(used())
        t_window = time.perf_counter()

result = {
    "allocator": args.allocator,
    "steps": args.steps,
    "torch": torch.__version__,
    "device": torch.cuda.get_device_name(),
    "window_ms_per_step": window_ms,
    "floors_after_empty_cache": floors,
    "peak_reserved": peak_reserved(),
    "peak_device_used": peak_used,
    "used_every_10_steps": used_after_step,
    "reserved_every_10_steps": reserved_after_step,
    "loss_last": float(loss),
    # reservations and releases over the run (with expandable segments, tidepool counts each map and
    # unmap of one or more pages)
    "num_device_alloc": stats().get("num_device_alloc"),
    "num_device_free": stats().get("num_device_free"),
}
if args.record_trace:
    result["trace_operations"] = tt.dump_trace(args.record_trace)
if args.json:
    with open(args.json, "w") as f:
        json.dump(result, f)
ms = sorted(window_ms[1:]) or window_ms
print("%-10s median %.3f ms/step, peak reserved %.1f MiB, peak device used %.1f MiB, floors %s MiB, "
      "device allocs/frees %s/%s"
      % (args.allocator, ms[len(ms) // 2], peak_reserved() / 2**20, peak_used / 2**20,
         sorted(set(f >> 20 for f in floors)), result["num_device_alloc"], result["num_device_free"]))

"""GPT-2 small (random init) trained with DistributedDataParallel over NCCL, one process per GPU, under
one allocator; records each rank's losses exactly, its memory after every step, and the device's used
memory after each empty_cache.

    torchrun --standalone --nproc_per_node=2 bench/ddp_gpt2.py --allocator tidepool --steps 300 --json OUT

writes OUT.rank0.json, OUT.rank1.json. bench/summarize_ddp.py compares two allocators' runs.
"""
import argparse
import json
import os
import sys

parser = argparse.ArgumentParser()
parser.add_argument("--allocator", choices=["native", "tidepool"], required=True)
parser.add_argument("--steps", type=int, default=300)
parser.add_argument("--empty-cache-every", type=int, default=100)
parser.add_argument("--json", required=True)
parser.add_argument("--tidepool-conf", default=None, help="tidepool's config string")
parser.add_argument("--trace-out", metavar="PATH", help="tidepool, rank 0: record the allocator's history and "
                    "write it as a tidepool trace, PATH.csv.gz, with its steps and driver calls in PATH.json "
                    "(bench/history_trace.py)")
args = parser.parse_args()

os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", ":4096:8")
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.pop("PYTORCH_CUDA_ALLOC_CONF", None)
import torch  # noqa: E402
import torch.distributed as dist  # noqa: E402

rank = int(os.environ["RANK"])
local_rank = int(os.environ["LOCAL_RANK"])
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from history_trace import enable_tidepool, write_recording  # noqa: E402

if args.allocator == "tidepool":
    tt = enable_tidepool(args.tidepool_conf, local_rank if args.trace_out and rank == 0 else None)
torch.cuda.set_device(local_rank)
dist.init_process_group("nccl", device_id=torch.device("cuda", local_rank))

from transformers import GPT2Config, GPT2LMHeadModel  # noqa: E402

torch.manual_seed(1234)
torch.use_deterministic_algorithms(True)
model = GPT2LMHeadModel(GPT2Config()).to("cuda")
model = torch.nn.parallel.DistributedDataParallel(model, device_ids=[local_rank])
optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4)
generator = torch.Generator(device="cpu").manual_seed(99 + rank)


def used_mib():
    free, total = torch.cuda.mem_get_info()
    return (total - free) / 2**20


def reserved_mib():
    if args.allocator == "tidepool":
        return tt.memory_reserved(local_rank) / 2**20
    return torch.cuda.memory_reserved() / 2**20


def allocated_mib():
    if args.allocator == "tidepool":
        return tt.memory_allocated(local_rank) / 2**20
    return torch.cuda.memory_allocated() / 2**20


losses, reserved, used, floors, after = [], [], [], [], []
for step in range(args.steps):
    if args.trace_out and rank == 0 and args.allocator == "tidepool":
        tt.annotate("step %d" % step)
    length = 128 + (step * 37) % 384
    ids = torch.randint(0, 50257, (8, length), generator=generator).to("cuda")
    out = model(input_ids=ids, labels=ids)
    optimizer.zero_grad(set_to_none=True)
    out.loss.backward()
    optimizer.step()
    losses.append(float(out.loss.detach()).hex())
    reserved.append(reserved_mib())
    used.append(used_mib())
    if (step + 1) % args.empty_cache_every == 0:
        torch.cuda.synchronize()
        torch.cuda.empty_cache()
        floors.append(used_mib())
        after.append({"allocated_mib": allocated_mib(), "reserved_mib": reserved_mib()})
stats = tt.memory_stats(local_rank) if args.allocator == "tidepool" else torch.cuda.memory_stats()
result = {"allocator": args.allocator, "rank": rank, "losses": losses, "reserved_mib": reserved,
          "used_mib": used, "used_after_empty_cache_mib": floors,
          "allocator_after_empty_cache": after,
          "device_allocs": stats.get("num_device_alloc", stats.get("num_device_alloc", None)),
          "num_alloc_retries": stats.get("num_alloc_retries")}
if args.allocator == "tidepool":
    result["tidepool_stats"] = {k: stats[k] for k in ("num_device_alloc", "num_device_free", "allocation.all.peak",
                                                      "reserved_bytes.all.peak")}
if args.trace_out and rank == 0 and args.allocator == "tidepool":
    lines, steps, dropped = write_recording(tt, args.trace_out, 0, local_rank)
    print("rank 0: wrote %s.csv.gz and .json: %d lines, %d steps, %d events dropped" % (
        args.trace_out, lines, steps, dropped))
with open("%s.rank%d.json" % (args.json, rank), "w") as f:
    json.dump(result, f)
print("rank %d %s: loss %s -> %s, reserved %.0f MiB at the end, floors %s" % (
    rank, args.allocator, float.fromhex(losses[0]), float.fromhex(losses[-1]), reserved[-1],
    ["%.0f" % x for x in floors]))
dist.destroy_process_group()

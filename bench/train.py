"""Real training under several allocators, in alternating rounds, one table.

    python3 bench/train.py [--workloads gpt2] [--allocators native,tidepool] [--rounds 5] [--steps 60]
                           [--json OUT.json]

Each (round, allocator) is a fresh process (an allocator is chosen before CUDA starts); rounds rotate
the order of the allocators, so drift in the GPU's clocks falls on all alike. Per run: the median step
time after the warm-up (the first pass over every shape the loop uses), peak allocated and reserved
(torch.cuda's counters, which tidepool serves), the device's peak use (total less free, sampled each
step). The table gives, per allocator, the median of the runs' step times and the median of the
per-round ratios to the first allocator, with the rounds' spread.

Workloads:
  gpt2   GPT-2 small (Hugging Face transformers, random init), batch 8, sequence lengths varying per
         step over 8 shapes from 128 to 1024, bf16 autocast, AdamW.
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
LENGTHS = [128, 256, 384, 512, 640, 768, 896, 1024]


def child(allocator, workload, steps):
    os.environ.pop("PYTORCH_CUDA_ALLOC_CONF", None)
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    import torch
    if allocator == "tidepool":
        sys.path.insert(0, os.path.join(ROOT, "python"))
        import tidepool.torch
        tidepool.torch.enable()
    assert workload == "gpt2", workload
    import transformers
    torch.manual_seed(0)
    model = transformers.GPT2LMHeadModel(transformers.GPT2Config()).cuda()
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4)
    warmup = len(LENGTHS)  # every shape once
    times, device_peak = [], 0
    total = torch.cuda.get_device_properties(0).total_memory
    for step in range(warmup + steps):
        n = LENGTHS[(step * 5) % len(LENGTHS)]
        ids = torch.randint(0, 50257, (8, n), device="cuda")
        torch.cuda.synchronize()
        start = time.perf_counter()
        with torch.autocast("cuda", dtype=torch.bfloat16):
            loss = model(ids, labels=ids).loss
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
        torch.cuda.synchronize()
        if step >= warmup:
            times.append(time.perf_counter() - start)
        device_peak = max(device_peak, total - torch.cuda.mem_get_info()[0])
    return {"allocator": allocator, "workload": workload, "ms_per_step": 1000 * statistics.median(times),
            "peak_allocated": torch.cuda.max_memory_allocated(), "peak_reserved": torch.cuda.max_memory_reserved(),
            "device_peak": device_peak, "backend": torch.cuda.memory.get_allocator_backend()}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--workloads", default="gpt2")
    ap.add_argument("--allocators", default="native,tidepool")
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--steps", type=int, default=60)
    ap.add_argument("--json")
    ap.add_argument("--child", nargs=2, metavar=("ALLOCATOR", "WORKLOAD"), help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child:
        print(json.dumps(child(args.child[0], args.child[1], args.steps)))
        return 0
    allocators = args.allocators.split(",")
    runs = []
    for workload in args.workloads.split(","):
        for r in range(args.rounds):
            order = allocators[r % len(allocators):] + allocators[:r % len(allocators)]
            for alloc in order:
                p = subprocess.run([sys.executable, __file__, "--child", alloc, workload, "--steps", str(args.steps)],
                                   capture_output=True, text=True)
                if p.returncode != 0:
                    sys.stderr.write(p.stdout + p.stderr)
                    sys.exit("bench/train.py: %s under %s failed" % (workload, alloc))
                run = json.loads(p.stdout.strip().splitlines()[-1])
                run["round"] = r
                runs.append(run)
                print("round %d %-9s %-6s %8.2f ms/step  allocated %7.1f MiB  reserved %7.1f MiB  device %7.1f MiB"
                      % (r + 1, alloc, workload, run["ms_per_step"], run["peak_allocated"] / 2**20,
                         run["peak_reserved"] / 2**20, run["device_peak"] / 2**20), flush=True)
    print("\n| workload | allocator | ms/step (median of runs) | ratio to %s: median of rounds (spread) "
          "| peak allocated MiB | peak reserved MiB | device peak MiB |" % allocators[0])
    print("|---|---|---|---|---|---|---|")
    for workload in args.workloads.split(","):
        base = {x["round"]: x["ms_per_step"] for x in runs if x["workload"] == workload and x["allocator"] == allocators[0]}
        for alloc in allocators:
            mine = [x for x in runs if x["workload"] == workload and x["allocator"] == alloc]
            ratios = sorted(x["ms_per_step"] / base[x["round"]] for x in mine)
            print("| %s | %s | %.2f | %.3f (%.3f-%.3f) | %.1f | %.1f | %.1f |" % (
                workload, alloc, statistics.median(x["ms_per_step"] for x in mine), statistics.median(ratios),
                ratios[0], ratios[-1], max(x["peak_allocated"] for x in mine) / 2**20,
                max(x["peak_reserved"] for x in mine) / 2**20, max(x["device_peak"] for x in mine) / 2**20))
    if args.json:
        with open(args.json, "w") as f:
            json.dump(runs, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())

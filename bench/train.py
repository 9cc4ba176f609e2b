"""Real training under several allocators, in alternating rounds, one table.

    python3 bench/train.py [--workloads seed,gpt2,resnet50,lstm] [--allocators native,...]
                           [--rounds 5] [--steps 200] [--timed-runs 1] [--json OUT.json]
    python3 bench/train.py --summarize OUT1.json OUT2.json ...     (one table from several runs)
    python3 bench/train.py --record DIR [--workloads ...] [--steps N]   (each tidepool allocator once,
                           its allocations recorded as a trace, with where each step begins and where
                           the driver was called, to replay on the simulated device)

Each (round, allocator) is a fresh process (an allocator is chosen before CUDA starts); rounds rotate
the order of the allocators, so drift in the GPU's clocks falls on all alike. --json is rewritten
after every run, so a run cut short keeps what it measured.

Allocators:
  native               PyTorch's caching allocator
  native-expandable    the same with PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True
  async                PyTorch's cudaMallocAsync backend (PYTORCH_CUDA_ALLOC_CONF=backend:cudaMallocAsync)
  tidepool             tidepool.torch.enable()
  tidepool-expandable  tidepool.torch.enable("expandable_segments:True")

Workloads (each step varies its shape over a fixed set; the warm-up is the first pass over every shape):
  seed      the seed's loop: nn.Transformer(d_model=512, nhead=8), input 32x128x512, forward and
            backward, synchronize and empty_cache every 100 steps (the warm-up: 2 steps)
  gpt2      GPT-2 small (Hugging Face transformers, random init), batch 8, sequence lengths over 8
            shapes from 128 to 1024, bf16 autocast, AdamW
  resnet50  torchvision's ResNet-50, 224x224 images, batch sizes over 7 shapes from 16 to 64, bf16
            autocast, SGD with momentum
  lstm      embedding 512, a 2-layer LSTM of 1024, a 10,000-word head, batch 64, sequence lengths
            over 8 shapes from 32 to 256, Adam

Per run: the median step time after the warm-up, wall (synchronize, step, synchronize) and on the GPU
(CUDA events recorded on the current stream around the step: from the step's first work to its last);
the device's peak use by NVML (sampled after each
step), and the floor beneath it (NVML's use once CUDA and cuBLAS are up, less what the allocator then
reserves: the context and libraries no allocator can save); peak allocated and reserved (torch.cuda's
counters, which tidepool serves); reserved after a final empty_cache; driver allocations and frees
(memory_stats' num_device_alloc and num_device_free, where the allocator keeps them) during the warm-up
and after it, with the steps that made them, and under tidepool the time they took (device_call_ns);
after the warm-up leaves out the seed loop's empty_cache step and the step after it, which must
release and reserve again (those are counted apart); and flatness: the largest step-to-step growth of
reserved memory over the last half of the steps (for seed, leaving out those same steps).

tidepool's own time: after the rounds, --timed-runs more runs of each workload under each tidepool
allocator with TIDEPOOL_TIME_CALLS=1, which times every allocation and free PyTorch asks of tidepool
(tidepool.torch._call_ns()); per step, the median of that time and of the number of calls. They are
apart from the rounds, so that the timer's own cost (two clock reads a call) touches no compared run.
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
ALLOCATORS = {  # name -> (PYTORCH_CUDA_ALLOC_CONF, tidepool's config or None for PyTorch's own)
    "native": (None, None),
    "native-expandable": ("expandable_segments:True", None),
    "async": ("backend:cudaMallocAsync", None),
    "tidepool": (None, ""),
    "tidepool-expandable": (None, "expandable_segments:True"),
}
SEED_EMPTY_CACHE_EVERY = 100


def make_workload(name, torch):
    """(warm-up steps, step function of the step index, the steps the loop's own empty_cache touches:
    the one that calls it, whose frees are the loop's, and the next, which must reserve again)."""
    torch.manual_seed(0)
    if name == "seed":
        model = torch.nn.Transformer(d_model=512, nhead=8).cuda()

        def step(i):
            x = torch.randn(32, 128, 512, device="cuda")
            model(x, x).sum().backward()
            if i % SEED_EMPTY_CACHE_EVERY == SEED_EMPTY_CACHE_EVERY - 1:
                torch.cuda.synchronize()
                torch.cuda.empty_cache()
        return 2, step, lambda i: i > 0 and i % SEED_EMPTY_CACHE_EVERY in (0, SEED_EMPTY_CACHE_EVERY - 1)
    if name == "gpt2":
        os.environ.setdefault("HF_HUB_OFFLINE", "1")
        import transformers
        lengths = [128, 256, 384, 512, 640, 768, 896, 1024]
        model = transformers.GPT2LMHeadModel(transformers.GPT2Config()).cuda()
        opt = torch.optim.AdamW(model.parameters(), lr=1e-4)

        def step(i):
            ids = torch.randint(0, 50257, (8, lengths[(i * 5) % len(lengths)]), device="cuda")
            with torch.autocast("cuda", dtype=torch.bfloat16):
                loss = model(ids, labels=ids).loss
            loss.backward()
            opt.step()
            opt.zero_grad(set_to_none=True)
        return len(lengths), step, lambda i: False
    if name == "resnet50":
        import torchvision
        batches = [16, 24, 32, 40, 48, 56, 64]
        model = torchvision.models.resnet50().cuda()
        opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)

        def step(i):
            b = batches[(i * 3) % len(batches)]
            images = torch.randn(b, 3, 224, 224, device="cuda")
            labels = torch.randint(0, 1000, (b,), device="cuda")
            with torch.autocast("cuda", dtype=torch.bfloat16):
                loss = torch.nn.functional.cross_entropy(model(images), labels)
            loss.backward()
            opt.step()
            opt.zero_grad(set_to_none=True)
        return len(batches), step, lambda i: False
    if name == "lstm":
        lengths = [32, 64, 96, 128, 160, 192, 224, 256]
        vocab = 10000
        embed = torch.nn.Embedding(vocab, 512).cuda()
        lstm = torch.nn.LSTM(512, 1024, num_layers=2, batch_first=True).cuda()
        head = torch.nn.Linear(1024, vocab).cuda()
        params = list(embed.parameters()) + list(lstm.parameters()) + list(head.parameters())
        opt = torch.optim.Adam(params, lr=1e-3)

        def step(i):
            tokens = torch.randint(0, vocab, (64, lengths[(i * 3) % len(lengths)] + 1), device="cuda")
            out, _ = lstm(embed(tokens[:, :-1]))
            loss = torch.nn.functional.cross_entropy(head(out).flatten(0, 1), tokens[:, 1:].flatten())
            loss.backward()
            opt.step()
            opt.zero_grad(set_to_none=True)
        return len(lengths), step, lambda i: False
    raise SystemExit("bench/train.py: no workload %r (seed, gpt2, resnet50, lstm)" % name)


def driver_calls(torch):
    """(allocations, frees) the allocator made from the driver, or None where it does not count them
    (cudaMallocAsync's pool takes memory from the driver out of PyTorch's sight)."""
    s = torch.cuda.memory_stats()
    if "num_device_alloc" not in s or torch.cuda.memory.get_allocator_backend() == "cudaMallocAsync":
        return None
    return s["num_device_alloc"], s["num_device_free"]


def difference(later, earlier):
    return None if later is None or earlier is None else [later[0] - earlier[0], later[1] - earlier[1]]


def child(allocator, workload, steps, record=None, timed=False):
    torch_conf, tidepool_conf = ALLOCATORS[allocator]
    if torch_conf:
        os.environ["PYTORCH_CUDA_ALLOC_CONF"] = torch_conf
    else:
        os.environ.pop("PYTORCH_CUDA_ALLOC_CONF", None)
    import pynvml
    import torch
    if timed:
        os.environ["TIDEPOOL_TIME_CALLS"] = "1"
    else:
        os.environ.pop("TIDEPOOL_TIME_CALLS", None)
    if tidepool_conf is not None:
        sys.path.insert(0, os.path.join(ROOT, "python"))
        import tidepool.torch
        tidepool.torch.enable(tidepool_conf or None)
        if record:
            tidepool.torch.record_memory_history(max_entries=4_000_000, ordered=True)
    pynvml.nvmlInit()
    nvml = pynvml.nvmlDeviceGetHandleByIndex(int(os.environ.get("CUDA_VISIBLE_DEVICES", "0").split(",")[0]))

    def device_used():
        return pynvml.nvmlDeviceGetMemoryInfo(nvml).used

    a = torch.ones(256, 256, device="cuda")
    (a @ a).sum().item()  # the context and cuBLAS are up
    floor = device_used() - torch.cuda.memory_reserved()
    del a
    warmup, step, touched_by_empty_cache = make_workload(workload, torch)
    times, gpu_times, own, reserved, device_peak = [], [], [], [], 0
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    clock = tidepool.torch._call_ns if timed and tidepool_conf is not None else (lambda: None)
    # [step, allocations, frees, ns] for each step that called the driver (ns: tidepool's
    # device_call_ns, 0 under PyTorch's allocators)
    steps_with_calls = []

    def driver_ns():
        return tidepool.torch.memory_stats()["device_call_ns"] if tidepool_conf is not None else 0
    for i in range(warmup + steps):
        if record:
            tidepool.torch.annotate("step %d" % i)
        before, before_ns = driver_calls(torch), driver_ns()
        torch.cuda.synchronize()
        own_before = clock()
        t0 = time.perf_counter()
        start.record()
        step(i)
        end.record()
        torch.cuda.synchronize()
        t1 = time.perf_counter()
        own_after = clock()
        if i >= warmup:
            times.append(t1 - t0)
            gpu_times.append(start.elapsed_time(end) / 1000)
            if own_after is not None:
                own.append([own_after[0] - own_before[0], own_after[1] - own_before[1]])
        device_peak = max(device_peak, device_used())
        reserved.append(torch.cuda.memory_reserved())
        made = difference(driver_calls(torch), before) or [0, 0]
        ns = driver_ns() - before_ns
        if sum(made) or ns:
            steps_with_calls.append([i] + made + [ns])
    counted = driver_calls(torch) is not None

    def phase(i):
        return "warmup" if i < warmup else "empty_cache" if touched_by_empty_cache(i) else "after"

    def total(name, column):
        return sum(c[column] for c in steps_with_calls if phase(c[0]) == name)

    def calls_in(name):
        return [total(name, 1), total(name, 2)] if counted else None

    def ms_in(name):
        return total(name, 3) / 1e6 if tidepool_conf is not None else None
    half = warmup + steps // 2
    growth = max([reserved[i] - reserved[i - 1] for i in range(max(half, 1), len(reserved))
                  if not touched_by_empty_cache(i)] or [0])
    peak_allocated, peak_reserved = torch.cuda.max_memory_allocated(), torch.cuda.max_memory_reserved()
    torch.cuda.synchronize()
    torch.cuda.empty_cache()
    if record:
        from history_trace import write_recording  # bench/, beside this script
        write_recording(tidepool.torch, record, warmup)
    return {"allocator": allocator, "workload": workload, "backend": torch.cuda.memory.get_allocator_backend(),
            "warmup_steps": warmup, "steps": steps, "ms_per_step": 1000 * statistics.median(times),
            "gpu_ms_per_step": 1000 * statistics.median(gpu_times), "timed": bool(own),
            "own_ms_per_step": statistics.median(o[0] for o in own) / 1e6 if own else None,
            "own_calls_per_step": statistics.median(o[1] for o in own) if own else None,
            "step_ms": [round(1000 * t, 4) for t in times], "step_gpu_ms": [round(1000 * t, 4) for t in gpu_times],
            "device_peak": device_peak, "device_floor": floor, "peak_allocated": peak_allocated,
            "peak_reserved": peak_reserved, "reserved_after_empty_cache": torch.cuda.memory_reserved(),
            "driver_calls_warmup": calls_in("warmup"),
            "driver_calls_after_warmup": calls_in("after"),
            "driver_calls_around_empty_cache": calls_in("empty_cache"),
            "driver_calls_by_step": steps_with_calls if counted else None,
            "driver_ms_warmup": ms_in("warmup"),
            "driver_ms_after_warmup": ms_in("after"),
            "max_reserved_growth_last_half": growth}


def mib(x):
    return "%.0f" % (x / 2**20)


def calls(pair):
    return "n/a" if pair is None else "%d + %d" % tuple(pair)


def driver_time(runs):
    """tidepool's time in those driver calls after the warm-up, the median of the runs, where known."""
    ms = [x.get("driver_ms_after_warmup") for x in runs]
    ms = [m for m in ms if m is not None]
    return ", %.1f ms" % statistics.median(ms) if ms and statistics.median(ms) > 0 else ""


def around_empty_cache(runs):
    """The driver calls of the loop's own empty_cache and the step after it, where there are any."""
    pairs = [x.get("driver_calls_around_empty_cache") for x in runs]
    pairs = [p for p in pairs if p is not None and sum(p)]
    return " (empty_cache's steps: %s)" % calls(max(pairs, key=sum)) if pairs else ""


def table(runs, allocators, workloads):
    runs = [x for x in runs if not x.get("timed")]
    print("\n| workload | allocator | ms/step (median of runs) | ratio to %s: median of rounds (spread) "
          "| device peak MiB (NVML) | peak reserved MiB | peak allocated MiB | reserved / allocated "
          "| reserved after empty_cache MiB | driver allocs + frees, warm-up | after warm-up "
          "| largest growth, last half, MiB |" % allocators[0])
    print("|---|---|---|---|---|---|---|---|---|---|---|---|")
    for workload in workloads:
        base = {x["round"]: x["ms_per_step"] for x in runs
                if x["workload"] == workload and x["allocator"] == allocators[0]}
        for alloc in allocators:
            mine = [x for x in runs if x["workload"] == workload and x["allocator"] == alloc]
            if not mine:
                continue
            ratios = sorted(x["ms_per_step"] / base[x["round"]] for x in mine if x["round"] in base)
            ratio = "%.3f (%.3f-%.3f)" % (statistics.median(ratios), ratios[0], ratios[-1]) if ratios else "n/a"
            worst = max(mine, key=lambda x: x["device_peak"])
            after = [x["driver_calls_after_warmup"] for x in mine]
            print("| %s | %s | %.2f | %s | %s | %s | %s | %.3f | %s | %s | %s | %s |" % (
                workload, alloc, statistics.median(x["ms_per_step"] for x in mine), ratio,
                mib(worst["device_peak"]), mib(max(x["peak_reserved"] for x in mine)),
                mib(max(x["peak_allocated"] for x in mine)),
                max(x["peak_reserved"] / x["peak_allocated"] for x in mine),
                mib(max(x["reserved_after_empty_cache"] for x in mine)), calls(mine[0]["driver_calls_warmup"]),
                calls(max(after, key=lambda c: -1 if c is None else sum(c)))
                + driver_time(mine) + around_empty_cache(mine),
                mib(max(x["max_reserved_growth_last_half"] for x in mine))))
        floors = [x["device_floor"] for x in runs if x["workload"] == workload]
        print("| %s | (floor: context and libraries) | | | %s-%s | | | | | | | |"
              % (workload, mib(min(floors)), mib(max(floors))))


def spread(values):
    values = sorted(values)
    return "%.3f (%.3f-%.3f)" % (statistics.median(values), values[0], values[-1]) if values else "n/a"


def step_table(runs, allocators, workloads):
    """Step time: wall and GPU (CUDA events), each a median of runs and the median (spread) of the
    rounds' ratios to the first allocator; tidepool's own time per step from the timed runs."""
    print("\n| workload | allocator | rounds | wall ms/step | wall ratio to %s: median of rounds (spread) "
          "| GPU ms/step (CUDA events) | GPU ratio: median of rounds (spread) | tidepool's own ms/step "
          "(timed run) | its calls/step | its share of the wall step |" % allocators[0])
    print("|---|---|---|---|---|---|---|---|---|---|")
    for workload in workloads:
        rounds = [x for x in runs if x["workload"] == workload and not x.get("timed")]
        base = {x["round"]: x for x in rounds if x["allocator"] == allocators[0]}
        for alloc in allocators:
            mine = [x for x in rounds if x["allocator"] == alloc]
            if not mine:
                continue
            wall = [x["ms_per_step"] / base[x["round"]]["ms_per_step"] for x in mine if x["round"] in base]
            gpu = [x["gpu_ms_per_step"] / base[x["round"]]["gpu_ms_per_step"] for x in mine
                   if x["round"] in base and x.get("gpu_ms_per_step") and base[x["round"]].get("gpu_ms_per_step")]
            timed = [x for x in runs if x["workload"] == workload and x["allocator"] == alloc and x.get("timed")]
            wall_ms = statistics.median(x["ms_per_step"] for x in mine)
            if timed:
                own = statistics.median(x["own_ms_per_step"] for x in timed)
                own_cols = "%.3f | %.0f | %.2f%%" % (own, statistics.median(x["own_calls_per_step"] for x in timed),
                                                    100 * own / statistics.median(x["ms_per_step"] for x in timed))
            else:
                own_cols = " | | "
            gpu_ms = [x["gpu_ms_per_step"] for x in mine if x.get("gpu_ms_per_step")]
            print("| %s | %s | %d | %.2f | %s | %s | %s | %s |" % (
                workload, alloc, len(mine), wall_ms, spread(wall),
                "%.2f" % statistics.median(gpu_ms) if gpu_ms else "n/a", spread(gpu), own_cols))


def run_child(allocator, workload, steps, record=None, timed=False):
    """One run in a fresh process: its result."""
    command = [sys.executable, __file__, "--child", allocator, workload, "--steps", str(steps)]
    command += ["--child-timed"] if timed else []
    p = subprocess.run(command + (["--child-record", record] if record else []), capture_output=True, text=True)
    if p.returncode != 0:
        sys.stderr.write(p.stdout[-2000:] + p.stderr[-4000:])
        sys.exit("bench/train.py: %s under %s failed" % (workload, allocator))
    return json.loads(p.stdout.strip().splitlines()[-1])


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--workloads", default="seed,gpt2,resnet50,lstm")
    ap.add_argument("--allocators", default=",".join(ALLOCATORS))
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--steps", type=int, default=200)
    ap.add_argument("--timed-runs", type=int, default=1,
                    help="after the rounds, this many runs of each workload under each tidepool allocator "
                    "with tidepool's own time measured (TIDEPOOL_TIME_CALLS=1)")
    ap.add_argument("--json")
    ap.add_argument("--summarize", nargs="+", metavar="JSON",
                    help="print the table of runs saved by earlier --json runs, measuring nothing")
    ap.add_argument("--record", metavar="DIR",
                    help="instead of the rounds: one run of each workload under each tidepool allocator, "
                    "its history written to DIR as WORKLOAD_ALLOCATOR.csv.gz, a trace for tidepool replay, "
                    "and WORKLOAD_ALLOCATOR.json, where its steps begin in the trace and its driver calls")
    ap.add_argument("--child", nargs=2, metavar=("ALLOCATOR", "WORKLOAD"), help=argparse.SUPPRESS)
    ap.add_argument("--child-record", help=argparse.SUPPRESS)
    ap.add_argument("--child-timed", action="store_true", help=argparse.SUPPRESS)
    args = ap.parse_args()
    allocators, workloads = args.allocators.split(","), args.workloads.split(",")
    for a in allocators:
        if a not in ALLOCATORS:
            ap.error("no allocator %r (%s)" % (a, ", ".join(ALLOCATORS)))
    if args.child:
        print(json.dumps(child(args.child[0], args.child[1], args.steps, args.child_record, args.child_timed)))
        return 0
    if args.record:
        os.makedirs(args.record, exist_ok=True)
        for workload in workloads:
            for alloc in (a for a in allocators if ALLOCATORS[a][1] is not None):
                path = os.path.join(args.record, "%s_%s" % (workload, alloc))
                run_child(alloc, workload, args.steps, path)
                print("recorded %s under %s: %s.csv.gz and %s.json" % (workload, alloc, path, path), flush=True)
        return 0
    if args.summarize:
        runs = [run for path in args.summarize for run in json.load(open(path))]
        present = [a for a in allocators if any(x["allocator"] == a for x in runs)]
        table(runs, present, [w for w in dict.fromkeys(x["workload"] for x in runs)])
        step_table(runs, present, [w for w in dict.fromkeys(x["workload"] for x in runs)])
        return 0
    runs = []

    def save(run):
        runs.append(run)
        if args.json:
            with open(args.json, "w") as f:
                json.dump(runs, f, indent=1)
    for workload in workloads:
        for r in range(args.rounds):
            order = allocators[r % len(allocators):] + allocators[:r % len(allocators)]
            for alloc in order:
                run = run_child(alloc, workload, args.steps)
                run["round"] = r
                save(run)
                print("round %d %-19s %-8s %8.2f ms/step (GPU %8.2f)  device %6s MiB  reserved %6s MiB  "
                      "allocated %6s MiB  driver calls after warm-up %s"
                      % (r + 1, alloc, workload, run["ms_per_step"], run["gpu_ms_per_step"],
                         mib(run["device_peak"]), mib(run["peak_reserved"]), mib(run["peak_allocated"]),
                         calls(run["driver_calls_after_warmup"])), flush=True)
        for t in range(args.timed_runs):
            for alloc in (a for a in allocators if ALLOCATORS[a][1] is not None):
                run = run_child(alloc, workload, args.steps, timed=True)
                run["round"] = None
                save(run)
                print("timed   %-19s %-8s %8.2f ms/step (GPU %8.2f)  tidepool's own %.3f ms/step in %d calls"
                      % (alloc, workload, run["ms_per_step"], run["gpu_ms_per_step"], run["own_ms_per_step"],
                         run["own_calls_per_step"]), flush=True)
    table(runs, allocators, workloads)
    step_table(runs, allocators, workloads)
    return 0


if __name__ == "__main__":
    sys.exit(main())

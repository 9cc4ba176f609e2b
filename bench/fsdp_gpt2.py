"""GPT-2 small (random init) trained with FSDP2 (fully_shard) over NCCL, one process per GPU, under one
allocator and one configuration of it; records each rank's losses exactly, its memory and step time
after every step, the device's used memory after each empty_cache, and the driver calls (segments
reserved and released) after warm-up.

    torchrun --standalone --nproc_per_node=2 bench/fsdp_gpt2.py --allocator tidepool \
        --tidepool-conf expandable_segments:True --steps 300 --json OUT

writes OUT.rank0.json, OUT.rank1.json (--nproc_per_node=1 works too). bench/summarize_fsdp.py compares
the runs of several configurations; bench/gpu_run.sh fsdp runs them.

The model: each GPT2Block, then the whole model, wrapped with fully_shard; parameters gathered in
bfloat16, gradients reduced in float32 (MixedPrecisionPolicy); AdamW. Batch 8, the sequence length drawn
each step from 128..1024 by a CPU generator seeded alike on every rank in every run, so that every
configuration sees the same shapes and the losses can be compared bit for bit; token ids from a
generator seeded per rank. Memory is read through the allocator in use: tidepool.torch.memory_stats
under tidepool, torch.cuda.memory_stats under PyTorch's allocator (what torch.cuda.memory_reserved,
max_memory_reserved and max_memory_allocated read), with the peaks reset at the start of each step; the
device's used memory is total - free of torch.cuda.mem_get_info, sampled after every step.

--nccl-register-hook: NCCL user-buffer registration through PyTorch's allocator hook
(TORCH_NCCL_USE_TENSOR_REGISTER_ALLOCATOR_HOOK=1, set here). What PyTorch does with it
(torch/csrc/distributed/c10d/ProcessGroupNCCL.cpp, NCCLUtils.cpp):
  - the ProcessGroupNCCL constructor, which init_process_group runs, attaches two allocator trace
    trackers (attachAllocatorTraceTracker, once per process). One calls ncclCommRegister for each
    SEGMENT_ALLOC, the other ncclCommDeregister for each SEGMENT_FREE; SEGMENT_MAP and SEGMENT_UNMAP
    are ignored, and PyTorch turns the hook off when its own allocator configuration has expandable
    segments (it does not know tidepool's: under tidepool's expandable segments the hook stays on and
    sees only map and unmap events, so nothing new is registered);
  - the segments that exist when a communicator is created are registered then, from the allocator's
    snapshot; with device_id given to init_process_group that happens inside it (eager init);
  - a SEGMENT_FREE for a segment PyTorch has not registered raises inside the allocator's call;
  - NCCL holds a registration until ncclCommDeregister or until the communicator is destroyed, and
    destroy_process_group destroys it (ncclCommDestroy) without deregistering first.
What is counted, and how:
  - the allocator's side: its counters of segments reserved from and released to the device
    (num_device_alloc, num_device_free) and the segments it holds (segment.all.current), read right
    after init_process_group (hook attached, communicator made, existing segments registered) and at
    the end;
  - NCCL's side, from NCCL's own log (NCCL_DEBUG=INFO, NCCL_DEBUG_SUBSYS=INIT,REG,DESTROY, per rank in
    OUT.rankN.nccl.log): "register comm C buffer B size S" for each ncclCommRegister that NCCL took
    ("Skipping registration for buffer ..." for one it declined), and when the communicator is
    destroyed, "Cleanup buffer B pages P" for each registration still held (subsystem INIT up to NCCL
    2.29, DESTROY from 2.30) and "comm C ... - Destroy COMPLETE". ncclCommDeregister logs nothing, so a
    deregistration is a registration with no cleanup line. The process group is destroyed at the end
    and the log read after it; PyTorch's own table of registered segments (NCCLComm's
    registeredSegmentHandles_) has no Python accessor.
  If every segment event reached the hook: registered = segments at attach + reservations since,
  deregistered = releases since, outstanding at destroy = segments held at the end.
"""
import argparse
import collections
import json
import os
import re
import statistics
import sys
import time

parser = argparse.ArgumentParser()
parser.add_argument("--allocator", choices=["native", "tidepool"], required=True)
parser.add_argument("--tidepool-conf", default=None, help="tidepool's config string (expandable_segments:True)")
parser.add_argument("--native-conf", default=None,
                    help="PyTorch's allocator config, set as PYTORCH_CUDA_ALLOC_CONF (expandable_segments:True)")
parser.add_argument("--steps", type=int, default=300)
parser.add_argument("--warmup", type=int, default=10, help="steps before driver calls are counted")
parser.add_argument("--empty-cache-every", type=int, default=100)
parser.add_argument("--nccl-register-hook", action="store_true",
                    help="register every segment with NCCL through PyTorch's allocator hook, and count the "
                    "registrations from NCCL's log")
parser.add_argument("--json", required=True, help="writes JSON.rankN.json")
parser.add_argument("--trace-out", metavar="PATH", help="tidepool, rank 0: record the allocator's history and "
                    "write it as a tidepool trace, PATH.csv.gz, with its steps and driver calls in PATH.json "
                    "(bench/history_trace.py), for replay on any machine")
args = parser.parse_args()
if args.native_conf and args.allocator != "native":
    parser.error("--native-conf is PyTorch's allocator's; tidepool takes --tidepool-conf")
if args.tidepool_conf and args.allocator != "tidepool":
    parser.error("--tidepool-conf is tidepool's")

rank = int(os.environ["RANK"])
local_rank = int(os.environ["LOCAL_RANK"])
HOOK = "TORCH_NCCL_USE_TENSOR_REGISTER_ALLOCATOR_HOOK"
nccl_log = "%s.rank%d.nccl.log" % (args.json, rank)
# All of these are read when torch, NCCL or the process group start: set before importing torch.
os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", ":4096:8")
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.pop("PYTORCH_ALLOC_CONF", None)  # read before PYTORCH_CUDA_ALLOC_CONF by recent releases
if args.native_conf:
    os.environ["PYTORCH_CUDA_ALLOC_CONF"] = args.native_conf
else:
    os.environ.pop("PYTORCH_CUDA_ALLOC_CONF", None)
if args.nccl_register_hook:
    os.environ[HOOK] = "1"
    os.environ["NCCL_DEBUG"] = "INFO"
    # REG: the registrations; INIT (up to 2.29) and DESTROY (2.30 on): the cleanup at destruction.
    # A name a release does not know is skipped by NCCL's parser.
    os.environ["NCCL_DEBUG_SUBSYS"] = "INIT,REG,DESTROY"
    os.environ["NCCL_DEBUG_FILE"] = nccl_log
    if os.path.exists(nccl_log):
        os.remove(nccl_log)
else:
    os.environ.pop(HOOK, None)  # a stray one in the environment would change what is measured
import torch  # noqa: E402
import torch.distributed as dist  # noqa: E402

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from history_trace import enable_tidepool, write_recording  # noqa: E402

if args.allocator == "tidepool":
    tt = enable_tidepool(args.tidepool_conf, local_rank if args.trace_out and rank == 0 else None, 8_000_000)
torch.cuda.set_device(local_rank)
# Before the process group: ProcessGroupNCCL keeps NCCL off NVLS reductions when it is made in
# deterministic mode (and gpu_run.sh turns NVLS off as well).
torch.use_deterministic_algorithms(True)
torch.backends.cudnn.benchmark = False
# device_id: the communicator is made here (eager init), so the hook's registrations start here.
dist.init_process_group("nccl", device_id=torch.device("cuda", local_rank))
world = dist.get_world_size()

from torch.distributed.fsdp import MixedPrecisionPolicy, fully_shard  # noqa: E402
from transformers import GPT2Config, GPT2LMHeadModel  # noqa: E402

conf = args.tidepool_conf if args.allocator == "tidepool" else args.native_conf
label = args.allocator + (" " + conf if conf else "") + (" + register hook" if args.nccl_register_hook else "")
# PyTorch's check reads its own configuration only (see the top of the file).
hook_in_effect = args.nccl_register_hook and "expandable_segments:true" not in (
    (args.native_conf or "").lower().replace(" ", ""))


def stats():
    """The allocator's statistics under PyTorch's key names; torch.cuda.memory_reserved(),
    max_memory_reserved() and max_memory_allocated() are reads of the same dictionary."""
    if args.allocator == "tidepool":
        return tt.memory_stats(local_rank)
    return torch.cuda.memory_stats(local_rank)


def counters(s):
    return {"num_device_alloc": int(s.get("num_device_alloc", 0)), "num_device_free": int(s.get("num_device_free", 0)),
            "segments": int(s.get("segment.all.current", 0))}


def used_mib():
    free, total = torch.cuda.mem_get_info(local_rank)
    return (total - free) / 2**20


MIB = 2**20
at_attach = counters(stats())
init_used = used_mib()

torch.manual_seed(1234)
model = GPT2LMHeadModel(GPT2Config()).to("cuda")
mp_policy = MixedPrecisionPolicy(param_dtype=torch.bfloat16, reduce_dtype=torch.float32)
for block in model.transformer.h:
    fully_shard(block, mp_policy=mp_policy)
fully_shard(model, mp_policy=mp_policy)
optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4)
lengths = torch.Generator(device="cpu").manual_seed(2024)  # the same on every rank and in every run
tokens = torch.Generator(device="cpu").manual_seed(99 + rank)

s = stats()
init_peak = {"reserved_mib": s["reserved_bytes.all.peak"] / MIB, "allocated_mib": s["allocated_bytes.all.peak"] / MIB}
rec = collections.defaultdict(list)
floors, after = [], []
device_peak = max(init_used, used_mib())
warm = None
for step in range(args.steps):
    if args.trace_out and rank == 0 and args.allocator == "tidepool":
        tt.annotate("step %d" % step)
    length = int(torch.randint(128, 1025, (1,), generator=lengths))
    ids = torch.randint(0, 50257, (8, length), generator=tokens)
    torch.cuda.reset_peak_memory_stats(local_rank)
    t0 = time.perf_counter()
    ids = ids.to("cuda")
    # The output object is dropped at once: holding it would keep the logits past the backward pass.
    loss = model(input_ids=ids, labels=ids).loss
    loss.backward()
    optimizer.step()
    optimizer.zero_grad(set_to_none=True)
    value = loss.item()
    torch.cuda.synchronize()
    rec["step_ms"].append((time.perf_counter() - t0) * 1e3)
    del loss
    s = stats()
    c = counters(s)
    rec["seq_len"].append(length)
    rec["losses"].append(value)
    rec["reserved_mib"].append(s["reserved_bytes.all.current"] / MIB)
    rec["allocated_mib"].append(s["allocated_bytes.all.current"] / MIB)
    rec["peak_reserved_mib"].append(s["reserved_bytes.all.peak"] / MIB)
    rec["peak_allocated_mib"].append(s["allocated_bytes.all.peak"] / MIB)
    rec["num_device_alloc"].append(c["num_device_alloc"])
    rec["num_device_free"].append(c["num_device_free"])
    used = used_mib()
    rec["used_mib"].append(used)
    device_peak = max(device_peak, used)
    if step + 1 == args.warmup:
        warm = c
    if (step + 1) % args.empty_cache_every == 0:
        torch.cuda.synchronize()
        torch.cuda.empty_cache()
        s = stats()
        floors.append(used_mib())
        after.append({"step": step + 1, "allocated_mib": s["allocated_bytes.all.current"] / MIB,
                      "reserved_mib": s["reserved_bytes.all.current"] / MIB})
torch.cuda.synchronize()
s = stats()
at_end = counters(s)
version = torch.cuda.nccl.version()
nccl_version = ".".join(str(x) for x in version if x != "") if isinstance(version, tuple) else str(version)
warm = warm or at_attach
peak_reserved = max(rec["peak_reserved_mib"] or [0.0])
peak_allocated = max(rec["peak_allocated_mib"] or [0.0])
result = {
    "allocator": args.allocator, "conf": conf or "", "label": label, "rank": rank, "world_size": world,
    "steps": args.steps, "warmup": args.warmup, "empty_cache_every": args.empty_cache_every,
    "torch": torch.__version__, "nccl": nccl_version,
    "device": torch.cuda.get_device_name(local_rank),
    **rec,
    "init_peak": init_peak,
    "peak_reserved_mib": peak_reserved, "peak_allocated_mib": peak_allocated,
    "peak_ratio": peak_reserved / peak_allocated if peak_allocated else None,
    "device_peak_used_mib": device_peak,
    "used_after_empty_cache_mib": floors, "allocator_after_empty_cache": after,
    "driver_calls_at_warmup": warm, "driver_calls_at_end": at_end,
    "driver_calls_after_warmup": {"alloc": at_end["num_device_alloc"] - warm["num_device_alloc"],
                                  "free": at_end["num_device_free"] - warm["num_device_free"]},
    "num_alloc_retries": s.get("num_alloc_retries"), "num_ooms": s.get("num_ooms"),
    "nccl_register_hook": args.nccl_register_hook,
}
if args.allocator == "tidepool":
    result["device_call_ms"] = s.get("device_call_ns", 0) / 1e6
out_path = "%s.rank%d.json" % (args.json, rank)


def write():
    with open(out_path + ".tmp", "w") as f:
        json.dump(result, f)
    os.replace(out_path + ".tmp", out_path)


# Written before the process group goes, so that a failure in its destruction loses nothing measured.
write()
if args.trace_out and rank == 0 and args.allocator == "tidepool":
    lines, steps, dropped = write_recording(tt, args.trace_out, args.warmup, local_rank)
    print("rank 0: wrote %s.csv.gz and .json: %d lines, %d steps, %d events dropped" % (
        args.trace_out, lines, steps, dropped))

REGISTER = re.compile(r"NCCL INFO register comm (\S+) buffer (\S+) size (\d+)")
SKIPPED = re.compile(r"NCCL INFO Skipping (?:graph )?registration for buffer (\S+) size (\d+)")
CLEANUP = re.compile(r"NCCL INFO Cleanup buffer (\S+) pages ([0-9a-fA-F]+)")
DESTROYED = re.compile(r"NCCL INFO comm (\S+) rank \d+ nranks \d+ cudaDev \d+ busId [0-9a-fA-F]+ - (Destroy|Abort) COMPLETE")
# Whether NCCL used a registration: a collective maps a registered buffer into its peer over IPC (on
# the first use of that buffer), and unmaps it when the registration goes.
IPC = {"mapped": re.compile(r"NCCL INFO rank \d+ - IPC register buffer "),
       "unmapped": re.compile(r"NCCL INFO rank \d+ - IPC deregistered buffer "),
       "failed": re.compile(r"NCCL INFO rank \d+ failed to IPC register userbuff ")}


def nccl_registrations(path):
    """Registrations, deregistrations and those still held at the communicator's destruction, from
    NCCL's log. Addresses are compared as NCCL keeps them: rounded down to the host page."""
    if not os.path.exists(path):
        return {"log": path, "found": False}
    page = os.sysconf("SC_PAGESIZE")

    def key(p):
        return (int(p, 16) if p.startswith("0x") else 0) & ~(page - 1)

    registered, cleaned = collections.Counter(), collections.Counter()
    comms, ends, skipped, registered_bytes = set(), [], 0, 0
    ipc = collections.Counter()
    with open(path, errors="replace") as f:
        for line in f:
            m = REGISTER.search(line)
            if m:
                comms.add(m.group(1))
                registered[key(m.group(2))] += 1
                registered_bytes += int(m.group(3))
                continue
            if SKIPPED.search(line):
                skipped += 1
                continue
            m = CLEANUP.search(line)
            if m:
                cleaned[key(m.group(1))] += 1
                continue
            m = DESTROYED.search(line)
            if m:
                ends.append(m.group(2))
                continue
            for what, pattern in IPC.items():
                if pattern.search(line):
                    ipc[what] += 1
    total = sum(registered.values())
    outstanding = sum(cleaned.values())
    return {
        "log": path, "found": True, "comms": len(comms), "registered": total,
        "registered_mib": registered_bytes / MIB, "skipped": skipped,
        "outstanding_at_destroy": outstanding,
        "deregistered": sum(max(0, n - cleaned[a]) for a, n in registered.items()),
        "cleanup_never_registered": sum(n for a, n in cleaned.items() if a not in registered),
        # "Abort": PyTorch deregisters everything before ncclCommAbort, so no cleanup lines are left to
        # count and the outstanding count reads 0 whatever was held.
        "communicator_end": ends,
        "ipc": {what: ipc[what] for what in IPC},
    }


if args.nccl_register_hook:
    torch.cuda.synchronize()
    dist.barrier()
dist.destroy_process_group()
if args.nccl_register_hook:
    # No allocation or empty_cache after this point: a segment event would reach the hook with its
    # communicator gone.
    result["registration"] = {
        "hook_in_effect": hook_in_effect,
        "allocator": {
            "segments_at_attach": at_attach["segments"],
            "reserved_since_attach": at_end["num_device_alloc"] - at_attach["num_device_alloc"],
            "released_since_attach": at_end["num_device_free"] - at_attach["num_device_free"],
            "segments_at_end": at_end["segments"],
        },
        "nccl": nccl_registrations(nccl_log),
    }
    write()

after_warm = result["driver_calls_after_warmup"]
steady = rec["step_ms"][args.warmup:] or rec["step_ms"]
print("rank %d %s: loss %r -> %r, peak reserved %.0f / allocated %.0f MiB, device peak %.0f MiB, "
      "driver calls after warm-up %d, median step %.1f ms, used after empty_cache %s" % (
          rank, label, rec["losses"][0] if rec["losses"] else None, rec["losses"][-1] if rec["losses"] else None,
          peak_reserved, peak_allocated, device_peak, after_warm["alloc"] + after_warm["free"],
          statistics.median(steady) if steady else 0.0, ["%.0f" % x for x in floors]))
if args.nccl_register_hook:
    reg = result["registration"]
    n, a = reg["nccl"], reg["allocator"]
    if n.get("found"):
        print("rank %d NCCL: registered %d, deregistered %d, outstanding at destroy %d (%s); allocator: %d held at "
              "attach + %d reserved, %d released, %d held at the end" % (
                  rank, n["registered"], n["deregistered"], n["outstanding_at_destroy"],
                  ",".join(n["communicator_end"]) or "no destroy line", a["segments_at_attach"],
                  a["reserved_since_attach"], a["released_since_attach"], a["segments_at_end"]))
    else:
        print("rank %d NCCL: no log at %s" % (rank, nccl_log))

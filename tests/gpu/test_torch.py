"""tidepool as PyTorch's allocator, on a real GPU.

Runs as a plain script (exit 0 passed, 1 failed, 77 skipped where there is no GPU or no PyTorch).
Each check prints what it measured.
"""
import os
import subprocess
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
# The test runs under whatever TIDEPOOL_CONF says; expandable segments change what a few checks expect.
EXPANDABLE = "expandable_segments:true" in os.environ.get("TIDEPOOL_CONF", "").replace(" ", "").lower()
sys.path.insert(0, os.path.join(ROOT, "python"))

try:
    import torch
except ImportError:
    print("skipped: PyTorch is not installed")
    sys.exit(77)
if not torch.cuda.is_available():
    print("skipped: no GPU")
    sys.exit(77)

import tidepool.torch as tt  # noqa: E402

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from checklist import check, finish  # noqa: E402


def device_used():
    free, total = torch.cuda.mem_get_info()
    return total - free


def test_enable_after_cuda_init_is_refused():
    code = ("import sys; sys.path.insert(0, %r); import torch; torch.zeros(1, device='cuda'); "
            "import tidepool.torch; tidepool.torch.enable()" % os.path.join(ROOT, "python"))
    p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    check(p.returncode != 0 and "before the first CUDA allocation" in p.stderr,
          "enable() after the first CUDA allocation raises a clear error: %s"
          % p.stderr.strip().splitlines()[-1][:160])


def workload():
    """Elementwise work over many sizes, on the default stream."""
    xs = []
    for i in range(200):
        n = (i * 7919) % (1 << 22) + 1
        x = torch.full((n,), float(i), device="cuda")
        xs.append(x * 2 + 1)
    total = sum(float(x[0]) for x in xs[:5])
    del xs
    return total


def test_empty_cache_returns_the_device_to_its_floor():
    workload()  # loads the kernels once: code memory is the driver's, not the allocator's
    torch.cuda.synchronize()
    torch.cuda.empty_cache()
    floor = device_used()
    check(tt.memory_reserved() == 0, "after empty_cache with nothing alive, tidepool reserves 0 bytes")
    workload()
    peak = device_used()
    torch.cuda.empty_cache()
    after = device_used()
    check(after == floor, "device used memory back to its floor after empty_cache: floor %d MiB, "
          "during %d MiB, after %d MiB" % (floor >> 20, peak >> 20, after >> 20))
    s = tt.memory_stats()
    # With expandable segments maps and unmaps need not pair up (an unmap may take pages that several
    # maps put there, or part of one); the bytes must.
    check((EXPANDABLE or s["num_device_free"] == s["num_device_alloc"]) and s["num_device_free"] > 0 and
          s["reserved_bytes.all.current"] == 0,
          "every segment reserved was released (%d reserved, %d released)"
          % (s["num_device_alloc"], s["num_device_free"]))


def test_record_stream_keeps_the_block_pending():
    side = torch.cuda.Stream()
    n = 8 << 20
    x = torch.empty(n, device="cuda")
    address = x.data_ptr()
    with torch.cuda.stream(side):
        torch.cuda._sleep(200_000_000)  # about 0.1 s of GPU time on the side stream
        x.add_(1)
    x.record_stream(side)
    drained_before = tt.memory_stats()["num_pending_drained"]
    del x
    s = tt.memory_stats()
    check(s["pending_free_blocks.all.current"] == 1,
          "a tensor used by another stream is pending after it dies (pending blocks: %d)"
          % s["pending_free_blocks.all.current"])
    y = torch.empty(n, device="cuda")
    check(y.data_ptr() != address, "its memory is not handed out while the side stream runs")
    del y
    side.synchronize()
    z = torch.empty(16, device="cuda")  # each allocation drains what has signalled
    s = tt.memory_stats()
    check(s["pending_free_blocks.all.current"] == 0 and s["num_pending_drained"] == drained_before + 1,
          "once the side stream is done, the block is drained (drained: %d)" % s["num_pending_drained"])
    del z


def test_statistics():
    torch.cuda.empty_cache()
    tt.reset_peak_memory_stats()
    a = torch.empty(1000, dtype=torch.uint8, device="cuda")
    b = torch.empty(3 << 20, dtype=torch.uint8, device="cuda")
    s = tt.memory_stats()
    check(s["allocated_bytes.all.current"] == 1024 + (3 << 20),
          "allocated_bytes.all.current counts both tensors (%d)" % s["allocated_bytes.all.current"])
    check(s["requested_bytes.all.current"] == 1000 + (3 << 20), "requested_bytes as asked")
    if EXPANDABLE:  # one pool per stream, in 2 MiB pages: 1 KiB + 3 MiB fill two
        check(s["reserved_bytes.small_pool.current"] == 0 and
              s["reserved_bytes.large_pool.current"] == 4 << 20, "reserved per pool (expandable segments)")
    else:  # 1 KiB in a 2 MiB small segment; 3 MiB in a large one that holds six such (18 MiB)
        check(s["reserved_bytes.small_pool.current"] == 2 << 20 and
              s["reserved_bytes.large_pool.current"] == 18 << 20, "reserved per pool (%d and %d bytes)"
              % (s["reserved_bytes.small_pool.current"], s["reserved_bytes.large_pool.current"]))
    summary = tt.memory_summary()
    check("Allocated memory" in summary and "Pending free" in summary, "memory_summary() prints a table")
    print(summary)
    del a, b
    tt.check()
    check(True, "tide_check passes")


def test_out_of_memory_raises_torch_oom():
    free, total = torch.cuda.mem_get_info()
    try:
        torch.empty(free + (8 << 30), dtype=torch.uint8, device="cuda")
        check(False, "an allocation larger than free memory raises")
    except torch.cuda.OutOfMemoryError as e:
        text = str(e)
        check(text.startswith("CUDA out of memory. Tried to allocate ") and "tidepool: device out of memory" in text,
              "torch.cuda.OutOfMemoryError with tidepool's report: %s" % str(e)[:300])
    torch.cuda.set_per_process_memory_fraction(0.01)
    try:
        torch.empty(4 << 30, dtype=torch.uint8, device="cuda")
        check(False, "set_per_process_memory_fraction(0.01) limits tidepool")
    except torch.cuda.OutOfMemoryError:
        check(tt.memory_stats()["limit_bytes"] == int(total * 0.01),
              "set_per_process_memory_fraction sets tidepool's limit")
    torch.cuda.set_per_process_memory_fraction(1.0)
    x = torch.empty(4 << 30, dtype=torch.uint8, device="cuda")
    del x


def test_training_step_and_cublas():
    model = torch.nn.Linear(1024, 1024).cuda()
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    for _ in range(20):
        loss = model(torch.randn(256, 1024, device="cuda")).square().mean()
        opt.zero_grad()
        loss.backward()
        opt.step()
    torch.cuda.synchronize()
    check(bool(torch.isfinite(loss)), "a small training loop (cuBLAS, autograd, optimizer) runs")
    tt.check()


def test_snapshot_history_and_leak_report():
    import pickle
    import tempfile
    torch.cuda.empty_cache()
    tt.record_memory_history(max_entries=100000)
    keep = torch.empty(5 << 20, dtype=torch.uint8, device="cuda")
    for _ in range(3):
        t = torch.randn(1024, 1024, device="cuda")
        del t
    snap = tt.memory_snapshot()
    stats = tt.memory_stats()
    segments = [s for s in snap["segments"] if s["device"] == torch.cuda.current_device()]
    check(sum(s["total_size"] for s in segments) == stats["reserved_bytes.all.current"],
          "memory_snapshot(): segments add up to reserved memory")
    check(sum(s["allocated_size"] for s in segments) == stats["allocated_bytes.all.current"],
          "memory_snapshot(): active blocks add up to allocated memory")
    states = {b["state"] for s in segments for b in s["blocks"]}
    check(states <= {"active_allocated", "active_pending_free", "inactive"} and "active_allocated" in states,
          "memory_snapshot(): block states in PyTorch's words (%s)" % sorted(states))
    trace = snap["device_traces"][torch.cuda.current_device()]
    actions = [e["action"] for e in trace]
    check(actions.count("alloc") == 4 and actions.count("free_requested") == 3 and
          actions.count("free_completed") == 3, "device_traces: 4 allocs, 3 frees requested and completed "
          "(%d entries)" % len(trace))
    with tempfile.NamedTemporaryFile(suffix=".pickle") as f:
        tt.dump_snapshot(f.name)
        loaded = pickle.load(open(f.name, "rb"))
    check(len(loaded["segments"]) == len(snap["segments"]), "dump_snapshot() writes a pickle that loads back")
    report = tt.leak_report()
    check("still live" in report and "5.0 MiB" in report, "leak_report() names the live tensor: %s" %
          report.strip().splitlines()[-1].strip())
    tt.record_memory_history(enabled=False)
    del keep


def misordered_frees(trace):
    """Frees in a snapshot's device trace that come before their allocation."""
    live, misordered = set(), 0
    for e in trace:
        if e["action"] == "alloc":
            live.add(e["addr"])
        elif e["action"] == "free_requested":
            misordered += e["addr"] not in live
            live.discard(e["addr"])
    return misordered


def test_snapshot_trace_in_order():
    """With the defaults, the snapshot's trace of training steps (autograd frees on its own thread) has
    every free after its allocation, as PyTorch's memory visualizer replays it."""
    model = torch.nn.Transformer(d_model=128, nhead=4, num_encoder_layers=2, num_decoder_layers=2).cuda()
    x = torch.randn(32, 16, 128, device="cuda")
    torch.cuda.synchronize()
    tt.record_memory_history(max_entries=200000)
    for _ in range(5):
        model(x, x).sum().backward()
    torch.cuda.synchronize()
    trace = tt.memory_snapshot()["device_traces"][torch.cuda.current_device()]
    tt.record_memory_history(enabled=False)
    frees = sum(e["action"] == "free_requested" for e in trace)
    bad = misordered_frees(trace)
    check(frees > 100 and bad == 0, "memory_snapshot(): %d frees in the trace of 5 training steps, %d before "
          "their allocation" % (frees, bad))


def test_dump_trace():
    """A training step with backward (autograd's own thread allocates too) recorded in order and written
    as a trace: every free follows its allocation, and the empty_cache call is a line of its own."""
    import gzip
    import tempfile
    model = torch.nn.Linear(512, 512).cuda()
    tt.record_memory_history(max_entries=100000, ordered=True)
    for _ in range(3):
        model(torch.randn(64, 512, device="cuda")).sum().backward()
    torch.cuda.empty_cache()
    model(torch.randn(64, 512, device="cuda")).sum().backward()
    with tempfile.NamedTemporaryFile(suffix=".csv.gz") as f:
        n = tt.dump_trace(f.name)
        lines = gzip.open(f.name, "rt").read().split()[1:]
    tt.record_memory_history(enabled=False)
    live, misordered = set(), 0
    for line in lines:
        op, ident = line.split(",")[:2]
        if op == "a":
            live.add(ident)
        elif op == "f":
            misordered += ident not in live
            live.discard(ident)
    check(n == len(lines) and n > 20 and misordered == 0 and lines.count("e,0,0,0") == 1,
          "dump_trace(): %d operations, every free after its allocation, one empty_cache line" % n)
    tt.record_memory_history(max_entries=1000, ordered=False)
    try:
        tt.dump_trace("/tmp/unordered.csv")
        check(False, "dump_trace() refuses a history recorded without ordered=True")
    except RuntimeError as e:
        check("ordered=True" in str(e), "dump_trace() refuses a history recorded without ordered=True")
    tt.record_memory_history(enabled=False)


def main():
    test_enable_after_cuda_init_is_refused()
    t0 = time.time()
    tt.enable()
    print("enabled in %.1f s (includes compiling the C++ hooks the first time)" % (time.time() - t0))
    check(tt.is_enabled(), "tidepool is PyTorch's allocator")
    test_empty_cache_returns_the_device_to_its_floor()
    test_record_stream_keeps_the_block_pending()
    test_statistics()
    test_out_of_memory_raises_torch_oom()
    test_training_step_and_cublas()
    test_snapshot_history_and_leak_report()
    test_snapshot_trace_in_order()
    test_dump_trace()
    return finish()


if __name__ == "__main__":
    sys.exit(main())

"""Does PyTorch's own memory API work under tidepool as under PyTorch's allocator?

Each feature runs in a fresh process twice: under PyTorch's native allocator (the control) and under
tidepool (tidepool.torch.enable() right after `import torch`). A feature passes when its script exits 0;
each script asserts what it checks. Prints one table, writes it as JSON with --json PATH.

    python3 tests/gpu/test_torch_compat.py [--json PATH] [--only NAME,NAME] [--jobs N]

Exit status: 0 when every feature that passes natively passes under tidepool, 1 otherwise, 77 (skipped)
where there is no GPU or no PyTorch.
"""
import argparse
import concurrent.futures
import json
import os
import subprocess
import sys
import tempfile
import textwrap
import time

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

PRELUDE = {
    "native": "import torch\n",
    "tidepool": ("import sys\nsys.path.insert(0, %r)\nimport torch\nimport tidepool.torch\n"
                 "tidepool.torch.enable()\n" % os.path.join(ROOT, "python")),
}

# name -> (what it shows, script). Scripts assert; an exception or a non-zero exit is a failure.
FEATURES = {}


def feature(name, what):
    def add(script):
        FEATURES[name] = (what, textwrap.dedent(script))
        return script
    return add


feature("memory_allocated", "memory_allocated / max_memory_allocated / memory_reserved / "
        "reset_peak_memory_stats")("""
    x = torch.empty(64 << 20, dtype=torch.uint8, device="cuda")
    a = torch.cuda.memory_allocated()
    assert a >= 64 << 20, a
    assert torch.cuda.memory_reserved() >= a
    y = torch.empty(32 << 20, dtype=torch.uint8, device="cuda")
    del y
    peak = torch.cuda.max_memory_allocated()
    assert peak >= (96 << 20), peak
    torch.cuda.reset_peak_memory_stats()
    assert torch.cuda.max_memory_allocated() == torch.cuda.memory_allocated() == a
    assert torch.cuda.max_memory_reserved() >= torch.cuda.memory_reserved()
    del x
    assert torch.cuda.memory_allocated() == a - (64 << 20)
    torch.cuda.reset_accumulated_memory_stats()
    assert torch.cuda.memory_stats()["allocation.all.allocated"] == 0
""")

feature("memory_stats", "memory_stats(), memory_summary(), memory_snapshot(), mem_get_info")("""
    x = torch.empty(1000, device="cuda")
    y = torch.empty(5 << 20, dtype=torch.uint8, device="cuda")
    s = torch.cuda.memory_stats()
    for key in ("allocated_bytes.all.current", "allocated_bytes.small_pool.current",
                "allocated_bytes.large_pool.current", "reserved_bytes.all.peak", "active_bytes.all.current",
                "inactive_split_bytes.all.current", "requested_bytes.all.current", "allocation.all.current",
                "segment.all.current", "num_alloc_retries", "num_ooms", "num_device_alloc",
                "num_device_free", "num_sync_all_streams"):
        assert key in s, key
    assert s["allocated_bytes.small_pool.current"] >= 4000
    assert s["allocated_bytes.large_pool.current"] >= 5 << 20
    assert s["allocation.all.current"] == 2, s["allocation.all.current"]
    text = torch.cuda.memory_summary()
    assert "Allocated memory" in text
    snap = torch.cuda.memory_snapshot()
    blocks = [b for seg in snap for b in seg["blocks"] if b["state"] == "active_allocated"]
    assert len(blocks) >= 2, snap
    free, total = torch.cuda.mem_get_info()
    assert 0 < free <= total
""")

feature("memory_stats_accumulated", "memory_stats()' .allocated and .freed, active and oversize, and "
        "reset_accumulated_memory_stats")("""
    torch.cuda.reset_accumulated_memory_stats()
    x = torch.empty(1000, device="cuda")                    # 4000 bytes: the small pool
    y = torch.empty(5 << 20, dtype=torch.uint8, device="cuda")  # the large pool
    del x
    s = torch.cuda.memory_stats()
    assert s["allocation.all.allocated"] == 2 and s["allocation.all.freed"] == 1, s
    assert s["active.all.allocated"] == 2 and s["active.all.freed"] == 1, s
    assert s["allocated_bytes.small_pool.allocated"] == 4096 == s["allocated_bytes.small_pool.freed"], s
    assert s["allocated_bytes.large_pool.allocated"] == 5 << 20 and s["allocated_bytes.large_pool.freed"] == 0, s
    assert s["requested_bytes.small_pool.allocated"] == 4000 == s["requested_bytes.small_pool.freed"], s
    assert s["segment.all.allocated"] == 2 and s["segment.all.freed"] == 0, s
    # y's 20 MiB segment keeps one FREE block after it: PyTorch's inactive_split counts it
    assert s["inactive_split.large_pool.current"] == 1 and s["inactive_split.small_pool.current"] == 0, s
    for name in ("allocation", "active", "segment", "allocated_bytes", "reserved_bytes", "active_bytes",
                 "inactive_split_bytes", "requested_bytes", "inactive_split"):
        for pool in ("all", "small_pool", "large_pool"):
            k = "%s.%s." % (name, pool)
            assert s[k + "allocated"] - s[k + "freed"] == s[k + "current"], (k, s)
    for k in ("oversize_allocations", "oversize_segments"):
        assert s[k + ".current"] == s[k + ".allocated"] == s[k + ".freed"] == 0, s
    assert s["max_split_size"] == -1, s["max_split_size"]  # no max_split_size_mb: SIZE_MAX, as an int64
    del y
    torch.cuda.empty_cache()
    s = torch.cuda.memory_stats()
    assert s["segment.all.freed"] == 2 and s["reserved_bytes.all.freed"] == s["reserved_bytes.all.allocated"], s
    assert s["num_device_free"] == 2, s
    torch.cuda.reset_accumulated_memory_stats()
    s = torch.cuda.memory_stats()
    assert all(v == 0 for k, v in s.items() if k.endswith((".allocated", ".freed"))), s
    assert s["num_device_alloc"] == s["num_device_free"] == 0, s
""")

feature("memory_history", "_record_memory_history + _snapshot + _dump_snapshot, rendered by "
        "_memory_viz")("""
    import os, pickle, tempfile
    from torch.cuda import _memory_viz
    torch.cuda.memory._record_memory_history(max_entries=10000)
    xs = [torch.empty(n << 10, dtype=torch.uint8, device="cuda") for n in (1, 100, 3000)]
    del xs[1]
    snap = torch.cuda.memory._snapshot()
    actions = [e["action"] for t in snap["device_traces"] for e in t]
    assert "alloc" in actions and "free_requested" in actions, actions[:20]
    assert any(seg["blocks"] for seg in snap["segments"])
    path = os.path.join(tempfile.mkdtemp(), "snap.pickle")
    torch.cuda.memory._dump_snapshot(path)
    with open(path, "rb") as f:
        loaded = pickle.load(f)
    html = _memory_viz.trace_plot(loaded)
    assert len(html) > 1000
    seg_html = _memory_viz.segment_plot(loaded)
    assert len(seg_html) > 1000
    torch.cuda.memory._record_memory_history(enabled=None)
""")

feature("cudnn_benchmark", "torch.backends.cudnn.benchmark = True on a conv net")("""
    torch.backends.cudnn.benchmark = True
    net = torch.nn.Sequential(torch.nn.Conv2d(3, 64, 3), torch.nn.ReLU(), torch.nn.Conv2d(64, 64, 3)).cuda()
    for shape in ((8, 3, 64, 64), (4, 3, 96, 96)):
        out = net(torch.randn(*shape, device="cuda"))
        out.sum().backward()
    torch.cuda.synchronize()
""")

feature("cuda_graph", "CUDA graph capture + replay equals eager")("""
    torch.manual_seed(0)
    net = torch.nn.Sequential(torch.nn.Linear(256, 512), torch.nn.GELU(), torch.nn.Linear(512, 256)).cuda()
    static_in = torch.randn(64, 256, device="cuda")
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):
        for _ in range(3):
            net(static_in)
    torch.cuda.current_stream().wait_stream(s)
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        static_out = net(static_in)
    for i in range(5):
        x = torch.randn(64, 256, device="cuda")
        static_in.copy_(x)
        g.replay()
        eager = net(x)
        torch.cuda.synchronize()
        assert torch.equal(static_out, eager), (static_out - eager).abs().max()
    del g
    torch.cuda.empty_cache()
""")

feature("make_graphed_callables", "torch.cuda.make_graphed_callables, forward and backward")("""
    torch.manual_seed(0)
    net = torch.nn.Sequential(torch.nn.Linear(128, 128), torch.nn.ReLU(), torch.nn.Linear(128, 10)).cuda()
    ref = torch.nn.Sequential(torch.nn.Linear(128, 128), torch.nn.ReLU(), torch.nn.Linear(128, 10)).cuda()
    ref.load_state_dict(net.state_dict())
    x = torch.randn(32, 128, device="cuda", requires_grad=True)
    graphed = torch.cuda.make_graphed_callables(net, (x,))
    for _ in range(3):
        inp = torch.randn(32, 128, device="cuda")
        out = graphed(inp)
        out.sum().backward()
        ref_out = ref(inp)
        ref_out.sum().backward()
        torch.cuda.synchronize()
        assert torch.allclose(out, ref_out, atol=1e-5), (out - ref_out).abs().max()
""")

feature("compile_reduce_overhead", 'torch.compile(mode="reduce-overhead") (cudagraph trees)')("""
    torch.manual_seed(0)
    net = torch.nn.Sequential(torch.nn.Linear(256, 256), torch.nn.GELU(), torch.nn.Linear(256, 256)).cuda()
    fast = torch.compile(net, mode="reduce-overhead")
    taken = []
    get_state = torch._C._cuda_getCheckpointState
    torch._C._cuda_getCheckpointState = lambda *a: taken.append(1) or get_state(*a)  # once per recording
    with torch.no_grad():  # inference: with a backward pending, cudagraph trees would not record
        for i in range(6):
            x = torch.randn(32, 256, device="cuda")
            out = fast(x).clone()
            torch.cuda.synchronize()
            assert torch.allclose(out, net(x), atol=1e-4)
    from torch._dynamo.utils import counters
    assert taken, "no CUDA graph was recorded"
    assert not counters["inductor"]["cudagraph_skips"], dict(counters["inductor"])
""")

feature("cudagraph_checkpoint", "cudagraph trees' checkpointing: a new graph recorded while a replay's "
        "outputs live (getCheckpointState, setCheckpointPoolState, checkPoolLiveAllocations)")("""
    import torch._inductor.config as inductor_config
    inductor_config.triton.slow_path_cudagraph_asserts = True  # checks the pool's live blocks after each
    from torch._dynamo.utils import counters
    restored = []
    set_state = torch._C._cuda_setCheckpointPoolState
    torch._C._cuda_setCheckpointPoolState = lambda *a: restored.append(1) or set_state(*a)

    @torch.compile(mode="reduce-overhead")
    def f(x):
        return (x @ x).relu() + 1

    @torch.compile(mode="reduce-overhead")
    def h(y):
        return y.sin() * 2 + y

    x = torch.randn(512, 512, device="cuda")
    want_a = (x @ x).relu() + 1
    want_b = want_a.sin() * 2 + want_a
    for _ in range(3):  # f alone: warm-up, recording, replay
        torch.compiler.cudagraph_mark_step_begin()
        a = f(x)
    for _ in range(4):  # then h after f's replay, while its output a lives: from a checkpoint
        torch.compiler.cudagraph_mark_step_begin()
        a = f(x)
        b = h(a)
        torch.testing.assert_close(a, want_a)
        torch.testing.assert_close(b, want_b)
        keep = b.clone()
    assert restored, "cudagraph trees never checkpointed"
    assert not counters["inductor"]["cudagraph_skips"], dict(counters["inductor"])
    torch.testing.assert_close(keep, want_b)
""")

feature("compile_default", "torch.compile() default mode, training steps")("""
    net = torch.nn.Sequential(torch.nn.Linear(256, 256), torch.nn.ReLU(), torch.nn.Linear(256, 1)).cuda()
    opt = torch.optim.SGD(net.parameters(), lr=0.01)
    step = torch.compile(lambda x: net(x).pow(2).mean())
    for _ in range(5):
        loss = step(torch.randn(64, 256, device="cuda"))
        opt.zero_grad()
        loss.backward()
        opt.step()
    torch.cuda.synchronize()
""")

feature("mem_pool", "torch.cuda.MemPool / use_mem_pool")("""
    pool = torch.cuda.MemPool()
    with torch.cuda.use_mem_pool(pool):
        x = torch.empty(8 << 20, dtype=torch.uint8, device="cuda")
    y = torch.empty(8 << 20, dtype=torch.uint8, device="cuda")
    snap = pool.snapshot()
    assert any(seg["address"] <= x.data_ptr() < seg["address"] + seg["total_size"] for seg in snap), snap
    assert not any(seg["address"] <= y.data_ptr() < seg["address"] + seg["total_size"] for seg in snap)
    assert pool.use_count() >= 1
    del x
    with torch.cuda.use_mem_pool(pool):
        z = torch.empty(8 << 20, dtype=torch.uint8, device="cuda")
    assert any(seg["address"] <= z.data_ptr() < seg["address"] + seg["total_size"] for seg in pool.snapshot())
    del z, pool
    torch.cuda.empty_cache()
""")

feature("mem_pool_use_on_oom", "MemPool(use_on_oom=True): an allocation that finds the device full uses "
        "the pool's cached memory")("""
    import inspect
    assert "use_on_oom" in inspect.signature(torch.cuda.MemPool).parameters, "this torch has no use_on_oom"
    fraction = 0.05
    torch.cuda.set_per_process_memory_fraction(fraction)
    n = int(torch.cuda.get_device_properties(0).total_memory * fraction * 0.6)
    pool = torch.cuda.MemPool(use_on_oom=True)
    with torch.cuda.use_mem_pool(pool):
        t = torch.empty(n, dtype=torch.uint8, device="cuda")
    del t  # its memory stays the pool's
    u = torch.empty(n, dtype=torch.uint8, device="cuda")  # the limit leaves room only in the pool
    u.fill_(3)
    assert int(u[:1000].sum()) == 3000
    del u
""")

feature("ipc_spawn", "a CUDA tensor sent to a spawned child (torch.multiprocessing)")("""
    import torch.multiprocessing as mp

    def child(q, done):
        t = q.get()
        done.put(float(t.sum()))

    if __name__ == "__main__":
        ctx = mp.get_context("spawn")
        q, done = ctx.Queue(), ctx.Queue()
        p = ctx.Process(target=child, args=(q, done))
        p.start()
        t = torch.arange(1000, dtype=torch.float32, device="cuda")
        q.put(t)
        got = done.get(timeout=120)
        p.join(timeout=60)
        assert got == float(t.sum()), got
        assert p.exitcode == 0, p.exitcode
""")

feature("gpt2_training", "a Hugging Face GPT-2 training loop that prints max_memory_allocated")("""
    import transformers
    torch.manual_seed(0)
    cfg = transformers.GPT2Config(n_layer=4, n_embd=256, n_head=4, vocab_size=8192, n_positions=256)
    model = transformers.GPT2LMHeadModel(cfg).cuda()
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4)
    for step in range(20):
        n = 64 + (step * 37) % 192
        ids = torch.randint(0, 8192, (8, n), device="cuda")
        with torch.autocast("cuda", dtype=torch.bfloat16):
            loss = model(ids, labels=ids).loss
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
    peak = torch.cuda.max_memory_allocated()
    print("max_memory_allocated", peak)
    assert peak > 0
""")

feature("oom_error", "running out raises torch.cuda.OutOfMemoryError, and the process goes on")("""
    try:
        torch.empty(1 << 50, dtype=torch.uint8, device="cuda")
        raise AssertionError("no error")
    except torch.cuda.OutOfMemoryError:
        pass
    x = torch.ones(10, device="cuda")
    assert float(x.sum()) == 10
""")

feature("record_stream", "tensor.record_stream on a side stream")("""
    s = torch.cuda.Stream()
    x = torch.empty(1 << 20, device="cuda")
    with torch.cuda.stream(s):
        torch.cuda._sleep(10000000)
        y = x * 2
    x.record_stream(s)
    del x
    z = torch.zeros(1 << 20, device="cuda")
    torch.cuda.synchronize()
    assert float(z.sum()) == 0
""")

feature("caching_allocator_alloc", "torch.cuda.caching_allocator_alloc / caching_allocator_delete")("""
    p = torch.cuda.caching_allocator_alloc(1 << 20)
    assert p != 0
    torch.cuda.caching_allocator_delete(p)
""")

feature("empty_cache", "torch.cuda.empty_cache() gives cached memory back")("""
    x = torch.empty(256 << 20, dtype=torch.uint8, device="cuda")
    del x
    before = torch.cuda.mem_get_info()[0]
    torch.cuda.empty_cache()
    after = torch.cuda.mem_get_info()[0]
    assert after >= before + (200 << 20), (before, after)
""")

feature("amp_grad_scaler", "AMP autocast with GradScaler")("""
    net = torch.nn.Linear(128, 128).cuda()
    opt = torch.optim.SGD(net.parameters(), lr=0.1)
    scaler = torch.amp.GradScaler("cuda")
    for _ in range(5):
        with torch.autocast("cuda", dtype=torch.float16):
            loss = net(torch.randn(16, 128, device="cuda")).float().pow(2).mean()
        scaler.scale(loss).backward()
        scaler.step(opt)
        scaler.update()
        opt.zero_grad()
    torch.cuda.synchronize()
""")

feature("memory_fraction", "set_per_process_memory_fraction limits what can be allocated")("""
    total = torch.cuda.get_device_properties(0).total_memory
    torch.cuda.set_per_process_memory_fraction(0.1)
    try:
        torch.empty(int(total * 0.2), dtype=torch.uint8, device="cuda")
        raise AssertionError("the fraction did not hold")
    except torch.cuda.OutOfMemoryError:
        pass
    x = torch.empty(int(total * 0.05), dtype=torch.uint8, device="cuda")
    del x
""")

feature("allocator_backend", "torch.cuda.get_allocator_backend() names the allocator")("""
    import os
    name = torch.cuda.memory.get_allocator_backend()
    want = "tidepool" if "tidepool" in sys.modules else "native"
    print("backend", name)
    assert name == want, name
""")

# ---- what downstream code expects of the allocator -----------------------------------------------------

feature("oom_halves_batch", "accelerate's find_executable_batch_size shrinks the batch on running out "
        "(the text says \" out of memory.\" after PyTorch's first sentence)")("""
    total = torch.cuda.get_device_properties(0).total_memory
    tried = []

    def step(batch_size):
        tried.append(batch_size)
        x = torch.empty(batch_size * (total // 16), dtype=torch.uint8, device="cuda")  # 16: all of it
        del x
        return batch_size

    try:
        torch.empty(total * 2, dtype=torch.uint8, device="cuda")
        raise AssertionError("no error")
    except torch.cuda.OutOfMemoryError as e:
        text = str(e)
        assert len(e.args) == 1, e.args
        assert text.startswith("CUDA out of memory. Tried to allocate "), text[:200]
        assert " out of memory." in text and "has a total capacity of" in text, text[:300]
    try:
        from accelerate.utils import find_executable_batch_size
    except ImportError:
        raise SystemExit("accelerate is not installed: pip install accelerate")
    result = find_executable_batch_size(step, starting_batch_size=64)()
    print("tried", tried)
    # accelerate shrinks the batch on each out-of-memory error it recognizes (by half in older
    # releases, by a tenth in newer ones) until one fits: batch 16 is the whole device.
    assert tried[0] == 64 and len(tried) >= 3, tried
    assert all(a > b for a, b in zip(tried, tried[1:])), tried
    assert result == tried[-1] and result < 16, (result, tried)
""")

feature("memory_viz_timeline", "_memory_viz renders a history whose allocations free (free_completed, "
        "also after record_stream) and whose segments come and go (cudaMalloc / cudaFree)")("""
    from torch.cuda import _memory_viz
    torch.cuda.memory._record_memory_history(max_entries=100000)
    side = torch.cuda.Stream()
    x = torch.empty(8 << 20, dtype=torch.uint8, device="cuda")
    y = torch.empty(8 << 20, dtype=torch.uint8, device="cuda")
    with torch.cuda.stream(side):
        y.add_(1)
    y.record_stream(side)
    del x, y                       # y's free completes once side is done with it
    torch.cuda.synchronize()
    torch.cuda.empty_cache()       # drains, then gives the segments back
    snap = torch.cuda.memory._snapshot()
    torch.cuda.memory._record_memory_history(enabled=None)
    trace = [e for t in snap["device_traces"] for e in t]
    allocs = [e["addr"] for e in trace if e["action"] == "alloc"]
    completed = [e["addr"] for e in trace if e["action"] == "free_completed"]
    assert len(allocs) >= 2 and all(a in completed for a in allocs), (allocs, completed)
    assert any(e["action"] == "segment_alloc" for e in trace), [e["action"] for e in trace]
    assert any(e["action"] == "segment_free" for e in trace), [e["action"] for e in trace]
    text = _memory_viz.trace(snap)
    print(text[-2000:])
    assert text.count("# free completed for") >= 2, text
    assert "cudaMalloc(" in text and "cudaFree(" in text, text
""")

feature("ipc_two_tensors_one_segment", "two tensors from one sender segment arrive in a spawned child, "
        "and a third after the first two are gone")("""
    import torch.multiprocessing as mp

    def child(q, done):
        a, b = q.get()
        done.put((float(a.sum()), float(b.sum())))
        del a, b
        c = q.get()
        done.put(float(c.sum()))

    if __name__ == "__main__":
        ctx = mp.get_context("spawn")
        q, done = ctx.Queue(), ctx.Queue()
        p = ctx.Process(target=child, args=(q, done))
        p.start()
        a = torch.arange(1000, dtype=torch.float32, device="cuda")
        b = torch.full((1000,), 2.0, device="cuda")  # small: the same 2 MiB segment as a
        q.put((a, b))
        got = done.get(timeout=120)
        assert got == (float(a.sum()), 2000.0), got
        c = torch.full((1000,), 3.0, device="cuda")
        q.put(c)
        assert done.get(timeout=120) == 3000.0
        p.join(timeout=60)
        assert p.exitcode == 0, p.exitcode
""")

feature("trace_tracker_segments", "an allocator trace tracker (as ProcessGroupNCCL registers for NCCL) hears "
        "segments reserved and freed")("""
    from torch.utils.cpp_extension import load_inline
    src = '''
    #include <torch/extension.h>
    #include <c10/cuda/CUDACachingAllocator.h>
    #include <atomic>
    static std::atomic<long> seen[4];
    void attach() {
        c10::cuda::CUDACachingAllocator::attachAllocatorTraceTracker(
            [](const c10::cuda::CUDACachingAllocator::TraceEntry &e) {
                using A = c10::cuda::CUDACachingAllocator::TraceEntry::Action;
                if (e.action_ == A::SEGMENT_ALLOC) seen[0]++;
                if (e.action_ == A::SEGMENT_FREE) seen[1]++;
                if (e.action_ == A::SEGMENT_MAP) seen[2]++;
                if (e.action_ == A::SEGMENT_UNMAP) seen[3]++;
            });
    }
    std::vector<long> counts() { return {seen[0].load(), seen[1].load(), seen[2].load(), seen[3].load()}; }
    '''
    probe = load_inline("trace_tracker_probe", cpp_sources=src, functions=["attach", "counts"], with_cuda=True)
    torch.cuda.init()
    probe.attach()
    x = torch.empty(30 << 20, dtype=torch.uint8, device="cuda")
    del x
    torch.cuda.empty_cache()
    made, gone, maps, unmaps = probe.counts()
    print("segment_alloc", made, "segment_free", gone, "map", maps, "unmap", unmaps)
    assert made + maps >= 1 and gone + unmaps >= 1, probe.counts()
""")

feature("empty_cache_in_mem_pool", "torch.cuda.empty_cache() inside use_mem_pool works (the pool's tensors "
        "stay), and after it the memory freed outside the pool goes back")("""
    side = torch.cuda.Stream()
    outside = torch.empty(64 << 20, dtype=torch.uint8, device="cuda")
    with torch.cuda.stream(side):
        outside.add_(1)
    outside.record_stream(side)
    del outside                    # pending until side is done
    torch.cuda.synchronize()
    base = torch.cuda.memory_reserved()
    pool = torch.cuda.MemPool()
    with torch.cuda.use_mem_pool(pool):
        x = torch.empty(8 << 20, dtype=torch.uint8, device="cuda")
        x.fill_(7)
        before = torch.cuda.memory_reserved()
        torch.cuda.empty_cache()   # must not raise, nor take the pool's live tensor
        assert torch.cuda.memory_reserved() <= before
        y = torch.empty(1 << 20, device="cuda")
        del y
    assert int(x[:1000].sum()) == 7000
    # The 64 MiB freed outside the pool has gone back by the time empty_cache has also run outside it
    # (PyTorch gives it back only then, its pending free drained; tidepool already inside the pool).
    torch.cuda.empty_cache()
    after = torch.cuda.memory_reserved()
    assert after <= before - (64 << 20), (base, before, after)
    del x
    del pool
    torch.cuda.empty_cache()
""")

feature("record_stream_foreign", "record_stream on memory the allocator does not own (a tensor over "
        "__cuda_array_interface__, as from another library) is skipped")("""
    base = torch.zeros(4096, dtype=torch.uint8, device="cuda")

    class Foreign:
        __cuda_array_interface__ = {"shape": (1024,), "typestr": "|u1",
                                    "data": (base.data_ptr() + 512, False), "version": 3}

    t = torch.as_tensor(Foreign(), device="cuda")
    assert t.data_ptr() == base.data_ptr() + 512
    side = torch.cuda.Stream()
    t.record_stream(side)          # PyTorch skips what its allocator did not hand out
    del t
    torch.cuda.synchronize()
""")

feature("pytorch_alloc_conf", "PYTORCH_ALLOC_CONF is honoured (expandable_segments) and keys without a "
        "meaning are named in a warning")("""
    import os
    import subprocess
    body = (
        "import warnings\\n"
        "warnings.simplefilter('always')\\n"
        "x = torch.empty(8 << 20, dtype=torch.uint8, device='cuda')\\n"
        "segs = torch.cuda.memory._snapshot()['segments']\\n"
        "assert segs and all(s['is_expandable'] for s in segs), segs\\n"
        "print('expandable ok')\\n")
    head = "import sys\\nsys.path[:0] = %r\\nimport torch\\n" % (sys.path,)
    if "tidepool" in sys.modules:
        head += "import tidepool.torch\\ntidepool.torch.enable()\\n"
    env = dict(os.environ, PYTORCH_ALLOC_CONF="expandable_segments:True,roundup_power2_divisions:4")
    r = subprocess.run([sys.executable, "-c", head + body], env=env, capture_output=True, text=True, timeout=300)
    print(r.stdout, r.stderr)
    assert r.returncode == 0 and "expandable ok" in r.stdout
    if "tidepool" in sys.modules:
        assert "roundup_power2_divisions" in r.stderr and "ignored" in r.stderr, r.stderr
""")

feature("caching_allocator_disabled", "torch.cuda.caching_allocator_enable(False) passes allocations to the "
        "driver, and True brings the cache back")("""
    torch.cuda.caching_allocator_enable(False)
    x = torch.ones(1 << 20, device="cuda")
    assert float(x.sum()) == 1 << 20
    x.record_stream(torch.cuda.Stream())
    del x
    torch.cuda.caching_allocator_enable(True)
    y = torch.ones(1 << 20, device="cuda")
    assert float(y.sum()) == 1 << 20
    assert torch.cuda.memory_allocated() >= 4 << 20
""")


feature("mem_pool_allocator", "MemPool(allocator=...): the pool's segments come from that allocator "
        "(as ncclMemAlloc would give them), with the cache on top")("""
    from torch.utils.cpp_extension import load_inline
    src = '''
    #include <torch/extension.h>
    #include <cuda_runtime_api.h>
    #include <atomic>
    static std::atomic<long> made{0}, gone{0};
    extern "C" void *probe_malloc(ssize_t size, int device, cudaStream_t stream) {
        void *p = nullptr;
        if (cudaMalloc(&p, size) != cudaSuccess) return nullptr;
        made++;
        return p;
    }
    extern "C" void probe_free(void *p, ssize_t size, int device, cudaStream_t stream) {
        cudaFree(p);
        gone++;
    }
    std::vector<long> counts() { return {made.load(), gone.load()}; }
    '''
    probe = load_inline("mem_pool_allocator_probe", cpp_sources=src, functions=["counts"], with_cuda=True)
    alloc = torch.cuda.memory.CUDAPluggableAllocator(probe.__file__, "probe_malloc", "probe_free")
    pool = torch.cuda.MemPool(alloc.allocator())
    with torch.cuda.use_mem_pool(pool):
        x = torch.ones(30 << 20, dtype=torch.uint8, device="cuda")
        assert int(x[:1000].sum()) == 1000
        del x
        y = torch.empty(30 << 20, dtype=torch.uint8, device="cuda")  # cached: no new reservation
    made, gone = probe.counts()
    print("made", made, "gone", gone)
    assert made >= 1, probe.counts()
    del y
    del pool
    torch.cuda.empty_cache()
    made2, gone2 = probe.counts()
    print("after empty_cache: made", made2, "gone", gone2)
    assert made2 == made and gone2 >= 1, probe.counts()
""")


def run_one(name, mode, timeout):
    what, body = FEATURES[name]
    script = PRELUDE[mode] + "import sys\n" + body
    with tempfile.NamedTemporaryFile("w", suffix="_%s_%s.py" % (name, mode), delete=False) as f:
        f.write(script)
        path = f.name
    start = time.time()
    try:
        p = subprocess.run([sys.executable, path], capture_output=True, text=True, timeout=timeout,
                           env=dict(os.environ, PYTHONUNBUFFERED="1"))
        ok, code, tail = p.returncode == 0, p.returncode, (p.stdout + p.stderr).strip().splitlines()
    except subprocess.TimeoutExpired:
        ok, code, tail = False, "timeout", ["did not finish in %d s" % timeout]
    os.unlink(path)
    why = "" if ok else (tail[-1] if tail else "exit %s" % code)
    return {"feature": name, "mode": mode, "ok": ok, "seconds": round(time.time() - start, 1),
            "why": why[:300], "output": "\n".join(tail[-15:])}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--json")
    ap.add_argument("--only")
    ap.add_argument("--jobs", type=int, default=6)
    ap.add_argument("--timeout", type=int, default=300)
    args = ap.parse_args()
    try:
        import torch
    except ImportError:
        print("skipped: PyTorch is not installed")
        return 77
    if not torch.cuda.is_available():
        print("skipped: no GPU")
        return 77
    names = args.only.split(",") if args.only else list(FEATURES)
    jobs = [(n, m) for n in names for m in ("native", "tidepool")]
    results = {}
    with concurrent.futures.ThreadPoolExecutor(args.jobs) as pool:
        for r in pool.map(lambda j: run_one(j[0], j[1], args.timeout), jobs):
            results[(r["feature"], r["mode"])] = r
    print("torch %s, %s" % (torch.__version__, torch.cuda.get_device_name(0)))
    print("| feature | native | tidepool |")
    print("|---|---|---|")
    regressions = 0
    for n in names:
        nat, tp = results[(n, "native")], results[(n, "tidepool")]
        cell = lambda r: "ok" if r["ok"] else "FAIL: " + r["why"].replace("|", "/")
        print("| %s | %s | %s |" % (FEATURES[n][0], cell(nat), cell(tp)))
        if nat["ok"] and not tp["ok"]:
            regressions += 1
    for (n, m), r in sorted(results.items()):
        if not r["ok"]:
            print("\n---- %s under %s ----\n%s" % (n, m, r["output"]))
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"torch": torch.__version__, "results": list(results.values())}, f, indent=1)
    print("\n%d of %d features that work natively fail under tidepool" % (regressions, len(names)))
    return 1 if regressions else 0


if __name__ == "__main__":
    sys.exit(main())

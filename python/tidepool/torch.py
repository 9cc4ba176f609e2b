"""tidepool as PyTorch's CUDA allocator.

    import torch
    import tidepool.torch
    tidepool.torch.enable("garbage_collection_threshold:0.8")   # before the first CUDA allocation

    ... train ...
    torch.cuda.empty_cache()                 # empties tidepool's cache: synchronize, drain, release
    print(torch.cuda.memory_summary())       # PyTorch's own memory API works: tidepool is its allocator

tidepool is installed as a CUDAAllocator of its own (_torch_allocator.cpp), so torch.cuda's memory API,
CUDA graphs, torch.compile's cudagraph trees, MemPool and IPC work as with PyTorch's allocator.
tensor.record_stream(s) keeps a freed tensor's memory pending until s is done with it;
torch.cuda.set_per_process_memory_fraction sets tidepool's limit; running out of memory raises
torch.cuda.OutOfMemoryError with tidepool's report. The functions below add tidepool's own views:
its statistics with pending frees (memory_stats), its history of every event, traces for `tidepool
replay`, and leak reports.
"""

import collections
import json
import os
import threading
import warnings

import torch

from . import _lib, _torch_hooks

_HERE = os.path.dirname(os.path.abspath(__file__))
_lock = threading.Lock()
_shim = None


def _build_shim(package_dir=_HERE):
    """The C++ hooks: those the wheel carries when they were built for this torch (release, CUDA,
    Python; _torch_hooks.choose_prebuilt), else compiled now with PyTorch's extension builder, which
    caches the build under a name that carries the torch release (cached after the first time)."""
    facts = _torch_hooks.running_facts(torch)
    prebuilt, _ = _torch_hooks.choose_prebuilt(_torch_hooks.read_manifest(package_dir), facts, package_dir)
    if prebuilt:
        _lib.lib()  # libtidepool first, so that the hooks bind to the copy tidepool's ctypes calls use
        try:
            return _torch_hooks.load_module(prebuilt)
        except ImportError as e:
            warnings.warn("tidepool: the prebuilt C++ hooks %s do not load (%s); compiling them instead"
                          % (prebuilt, e), RuntimeWarning, stacklevel=3)
    if _torch_version() > _torch_hooks.NEWEST_TORCH:
        warnings.warn("tidepool: torch %s is newer than %d.%d, the newest release the C++ hooks are written "
                      "for; compiling them may fail" % ((torch.__version__,) + _torch_hooks.NEWEST_TORCH),
                      RuntimeWarning, stacklevel=3)
    from torch.utils import cpp_extension

    library = os.path.abspath(_lib.library_path())
    return cpp_extension.load(
        name=_torch_hooks.jit_name(facts),
        sources=[os.path.join(_HERE, "_torch_allocator.cpp")],
        extra_include_paths=[_lib.include_dir()],
        extra_ldflags=[library, "-Wl,-rpath," + os.path.dirname(library)],
        with_cuda=True,
        verbose=bool(os.environ.get("TIDEPOOL_VERBOSE_BUILD")),
    )


# The PyTorch releases the C++ hooks are written against (README.md, Using it with PyTorch).
OLDEST_TORCH = _torch_hooks.OLDEST_TORCH


def _torch_version():
    parts = torch.__version__.split("+")[0].split(".")
    try:
        return tuple(int(p) for p in parts[:2])
    except ValueError:
        return OLDEST_TORCH


def _pytorch_conf():
    """PyTorch's allocator configuration from the environment: PYTORCH_ALLOC_CONF, else the older
    PYTORCH_CUDA_ALLOC_CONF."""
    return os.environ.get("PYTORCH_ALLOC_CONF") or os.environ.get("PYTORCH_CUDA_ALLOC_CONF") or ""


def _settings(text):
    """What a tidepool configuration says of the settings PyTorch's snapshot reports."""
    keys = {}
    for item in text.split(","):
        key, _, value = item.partition(":")
        if key.strip():
            keys[key.strip()] = value.strip()
    expandable = keys.get("expandable_segments", "False").lower() in ("true", "1")
    gc = float(keys.get("garbage_collection_threshold", "0") or 0)
    max_split = int(keys.get("max_split_size_mb", "0") or 0) << 20
    return expandable, gc, max_split


def _configuration(shim, config):
    """The configuration tidepool runs with: TIDEPOOL_CONF and config (tidepool's own), and the keys
    of PyTorch's allocator configuration that have a tidepool meaning and that tidepool's own does not
    set (tidepool's wins). PyTorch's keys that tidepool ignores are named in one warning."""
    own = ",".join(x for x in (os.environ.get("TIDEPOOL_CONF", ""), config or "") if x)
    mapped, ignored = shim.config_from_pytorch(_pytorch_conf(), own)
    if ignored:
        warnings.warn("tidepool: PyTorch's allocator settings %s have no meaning under tidepool and are "
                      "ignored" % ", ".join(ignored.split(",")), RuntimeWarning, stacklevel=3)
    # TIDEPOOL_CONF is read by tidepool itself; what is passed here wins over it, and holds no key it sets.
    passed = ",".join(x for x in (mapped, config or "") if x)
    return passed, ",".join(x for x in (mapped, own) if x)


_warned_settings = set()


def _follow_allocator_settings():
    """torch.cuda.memory._set_allocator_settings(text) goes on to PyTorch as before, and what tidepool
    can change while it runs follows it: per_process_memory_fraction sets tidepool's limit on every
    device. The keys tidepool fixes at enable() (expandable_segments, garbage_collection_threshold,
    max_split_size_mb) and those it ignores are named in one warning each."""
    memory = torch.cuda.memory
    original = getattr(memory, "_set_allocator_settings", None)
    if original is None or getattr(original, "_tidepool", False):
        return

    def set_allocator_settings(env):
        original(env)
        mapped, ignored = _shim.config_from_pytorch(env, "")
        fixed = []
        for item in filter(None, mapped.split(",")):
            key, _, value = item.partition(":")
            if key == "limit":
                _shim.set_memory_fraction(float(value))
            else:
                fixed.append(key)
        for kind, keys in (("are fixed when tidepool.torch.enable() runs (use TIDEPOOL_CONF or "
                            "PYTORCH_ALLOC_CONF)", fixed), ("have no meaning under tidepool and are ignored",
                                                           [k for k in ignored.split(",") if k])):
            new = [k for k in keys if k not in _warned_settings]
            if new:
                _warned_settings.update(new)
                warnings.warn("tidepool: _set_allocator_settings: %s %s" % (", ".join(new), kind),
                              RuntimeWarning, stacklevel=2)

    set_allocator_settings._tidepool = True
    memory._set_allocator_settings = set_allocator_settings


def enable(config=None):
    """Makes tidepool the allocator of every CUDA device in this process.

    config is tidepool's configuration string ("limit:0.9,max_split_size_mb:256"; TIDEPOOL_CONF in the
    environment is read too, this argument wins). PyTorch's own allocator configuration
    (PYTORCH_ALLOC_CONF or PYTORCH_CUDA_ALLOC_CONF) is honoured where tidepool has the key
    (expandable_segments, garbage_collection_threshold, max_split_size_mb, per_process_memory_fraction)
    and tidepool's own configuration does not set it; the other keys are named in one warning.
    Must be called before the first CUDA allocation.
    """
    global _shim
    config = _lib.text_arg(config, "tidepool.torch.enable: config")
    if _torch_version() < OLDEST_TORCH:
        raise RuntimeError("tidepool.torch needs PyTorch %d.%d or later; this is %s"
                           % (OLDEST_TORCH + (torch.__version__,)))
    with _lock:
        if _shim is not None:
            raise RuntimeError("tidepool.torch.enable() was already called in this process")
        if torch.cuda.is_initialized():
            raise RuntimeError(
                "tidepool.torch.enable() must be called before the first CUDA allocation: CUDA is "
                "already initialized in this process, and PyTorch cannot change its allocator once "
                "it has one. Call it right after `import torch`, before any tensor goes to the GPU.")
        shim = _build_shim()
        passed, effective = _configuration(shim, config)
        try:
            shim.enable(passed, *_settings(effective))
        except RuntimeError as e:
            if "initialized allocator" in str(e):
                raise RuntimeError(
                    "tidepool.torch.enable() must be called before the first CUDA allocation: "
                    "PyTorch's allocator is already in use (%s)" % e) from None
            raise
        _shim = shim
        _follow_allocator_settings()


def is_enabled():
    return _shim is not None


def _require():
    if _shim is None:
        raise RuntimeError("tidepool is not enabled: call tidepool.torch.enable() first")
    return _shim


def _call_ns():
    """(nanoseconds, calls): the time PyTorch's allocations and frees spent in tidepool so far (its core
    and the C++ hooks' bookkeeping, steady_clock around each call), and how many there were; None
    unless TIDEPOOL_TIME_CALLS=1 was in the environment when enable() ran. Off, the timer costs one
    branch a call."""
    on, ns, calls = _require().call_time()
    return (ns, calls) if on else None


def _device_index(device):
    """A device index from None (the current device), a torch.device or its name ("cuda:1"), or an int;
    checked before it reaches the C++ hooks, whose int would not hold every Python int."""
    if device is None:
        return torch.cuda.current_device()
    if isinstance(device, (str, torch.device)):
        return torch.device(device).index or 0
    return _lib.device_arg(device)


def memory_stats(device=None):
    """tidepool's statistics for one device, under PyTorch's key names
    ("allocated_bytes.all.current", "reserved_bytes.large_pool.peak", "num_ooms", ...), plus
    tidepool's own ("pending_free_bytes.all.current", "num_pending_drained", ...)."""
    stats = json.loads(_require().stats_json(_device_index(device)))
    return collections.OrderedDict(sorted(stats.items()))


def memory_allocated(device=None):
    return memory_stats(device)["allocated_bytes.all.current"]


def memory_reserved(device=None):
    return memory_stats(device)["reserved_bytes.all.current"]


def max_memory_reserved(device=None):
    return memory_stats(device)["reserved_bytes.all.peak"]


def reset_peak_memory_stats(device=None):
    """torch.cuda.reset_peak_memory_stats: tidepool is torch's allocator, so torch's own call works."""
    _require()
    torch.cuda.reset_peak_memory_stats(device)


def empty_cache():
    """torch.cuda.empty_cache(): synchronize, drain pending frees, release every wholly free segment of
    every device."""
    _require()
    torch.cuda.empty_cache()


def check(device=None):
    """Runs tidepool's validator over one device's allocator; raises if an invariant is broken."""
    _require().check(_device_index(device))


def set_limit(nbytes, device=None):
    """tidepool's limit on one device's reserved memory, in bytes (at least 1)."""
    nbytes = _lib.whole_number(nbytes, "tidepool.torch.set_limit: nbytes", 1, _lib.INT64_MAX,
                               "the largest int64")
    _require().set_limit(_device_index(device), nbytes)


def _format_bytes(n):
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if abs(n) < 1024 or unit == "TiB":
            return ("%d %s" % (n, unit)) if unit == "B" else ("%.2f %s" % (n, unit))
        n /= 1024.0


def memory_summary(device=None):
    """A table of tidepool's statistics for one device, like torch.cuda.memory_summary()."""
    s = memory_stats(device)
    rows = [
        ("Allocated memory", "allocated_bytes", True),
        ("Requested memory", "requested_bytes", True),
        ("Active memory (allocated + pending)", "active_bytes", True),
        ("Pending free (still used by the GPU)", "pending_free_bytes", True),
        ("Cached (free, reusable)", "cached_bytes", True),
        ("Non-releasable (in split segments)", "inactive_split_bytes", True),
        ("Reserved from the driver", "reserved_bytes", True),
        ("Allocations", "allocation", False),
        ("Segments", "segment", False),
        ("Pending free blocks", "pending_free_blocks", False),
        ("Non-releasable blocks", "inactive_split", False),
    ]
    width = 40
    lines = ["=" * 84,
             " tidepool memory summary, device %d" % _device_index(device),
             "-" * 84,
             " %-*s %-10s %14s %14s" % (width, "Metric", "Pool", "Current", "Peak"),
             "-" * 84]
    for title, key, is_bytes in rows:
        for pool in ("all", "small_pool", "large_pool"):
            cur, peak = s["%s.%s.current" % (key, pool)], s["%s.%s.peak" % (key, pool)]
            fmt = _format_bytes if is_bytes else str
            lines.append(" %-*s %-10s %14s %14s" % (width, title if pool == "all" else "", pool,
                                                    fmt(cur), fmt(peak)))
    lines.append("-" * 84)
    for key in ("num_device_alloc", "num_device_free", "num_alloc_retries", "num_ooms",
                "num_sync_all_streams", "num_pending_drained", "num_gc_released"):
        lines.append(" %-*s %14d" % (width + 11, key, s[key]))
    lines.append(" %-*s %11.3f ms" % (width + 11, "time in the driver's memory calls", s["device_call_ns"] / 1e6))
    lines.append(" %-*s %14s" % (width + 11, "limit", _format_bytes(s["limit_bytes"])))
    lines.append("=" * 84)
    return "\n".join(lines)


# ---- sleep and wake: named pools whose memory goes back to the device between phases ------------------
#
# Reinforcement-learning post-training runs an inference engine and a trainer on the same GPUs: between
# phases the engine's weights and KV cache must go back to the device, and come back later at the same
# addresses so that the engine's CUDA graphs stay valid (vLLM's sleep mode, torch_memory_saver). Here a
# named pool is a torch.cuda.MemPool whose tidepool pool is sleepable: its pages can be unmapped and
# mapped again at the same addresses, with tidepool's caching as for any pool.

_named_pools = {}   # (device, name) -> (torch.cuda.MemPool, tidepool pool id)


def _named_pool(name, device):
    """The named pool on device, made (and made sleepable, before it holds memory) on first use."""
    import ctypes
    shim = _require()
    key = (device, name)
    with _lock:
        if key not in _named_pools:
            mempool = torch.cuda.MemPool()
            pool = shim.mempool_pool_id(device, *mempool.id)
            _lib.check(_lib.lib().tide_pool_make_sleepable(ctypes.c_void_p(shim.allocator_address(device)), pool),
                       "tidepool.torch.pool(%r)" % name)
            _named_pools[key] = (mempool, pool)
        return _named_pools[key]


def pool(name, device=None):
    """A context manager: tensors made on device inside it are allocated in the named pool ("weights",
    "kv_cache", ...), which sleep() can put to sleep and wake_up() wake.

        with tidepool.torch.pool("weights"):
            model = load_model().cuda()
    """
    name = _lib.text_arg(name, "tidepool.torch.pool: name")
    if not name:
        raise ValueError("tidepool.torch.pool: the name is empty")
    d = _device_index(device)
    mempool, _ = _named_pool(name, d)
    return torch.cuda.use_mem_pool(mempool, device=d)


def _pools_named(names, device, verb):
    out = []
    for name in names:
        key = (device, name)
        if key not in _named_pools:
            raise ValueError("tidepool.torch.%s: no pool named %r on device %d (made with "
                             "tidepool.torch.pool)" % (verb, name, device))
        out.append((name, _named_pools[key][1]))
    return out


def sleep(offload=(), discard=(), device=None):
    """Gives the named pools' device memory back while their tensors keep their addresses. The contents
    of the pools in offload are copied to pinned host memory first (vLLM's sleep level 1 for the
    weights); those in discard are lost (the KV cache). Waits for the device first. Allocating in a
    sleeping pool raises; freeing its tensors is allowed."""
    import ctypes
    if isinstance(offload, str) or isinstance(discard, str):
        raise TypeError("tidepool.torch.sleep: offload and discard are sequences of pool names")
    shim = _require()
    d = _device_index(device)
    t = ctypes.c_void_p(shim.allocator_address(d))
    for names, keep in ((offload, True), (discard, False)):
        for _, pool in _pools_named(names, d, "sleep"):
            _lib.pool_sleep(t, pool, keep)


def wake_up(tags=None, device=None):
    """Maps the sleeping pools' memory again at the same addresses and copies offloaded contents back:
    every sleeping named pool, or those named in tags. A CUDA graph captured before the sleep replays
    after the wake. Raises torch.cuda.OutOfMemoryError if the device has too little room (the pools stay
    asleep, whole: free memory and call again)."""
    import ctypes
    shim = _require()
    d = _device_index(device)
    t = ctypes.c_void_p(shim.allocator_address(d))
    if tags is None:
        names = [name for (dev, name), (_, pool) in list(_named_pools.items())
                 if dev == d and _lib.pool_sleeping(t, pool)]
    elif isinstance(tags, str):
        raise TypeError("tidepool.torch.wake_up: tags is a sequence of pool names")
    else:
        names = list(tags)
    for name, pool in _pools_named(names, d, "wake_up"):
        try:
            _lib.pool_wake(t, pool)
        except _lib.OutOfMemory as e:
            raise torch.cuda.OutOfMemoryError("tidepool.torch.wake_up(%r): %s" % (name, e)) from None


def is_sleeping(name, device=None):
    """Whether the named pool sleeps."""
    import ctypes
    shim = _require()
    d = _device_index(device)
    (_, pool), = _pools_named([name], d, "is_sleeping")
    return _lib.pool_sleeping(ctypes.c_void_p(shim.allocator_address(d)), pool)


# ---- seeing memory: history, snapshots in PyTorch's structure, leak reports ----------------------------

def record_memory_history(enabled=True, max_entries=100000, stacks=False, device=None, ordered=True):
    """Starts (or, with enabled=False, stops) tidepool's history of allocator events on one device (all
    devices if device is None). stacks=True records each event's native call stack.

    ordered=True (the default, as PyTorch's own history is) keeps every event in its exact order.
    ordered=False costs less per event: one stream's allocations and frees stay in their exact order
    (PyTorch's autograd frees on a thread of its own, on the same stream), but streams take event
    numbers 512 at a time, so two streams' events, and a stream's events with segment events,
    interleave in blocks of up to 512; dump_trace refuses such a history."""
    shim = _require()
    if enabled:
        max_entries = _lib.whole_number(max_entries, "record_memory_history: max_entries", 1,
                                        _lib.INT64_MAX, "the largest int64")
    devices = range(torch.cuda.device_count()) if device is None else [_device_index(device)]
    for d in devices:
        if enabled:
            shim.history_start(d, max_entries, bool(stacks), bool(ordered))
        else:
            shim.history_stop(d)


def annotate(text, device=None):
    """Marks this point in the history of one device's allocator (the current device if None) with
    text, e.g. "step 12": an annotation event among the allocations. Needs record_memory_history on."""
    _require().annotate(_device_index(device), _lib.text_arg(str(text), "annotate: text"))


def _frames(names):
    """tidepool's "libx.so(function+0x1c)" strings as PyTorch's frame dicts."""
    out = []
    for name in names or []:
        filename, _, rest = name.partition("(")
        out.append({"filename": filename, "line": 0, "name": rest.rstrip(")") or name})
    return out


_STATES = {"active": "active_allocated", "pending_free": "active_pending_free", "cached": "inactive"}
_ACTIONS = {"alloc": "alloc", "free_requested": "free_requested", "free_completed": "free_completed",
            "segment_reserved": "segment_alloc", "segment_released": "segment_free", "oom": "oom"}


def memory_snapshot():
    """A snapshot of every device's tidepool allocator in the structure of PyTorch's
    torch.cuda.memory._snapshot(): "segments" (each with "blocks" in the states active_allocated,
    active_pending_free and inactive) and "device_traces" (the events of tidepool's history, if one was
    recorded: alloc, free_requested, free_completed, segment_alloc, segment_free, oom; in order unless
    it was recorded with ordered=False)."""
    shim = _require()
    segments, traces = [], []
    for d in range(torch.cuda.device_count()):
        snap = json.loads(shim.snapshot_json(d))
        for seg in snap["segments"]:
            blocks = []
            for b in seg["blocks"]:
                blocks.append({
                    "address": b["address"], "size": b["size"], "requested_size": b["requested"],
                    "state": _STATES[b["state"]],
                    "frames": _frames([b["site"]] if b.get("site") else []),
                })
            active = [b for b in blocks if b["state"] != "inactive"]
            segments.append({
                "device": d, "address": seg["address"], "total_size": seg["size"], "stream": seg["stream"],
                "segment_type": seg["pool"], "segment_pool_id": (0, 0), "is_expandable": seg.get("expandable", False),
                "allocated_size": sum(b["size"] for b in blocks if b["state"] == "active_allocated"),
                "active_size": sum(b["size"] for b in active),
                "requested_size": sum(b["requested_size"] for b in active),
                "frames": [], "blocks": blocks,
            })
        trace = []
        for e in json.loads(shim.history_json(d))["events"]:
            action = _ACTIONS.get(e["kind"])
            if action is None:
                continue  # empty_cache and annotations have no counterpart in PyTorch's trace
            entry = {"action": action, "addr": e["addr"], "size": e["size"], "stream": e["stream"],
                     "time_us": e["time_ns"] // 1000, "frames": _frames(e["frames"])}
            if action == "oom":
                entry["device_free"] = 0
            trace.append(entry)
        traces.append(trace)
    return {"segments": segments, "device_traces": traces, "allocator_settings": {"allocator": "tidepool"}}


def dump_snapshot(path):
    """Writes memory_snapshot() as the pickle PyTorch's memory visualizer reads
    (pytorch.org/memory_viz, or python -m torch.cuda._memory_viz trace_plot PATH -o out.html)."""
    import pickle
    with open(path, "wb") as f:
        pickle.dump(memory_snapshot(), f)


def dump_trace(path, device=None):
    """Writes what the program asked of one device's allocator, as recorded by
    record_memory_history(ordered=True), as a trace CSV (gzip'd if path ends in .gz) that
    `tidepool replay` and `gpu_bench replay` read: allocations, frees and empty_cache calls in order.
    Returns the number of operations written."""
    from . import trace
    history = json.loads(_require().history_json(_device_index(device)))
    if not history.get("ordered"):
        raise RuntimeError("tidepool.torch.dump_trace: the history was recorded with ordered=False, so "
                           "the events of PyTorch's threads may be out of order (a free before its "
                           "allocation); record it with record_memory_history(ordered=True), the default")
    lines, _ = trace.write_trace(history, path)
    return lines


def leak_report(device=None):
    """What is still allocated on one device, grouped by tag and call site, largest first, in words."""
    return _require().leak_report(_device_index(device))

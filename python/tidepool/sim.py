"""tidepool on the simulated device: the allocator, with no GPU, from Python.

    from tidepool.sim import SimulatedDevice
    with SimulatedDevice(total_bytes=8 << 30, config="expandable_segments:True") as dev:
        p = dev.malloc(1 << 20)
        dev.free(p)
        print(dev.stats()["reserved_bytes.all.current"])
        dev.empty_cache()

The simulated device (tidepool_sim.h) maps host memory for its "device" memory and runs streams as
threads; the allocator is the same one that serves a GPU. Good for trying configurations and for tests.
"""

import contextlib
import ctypes
import threading

from . import _lib


class SimOptions(ctypes.Structure):
    _fields_ = [("struct_size", ctypes.c_uint32), ("total_bytes", ctypes.c_uint64),
                ("queue_depth", ctypes.c_uint32), ("same_addresses", ctypes.c_uint32)]


class SimulatedDevice:
    """One simulated device and one tidepool allocator on it. Close it (or use it as a context manager):
    closing destroys the allocator, which reports memory still allocated as an error.

    Its methods may be called from several threads. close() waits for the calls other threads are
    making to return, and every call that comes after it, or while it waits, raises TidepoolError
    saying the device is closed."""

    def __init__(self, total_bytes=0, config=None):
        # Set first, so close() works on an instance whose creation failed half-way.
        self._cond = threading.Condition()
        self._calls = 0           # calls inside the library now
        self._state = "open"      # then "closing" (no new calls; waiting for those inside), "closed"
        self._sim = self._t = None
        total_bytes = _lib.whole_number(total_bytes, "SimulatedDevice: total_bytes", 0, _lib.UINT64_MAX,
                                        "2^64 - 1")
        config = _lib.c_text(config, "SimulatedDevice: config")
        L = _lib.lib()
        sim, t = ctypes.c_void_p(), ctypes.c_void_p()
        opts = SimOptions(ctypes.sizeof(SimOptions), total_bytes, 0, 0)
        status = L.tide_sim_create(ctypes.byref(opts), ctypes.byref(sim))
        if status != _lib.TIDE_OK:
            self._state = "closed"
            _lib.check(status, "tide_sim_create")
        self._backend = L.tide_sim_backend(sim)
        status = L.tide_create(ctypes.byref(self._backend), config or None, ctypes.byref(t))
        if status != _lib.TIDE_OK:
            L.tide_sim_destroy(sim)
            self._state = "closed"
            _lib.check(status, "tide_create")
        self._sim, self._t = sim, t

    @contextlib.contextmanager
    def _inside(self, what):
        """A call into the library, counted in while it runs; refused once close() has begun, so the
        allocator is never destroyed under it."""
        with self._cond:
            if self._state != "open":
                raise _lib.TidepoolError("%s: this SimulatedDevice is %s" % (what, self._state))
            self._calls += 1
        try:
            yield
        finally:
            with self._cond:
                self._calls -= 1
                if not self._calls:
                    self._cond.notify_all()

    def new_stream(self):
        """A new stream of the device (stream 0 always exists)."""
        out = ctypes.c_void_p()
        with self._inside("new_stream"):
            status = _lib.lib().tide_sim_stream_create(self._sim, ctypes.byref(out))
        _lib.check(status, "tide_sim_stream_create")
        return out.value

    def malloc(self, size, stream=0):
        size, stream = _lib.size_arg(size, "malloc: size"), _lib.stream_arg(stream, "malloc: stream")
        out = ctypes.c_void_p()
        L = _lib.lib()
        with self._inside("malloc"):
            status = L.tide_malloc(self._t, size, stream, ctypes.byref(out))
        _lib.check_memory(status, size, "tide_malloc of %d bytes" % size, "simulated device")
        return out.value

    def free(self, ptr):
        ptr = _lib.pointer_arg(ptr, "free: pointer")
        with self._inside("free"):
            status = _lib.lib().tide_free(self._t, ptr)
        _lib.check(status, "tide_free")

    def record_stream(self, ptr, stream):
        ptr = _lib.pointer_arg(ptr, "record_stream: pointer")
        stream = _lib.stream_arg(stream, "record_stream: stream")
        with self._inside("record_stream"):
            status = _lib.lib().tide_record_stream(self._t, ptr, stream)
        _lib.check(status, "tide_record_stream")

    def stats(self):
        """tidepool's statistics, under PyTorch's key names ("allocated_bytes.all.current", ...)."""
        with self._inside("stats"):
            return _lib.stats_json(self._t)

    def reset_accumulated_stats(self):
        """Starts what stats() accumulates again from 0: each statistic's ".allocated" and ".freed" (what it
        gained and lost) and the counts of events (num_device_alloc, ...), as PyTorch's
        reset_accumulated_memory_stats. Current values and peaks stay."""
        with self._inside("reset_accumulated_stats"):
            status = _lib.lib().tide_reset_accumulated_stats(self._t)
        _lib.check(status, "tide_reset_accumulated_stats")

    def empty_cache(self):
        """Synchronizes the device, drains pending frees and gives every free segment back."""
        with self._inside("empty_cache"):
            status = _lib.lib().tide_empty_cache(self._t, None)
        _lib.check(status, "tide_empty_cache")

    # ---- private pools, sleep and wake (tidepool.h, "Sleep and wake") ------------------------------------

    def create_pool(self, sleepable=False):
        """A new private pool's id; sleepable=True lets sleep() give its memory back while its blocks keep
        their addresses."""
        L = _lib.lib()
        out = ctypes.c_uint64()
        with self._inside("create_pool"):
            _lib.check(L.tide_pool_create(self._t, ctypes.byref(out)), "tide_pool_create")
            if sleepable:
                _lib.check(L.tide_pool_make_sleepable(self._t, out.value), "tide_pool_make_sleepable")
        return out.value

    def release_pool(self, pool):
        with self._inside("release_pool"):
            _lib.check(_lib.lib().tide_pool_release(self._t, _lib.whole_number(pool, "release_pool: pool", 1,
                                                                               _lib.UINT64_MAX, "2^64 - 1")),
                       "tide_pool_release")

    def malloc_pool(self, size, pool, stream=0):
        """malloc() from a private pool's own memory."""
        size, stream = _lib.size_arg(size, "malloc_pool: size"), _lib.stream_arg(stream, "malloc_pool: stream")
        pool = _lib.whole_number(pool, "malloc_pool: pool", 0, _lib.UINT64_MAX, "2^64 - 1")
        out = ctypes.c_void_p()
        L = _lib.lib()
        with self._inside("malloc_pool"):
            status = L.tide_malloc_pool(self._t, size, stream, pool, ctypes.byref(out))
        _lib.check_memory(status, size, "tide_malloc_pool of %d bytes" % size, "simulated device")
        return out.value

    def pool_memory(self, pool):
        """(reserved, allocated) bytes of a pool; reserved is 0 while it sleeps."""
        reserved, allocated = ctypes.c_size_t(), ctypes.c_size_t()
        with self._inside("pool_memory"):
            _lib.check(_lib.lib().tide_pool_memory(self._t, pool, ctypes.byref(reserved), ctypes.byref(allocated)),
                       "tide_pool_memory")
        return reserved.value, allocated.value

    def sleep(self, offload=(), discard=()):
        """Puts sleepable pools to sleep: their pages go back to the device and their blocks keep their
        addresses; the contents of the pools in offload are kept in host memory, those in discard lost."""
        with self._inside("sleep"):
            for pools, keep in ((offload, True), (discard, False)):
                for pool in pools:
                    _lib.pool_sleep(self._t, pool, keep)

    def wake_up(self, pools):
        """Maps the pools' pages again at the same addresses and copies offloaded contents back."""
        with self._inside("wake_up"):
            for pool in pools:
                _lib.pool_wake(self._t, pool, "simulated device")

    def sleeping(self, pool):
        with self._inside("sleeping"):
            return _lib.pool_sleeping(self._t, pool)

    def counters(self):
        """What the simulated device holds: held_bytes (mapped or reserved), mapped_pages, va_ranges,
        host_bytes (host memory of offloaded contents), and calls per backend function
        ({"map": n, ...})."""
        raw = (ctypes.c_uint64 * 64)()  # room for the struct as it grows
        with self._inside("counters"):
            _lib.lib().tide_sim_get_counters(self._sim, raw)
        ops = ("reserve", "release", "fence_create", "fence_record", "fence_query", "synchronize", "mem_info",
               "fill", "verify", "va_reserve", "va_release", "map", "unmap", "host_alloc", "copy_to_host",
               "copy_to_device", "ipc_open", "ipc_close")
        n = len(ops)
        tail = ("held_bytes", "held_segments", "mapped_pages", "va_ranges", "live_fences", "host_bytes",
                "host_buffers", "copied_bytes", "ipc_openings")
        out = {"calls": dict(zip(ops, raw[:n])), "failures": dict(zip(ops, raw[n:2 * n]))}
        out.update(zip(tail, raw[2 * n:2 * n + len(tail)]))
        return out

    def check(self):
        """tidepool's own consistency check of its bookkeeping."""
        with self._inside("check"):
            status = _lib.lib().tide_check(self._t)
        _lib.check(status, "tide_check")

    def close(self):
        """Destroys the allocator and the device, once the calls other threads are inside have returned.
        A second close(), or one racing this, returns when the device is closed."""
        with self._cond:
            if self._state != "open":
                while self._state != "closed":
                    self._cond.wait()
                return
            self._state = "closing"
            while self._calls:
                self._cond.wait()
            t, sim = self._t, self._sim
        try:
            L = _lib.lib()
            status = L.tide_destroy(t)
            L.tide_sim_destroy(sim)
        finally:
            with self._cond:
                self._t = self._sim = None
                self._state = "closed"
                self._cond.notify_all()
        _lib.check(status, "tide_destroy")

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

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

    def _enter(self, what):
        """Counts a call in; refused once close() has begun, so the allocator is never destroyed under it."""
        with self._cond:
            if self._state != "open":
                raise _lib.TidepoolError("%s: this SimulatedDevice is %s" % (what, self._state))
            self._calls += 1

    def _leave(self):
        with self._cond:
            self._calls -= 1
            if not self._calls:
                self._cond.notify_all()

    def new_stream(self):
        """A new stream of the device (stream 0 always exists)."""
        out = ctypes.c_void_p()
        self._enter("new_stream")
        try:
            status = _lib.lib().tide_sim_stream_create(self._sim, ctypes.byref(out))
        finally:
            self._leave()
        _lib.check(status, "tide_sim_stream_create")
        return out.value

    def malloc(self, size, stream=0):
        size, stream = _lib.size_arg(size, "malloc: size"), _lib.stream_arg(stream, "malloc: stream")
        out = ctypes.c_void_p()
        L = _lib.lib()
        self._enter("malloc")
        try:
            status = L.tide_malloc(self._t, size, stream, ctypes.byref(out))
        finally:
            self._leave()
        # the message is this thread's own (tide_last_error is per thread), so reading it after is safe
        if status == _lib.TIDE_ENOMEM:
            raise _lib.OutOfMemory(size, L.tide_last_error().decode(errors="replace"), "simulated device")
        _lib.check(status, "tide_malloc of %d bytes" % size)
        return out.value

    def free(self, ptr):
        ptr = _lib.pointer_arg(ptr, "free: pointer")
        self._enter("free")
        try:
            status = _lib.lib().tide_free(self._t, ptr)
        finally:
            self._leave()
        _lib.check(status, "tide_free")

    def record_stream(self, ptr, stream):
        ptr = _lib.pointer_arg(ptr, "record_stream: pointer")
        stream = _lib.stream_arg(stream, "record_stream: stream")
        self._enter("record_stream")
        try:
            status = _lib.lib().tide_record_stream(self._t, ptr, stream)
        finally:
            self._leave()
        _lib.check(status, "tide_record_stream")

    def stats(self):
        """tidepool's statistics, under PyTorch's key names ("allocated_bytes.all.current", ...)."""
        self._enter("stats")
        try:
            return _lib.stats_json(self._t)
        finally:
            self._leave()

    def empty_cache(self):
        """Synchronizes the device, drains pending frees and gives every free segment back."""
        self._enter("empty_cache")
        try:
            status = _lib.lib().tide_empty_cache(self._t, None)
        finally:
            self._leave()
        _lib.check(status, "tide_empty_cache")

    def check(self):
        """tidepool's own consistency check of its bookkeeping."""
        self._enter("check")
        try:
            status = _lib.lib().tide_check(self._t)
        finally:
            self._leave()
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

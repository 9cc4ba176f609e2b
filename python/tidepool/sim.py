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

from . import _lib


class SimOptions(ctypes.Structure):
    _fields_ = [("struct_size", ctypes.c_uint32), ("total_bytes", ctypes.c_uint64),
                ("queue_depth", ctypes.c_uint32), ("same_addresses", ctypes.c_uint32)]


class SimulatedDevice:
    """One simulated device and one tidepool allocator on it. Close it (or use it as a context manager):
    closing destroys the allocator, which reports memory still allocated as an error."""

    def __init__(self, total_bytes=0, config=None):
        L = _lib.lib()
        self._sim = ctypes.c_void_p()
        self._t = ctypes.c_void_p()
        opts = SimOptions(ctypes.sizeof(SimOptions), int(total_bytes), 0, 0)
        _lib.check(L.tide_sim_create(ctypes.byref(opts), ctypes.byref(self._sim)), "tide_sim_create")
        self._backend = L.tide_sim_backend(self._sim)
        status = L.tide_create(ctypes.byref(self._backend), config.encode() if config else None,
                               ctypes.byref(self._t))
        if status != _lib.TIDE_OK:
            L.tide_sim_destroy(self._sim)
            self._sim = None
            _lib.check(status, "tide_create")

    def _allocator(self):
        if not self._t:
            raise _lib.TidepoolError("this SimulatedDevice is closed")
        return self._t

    def new_stream(self):
        """A new stream of the device (stream 0 always exists)."""
        out = ctypes.c_void_p()
        _lib.check(_lib.lib().tide_sim_stream_create(self._sim, ctypes.byref(out)), "tide_sim_stream_create")
        return out.value

    def malloc(self, size, stream=0):
        out = ctypes.c_void_p()
        L = _lib.lib()
        status = L.tide_malloc(self._allocator(), int(size), ctypes.c_void_p(stream or None), ctypes.byref(out))
        if status == _lib.TIDE_ENOMEM:
            raise _lib.OutOfMemory(size, L.tide_last_error().decode(errors="replace"))
        _lib.check(status, "tide_malloc of %d bytes" % size)
        return out.value

    def free(self, ptr):
        _lib.check(_lib.lib().tide_free(self._allocator(), ctypes.c_void_p(ptr)), "tide_free")

    def record_stream(self, ptr, stream):
        _lib.check(_lib.lib().tide_record_stream(self._allocator(), ctypes.c_void_p(ptr),
                                                 ctypes.c_void_p(stream or None)), "tide_record_stream")

    def stats(self):
        """tidepool's statistics, under PyTorch's key names ("allocated_bytes.all.current", ...)."""
        return _lib.stats_json(self._allocator())

    def empty_cache(self):
        """Synchronizes the device, drains pending frees and gives every free segment back."""
        _lib.check(_lib.lib().tide_empty_cache(self._allocator(), None), "tide_empty_cache")

    def check(self):
        """tidepool's own consistency check of its bookkeeping."""
        _lib.check(_lib.lib().tide_check(self._allocator()), "tide_check")

    def close(self):
        if self._t:
            L = _lib.lib()
            status = L.tide_destroy(self._t)
            self._t = None
            L.tide_sim_destroy(self._sim)
            self._sim = None
            _lib.check(status, "tide_destroy")

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

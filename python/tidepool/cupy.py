"""tidepool as CuPy's allocator.

    import cupy
    import tidepool.cupy
    tidepool.cupy.enable()           # CuPy's allocations now go through tidepool
    ...
    tidepool.cupy.empty_cache()      # synchronize, drain, give every free segment back

Streams: CuPy's CFunctionAllocator passes tidepool no stream, so every block counts as allocated on the
legacy default stream, and a freed block is reused at once by the next allocation. That is safe when
all work runs on the default stream (CuPy's default) or when the program synchronizes before freeing
memory that another stream still uses; with CuPy streams in flight at a free, prefer CuPy's own stream-
aware MemoryPool.
"""

import ctypes
import threading

import cupy

from . import _lib

_lock = threading.Lock()
_devices = None


def _raise_out_of_memory(size):
    error = cupy.cuda.memory.OutOfMemoryError(size, -1)
    error.args = ("CUDA out of memory (tidepool). " + _lib.lib().tide_last_error().decode(errors="replace"),)
    raise error


def enable(config=None):
    """Routes CuPy's allocations through tidepool (one allocator per device, created on first use)."""
    global _devices
    with _lock:
        if _devices is not None:
            raise RuntimeError("tidepool.cupy.enable() was already called in this process")
        L = _lib.lib()
        handle = ctypes.c_void_p()
        _lib.check(L.tide_devices_create(config.encode() if config else None, ctypes.byref(handle)),
                   "tide_devices_create")
        malloc_fn = ctypes.cast(L.tide_cupy_malloc, ctypes.c_void_p).value
        free_fn = ctypes.cast(L.tide_cupy_free, ctypes.c_void_p).value
        c_allocator = cupy.cuda.memory.CFunctionAllocator(handle.value, malloc_fn, free_fn, handle)

        def malloc(size):
            pointer = c_allocator.malloc(size)
            if size and pointer.ptr == 0:
                _raise_out_of_memory(size)
            return pointer

        cupy.cuda.set_allocator(malloc)
        _devices = handle


def _handle():
    if _devices is None:
        raise RuntimeError("tidepool is not enabled for CuPy: call tidepool.cupy.enable() first")
    return _devices


def empty_cache():
    L = _lib.lib()
    _lib.check(L.tide_devices_empty_cache(_handle()), "tide_devices_empty_cache")


def memory_stats(device=None):
    """tidepool's statistics for one device, under PyTorch's key names."""
    L = _lib.lib()
    index = cupy.cuda.Device().id if device is None else int(device)
    allocator = ctypes.c_void_p()
    _lib.check(L.tide_devices_get(_handle(), index, ctypes.byref(allocator)), "tide_devices_get")
    return _lib.stats_json(allocator)

"""tidepool as CuPy's allocator, stream-aware.

    import cupy
    import tidepool.cupy
    tidepool.cupy.enable()           # CuPy's allocations now go through tidepool
    ...
    tidepool.cupy.empty_cache()      # synchronize, drain, give every free segment back

Sleep and wake (as tidepool.torch's): arrays made inside `with tidepool.cupy.pool("weights"):` come from a
named sleepable pool; `tidepool.cupy.sleep(offload=("weights",), discard=("kv_cache",))` gives those
pools' device memory back while the arrays keep their addresses, and `tidepool.cupy.wake_up()` maps it
again, the offloaded contents copied back. Allocating in a sleeping pool raises; freeing is allowed.

Streams: a block is allocated on CuPy's current stream at the time (cupy.cuda.get_current_stream()),
and tidepool reuses it in that stream's order. When it is freed while another stream is current, a
fence is recorded on that stream too, so the block is not handed out again before the work queued
there is done. Work on a third stream, neither current at allocation nor at free, is the program's to
order (record_stream, as in PyTorch, or a synchronize).
"""

import contextlib
import threading

import cupy

from . import _lib

_lock = threading.Lock()
_devices = None
_named = _lib.NamedPools("tidepool.cupy")
_routing = threading.local()  # .pool: (device, pool id) while inside pool(name)


def _stream_of(device_id):
    return cupy.cuda.get_current_stream(device_id).ptr


def enable(config=None):
    """Routes CuPy's allocations through tidepool (one allocator per device, shared with tidepool's
    other Python adaptors)."""
    global _devices
    with _lock:
        if _devices is not None:
            raise RuntimeError("tidepool.cupy.enable() was already called in this process")
        devices = _lib.shared_devices(config)  # checks config

        def malloc(size, device_id):
            try:
                routed = getattr(_routing, "pool", None)
                if routed is not None and routed[0] == device_id:
                    return _lib.pool_malloc(_lib.device_allocator(devices, device_id), size,
                                            _stream_of(device_id), routed[1])
                return _lib.devices_malloc(devices, device_id, size, _stream_of(device_id))
            except _lib.OutOfMemory as e:
                error = cupy.cuda.memory.OutOfMemoryError(size, -1)
                error.args = (str(e),)
                raise error from None

        def free(ptr, device_id):
            _lib.devices_free_on(devices, ptr, _stream_of(device_id))

        allocator = cupy.cuda.memory.PythonFunctionAllocator(malloc, free)
        cupy.cuda.set_allocator(allocator.malloc)
        _devices = devices


def _handle():
    if _devices is None:
        raise RuntimeError("tidepool is not enabled for CuPy: call tidepool.cupy.enable() first")
    return _devices


def record_stream(array, stream):
    """Declares that array's memory is used on stream (a cupy.cuda.Stream): its free waits for the work
    queued there by then, as torch.Tensor.record_stream."""
    ptr = _lib.pointer_arg(array.data.mem.ptr if hasattr(array, "data") else array, "record_stream: array")
    stream = _lib.stream_arg(stream.ptr, "record_stream: stream")
    _lib.check(_lib.lib().tide_devices_record_stream(_handle(), ptr, stream), "tide_record_stream")


def empty_cache():
    L = _lib.lib()
    _lib.check(L.tide_devices_empty_cache(_handle()), "tide_devices_empty_cache")


def memory_stats(device=None):
    """tidepool's statistics for one device, under PyTorch's key names."""
    index = cupy.cuda.Device().id if device is None else device  # device_allocator checks it
    return _lib.stats_json(_lib.device_allocator(_handle(), index))


# ---- sleep and wake --------------------------------------------------------------------------------------

def _current_allocator():
    device = cupy.cuda.Device().id
    return device, _lib.device_allocator(_handle(), device)


@contextlib.contextmanager
def pool(name):
    """Arrays made on the current device inside this block (this thread) come from the named sleepable
    pool, made on first use."""
    device, allocator = _current_allocator()
    routed = (device, _named.get(allocator, name))
    before = getattr(_routing, "pool", None)
    _routing.pool = routed
    try:
        yield
    finally:
        _routing.pool = before


def sleep(offload=(), discard=()):
    """Gives the named pools' device memory back (current device); their arrays keep their addresses.
    Waits for the device first. offload: contents kept in pinned host memory; discard: contents lost."""
    _named.sleep(_current_allocator()[1], offload, discard)


def wake_up(tags=None):
    """Maps the sleeping pools' memory again at the same addresses (every sleeping named pool of the
    current device, or those in tags) and copies offloaded contents back. Raises
    cupy.cuda.memory.OutOfMemoryError when the device has too little room (the pool stays asleep)."""
    try:
        _named.wake(_current_allocator()[1], tags)
    except _lib.OutOfMemory as e:
        error = cupy.cuda.memory.OutOfMemoryError(0, -1)
        error.args = (str(e),)
        raise error from None


def is_sleeping(name):
    return _named.sleeping(_current_allocator()[1], name)

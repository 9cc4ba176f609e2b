"""tidepool as a cuda.core MemoryResource (NVIDIA's cuda-python).

    from cuda.core import Device
    import tidepool.cuda_core
    dev = Device(); dev.set_current()
    mr = tidepool.cuda_core.TidepoolMemoryResource(dev.device_id)
    buf = mr.allocate(1 << 20, stream=dev.default_stream)
    dev.memory_resource = mr                  # dev.allocate(...) now comes from tidepool too

allocate(size, stream=s) takes a block ordered on s; deallocate(ptr, size, stream=t) frees it after the
work queued on t (and on s) by then: a fence on t when t is not s, as tidepool does for PyTorch's
record_stream. Buffers close through deallocate, on the stream they were given.

Sleep and wake: TidepoolMemoryResource(device_id, pool="weights") allocates from a named sleepable pool;
its sleep(offload=True) gives the pool's device memory back while the buffers keep their addresses
(offload: contents kept in pinned host memory; offload=False: lost), and wake_up() maps it again.
"""

from cuda.core import Buffer, MemoryResource

from . import _lib

_named = _lib.NamedPools("tidepool.cuda_core")


def _stream_handle(stream):
    if stream is None:
        return 0  # the legacy default stream
    handle = getattr(stream, "handle", None)
    if handle is None:
        raise TypeError("tidepool: a cuda.core Stream is needed here, got %r" % (stream,))
    return _lib.handle_value(handle, "stream handle")


class TidepoolMemoryResource(MemoryResource):
    """Device memory of one device from tidepool (the allocators tidepool's Python adaptors share)."""

    def __init__(self, device_id=0, config=None, pool=None):
        self._device_id = _lib.device_arg(device_id, "TidepoolMemoryResource: device_id")
        self._devices = _lib.shared_devices(config)
        self._pool_name = pool
        self._pool = None if pool is None else _named.get(self._allocator(), pool)

    def _allocator(self):
        return _lib.device_allocator(self._devices, self._device_id)

    def allocate(self, size, stream=None):
        if self._pool is None:
            ptr = _lib.devices_malloc(self._devices, self._device_id, size, _stream_handle(stream))
        else:
            ptr = _lib.pool_malloc(self._allocator(), size, _stream_handle(stream), self._pool)
        if stream is None:
            return Buffer.from_handle(ptr, size, mr=self)
        return Buffer.from_handle(ptr, size, mr=self, stream=stream)

    def deallocate(self, ptr, size, stream=None):
        _lib.devices_free_on(self._devices, ptr, _stream_handle(stream))  # checks ptr

    @property
    def is_device_accessible(self):
        return True

    @property
    def is_host_accessible(self):
        return False

    @property
    def device_id(self):
        return self._device_id

    def memory_stats(self):
        """tidepool's statistics for this device, under PyTorch's key names."""
        return _lib.stats_json(_lib.device_allocator(self._devices, self._device_id))

    def empty_cache(self):
        """Synchronizes the device, drains pending frees, gives every free segment back."""
        _lib.check(_lib.lib().tide_empty_cache(_lib.device_allocator(self._devices, self._device_id), None),
                   "tide_empty_cache")

    # -- sleep and wake (a resource made with pool=NAME) --
    def _named_only(self, verb):
        if self._pool is None:
            raise RuntimeError("TidepoolMemoryResource.%s: this resource has no pool; make it with "
                               "pool=NAME to put its memory to sleep" % verb)

    def sleep(self, offload=True):
        """Gives the pool's device memory back; its buffers keep their addresses. Waits for the device."""
        self._named_only("sleep")
        names = (self._pool_name,)
        _named.sleep(self._allocator(), names if offload else (), () if offload else names)

    def wake_up(self):
        """Maps the pool's memory again at the same addresses; offloaded contents come back."""
        self._named_only("wake_up")
        _named.wake(self._allocator(), (self._pool_name,))

    @property
    def is_sleeping(self):
        self._named_only("is_sleeping")
        return _named.sleeping(self._allocator(), self._pool_name)

"""tidepool as numba-cuda's memory manager (an External Memory Management plugin).

    NUMBA_CUDA_MEMORY_MANAGER=tidepool.numba python script.py
or, before numba's first CUDA call:
    from numba import cuda
    import tidepool.numba
    cuda.set_memory_manager(tidepool.numba.TidepoolMemoryManager)

Device memory comes from tidepool (shared with tidepool's other Python adaptors); pinned and mapped host
memory stay numba's. numba allocates with no stream, so blocks are tidepool's legacy-default-stream
blocks, and numba's frees go through its deferred-cleanup queue as they do with numba's own manager
(none while `cuda.defer_cleanup()` is active). A block is reused in the default stream's order: an
array used on another stream should be declared with tidepool.numba.record_stream(array, stream)
before it is released, as torch's record_stream. IPC handles (array.get_ipc_handle()) work with
tidepool's default segments (not with expandable_segments, whose memory the driver cannot share so).
"""

import ctypes
import weakref

from numba import cuda
from numba.cuda.cudadrv import driver as _driver

from . import _lib

_CUDA_ERROR_OUT_OF_MEMORY = 2


def _devices():
    return _lib.shared_devices()


class TidepoolMemoryManager(_driver.GetIpcHandleMixin, _driver.HostOnlyCUDAMemoryManager):
    """numba's EMM plugin interface, version 1, over tidepool."""

    def initialize(self):
        # numba's deferred frees flush when their bytes pass a share of the device (CUDA_DEALLOCS_RATIO)
        if self.deallocations.memory_capacity == _driver._SizeNotSet:
            self.deallocations.memory_capacity = self.get_memory_info().total

    def memalloc(self, size):
        device = self.context.device.id
        try:
            ptr = _lib.devices_malloc(_devices(), device, size, 0)
        except _lib.OutOfMemory:
            self.deallocations.clear()  # as numba's manager: the deferred frees first, then once more
            try:
                ptr = _lib.devices_malloc(_devices(), device, size, 0)
            except _lib.OutOfMemory as e:
                raise _driver.CudaAPIError(_CUDA_ERROR_OUT_OF_MEMORY, str(e)) from None
        deallocations = self.deallocations

        def finalizer():
            deallocations.add_item(_free, ptr, size)

        return _driver.MemoryPointer(weakref.proxy(self.context), ctypes.c_void_p(ptr), size, finalizer=finalizer)

    def get_memory_info(self):
        """Free: what the device has free plus what tidepool holds cached for reuse; total: the
        device's."""
        free, total = _driver.driver.cuMemGetInfo()
        stats = _lib.stats_json(_lib.device_allocator(_devices(), self.context.device.id))
        cached = stats["reserved_bytes.all.current"] - stats["active_bytes.all.current"]
        return _driver.MemoryInfo(free=int(free) + max(cached, 0), total=int(total))

    def reset(self):
        super().reset()  # flushes numba's pending frees (tidepool's among them)
        _lib.check(_lib.lib().tide_empty_cache(_lib.device_allocator(_devices(), self.context.device.id), None),
                   "tide_empty_cache")

    @property
    def interface_version(self):
        return 1


def _free(ptr):
    _lib.devices_free_on(_devices(), ptr, 0)


def _pointer_of(array):
    """The pointer tidepool handed out for array's memory (a view's owner's), as a ctypes.c_void_p."""
    if hasattr(array, "gpu_data"):
        return _lib.pointer_arg(array.gpu_data.owner.handle, "record_stream: array's memory")
    return _lib.pointer_arg(array, "record_stream: array")


def record_stream(array, stream):
    """Declares that the memory of array (a numba device array, or a pointer tidepool returned) is used
    on stream (a numba stream): its release waits for the work queued there by then."""
    ptr, stream = _pointer_of(array), _lib.stream_arg(stream.handle, "record_stream: stream")
    _lib.check(_lib.lib().tide_devices_record_stream(_devices(), ptr, stream), "tide_record_stream")


def memory_stats(device=0):
    """tidepool's statistics for one device, under PyTorch's key names."""
    return _lib.stats_json(_lib.device_allocator(_devices(), device))


def empty_cache():
    """Flushes numba's deferred frees on the current context, then gives tidepool's free segments back."""
    cuda.current_context().memory_manager.deallocations.clear()
    _lib.check(_lib.lib().tide_devices_empty_cache(_devices()), "tide_devices_empty_cache")


# NUMBA_CUDA_MEMORY_MANAGER=tidepool.numba looks for this name.
_numba_memory_manager = TidepoolMemoryManager

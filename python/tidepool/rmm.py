"""tidepool under RMM (RAPIDS Memory Manager), where RMM is installed.

    import rmm
    import tidepool.rmm
    rmm.mr.set_current_device_resource(tidepool.rmm.resource())

resource() is an rmm.mr.CallbackMemoryResource whose callbacks go to tidepool: an allocation is
ordered on the stream RMM gives, and a deallocation on another stream is fenced there, as for
PyTorch's record_stream. Statistics and empty_cache: tidepool.rmm.memory_stats(), .empty_cache().
"""

import rmm

from . import _lib


def _stream_handle(stream):
    """A CUstream as an int from what RMM passes (an rmm Stream, or nothing for the default)."""
    if stream is None:
        return 0
    for attribute in ("value", "ptr", "handle"):
        value = getattr(stream, attribute, None)
        if value is not None:
            return _lib.handle_value(value() if callable(value) else value, "stream handle")
    return _lib.handle_value(stream, "stream")


def resource(device=0, config=None):
    """An RMM memory resource over tidepool, for one device."""
    index = _lib.device_arg(device, "tidepool.rmm.resource: device")
    devices = _lib.shared_devices(config)

    def allocate(size, stream=None):
        return _lib.devices_malloc(devices, index, size, _stream_handle(stream))

    def deallocate(ptr, size, stream=None):
        _lib.devices_free_on(devices, ptr, _stream_handle(stream))

    return rmm.mr.CallbackMemoryResource(allocate, deallocate)


def memory_stats(device=0):
    """tidepool's statistics for one device, under PyTorch's key names."""
    return _lib.stats_json(_lib.device_allocator(_lib.shared_devices(), device))


def empty_cache():
    _lib.check(_lib.lib().tide_devices_empty_cache(_lib.shared_devices()), "tide_devices_empty_cache")

"""python -m tidepool: the version, the library in use, and the devices tidepool sees."""

import ctypes
import sys

from . import __version__, _lib


def main():
    print("tidepool %s" % __version__)
    try:
        path = _lib.library_path()
        L = _lib.lib()
    except (OSError, _lib.TidepoolError) as e:
        print("library: not usable: %s" % e)
        return 1
    print("library: %s" % path)
    count = ctypes.c_int(0)
    status = L.tide_cuda_device_count(ctypes.byref(count))
    if status == _lib.TIDE_OK and count.value:
        print("CUDA devices: %d" % count.value)
    else:
        why = L.tide_last_error().decode(errors="replace") if status != _lib.TIDE_OK else "none found"
        print("CUDA devices: 0 (%s)" % why)
    from .sim import SimulatedDevice
    with SimulatedDevice(1 << 30) as dev:
        dev.free(dev.malloc(1 << 20))
    print("simulated device: available (tidepool.sim.SimulatedDevice)")
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""python -m tidepool: the version, the library in use, the devices tidepool sees, and what the
PyTorch integration would use (torch, its version against the supported range, the compiler and CUDA
toolkit its C++ hooks are built with) and what it lacks."""

import ctypes
import importlib.util
import os
import shutil
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
    report_torch()
    return 0


def report_torch():
    """What tidepool.torch.enable() would use, and what is missing for it. Reads only what is
    installed: nothing is compiled."""
    if importlib.util.find_spec("torch") is None:
        print("PyTorch: not installed (tidepool.torch needs it; the C library and the other "
              "integrations do not)")
        return
    try:
        import torch
    except Exception as e:  # a broken install says why, rather than a traceback
        print("PyTorch: installed but does not import: %s" % e)
        return
    from .torch import OLDEST_TORCH, _torch_version
    ok = _torch_version() >= OLDEST_TORCH
    print("PyTorch: %s (%s; tidepool.torch supports %d.%d and later)"
          % (torch.__version__, "supported" if ok else "too old", OLDEST_TORCH[0], OLDEST_TORCH[1]))
    cuda = getattr(torch.version, "cuda", None)
    print("PyTorch's CUDA: %s" % (cuda or "none (a CPU-only build: tidepool.torch needs a CUDA build)"))
    try:
        from torch.utils.cpp_extension import CUDA_HOME
    except Exception:
        CUDA_HOME = None
    print("CUDA toolkit for the C++ hooks: %s" % (CUDA_HOME or "not found (set CUDA_HOME)"))
    compiler = os.environ.get("CXX") or shutil.which("c++") or shutil.which("g++")
    print("C++ compiler for the C++ hooks: %s" % (compiler or "not found (install g++)"))
    if importlib.util.find_spec("ninja") is None and not shutil.which("ninja"):
        print("ninja: not found (PyTorch's extension builder needs it: pip install ninja)")
    for var in ("PYTORCH_ALLOC_CONF", "PYTORCH_CUDA_ALLOC_CONF", "TIDEPOOL_CONF"):
        if os.environ.get(var):
            print("%s=%s (tidepool.torch.enable() reads it)" % (var, os.environ[var]))


if __name__ == "__main__":
    sys.exit(main())

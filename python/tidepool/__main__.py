"""python -m tidepool: the version, the library in use, the devices tidepool sees, and what the
PyTorch integration would use (torch, its version against the supported range, whether the package
carries C++ hooks built for it, else the compiler and CUDA headers they are compiled with) and what it
lacks."""

import ctypes
import importlib.util
import os
import shutil
import sys

from . import __version__, _lib, _torch_hooks


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
    """What tidepool.torch.enable() would use, and what is missing for it: the C++ hooks the package
    carries and whether they fit this torch, and, where they do not, what compiling them needs. Reads
    only what is installed: nothing is compiled."""
    package = os.path.dirname(os.path.abspath(__file__))
    manifest = _torch_hooks.read_manifest(package)
    if importlib.util.find_spec("torch") is None:
        print("PyTorch: not installed (tidepool.torch needs it; the C library and the other "
              "integrations do not)")
        print("C++ hooks for PyTorch, prebuilt: %s" % _torch_hooks.choose_prebuilt(manifest, None, package)[1])
        return
    try:
        import torch
    except Exception as e:  # a broken install says why, rather than a traceback
        print("PyTorch: installed but does not import: %s" % e)
        return
    oldest, newest = _torch_hooks.OLDEST_TORCH, _torch_hooks.NEWEST_TORCH
    release = _torch_hooks.torch_release(str(torch.__version__))
    if release is None or release < oldest:
        verdict = "too old: tidepool.torch needs %d.%d or later" % oldest
    elif release > newest:
        verdict = ("newer than %d.%d, the newest release the C++ hooks are written for: they may not "
                   "compile" % newest)
    else:
        verdict = "supported: the C++ hooks are written for %d.%d to %d.%d" % (oldest + newest)
    print("PyTorch: %s (%s)" % (torch.__version__, verdict))
    cuda = getattr(torch.version, "cuda", None)
    print("PyTorch's CUDA: %s" % (cuda or "none (a CPU-only build: tidepool.torch needs a CUDA build)"))
    prebuilt, why = _torch_hooks.choose_prebuilt(manifest, _torch_hooks.running_facts(torch), package)
    print("C++ hooks for PyTorch, prebuilt: %s" % why)
    if prebuilt:
        return
    # What compiling them on first use needs.
    try:
        from torch.utils.cpp_extension import CUDA_HOME
    except Exception:
        CUDA_HOME = None
    try:
        headers = ", ".join(_torch_hooks.cuda_include_dirs(CUDA_HOME))
    except _torch_hooks.HooksUnavailable as e:
        headers = "not found: %s" % e
    print("CUDA toolkit for compiling the C++ hooks: %s" % (CUDA_HOME or "not found (set CUDA_HOME)"))
    print("CUDA headers for compiling the C++ hooks: %s" % headers)
    compiler = os.environ.get("CXX") or shutil.which("c++") or shutil.which("g++")
    print("C++ compiler for the C++ hooks: %s" % (compiler or "not found (install g++)"))
    if importlib.util.find_spec("ninja") is None and not shutil.which("ninja"):
        print("ninja: not found (PyTorch's extension builder needs it: pip install ninja)")
    for var in ("PYTORCH_ALLOC_CONF", "PYTORCH_CUDA_ALLOC_CONF", "TIDEPOOL_CONF"):
        if os.environ.get(var):
            print("%s=%s (tidepool.torch.enable() reads it)" % (var, os.environ[var]))


if __name__ == "__main__":
    sys.exit(main())

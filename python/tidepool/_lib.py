"""Finds and loads libtidepool, building it from the source tree when needed (standard library only)."""

import ctypes
import os
import subprocess
import sys
import threading

_HERE = os.path.dirname(os.path.abspath(__file__))
_lock = threading.Lock()
_lib = None

TIDE_OK, TIDE_EINVAL, TIDE_ENOMEM = 0, 1, 2


class TidepoolError(RuntimeError):
    """A tidepool call failed; the message is tidepool's own."""


def source_root():
    """The repository this package sits in (python/tidepool inside it), or None once installed."""
    root = os.path.dirname(os.path.dirname(_HERE))
    return root if os.path.exists(os.path.join(root, "CMakeLists.txt")) and \
        os.path.exists(os.path.join(root, "include", "tidepool.h")) else None


def include_dir():
    """Where tidepool.h is: bundled with an installed package, or the source tree's include/."""
    bundled = os.path.join(_HERE, "include")
    if os.path.exists(os.path.join(bundled, "tidepool.h")):
        return bundled
    root = source_root()
    if root:
        return os.path.join(root, "include")
    raise TidepoolError("tidepool.h not found: install the package or run it from the source tree")


def _build_in_source_tree(root):
    build = os.path.join(root, "build")
    sys.stderr.write("tidepool: building libtidepool in %s (once)\n" % build)
    subprocess.run(["cmake", "-S", root, "-B", build, "-DCMAKE_BUILD_TYPE=Release"], check=True,
                   stdout=subprocess.DEVNULL)
    subprocess.run(["cmake", "--build", build, "--target", "tidepool_shared", "-j", str(os.cpu_count() or 2)],
                   check=True, stdout=subprocess.DEVNULL)
    return os.path.join(build, "libtidepool.so")


def library_path():
    """The libtidepool.so to use: $TIDEPOOL_LIBRARY, the one installed with the package, or the source
    tree's build/ (built now if missing)."""
    env = os.environ.get("TIDEPOOL_LIBRARY")
    if env:
        if not os.path.exists(env):
            raise TidepoolError("TIDEPOOL_LIBRARY=%s: no such file" % env)
        return env
    bundled = os.path.join(_HERE, "libtidepool.so")
    if os.path.exists(bundled):
        return bundled
    root = source_root()
    if root is None:
        raise TidepoolError("libtidepool.so not found: set TIDEPOOL_LIBRARY or reinstall the package")
    built = os.path.join(root, "build", "libtidepool.so")
    if os.path.exists(built):
        return built
    return _build_in_source_tree(root)


def _declare(lib):
    p, i, sz, d = ctypes.c_void_p, ctypes.c_int, ctypes.c_size_t, ctypes.c_double
    lib.tide_last_error.restype = ctypes.c_char_p
    lib.tide_last_error.argtypes = []
    lib.tide_status_name.restype = ctypes.c_char_p
    lib.tide_status_name.argtypes = [i]
    for name, args in {
        "tide_devices_create": [ctypes.c_char_p, ctypes.POINTER(p)],
        "tide_devices_destroy": [p],
        "tide_devices_get": [p, i, ctypes.POINTER(p)],
        "tide_devices_empty_cache": [p],
        "tide_cuda_device_count": [ctypes.POINTER(i)],
        "tide_stats_json": [p, ctypes.c_char_p, sz, ctypes.POINTER(sz)],
        "tide_reset_peak_stats": [p],
        "tide_empty_cache": [p, p],
        "tide_set_limit": [p, sz],
        "tide_set_limit_fraction": [p, d],
        "tide_check": [p],
    }.items():
        f = getattr(lib, name)
        f.restype = i
        f.argtypes = args


def lib():
    """The loaded library (ctypes.CDLL), loaded once."""
    global _lib
    with _lock:
        if _lib is None:
            loaded = ctypes.CDLL(library_path(), mode=ctypes.RTLD_GLOBAL)
            _declare(loaded)
            _lib = loaded
        return _lib


def check(status, what):
    """Raises TidepoolError with tidepool's message unless status is TIDE_OK."""
    if status != TIDE_OK:
        L = lib()
        raise TidepoolError("%s: %s: %s" % (what, L.tide_status_name(status).decode(),
                                             L.tide_last_error().decode(errors="replace")))


def stats_json(allocator):
    """The statistics of one allocator (a tide_allocator pointer) as a dict."""
    import json
    L = lib()
    need = ctypes.c_size_t(0)
    L.tide_stats_json(allocator, None, 0, ctypes.byref(need))
    buf = ctypes.create_string_buffer(need.value + 1)
    check(L.tide_stats_json(allocator, buf, need.value + 1, ctypes.byref(need)), "tide_stats_json")
    return json.loads(buf.value.decode())

"""Finds and loads libtidepool, building it from the source tree when needed (standard library only)."""

import ctypes
import fcntl
import numbers
import operator
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


class ArgumentError(TidepoolError, ValueError):
    """An argument outside what the C library takes, refused before it got there (a ValueError too)."""


# ---- arguments, checked before ctypes sees them --------------------------------------------------------
# ctypes converts a Python int to a C integer modulo 2^bits without a word (2**64 + 4096 reaches
# tide_malloc as 4096, -1 as SIZE_MAX) and passes a string to C, which stops at its first NUL. So every
# number and string a caller gives is checked here, once, and the adaptors pass on only what these
# return.

SIZE_MAX = (1 << (8 * ctypes.sizeof(ctypes.c_size_t))) - 1
UINTPTR_MAX = (1 << (8 * ctypes.sizeof(ctypes.c_void_p))) - 1
UINT64_MAX = (1 << 64) - 1
INT64_MAX = (1 << 63) - 1
INT_MAX = (1 << (8 * ctypes.sizeof(ctypes.c_int) - 1)) - 1


def whole_number(value, what, low, high, high_is="the most it can be"):
    """value as an int in [low, high]. An int, or an object that is one (__index__, as NumPy's integers
    are); a bool, a float (4096.0 too) or anything else is a TypeError, as they are mistakes more often
    than not; out of range is an ArgumentError."""
    if isinstance(value, bool):
        raise TypeError("%s must be a whole number, not a bool (%r)" % (what, value))
    try:
        number = operator.index(value)
    except TypeError:
        raise TypeError("%s must be a whole number (an int), not %s (%r)"
                        % (what, type(value).__name__, value)) from None
    # operator.index gives an exact int on Python 3.10 and later; before, an int subclass could come
    # back, whose comparisons and formatting it may override
    number = int.__index__(number)
    if number < low:
        raise ArgumentError("%s is %d, %s" % (what, number, "negative" if number < 0 <= low
                                                                else "less than %d" % low))
    if number > high:
        raise ArgumentError("%s is %d, more than %d, %s" % (what, number, high, high_is))
    return number


def size_arg(value, what="size", low=0):
    """A byte count for a size_t (0 is left to the library, which says why it refuses it)."""
    return whole_number(value, what, low, SIZE_MAX, "the largest size_t")


def device_arg(value, what="device"):
    """A device index for a C int (the library says which devices exist)."""
    return whole_number(value, what, 0, INT_MAX, "the largest C int")


def handle_value(value, what):
    """A pointer or stream handle as an int in [0, UINTPTR_MAX]: an int (or __index__), a
    ctypes.c_void_p, or a handle object that converts with int() and is no number (cuda-python's
    CUstream and CUdeviceptr). Numbers that are not whole (float, Decimal, Fraction) and bools are
    refused: int() would cut them to some other address."""
    if isinstance(value, ctypes.c_void_p):
        return value.value or 0
    if isinstance(value, bool) or hasattr(value, "__index__") or isinstance(value, numbers.Number) \
            or not hasattr(value, "__int__"):
        return whole_number(value, what, 0, UINTPTR_MAX, "the highest address")
    return whole_number(int(value), what, 0, UINTPTR_MAX, "the highest address")


def pointer_arg(value, what="pointer"):
    """handle_value as a ctypes.c_void_p (0 or None: NULL)."""
    return ctypes.c_void_p(handle_value(0 if value is None else value, what) or None)


def stream_arg(value, what="stream"):
    """A stream handle (0 or None: the legacy default stream) as a ctypes.c_void_p."""
    return ctypes.c_void_p(handle_value(0 if value is None else value, what) or None)


def text_arg(value, what):
    """A str for a C string, or None. A NUL inside it is refused: C would read only the text before it,
    and a configuration cut there is accepted as if the rest had not been written."""
    if value is None:
        return None
    if not isinstance(value, str):
        raise TypeError("%s must be a str, not %s (%r)" % (what, type(value).__name__, value))
    nul = value.find("\0")
    if nul >= 0:
        raise ArgumentError("%s has a NUL character at offset %d; C would read it as %r and drop the rest"
                            % (what, nul, value[:nul]))
    return value


def c_text(value, what):
    """text_arg encoded for ctypes (UTF-8), or None."""
    text = text_arg(value, what)
    return None if text is None else text.encode()


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
    """The source tree's build/libtidepool.so, built first if missing. Processes that start together
    (torchrun's ranks, a test runner's jobs) build it once: each waits on a lock in build/, and finds
    the library built when it gets the lock. Two at once ran CMake in one folder, and one failed."""
    build = os.path.join(root, "build")
    library = os.path.join(build, "libtidepool.so")
    try:
        os.makedirs(build, exist_ok=True)
        lock = open(os.path.join(build, ".tidepool-build.lock"), "a")
    except OSError:
        if os.path.exists(library):  # a tree we may not write in, built already
            return library
        raise
    with lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # let go when the file closes
        if os.path.exists(library):
            return library
        sys.stderr.write("tidepool: building libtidepool in %s (once)\n" % build)
        subprocess.run(["cmake", "-S", root, "-B", build, "-DCMAKE_BUILD_TYPE=Release"], check=True,
                       stdout=subprocess.DEVNULL)
        subprocess.run(["cmake", "--build", build, "--target", "tidepool_shared", "-j",
                        str(os.cpu_count() or 2)], check=True, stdout=subprocess.DEVNULL)
        return library


def library_path():
    """The libtidepool.so to use: $TIDEPOOL_LIBRARY, the one installed with the package, or the source
    tree's build/ (built now if missing)."""
    env = os.environ.get("TIDEPOOL_LIBRARY")
    if env:
        if not os.path.exists(env):
            raise TidepoolError("TIDEPOOL_LIBRARY=%s: no such file" % env)
        return env
    # An installed package holds the library under its soname, libtidepool.so.MAJOR
    # (python/tidepool_build.py).
    for name in sorted(os.listdir(_HERE)):
        if name.startswith("libtidepool.so."):
            return os.path.join(_HERE, name)
    root = source_root()
    if root is None:
        raise TidepoolError("libtidepool.so not found: set TIDEPOOL_LIBRARY or reinstall the package")
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
        "tide_devices_malloc": [p, i, sz, p, ctypes.POINTER(p)],
        "tide_devices_free": [p, i, p],
        "tide_devices_record_stream": [p, p, p],
        "tide_create": [p, ctypes.c_char_p, ctypes.POINTER(p)],
        "tide_destroy": [p],
        "tide_malloc": [p, sz, p, ctypes.POINTER(p)],
        "tide_free": [p, p],
        "tide_record_stream": [p, p, p],
        "tide_sim_create": [p, ctypes.POINTER(p)],
        "tide_sim_stream_create": [p, ctypes.POINTER(p)],
        "tide_sim_synchronize": [p],
        "tide_cuda_device_count": [ctypes.POINTER(i)],
        "tide_stats_json": [p, ctypes.c_char_p, sz, ctypes.POINTER(sz)],
        "tide_reset_peak_stats": [p],
        "tide_reset_accumulated_stats": [p],
        "tide_empty_cache": [p, p],
        "tide_set_limit": [p, sz],
        "tide_set_limit_fraction": [p, d],
        "tide_check": [p],
        # private pools and sleep (tidepool.torch.sleep, SimulatedDevice.sleep)
        "tide_pool_create": [p, ctypes.POINTER(ctypes.c_uint64)],
        "tide_pool_make_sleepable": [p, ctypes.c_uint64],
        "tide_pool_release": [p, ctypes.c_uint64],
        "tide_malloc_pool": [p, sz, p, ctypes.c_uint64, ctypes.POINTER(p)],
        "tide_pool_memory": [p, ctypes.c_uint64, ctypes.POINTER(sz), ctypes.POINTER(sz)],
        "tide_pool_sleep": [p, ctypes.c_uint64, ctypes.c_uint],
        "tide_pool_wake": [p, ctypes.c_uint64],
        "tide_pool_sleeping": [p, ctypes.c_uint64, ctypes.POINTER(ctypes.c_uint32)],
    }.items():
        f = getattr(lib, name)
        f.restype = i
        f.argtypes = args
    lib.tide_sim_destroy.restype = None
    lib.tide_sim_destroy.argtypes = [p]
    lib.tide_sim_get_counters.restype = None
    lib.tide_sim_get_counters.argtypes = [p, p]
    lib.tide_sim_backend.restype = Backend
    lib.tide_sim_backend.argtypes = [p]


class Backend(ctypes.Structure):
    """tide_backend, passed from tide_sim_backend to tide_create untouched. Python never reads it, so
    it is declared as its first field and room for the rest: returned by value, a struct this large
    comes back through memory the caller provides, and tide_create copies struct_size bytes of it."""
    _fields_ = [("struct_size", ctypes.c_uint32), ("rest", ctypes.c_void_p * 63)]


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


def check_memory(status, size, what, device="CUDA"):
    """check() for a call that takes device memory: running out raises OutOfMemory (a MemoryError of
    size bytes, with tidepool's report), any other failure TidepoolError. The message is this thread's
    own (tide_last_error is per thread), so reading it after the call is safe."""
    if status == TIDE_ENOMEM:
        raise OutOfMemory(size, lib().tide_last_error().decode(errors="replace"), device)
    check(status, what)


def stats_json(allocator):
    """The statistics of one allocator (a tide_allocator pointer) as a dict."""
    import json
    L = lib()
    need = ctypes.c_size_t(0)
    L.tide_stats_json(allocator, None, 0, ctypes.byref(need))
    buf = ctypes.create_string_buffer(need.value + 1)
    check(L.tide_stats_json(allocator, buf, need.value + 1, ctypes.byref(need)), "tide_stats_json")
    return json.loads(buf.value.decode())


_shared = None
_shared_config = None


def shared_devices(config=None):
    """The process's one set of per-device allocators (a tide_devices pointer) for the Python adaptors
    (CuPy, numba, cuda.core, RMM), made on first use: they share one cache per device, as the C
    library's set does. A later call with another config is refused."""
    global _shared, _shared_config
    config = text_arg(config, "tidepool config")
    L = lib()  # outside the lock: lib() takes it too
    with _lock:
        if _shared is None:
            handle = ctypes.c_void_p()
            check(L.tide_devices_create(config.encode() if config else None, ctypes.byref(handle)),
                  "tide_devices_create")
            _shared, _shared_config = handle, config
        elif config is not None and config != _shared_config:
            raise TidepoolError("tidepool's allocators were already made with config %r; a second adaptor "
                                "cannot ask for %r" % (_shared_config, config))
        return _shared


def device_allocator(devices, index):
    """The tide_allocator of one device of a set."""
    allocator = ctypes.c_void_p()
    check(lib().tide_devices_get(devices, device_arg(index, "device index"), ctypes.byref(allocator)), "tide_devices_get")
    return allocator


def devices_malloc(devices, device, size, stream):
    """A block of size bytes on device, ordered on stream (a CUstream as an int; 0: the legacy default
    stream). Raises MemoryError(size) subclass OutOfMemory when the device is full."""
    device, size = device_arg(device, "malloc: device"), size_arg(size, "malloc: size")
    stream = stream_arg(stream, "malloc: stream")
    L = lib()
    out = ctypes.c_void_p()
    status = L.tide_devices_malloc(devices, device, size, stream, ctypes.byref(out))
    check_memory(status, size, "tide_malloc of %d bytes" % size)
    return out.value


def devices_free_on(devices, ptr, stream):
    """Frees ptr once the work queued so far on stream is done, as well as the work on the stream it
    was allocated on (a fence on stream, unless it is that stream)."""
    ptr, stream = pointer_arg(ptr, "free: pointer"), stream_arg(stream, "free: stream")
    L = lib()
    # On the block's own stream this records nothing: its work is in order already.
    check(L.tide_devices_record_stream(devices, ptr, stream), "tide_record_stream")
    check(L.tide_devices_free(devices, -1, ptr), "tide_free")


# ---- sleep and wake (tidepool.h, "Sleep and wake") ---------------------------------------------------------

TIDE_SLEEP_DISCARD, TIDE_SLEEP_OFFLOAD = 0, 1


def pool_sleep(allocator, pool, offload):
    """tide_pool_sleep: the pool's pages go back to the device, its blocks keep their addresses; with
    offload its blocks' contents are kept in host memory (pinned, on CUDA) until the wake."""
    check(lib().tide_pool_sleep(allocator, pool, TIDE_SLEEP_OFFLOAD if offload else TIDE_SLEEP_DISCARD),
          "tide_pool_sleep of pool %d" % pool)


def pool_wake(allocator, pool, device="CUDA"):
    """tide_pool_wake: pages at the same addresses again, offloaded contents copied back. Raises
    OutOfMemory (the pool stays asleep, whole) when the device has too little room."""
    check_memory(lib().tide_pool_wake(allocator, pool), 0, "tide_pool_wake of pool %d" % pool, device)


def pool_sleeping(allocator, pool):
    out = ctypes.c_uint32(0)
    check(lib().tide_pool_sleeping(allocator, pool, ctypes.byref(out)), "tide_pool_sleeping")
    return bool(out.value)


def pool_malloc(allocator, size, stream, pool, device="CUDA"):
    """A block of size bytes from a private pool's own memory, ordered on stream."""
    size, stream = size_arg(size, "malloc: size"), stream_arg(stream, "malloc: stream")
    out = ctypes.c_void_p()
    status = lib().tide_malloc_pool(allocator, size, stream, pool, ctypes.byref(out))
    check_memory(status, size, "tide_malloc_pool of %d bytes" % size, device)
    return out.value


class NamedPools:
    """Sleepable private pools by name ("weights", "kv_cache"), per allocator: what tidepool.cupy and
    tidepool.cuda_core put to sleep and wake by name. A pool is made, and made sleepable before it holds
    any memory, the first time its name is asked for; names are never forgotten (a pool outlives the
    arrays in it)."""

    def __init__(self, adaptor):
        self._adaptor = adaptor  # for messages: "tidepool.cupy"
        self._pools = {}  # (allocator address, name) -> pool id
        self._lock = threading.Lock()

    def get(self, allocator, name):
        name = text_arg(name, "%s.pool: name" % self._adaptor)
        if not name:
            raise ArgumentError("%s.pool: the name is empty" % self._adaptor)
        key = (allocator.value, name)
        L = lib()
        with self._lock:
            if key not in self._pools:
                pool = ctypes.c_uint64()
                check(L.tide_pool_create(allocator, ctypes.byref(pool)), "%s.pool(%r)" % (self._adaptor, name))
                check(L.tide_pool_make_sleepable(allocator, pool.value), "%s.pool(%r)" % (self._adaptor, name))
                self._pools[key] = pool.value
            return self._pools[key]

    def named(self, allocator, names, verb):
        """[(name, pool)] of names made on this allocator; a name never made is an error."""
        if isinstance(names, (str, bytes)):
            raise TypeError("%s.%s: give a sequence of pool names, not one string" % (self._adaptor, verb))
        out = []
        with self._lock:
            for name in names:
                key = (allocator.value, name)
                if key not in self._pools:
                    raise ArgumentError("%s.%s: no pool named %r on this device (pools are made by %s.pool)"
                                        % (self._adaptor, verb, name, self._adaptor))
                out.append((name, self._pools[key]))
        return out

    def sleep(self, allocator, offload=(), discard=()):
        """The pools in offload keep their contents in host memory; those in discard lose theirs."""
        plan = [(pool, True) for _, pool in self.named(allocator, offload, "sleep")]
        plan += [(pool, False) for _, pool in self.named(allocator, discard, "sleep")]
        for pool, keep in plan:
            pool_sleep(allocator, pool, keep)

    def wake(self, allocator, names=None, device="CUDA"):
        """Wakes the named pools, or every sleeping one of this allocator (names None)."""
        if names is None:
            with self._lock:
                pools = [pool for (address, _), pool in self._pools.items() if address == allocator.value]
            pools = [pool for pool in pools if pool_sleeping(allocator, pool)]
        else:
            pools = [pool for _, pool in self.named(allocator, names, "wake_up")]
        for pool in pools:
            pool_wake(allocator, pool, device)

    def sleeping(self, allocator, name):
        (_, pool), = self.named(allocator, [name], "is_sleeping")
        return pool_sleeping(allocator, pool)


class OutOfMemory(MemoryError):
    """The device has no room for the allocation (tidepool's message says what it holds). device names
    the device as the message begins: "CUDA" for a GPU, "simulated device" for tidepool.sim, which is no
    CUDA device; the words " out of memory." stay, which frameworks' callers look for."""

    def __init__(self, size, message, device="CUDA"):
        super().__init__("%s out of memory (tidepool) allocating %d bytes. %s" % (device, size, message))
        self.size = size

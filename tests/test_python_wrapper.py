"""The Python package's arguments and close(), on the CPU: every integer and string a caller gives is
checked before ctypes would wrap or cut it (a size of 2**64 + 4096 reached tide_malloc as 4096; a
config with a NUL was read up to the NUL), in SimulatedDevice and in each framework adaptor; and
SimulatedDevice.close() while other threads allocate ends cleanly (it crashed the process).

The adaptors import torch, CuPy, numba, cuda.core or RMM; here each of those is a stand-in module with
only what the adaptor touches, so the checks run without any of them. An argument that passes the
checks goes on to the real library, which with no GPU refuses it as TidepoolError, and on a machine
with a GPU serves it: that is how a test below tells "refused by the check" (ArgumentError or
TypeError) from "reached the library".

    TIDEPOOL_LIBRARY=build/libtidepool.so python3 tests/test_python_wrapper.py
"""
import fractions
import os
import subprocess
import sys
import textwrap
import types

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "python"))

from tidepool import _lib  # noqa: E402
from tidepool._lib import ArgumentError, TidepoolError  # noqa: E402
from tidepool.sim import SimulatedDevice  # noqa: E402

failures = []


def described(call, args, kwargs):
    """The call as a failure message names it."""
    return "%s(%s)" % (getattr(call, "__qualname__", call),
                       ", ".join([repr(a) for a in args] + ["%s=%r" % kv for kv in kwargs.items()]))


def refused_by_check(name, e):
    failures.append("%s: refused by the argument check, should have reached the library: %s" % (name, e))


def expect(error, call, *args, **kwargs):
    """call(*args, **kwargs) raises error (exactly that class, or a subclass of it)."""
    name = described(call, args, kwargs)
    try:
        result = call(*args, **kwargs)
    except error as e:
        if error is TidepoolError and isinstance(e, ArgumentError):
            refused_by_check(name, e)
        return e
    except Exception as e:  # noqa: BLE001 - any other outcome is the failure being reported
        failures.append("%s: raised %s (%s), expected %s" % (name, type(e).__name__, e, error.__name__))
        return None
    failures.append("%s: accepted (returned %r), expected %s" % (name, result, error.__name__))
    return None


def reaches_library(call, *args, release=None):
    """call(*args) passes the argument checks: the library refuses it as TidepoolError (no GPU here), or
    serves it (a GPU is here), and release(result) gives back what it got."""
    name = described(call, args, {})
    try:
        result = call(*args)
    except ArgumentError as e:
        refused_by_check(name, e)
        return
    except TidepoolError:
        return
    except Exception as e:  # noqa: BLE001 - any other outcome is the failure being reported
        failures.append("%s: raised %s (%s), expected the library's answer" % (name, type(e).__name__, e))
        return
    if release:
        release(result)


class Indexable:
    """An object that is an integer through __index__, as NumPy's integer scalars are."""

    def __init__(self, value):
        self.value = value

    def __index__(self):
        return self.value


class Handle:
    """A handle object that converts with int() only, as cuda-python's CUstream does."""

    def __init__(self, value):
        self.value = value

    def __int__(self):
        return self.value


BAD_SIZES = [(2**64 + 4096, ArgumentError), (2**64, ArgumentError), (-1, ArgumentError),
             (-2**64, ArgumentError), (True, TypeError), (False, TypeError), (4096.0, TypeError),
             (float("inf"), TypeError), (float("nan"), TypeError), ("4096", TypeError), (None, TypeError),
             (fractions.Fraction(4096), TypeError), (Indexable(2**64), ArgumentError), (Handle(4096), TypeError)]
BAD_HANDLES = [(2**64, ArgumentError), (2**64 + 4096, ArgumentError), (-1, ArgumentError), (True, TypeError),
               (1.5, TypeError), (4096.0, TypeError), ("0x1000", TypeError), (fractions.Fraction(3, 2), TypeError),
               (Indexable(-5), ArgumentError), (Handle(2**64), ArgumentError), (Handle(-1), ArgumentError)]
BAD_DEVICES = [(-1, ArgumentError), (2**31, ArgumentError), (2**64, ArgumentError), (True, TypeError),
               (0.0, TypeError), ("0", TypeError)]
BAD_CONFIGS = [("expandable_segments:True\0garbage", ArgumentError), ("\0", ArgumentError),
               (b"expandable_segments:True", TypeError), (3, TypeError)]


def test_helpers():
    for value, error in BAD_SIZES:
        expect(error, _lib.size_arg, value)
    assert _lib.size_arg(_lib.SIZE_MAX) == _lib.SIZE_MAX and _lib.size_arg(Indexable(7)) == 7
    for value, error in BAD_HANDLES:
        expect(error, _lib.handle_value, value, "stream")
    assert _lib.handle_value(_lib.UINTPTR_MAX, "p") == _lib.UINTPTR_MAX
    assert _lib.handle_value(Handle(0x1000), "stream") == 0x1000
    assert _lib.handle_value(Indexable(0x2000), "stream") == 0x2000
    import ctypes
    assert _lib.handle_value(ctypes.c_void_p(0x3000), "p") == 0x3000 and _lib.handle_value(ctypes.c_void_p(), "p") == 0
    assert _lib.pointer_arg(None).value is None and _lib.stream_arg(None).value is None
    for value, error in BAD_DEVICES:
        expect(error, _lib.device_arg, value)
    assert _lib.device_arg(63) == 63
    for value, error in BAD_CONFIGS:
        expect(error, _lib.text_arg, value, "config")
    assert _lib.c_text("garbage_collection_threshold:0.5", "c") == b"garbage_collection_threshold:0.5"
    assert _lib.c_text(None, "c") is None
    e = expect(ArgumentError, _lib.size_arg, 2**64 + 4096, "malloc: size")
    assert e is None or ("malloc: size" in str(e) and "18446744073709555712" in str(e)), e
    e = expect(ArgumentError, _lib.text_arg, "a\0b", "config")
    assert e is None or "offset 1" in str(e), e
    # an argument error is a ValueError too, as Python's own range errors are
    assert issubclass(ArgumentError, ValueError) and issubclass(ArgumentError, TidepoolError)


def test_simulated_device():
    for value, error in BAD_SIZES[:4] + [(True, TypeError)]:
        expect(error, SimulatedDevice, value)
    for value, error in BAD_CONFIGS:
        expect(error, SimulatedDevice, 1 << 30, value)
    with SimulatedDevice(1 << 30) as dev:
        before = dev.stats()
        for value, error in BAD_SIZES:
            expect(error, dev.malloc, value)
        for value, error in BAD_HANDLES:
            expect(error, dev.malloc, 4096, value)
            expect(error, dev.free, value)
            expect(error, dev.record_stream, value, 0)
        assert dev.stats() == before, "a refused call changed the statistics"
        p = dev.malloc(Indexable(4096))
        s = dev.new_stream()
        dev.record_stream(p, s)
        for value, error in BAD_HANDLES:
            expect(error, dev.record_stream, p, value)
        dev.free(p)
        dev.free(None)  # NULL, as tide_free(NULL): nothing
        expect(TidepoolError, dev.malloc, 0)  # in range; the library says why not
        e = expect(_lib.OutOfMemory, dev.malloc, _lib.SIZE_MAX)
        # the simulated device is no CUDA device: its message says which device ran out
        if e is not None and (not str(e).startswith("simulated device out of memory") or "CUDA" in str(e)
                              or " out of memory." not in str(e)):
            failures.append("the simulated device's out of memory reads: %s" % e)
        dev.empty_cache()
        stats = dev.stats()
        assert stats["reserved_bytes.all.current"] == 0
        # what each statistic gained and lost, under PyTorch's names, and their reset
        assert stats["allocation.all.allocated"] == stats["allocation.all.freed"] == 1, stats
        assert stats["segment.small_pool.allocated"] == stats["segment.small_pool.freed"] == 1, stats
        assert stats["reserved_bytes.all.freed"] == 2 << 20 and stats["oversize_allocations.freed"] == 0, stats
        dev.reset_accumulated_stats()
        stats = dev.stats()
        assert all(stats[k] == 0 for k in stats if k.endswith((".allocated", ".freed"))), stats
        assert stats["num_device_alloc"] == 0 and stats["allocation.all.peak"] == 1, stats
    for call, args in ((dev.malloc, (4096,)), (dev.free, (p,)), (dev.stats, ()), (dev.new_stream, ()),
                       (dev.check, ()), (dev.empty_cache, ()), (dev.record_stream, (p, 0))):
        e = expect(TidepoolError, call, *args)
        assert e is None or "closed" in str(e), e
    dev.close()  # a second close does nothing
    assert SimulatedDevice(0).stats()["limit_bytes"] > 0  # 0 is the simulated device's default size


CLOSE_RACE = textwrap.dedent("""
    import sys, threading
    sys.path.insert(0, sys.argv[1])
    from tidepool.sim import SimulatedDevice
    from tidepool import TidepoolError
    for round in range(int(sys.argv[2])):
        dev = SimulatedDevice(1 << 30, "expandable_segments:True" if round % 2 else None)
        started, errors, unexpected = threading.Barrier(9), [], []
        def allocate(seed):
            started.wait()
            n = 0
            while True:
                try:
                    p = dev.malloc(4096 + 512 * ((seed * 7919 + n) % 4096))
                    dev.free(p)
                    n += 1
                except TidepoolError as e:
                    errors.append(str(e))
                    return
                except BaseException as e:
                    unexpected.append(repr(e))
                    return
        def close():
            started.wait()
            for _ in range(2):
                try:
                    dev.close()
                except TidepoolError as e:  # a thread held a block when the close came: reported
                    if "still live" not in str(e):
                        unexpected.append("close: " + str(e))
        threads = [threading.Thread(target=allocate, args=(i,)) for i in range(6)]
        threads += [threading.Thread(target=close) for _ in range(3)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert not unexpected, unexpected
        assert len(errors) == 6 and all("SimulatedDevice is clos" in e for e in errors), errors
    print("close raced with allocating threads: every round ended")
""")


def test_close_while_threads_allocate():
    # In a child process, so a hang fails this test at the timeout and a crash fails it too.
    try:
        run = subprocess.run([sys.executable, "-c", CLOSE_RACE, os.path.join(ROOT, "python"), "20"],
                             capture_output=True, text=True, timeout=120)
    except subprocess.TimeoutExpired:
        failures.append("close() while six threads allocate: still running after 120 s (a hang)")
        return
    if run.returncode != 0:
        failures.append("close() while six threads allocate: exit status %d\n%s%s"
                        % (run.returncode, run.stdout, run.stderr))
    else:
        print(run.stdout.strip())


# ---- the adaptors, over stand-ins for the frameworks -------------------------------------------------

def module(name, **attributes):
    m = types.ModuleType(name)
    m.__dict__.update(attributes)
    sys.modules[name] = m
    return m


def stand_ins():
    """Modules with just what tidepool's adaptors use of torch, CuPy, numba, cuda.core and RMM."""
    captured = {}

    class Device:  # torch.device
        def __init__(self, spec):
            self.index = int(spec.split(":")[1]) if isinstance(spec, str) and ":" in spec else None

    torch = module("torch", device=Device)
    torch.cuda = module("torch.cuda", is_initialized=lambda: False, current_device=lambda: 0,
                        device_count=lambda: 1)

    class PythonFunctionAllocator:
        def __init__(self, malloc, free):
            captured["cupy"] = (malloc, free)
            self.malloc = malloc

    class OutOfMemoryError(Exception):
        def __init__(self, size, limit):
            super().__init__(size, limit)

    cupy = module("cupy")
    cupy.cuda = module("cupy.cuda", get_current_stream=lambda device: types.SimpleNamespace(ptr=0),
                       set_allocator=lambda f: None, Device=lambda: types.SimpleNamespace(id=0))
    cupy.cuda.memory = module("cupy.cuda.memory", PythonFunctionAllocator=PythonFunctionAllocator,
                              OutOfMemoryError=OutOfMemoryError)

    numba = module("numba")
    numba.cuda = module("numba.cuda")
    numba.cuda.cudadrv = module("numba.cuda.cudadrv")
    numba.cuda.cudadrv.driver = module("numba.cuda.cudadrv.driver", GetIpcHandleMixin=type("G", (), {}),
                                       HostOnlyCUDAMemoryManager=type("H", (), {}), _SizeNotSet=object(),
                                       CudaAPIError=Exception)

    class MemoryResource:
        pass

    cuda = module("cuda")
    cuda.core = module("cuda.core", MemoryResource=MemoryResource,
                       Buffer=types.SimpleNamespace(from_handle=lambda *a, **k: a))

    class CallbackMemoryResource:
        def __init__(self, allocate, deallocate):
            self.allocate, self.deallocate = allocate, deallocate

    rmm = module("rmm")
    rmm.mr = module("rmm.mr", CallbackMemoryResource=CallbackMemoryResource)
    return captured


class Shim:
    """Stands in for tidepool.torch's C++ hooks: records what reaches them."""

    def __init__(self):
        self.calls = []

    def __getattr__(self, name):
        return lambda *args: self.calls.append((name,) + args) or "{}"


def stream(handle):
    return types.SimpleNamespace(handle=handle, ptr=handle)


def test_adaptors():
    captured = stand_ins()
    import tidepool.torch as tt
    import tidepool.cupy as tc
    import tidepool.numba as tn
    import tidepool.cuda_core as tcc
    import tidepool.rmm as tr

    # torch: the C++ hooks take an int device, an int64 limit and history size, and C strings
    for value, error in BAD_CONFIGS:
        expect(error, tt.enable, value)
    shim = tt._shim = Shim()
    for value, error in [d for d in BAD_DEVICES if not isinstance(d[0], str)]:  # names are torch's to parse
        expect(error, tt.memory_stats, value)
        expect(error, tt.set_limit, 1 << 30, value)
        expect(error, tt.check, value)
    for value, error in BAD_SIZES + [(0, ArgumentError), (2**63, ArgumentError)]:
        expect(error, tt.set_limit, value)
        expect(error, tt.record_memory_history, max_entries=value)
    expect(ArgumentError, tt.annotate, "step\0 12")
    assert not shim.calls, shim.calls
    tt.set_limit(Indexable(2**63 - 1), "cuda:1")
    tt.record_memory_history(max_entries=10, device=0)
    tt.record_memory_history(enabled=False, max_entries=None)
    tt.annotate(12)
    assert shim.calls == [("set_limit", 1, 2**63 - 1), ("history_start", 0, 10, False, True),
                          ("history_stop", 0), ("annotate", 0, "12")], shim.calls
    tt._shim = None

    # CuPy: its allocator's callbacks, record_stream, memory_stats
    for value, error in BAD_CONFIGS:
        expect(error, tc.enable, value)
    tc.enable()
    malloc, free = captured["cupy"]
    for value, error in BAD_SIZES:
        expect(error, malloc, value, 0)
    for value, error in BAD_DEVICES:
        expect(error, malloc, 4096, value)
        expect(error, tc.memory_stats, value)
    for value, error in BAD_HANDLES:
        expect(error, free, value, 0)
        expect(error, tc.record_stream, value, stream(0))
        expect(error, tc.record_stream, 0x1000, stream(value))
    reaches_library(malloc, 4096, 0, release=lambda ptr: free(ptr, 0))
    reaches_library(tc.memory_stats, 0)

    # numba: its memory manager's frees, record_stream, memory_stats
    for value, error in BAD_HANDLES:
        expect(error, tn._free, value)
        expect(error, tn.record_stream, value, stream(0))
        expect(error, tn.record_stream, 0x1000, stream(value))
    array = types.SimpleNamespace(gpu_data=types.SimpleNamespace(owner=types.SimpleNamespace(handle=2**64)))
    expect(ArgumentError, tn.record_stream, array, stream(0))
    for value, error in BAD_DEVICES:
        expect(error, tn.memory_stats, value)
    expect(TidepoolError, tn.record_stream, Handle(0x1000), stream(Handle(0x2000)))  # not tidepool's pointer

    # cuda.core: the memory resource
    for value, error in BAD_DEVICES:
        expect(error, tcc.TidepoolMemoryResource, value)
    for value, error in BAD_CONFIGS[2:]:
        expect(error, tcc.TidepoolMemoryResource, 0, value)
    mr = tcc.TidepoolMemoryResource(0)
    for value, error in BAD_SIZES:
        expect(error, mr.allocate, value)
    for value, error in BAD_HANDLES:
        expect(error, mr.allocate, 4096, stream(value))
        expect(error, mr.deallocate, value, 4096)
        expect(error, mr.deallocate, 0x1000, 4096, stream(value))
    reaches_library(mr.allocate, 4096, stream(Handle(0)), release=lambda got: mr.deallocate(got[0], 4096))

    # RMM: the callback resource
    for value, error in BAD_DEVICES:
        expect(error, tr.resource, value)
    res = tr.resource(0)
    for value, error in BAD_SIZES:
        expect(error, res.allocate, value)
    for value, error in BAD_HANDLES:
        expect(error, res.allocate, 4096, stream(value))
        expect(error, res.deallocate, value, 4096)
    reaches_library(res.allocate, 4096, None, release=lambda ptr: res.deallocate(ptr, 4096))


def test_source_tree_builds_once():
    """Processes that start together from a source tree (torchrun's ranks, a test runner's jobs) build
    libtidepool once: six at once ran CMake in one folder, and one of them failed. Here threads stand
    in for the processes (the lock is on an open file, so threads exclude each other as processes do),
    and CMake is a stand-in that takes a while and writes the library."""
    import tempfile
    import threading
    import time
    real_run = _lib.subprocess.run
    configured = []

    def fake_cmake(args, **kwargs):
        if "--build" in args:
            time.sleep(0.2)
            build = args[args.index("--build") + 1]
            with open(os.path.join(build, "libtidepool.so"), "w"):
                pass
        else:
            configured.append(args)
            time.sleep(0.2)
        return subprocess.CompletedProcess(args, 0)

    with tempfile.TemporaryDirectory() as root:
        results = []
        _lib.subprocess.run = fake_cmake
        try:
            threads = [threading.Thread(target=lambda: results.append(_lib._build_in_source_tree(root)))
                       for _ in range(6)]
            for th in threads:
                th.start()
            for th in threads:
                th.join()
        finally:
            _lib.subprocess.run = real_run
        library = os.path.join(root, "build", "libtidepool.so")
        if len(configured) != 1:
            failures.append("six callers at once ran CMake's configure %d times, not once" % len(configured))
        if results != [library] * 6:
            failures.append("six callers at once got %r, not the library each" % results)


def main():
    for test in (test_helpers, test_simulated_device, test_close_while_threads_allocate, test_adaptors,
                 test_source_tree_builds_once):
        before = len(failures)
        test()
        print("%s: %s" % (test.__name__, "ok" if len(failures) == before else "FAILED"))
    for f in failures:
        print("FAIL: " + f)
    if failures:
        sys.exit(1)
    print("every argument checked, close() safe under threads")


if __name__ == "__main__":
    main()

"""tidepool as CuPy's allocator, on a real GPU: a short workload, empty_cache giving the memory back,
and out-of-memory raising CuPy's error with tidepool's report. Exit 77 where there is no GPU or CuPy."""
import os
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(ROOT, "python"))

try:
    import cupy
    if cupy.cuda.runtime.getDeviceCount() == 0:
        raise RuntimeError("no device")
except Exception as e:  # noqa: BLE001 - any failure here means there is nothing to test on
    print("skipped: no CuPy or no GPU (%s)" % e)
    sys.exit(77)

import tidepool.cupy as tc  # noqa: E402

failures = []


def check(cond, what):
    print(("ok    " if cond else "FAIL  ") + what, flush=True)
    if not cond:
        failures.append(what)


def used():
    free, total = cupy.cuda.runtime.memGetInfo()
    return total - free


def workload():
    total = 0.0
    for i in range(100):
        a = cupy.arange((i * 7919) % (1 << 21) + 1, dtype=cupy.float32)
        b = cupy.sqrt(a * a + 1)
        total += float(b[-1])
    m = cupy.random.rand(1024, 1024, dtype=cupy.float32)
    total += float((m @ m).sum())
    return total


def main():
    tc.enable()
    workload()
    cupy.cuda.Device().synchronize()
    tc.empty_cache()
    floor = used()
    result = workload()
    during = used()
    s = tc.memory_stats()
    check(s["num_device_alloc"] > 0 and s["allocation.all.peak"] > 0,
          "CuPy's allocations went through tidepool (%d segments reserved, peak %d blocks)"
          % (s["num_device_alloc"], s["allocation.all.peak"]))
    tc.empty_cache()
    after = used()
    s = tc.memory_stats()
    check(s["reserved_bytes.all.current"] == 0, "after empty_cache tidepool reserves nothing")
    check(after == floor, "device used memory back to its floor: floor %d MiB, during %d MiB, after %d MiB"
          % (floor >> 20, during >> 20, after >> 20))
    check(result == result, "the workload computed a number")
    free, _ = cupy.cuda.runtime.memGetInfo()
    try:
        cupy.empty(free + (8 << 30), dtype=cupy.uint8)
        check(False, "an array larger than free memory raises")
    except cupy.cuda.memory.OutOfMemoryError as e:
        check("tidepool" in str(e), "cupy OutOfMemoryError with tidepool's report: %s" % str(e)[:200])
    if failures:
        print("%d check(s) failed" % len(failures))
        return 1
    print("all passed")
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""tidepool as CuPy's allocator, on a real GPU: a short workload, empty_cache giving the memory back,
out-of-memory raising CuPy's error with tidepool's report, and streams: a block freed while another
stream that used it is current is not reused before that stream's work is done (and, as the negative
control, one freed on its own stream while another still writes it is reused at once, and the late
writes land in its new owner). Exit 77 where there is no GPU or CuPy."""
import os
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(ROOT, "python"))

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import needs  # noqa: E402

needs.modules(("cupy", "CuPy"))
import cupy  # noqa: E402
needs.gpu(cupy.cuda.runtime.getDeviceCount, "CuPy")

import tidepool.cupy as tc  # noqa: E402

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import late_write  # noqa: E402
from checklist import check, finish  # noqa: E402


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


def reuse_after_late_write(free_on_writer):
    """x allocated on the default stream, written late by a kernel on another stream, freed (with that
    stream current, or not), then y of the same size allocated and filled on the default stream.
    Returns (y took x's memory, y's data was overwritten by the late kernel)."""
    nbytes = 64 << 20
    writer = cupy.cuda.Stream(non_blocking=True)
    x = cupy.zeros(nbytes // 4, dtype=cupy.float32)
    x_ptr = x.data.ptr
    cupy.cuda.Device().synchronize()
    late_write.launch(x_ptr, nbytes, writer)
    if free_on_writer:
        with writer:
            del x
    else:
        del x
    y = cupy.full(nbytes // 4, 7.0, dtype=cupy.float32)
    same = y.data.ptr == x_ptr
    cupy.cuda.Device().synchronize()
    corrupted = bool((y != 7.0).any())
    del y
    return same, corrupted


def cross_stream():
    late_write.warm_up()
    same, corrupted = reuse_after_late_write(free_on_writer=False)
    check(same and corrupted, "negative control: freed on its own stream while another stream writes it, "
          "the block is reused at once and the late writes corrupt its new owner (reused %s, corrupted %s)"
          % (same, corrupted))
    drained = tc.memory_stats()["num_pending_drained"]
    same, corrupted = reuse_after_late_write(free_on_writer=True)
    check(not corrupted, "freed while the writing stream is current: no corruption (reused at once: %s)" % same)
    check(not same, "... and its memory was not handed out while that stream's work was queued")
    tc.empty_cache()
    check(tc.memory_stats()["num_pending_drained"] > drained, "the free waited as a pending free, then drained")


def sleep_and_wake():
    """Arrays in named pools: sleep gives their memory back (offloaded contents kept, discarded lost),
    wake_up maps it again at the same addresses, and the offloaded data is back."""
    with tc.pool("weights"):
        w = cupy.arange(64 << 20, dtype=cupy.float32)  # 256 MiB
    with tc.pool("kv_cache"):
        kv = cupy.zeros(64 << 20, dtype=cupy.float32)
    reference = w.copy()  # in the default pool, which stays awake
    address = w.data.ptr
    cupy.cuda.Device().synchronize()
    before = used()
    tc.sleep(offload=("weights",), discard=("kv_cache",))
    fell = before - used()
    check(fell >= 0.99 * (512 << 20) and tc.is_sleeping("weights") and tc.is_sleeping("kv_cache"),
          "sleep gave the pools' memory back: the device's used memory fell by %d MiB" % (fell >> 20))
    try:
        with tc.pool("weights"):
            cupy.empty(1024, dtype=cupy.uint8)
        check(False, "allocating in a sleeping pool raises")
    except Exception as e:  # noqa: BLE001 - CuPy passes tidepool's error on
        check("asleep" in str(e), "allocating in a sleeping pool raises: %s" % str(e)[:100])
    tc.wake_up()
    check(not tc.is_sleeping("weights") and w.data.ptr == address and bool((w == reference).all()),
          "wake_up: the weights are back at the same address with their contents")
    kv.fill(1)
    check(bool((kv == 1).all()), "the discarded pool is usable again after the wake")
    del w, kv, reference


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
    cross_stream()
    sleep_and_wake()
    free, _ = cupy.cuda.runtime.memGetInfo()
    try:
        cupy.empty(free + (8 << 30), dtype=cupy.uint8)
        check(False, "an array larger than free memory raises")
    except cupy.cuda.memory.OutOfMemoryError as e:
        check("tidepool" in str(e), "cupy OutOfMemoryError with tidepool's report: %s" % str(e)[:200])
    return finish()


if __name__ == "__main__":
    sys.exit(main())

"""tidepool as a cuda.core MemoryResource, on a real GPU: buffers on streams that kernels write and read,
Device.memory_resource, a deallocation on another stream fenced there (with the negative control: one
on the allocation's own stream while another still writes is reused at once, and the late writes land
in the new owner), statistics and empty_cache. Exit 77 where there is no GPU, no cuda.core or no CuPy
(whose kernels the test uses)."""
import os
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(ROOT, "python"))
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import needs  # noqa: E402

needs.modules(("cuda.core", "cuda.core"), ("cupy", "CuPy"))
from cuda.core import Device  # noqa: E402
import cupy  # noqa: E402
needs.gpu(cupy.cuda.runtime.getDeviceCount, "CuPy")

import late_write  # noqa: E402
import tidepool.cuda_core  # noqa: E402
from checklist import check, finish  # noqa: E402


def cupy_stream(stream):
    return cupy.cuda.ExternalStream(int(stream.handle))


def reuse_after_late_write(mr, home, writer, free_on_writer):
    """A buffer allocated on home, written late by a kernel on writer, deallocated on writer (or on
    home), then a new one of the same size allocated and filled on home. Returns (the new one took the
    old one's memory, its data was overwritten)."""
    nbytes = 64 << 20
    old = mr.allocate(nbytes, stream=home)
    old_ptr = int(old.handle)
    late_write.view(old_ptr, nbytes, old).fill(0)
    home.sync()
    late_write.launch(old_ptr, nbytes, cupy_stream(writer))
    old.close(writer if free_on_writer else home)  # Buffer.close deallocates on the stream it is given
    new = mr.allocate(nbytes, stream=home)
    data = late_write.view(int(new.handle), nbytes, new)
    with cupy_stream(home):
        data.fill(7.0)
    Device().sync()
    corrupted = bool((data != 7.0).any())
    same = int(new.handle) == old_ptr
    del data
    new.close(home)
    return same, corrupted


def main():
    dev = Device()
    dev.set_current()
    mr = tidepool.cuda_core.TidepoolMemoryResource(dev.device_id)
    home, writer = dev.create_stream(), dev.create_stream()

    buf = mr.allocate(4 << 20, stream=home)
    check(buf.memory_resource is mr and buf.size == 4 << 20 and buf.is_device_accessible,
          "allocate gives a device Buffer of tidepool's")
    data = late_write.view(int(buf.handle), buf.size, buf)
    with cupy_stream(home):
        data[:] = cupy.arange(data.size, dtype=cupy.float32)
        total = float(data.sum())
    n = data.size
    check(total == float(n) * (n - 1) / 2, "a kernel wrote the buffer on its stream and read it back")
    del data
    s = mr.memory_stats()
    check(s["allocation.all.current"] == 1 and s["allocated_bytes.all.current"] >= 4 << 20,
          "the buffer is a tidepool block (%d bytes allocated)" % s["allocated_bytes.all.current"])
    buf.close(home)
    check(mr.memory_stats()["allocation.all.current"] == 0, "Buffer.close deallocates it through tidepool")

    try:
        dev.memory_resource = mr
        via_device = dev.allocate(1 << 20, stream=home)
        check(via_device.memory_resource is mr and mr.memory_stats()["allocation.all.current"] == 1,
              "Device.memory_resource = tidepool's: dev.allocate comes from tidepool")
        via_device.close(home)
    except Exception as e:  # noqa: BLE001 - reported as a failed check
        check(False, "Device.memory_resource = tidepool's (%s: %s)" % (type(e).__name__, e))

    late_write.warm_up()
    same, corrupted = reuse_after_late_write(mr, home, writer, free_on_writer=False)
    check(same and corrupted, "negative control: deallocated on its own stream while another writes it, "
          "the memory is reused at once and the late writes corrupt the new buffer (reused %s, corrupted %s)"
          % (same, corrupted))
    same, corrupted = reuse_after_late_write(mr, home, writer, free_on_writer=True)
    check(not corrupted and not same, "deallocated on the writing stream: not reused before that stream's work "
          "is done, no corruption (reused %s, corrupted %s)" % (same, corrupted))

    dev.sync()
    mr.empty_cache()
    s = mr.memory_stats()
    check(s["reserved_bytes.all.current"] == 0, "empty_cache gives every segment back (%d reserved)"
          % s["reserved_bytes.all.current"])

    # Sleep and wake: a resource of a named pool.
    weights = tidepool.cuda_core.TidepoolMemoryResource(dev.device_id, pool="weights")
    buf = weights.allocate(256 << 20, stream=home)
    data = late_write.view(int(buf.handle), buf.size, buf)
    with cupy_stream(home):
        data[:] = 3
    home.sync()
    free_before = cupy.cuda.runtime.memGetInfo()[0]
    weights.sleep(offload=True)
    freed = cupy.cuda.runtime.memGetInfo()[0] - free_before
    check(weights.is_sleeping and freed >= 0.99 * (256 << 20),
          "sleep(offload=True) gave the pool's memory back (%d MiB)" % (freed >> 20))
    weights.wake_up()
    with cupy_stream(home):
        back = bool((data == 3).all())
    check(not weights.is_sleeping and back,
          "wake_up: the buffer's contents are back at the same address")
    del data
    buf.close(home)
    try:
        mr.sleep()
        check(False, "sleep on a resource without a pool is refused")
    except RuntimeError as e:
        check("pool=NAME" in str(e), "sleep on a resource without a pool is refused: %s" % str(e)[:80])
    return finish()


if __name__ == "__main__":
    sys.exit(main())

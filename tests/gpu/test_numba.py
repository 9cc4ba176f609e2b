"""tidepool as numba-cuda's memory manager (NUMBA_CUDA_MEMORY_MANAGER=tidepool.numba), on a real GPU:
numba's arrays in tidepool's memory, copied to and from the host and written by a kernel (CuPy's,
through __cuda_array_interface__: the numba-cuda on the H200 machine cannot compile kernels with the
numpy beside it), numba's deferred cleanup respected, get_memory_info, an
IPC handle opened in another process, out-of-memory as numba's error, empty_cache giving the memory
back. Exit 77 where there is no GPU or no numba-cuda."""
import os
import pickle
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(ROOT, "python"))
os.environ["NUMBA_CUDA_MEMORY_MANAGER"] = "tidepool.numba"
os.environ["PYTHONPATH"] = os.path.join(ROOT, "python") + os.pathsep + os.environ.get("PYTHONPATH", "")

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import needs  # noqa: E402

needs.modules(("numpy", "numpy"), ("cupy", "CuPy"), ("numba.cuda", "numba-cuda"))
import numpy as np  # noqa: E402
import cupy  # noqa: E402
from numba import cuda  # noqa: E402
needs.gpu(lambda: len(cuda.gpus) if cuda.is_available() else 0, "numba-cuda")

import tidepool.numba as tn  # noqa: E402

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from checklist import check, finish  # noqa: E402


CHILD = """
import pickle, sys
import numpy as np
from numba import cuda
handle = pickle.loads(sys.stdin.buffer.read())
array = handle.open()  # an IpcArrayHandle: the array's shape and dtype travel with it
print(float(array.copy_to_host().sum()))
handle.close()
"""


def allocated():
    return tn.memory_stats()["allocated_bytes.all.current"]


def main():
    ctx = cuda.current_context()
    check(type(ctx.memory_manager).__name__ == "TidepoolMemoryManager",
          "numba's memory manager is tidepool's (%s)" % type(ctx.memory_manager).__name__)
    n = 1 << 20
    x = np.arange(n, dtype=np.float32)
    y = np.ones(n, dtype=np.float32)
    d_x, d_y = cuda.to_device(x), cuda.to_device(y)
    d_out = cuda.device_array(n, dtype=np.float32)
    out = cupy.asarray(d_out)  # the same memory, no copy
    check(out.data.ptr == int(d_out.device_ctypes_pointer.value), "CuPy sees the numba array's own memory")
    out[:] = 2 * cupy.asarray(d_x) + cupy.asarray(d_y)
    cupy.cuda.Device().synchronize()
    del out
    check(np.array_equal(d_out.copy_to_host(), 2 * x + y), "a kernel wrote tidepool's memory, read back right")
    s = tn.memory_stats()
    check(s["allocation.all.current"] >= 3 and s["allocated_bytes.all.current"] >= 3 * n * 4,
          "the arrays are tidepool's blocks (%d blocks, %d bytes)" % (s["allocation.all.current"],
                                                                     s["allocated_bytes.all.current"]))
    check(s["device_call_ns"] > 0, "tidepool timed its driver calls: %.3f ms in %d reservations"
          % (s["device_call_ns"] / 1e6, s["num_device_alloc"]))
    info = ctx.get_memory_info()
    check(0 < info.free <= info.total, "get_memory_info: %d MiB free of %d MiB" % (info.free >> 20, info.total >> 20))

    # numba's deferred cleanup: no free while defer_cleanup is active
    before = allocated()
    with cuda.defer_cleanup():
        scratch = cuda.device_array(4 << 20, dtype=np.uint8)
        del scratch
        ctx.memory_manager.deallocations.clear()  # a flush numba would do: refused while deferred
        check(allocated() == before + (4 << 20) and len(ctx.memory_manager.deallocations) >= 1,
              "inside defer_cleanup the freed array waits in numba's queue, still allocated")
    ctx.memory_manager.deallocations.clear()
    check(allocated() == before, "after defer_cleanup, numba's flush frees it in tidepool")

    # IPC: a handle of tidepool's memory opened by another process
    handle = d_out.get_ipc_handle()
    child = subprocess.run([sys.executable, "-c", CHILD], input=pickle.dumps(handle), capture_output=True,
                           timeout=300)
    want = float((2 * x + y).sum())
    got = child.stdout.decode().strip().splitlines()[-1] if child.stdout.strip() else child.stderr.decode()[-300:]
    check(child.returncode == 0 and abs(float(got) - want) <= 1e-3 * want,
          "an IPC handle opened in a child process reads the data (child %s, want %s)" % (got, want))

    # out of memory: numba's error, with tidepool's report
    try:
        cuda.device_array(info.total + (8 << 30), dtype=np.uint8)
        check(False, "an array larger than the device raises")
    except Exception as e:  # noqa: BLE001 - numba raises its CudaAPIError
        check("tidepool" in str(e), "out of memory raises %s with tidepool's report" % type(e).__name__)

    del d_x, d_y, d_out, handle  # the IPC handle holds its array's memory alive
    tn.empty_cache()
    s = tn.memory_stats()
    check(s["allocated_bytes.all.current"] == 0 and s["reserved_bytes.all.current"] == 0,
          "after the arrays die and empty_cache, tidepool holds nothing (%d allocated, %d reserved)"
          % (s["allocated_bytes.all.current"], s["reserved_bytes.all.current"]))
    return finish()


if __name__ == "__main__":
    sys.exit(main())

"""A kernel that writes memory late, for the cross-stream tests of the Python adaptors (CuPy, cuda.core):
it spins on its stream for a while, then fills a buffer with -1. If an allocator hands the buffer to
someone else before that kernel is done, the late writes land in the new owner's data."""
import warnings

import cupy

# cupy.cuda.ExternalStream, which the cuda.core test wraps its streams in, warns that it is deprecated
warnings.filterwarnings("ignore", category=DeprecationWarning, message="ExternalStream")

_KERNEL = cupy.RawKernel(r"""
extern "C" __global__ void late_write(float *p, long long n, long long cycles) {
    long long start = clock64();
    while (clock64() - start < cycles) {}
    for (long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x; i < n; i += (long long)gridDim.x * blockDim.x)
        p[i] = -1.0f;
}
""", "late_write")

SPIN_CYCLES = 2_000_000_000  # about 1 s on an H200: longer than anything the host does meanwhile


def warm_up():
    """Compiles this kernel and CuPy's fill before a timed sequence: a first use compiles, which can
    take longer than the late kernel's spin, and the fill would then run after the late writes."""
    scratch = cupy.zeros(1024, dtype=cupy.float32)
    _KERNEL((1,), (32,), (cupy.uint64(scratch.data.ptr), cupy.int64(1024), cupy.int64(0)))
    scratch.fill(7.0)
    cupy.full(1024, 7.0, dtype=cupy.float32)
    cupy.cuda.Device().synchronize()


def launch(ptr, nbytes, stream):
    """Queues the late write of nbytes at ptr on stream (a cupy Stream or ExternalStream)."""
    with stream:
        _KERNEL((64,), (256,), (cupy.uint64(ptr), cupy.int64(nbytes // 4), cupy.int64(SPIN_CYCLES)))


def view(ptr, nbytes, owner):
    """A float32 CuPy array over memory CuPy does not own."""
    memory = cupy.cuda.UnownedMemory(ptr, nbytes, owner)
    return cupy.ndarray((nbytes // 4,), dtype=cupy.float32, memptr=cupy.cuda.MemoryPointer(memory, 0))

// The device side of guard:True for the CUDA backend: checks that n bytes at p all equal value and
// leaves the offset of the first that differs (or all ones) in *first_bad. The backend loads it as PTX
// (src/backend/guard_verify_ptx.h, made from this file by scripts/gen-ptx.sh), so building tidepool needs
// no CUDA compiler.
extern "C" __global__ void tide_guard_verify(const unsigned char *p, unsigned long long n,
                                             unsigned int value, unsigned long long *first_bad)
{
    unsigned long long stride = (unsigned long long)gridDim.x * blockDim.x;
    for (unsigned long long i = (unsigned long long)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += stride)
        if (p[i] != (unsigned char)value)
            atomicMin(first_bad, i);
}

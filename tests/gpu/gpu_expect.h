// The GPU tests' own checks: EXPECT(cond) counts a failure and says where (with tidepool's last
// message) and carries on; `failures` is the count, for the test's exit status. And the kernel they
// share to fill a block with one byte value.
#ifndef TIDE_TEST_GPU_EXPECT_H
#define TIDE_TEST_GPU_EXPECT_H

#include <cuda_runtime.h>

#include <cstddef>
#include <cstdio>

#include "tidepool.h"
#include "tidepool_cuda.h"

static int failures;

#define EXPECT(cond)                                                                               \
    do {                                                                                           \
        if (!(cond)) {                                                                             \
            fprintf(stderr, "%s:%d: expected %s (last error: %s)\n", __FILE__, __LINE__, #cond,    \
                    tide_last_error());                                                            \
            failures++;                                                                            \
        }                                                                                          \
    } while (0)

__global__ void fill_bytes(unsigned char *p, size_t n, unsigned char v)
{
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x)
        p[i] = v;
}

#endif

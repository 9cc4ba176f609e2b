/*
 * What CUDA's virtual memory calls cost by the size of one physical handle, on the GPU machine: is a
 * map's time per call or per byte? tidepool's expandable segments map one 2 MiB handle per page (so
 * that any page can be unmapped alone); PyTorch's map 20 MiB handles. For each handle size, REPS times:
 * cuMemCreate, cuMemMap, cuMemSetAccess into one reserved range, timed together ("map"); then
 * cuMemUnmap and cuMemRelease ("unmap"; with an idle device, without tidepool's cuCtxSynchronize,
 * which is timed on its own). Prints median microseconds per call and per MiB.
 *
 *   cc -O2 -I/usr/local/cuda/include bench/vm_cost.c -o vm_cost -lcuda && ./vm_cost [REPS]
 */
#define _POSIX_C_SOURCE 200809L
#include <cuda.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#define CHECK(call)                                                                                \
    do {                                                                                           \
        CUresult r_ = (call);                                                                      \
        if (r_ != CUDA_SUCCESS) {                                                                  \
            const char *s_ = "?";                                                                  \
            cuGetErrorString(r_, &s_);                                                             \
            fprintf(stderr, "%s failed: %s\n", #call, s_);                                         \
            exit(1);                                                                               \
        }                                                                                          \
    } while (0)

static double now_us(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec * 1e6 + (double)ts.tv_nsec / 1e3;
}

static int by_value(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

static double median(double *v, int n)
{
    qsort(v, (size_t)n, sizeof *v, by_value);
    return v[n / 2];
}

int main(int argc, char **argv)
{
    int reps = argc > 1 ? atoi(argv[1]) : 31;
    if (reps < 1 || reps > 1000)
        reps = 31;
    CUdevice dev;
    CUcontext ctx;
    CHECK(cuInit(0));
    CHECK(cuDeviceGet(&dev, 0));
    CHECK(cuDevicePrimaryCtxRetain(&ctx, dev));
    CHECK(cuCtxSetCurrent(ctx));

    CUmemAllocationProp prop = {0};
    prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
    prop.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
    prop.location.id = 0;
    size_t granularity = 0;
    CHECK(cuMemGetAllocationGranularity(&granularity, &prop, CU_MEM_ALLOC_GRANULARITY_MINIMUM));
    CUmemAccessDesc access = {{CU_MEM_LOCATION_TYPE_DEVICE, 0}, CU_MEM_ACCESS_FLAGS_PROT_READWRITE};

    const size_t mib = 1u << 20;
    const size_t sizes[] = {2 * mib, 4 * mib, 8 * mib, 20 * mib, 64 * mib, 256 * mib};
    const int nsizes = (int)(sizeof sizes / sizeof *sizes);
    CUdeviceptr base;
    CHECK(cuMemAddressReserve(&base, sizes[nsizes - 1], granularity, 0, 0));

    double *map_us = malloc((size_t)reps * sizeof *map_us), *unmap_us = malloc((size_t)reps * sizeof *unmap_us);
    double *sync_us = malloc((size_t)reps * sizeof *sync_us);
    printf("granularity %zu KiB; median of %d\n", granularity >> 10, reps);
    printf("| handle | map (create+map+access), us | per MiB | unmap (unmap+release), us | per MiB |\n");
    printf("|---|---|---|---|---|\n");
    for (int s = 0; s < nsizes; s++) {
        size_t size = sizes[s];
        for (int r = 0; r < reps; r++) {
            CUmemGenericAllocationHandle h;
            double t0 = now_us();
            CHECK(cuMemCreate(&h, size, &prop, 0));
            CHECK(cuMemMap(base, size, 0, h, 0));
            CHECK(cuMemSetAccess(base, size, &access, 1));
            double t1 = now_us();
            CHECK(cuMemsetD8(base, 1, size)); /* touch it, as a program would */
            CHECK(cuCtxSynchronize());
            double t2 = now_us();
            CHECK(cuCtxSynchronize()); /* what tidepool's unmap adds on an idle device */
            double t3 = now_us();
            CHECK(cuMemUnmap(base, size));
            CHECK(cuMemRelease(h));
            double t4 = now_us();
            map_us[r] = t1 - t0;
            sync_us[r] = t3 - t2;
            unmap_us[r] = t4 - t3;
        }
        double m = median(map_us, reps), u = median(unmap_us, reps);
        printf("| %zu MiB | %.1f | %.2f | %.1f | %.2f |\n", size / mib, m, m / (double)(size / mib), u,
               u / (double)(size / mib));
    }
    printf("cuCtxSynchronize on an idle device: %.1f us (median)\n", median(sync_us, reps));
    CHECK(cuMemAddressFree(base, sizes[nsizes - 1]));
    return 0;
}

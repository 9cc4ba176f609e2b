/*
 * What CUDA's virtual memory calls cost by the size of one physical handle, on the GPU machine: is a
 * map's time per call or per byte? tidepool's expandable segments map one 2 MiB handle per page (so
 * that any page can be unmapped alone); PyTorch's map 20 MiB handles. For each handle size, REPS times:
 * cuMemCreate, cuMemMap, cuMemSetAccess into one reserved range, timed together ("map"); then
 * cuMemUnmap and cuMemRelease ("unmap"; with an idle device, without tidepool's cuCtxSynchronize,
 * which is timed on its own). Prints median microseconds per call and per MiB.
 *
 * Then aliases: one 2 MiB handle mapped at two virtual pages at once. Shows that the device sees one
 * physical page through both (bytes written through each are read back through the other, and the
 * device's free memory falls by one page, not two), and times mapping an existing handle at a second
 * page (cuMemMap + cuMemSetAccess) and unmapping it (cuMemUnmap), the calls that packing physical pages
 * by in-page offset would make.
 *
 * Then copies: what a sleeping pool's offload and wake copy cost. 1 GiB from host memory made by
 * cuMemHostAlloc (pinned, portable, as tidepool's CUDA backend makes it) and by malloc (pageable), to
 * and from device memory of three kinds: cuMemAlloc, one handle mapped fresh for each copy (as a wake
 * maps a run), and 2 MiB handles mapped one by one (as a pool grows past its mark). Synchronous
 * cuMemcpyHtoD / cuMemcpyDtoH as tidepool calls them; GB/s, the best and the median of REPS.
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

/* One handle at base and at base + page: what each sees, what the device's free memory says, and what a
 * second mapping of a handle costs. */
static void alias_check(CUdeviceptr base, size_t page, const CUmemAllocationProp *prop,
                        const CUmemAccessDesc *access, double *map_us, double *unmap_us, int reps)
{
    CUmemGenericAllocationHandle h;
    size_t free0, free1, free2, total;
    CUdeviceptr first = base, second = base + page;
    CHECK(cuMemGetInfo(&free0, &total));
    CHECK(cuMemCreate(&h, page, prop, 0));
    CHECK(cuMemMap(first, page, 0, h, 0));
    CHECK(cuMemSetAccess(first, page, access, 1));
    CHECK(cuMemGetInfo(&free1, &total));
    CHECK(cuMemMap(second, page, 0, h, 0));
    CHECK(cuMemSetAccess(second, page, access, 1));
    CHECK(cuMemGetInfo(&free2, &total));
    /* The low half written through the first page, the high half through the second. */
    CHECK(cuMemsetD8(first, 0xAB, page / 2));
    CHECK(cuMemsetD8(second + page / 2, 0xCD, page / 2));
    CHECK(cuCtxSynchronize());
    unsigned char *through_first = malloc(page), *through_second = malloc(page);
    CHECK(cuMemcpyDtoH(through_first, first, page));
    CHECK(cuMemcpyDtoH(through_second, second, page));
    size_t wrong = 0;
    for (size_t i = 0; i < page; i++) {
        unsigned char want = i < page / 2 ? 0xAB : 0xCD;
        wrong += (through_first[i] != want) + (through_second[i] != want);
    }
    free(through_first);
    free(through_second);
    printf("\naliases: one %zu MiB handle mapped at two pages; bytes read back wrong through either: %zu "
           "of %zu; device free memory fell by %zu KiB at the first mapping and %zu KiB at the second\n",
           page >> 20, wrong, 2 * page, (free0 - free1) >> 10, (free1 - free2) >> 10);
    CHECK(cuMemUnmap(second, page));
    for (int r = 0; r < reps; r++) {
        double t0 = now_us();
        CHECK(cuMemMap(second, page, 0, h, 0));
        CHECK(cuMemSetAccess(second, page, access, 1));
        double t1 = now_us();
        CHECK(cuMemUnmap(second, page));
        double t2 = now_us();
        map_us[r] = t1 - t0;
        unmap_us[r] = t2 - t1;
    }
    printf("a second mapping of an existing handle (map+access): %.1f us; its unmap: %.1f us (medians of %d)\n",
           median(map_us, reps), median(unmap_us, reps), reps);
    CHECK(cuMemUnmap(first, page));
    CHECK(cuMemRelease(h));
    if (wrong)
        exit(1);
}

enum dest { DEST_ALLOC, DEST_ONE_HANDLE, DEST_PAGES, DEST_KINDS };

/* Device memory of one kind at *ptr (for DEST_ALLOC) or mapped into [base, base + size). */
static void dest_make(enum dest kind, CUdeviceptr base, size_t size, size_t page, const CUmemAllocationProp *prop,
                      const CUmemAccessDesc *access, CUdeviceptr *ptr)
{
    if (kind == DEST_ALLOC) {
        CHECK(cuMemAlloc(ptr, size));
        return;
    }
    size_t unit = kind == DEST_ONE_HANDLE ? size : page;
    for (size_t at = 0; at < size; at += unit) {
        CUmemGenericAllocationHandle h;
        CHECK(cuMemCreate(&h, unit, prop, 0));
        CHECK(cuMemMap(base + at, unit, 0, h, 0));
        CHECK(cuMemRelease(h));
        CHECK(cuMemSetAccess(base + at, unit, access, 1));
    }
    *ptr = base;
}

static void dest_drop(enum dest kind, CUdeviceptr ptr, size_t size, size_t page)
{
    if (kind == DEST_ALLOC) {
        CHECK(cuMemFree(ptr));
        return;
    }
    size_t unit = kind == DEST_ONE_HANDLE ? size : page;
    for (size_t at = 0; at < size; at += unit)
        CHECK(cuMemUnmap(ptr + at, unit));
}

static void copy_cost(size_t page, const CUmemAllocationProp *prop, const CUmemAccessDesc *access, int reps)
{
    const size_t size = (size_t)1 << 30;
    static const char *const dest_name[DEST_KINDS] = {"cuMemAlloc", "one handle, mapped fresh",
                                                      "2 MiB handles"};
    CUdeviceptr base;
    CHECK(cuMemAddressReserve(&base, size, page, 0, 0));
    void *pinned = NULL;
    CHECK(cuMemHostAlloc(&pinned, size, 1 /* CU_MEMHOSTALLOC_PORTABLE */));
    void *pageable = malloc(size);
    if (!pageable)
        exit(1);
    for (size_t i = 0; i < size; i += 4096) { /* touched, as an offloaded copy's buffer is */
        ((char *)pinned)[i] = 1;
        ((char *)pageable)[i] = 1;
    }
    double *to_dev = malloc((size_t)reps * sizeof *to_dev), *to_host = malloc((size_t)reps * sizeof *to_host);
    printf("\ncopies of 1 GiB, synchronous, GB/s (best / median of %d)\n", reps);
    printf("| host memory | device memory | host to device | device to host |\n|---|---|---|---|\n");
    for (int hostk = 0; hostk < 2; hostk++) {
        void *host = hostk == 0 ? pinned : pageable;
        for (int d = 0; d < DEST_KINDS; d++) {
            for (int r = 0; r < reps; r++) {
                CUdeviceptr dev;
                dest_make((enum dest)d, base, size, page, prop, access, &dev);
                double t0 = now_us();
                CHECK(cuMemcpyHtoD(dev, host, size));
                double t1 = now_us();
                CHECK(cuMemcpyDtoH(host, dev, size));
                double t2 = now_us();
                dest_drop((enum dest)d, dev, size, page);
                to_dev[r] = (double)size / ((t1 - t0) * 1e3);
                to_host[r] = (double)size / ((t2 - t1) * 1e3);
            }
            double best_in = 0, best_out = 0;
            for (int r = 0; r < reps; r++) {
                best_in = to_dev[r] > best_in ? to_dev[r] : best_in;
                best_out = to_host[r] > best_out ? to_host[r] : best_out;
            }
            printf("| %s | %s | %.1f / %.1f | %.1f / %.1f |\n", hostk == 0 ? "cuMemHostAlloc" : "malloc",
                   dest_name[d], best_in, median(to_dev, reps), best_out, median(to_host, reps));
        }
    }
    free(to_dev);
    free(to_host);
    free(pageable);
    CHECK(cuMemFreeHost(pinned));
    CHECK(cuMemAddressFree(base, size));
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
    alias_check(base, granularity, &prop, &access, map_us, unmap_us, reps);
    CHECK(cuMemAddressFree(base, sizes[nsizes - 1]));
    copy_cost(granularity, &prop, &access, reps < 5 ? reps : 5);
    return 0;
}

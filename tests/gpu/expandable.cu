// expandable_segments:True on a real GPU, through the driver's virtual memory API.
//
//  1. Pages between live blocks: a freed middle block's pages are unmapped by tide_empty_cache (the
//     device's free memory rises by what tidepool says it released) while the blocks on both sides keep
//     their data, written and read back by kernels; mapped again, the hole serves a new block.
//  2. A random run (allocations from 512 B to 64 MiB, frees, trims, empty_caches) with every live
//     block's data checked by a kernel after every release, and tide_check throughout.
//  3. empty_cache with nothing live returns the device's free memory to where it started.
//  4. The cost of a map and an unmap: pages mapped one call each and many per call, and unmapped.
//  5. With two GPUs: a block mapped with peer access (tide_backend_cuda_peers) is written by a kernel
//     on the other GPU and read back on its own.
//
// Exit 77 (skipped) where there is no GPU.
#include <cuda_runtime.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>

#include "cuda_check.h"
#include "gpu_expect.h"
#include "tidepool.h"
#include "tidepool_cuda.h"

// Counts bytes that differ from v into *bad.
__global__ void count_other(const unsigned char *p, size_t n, unsigned char v, unsigned long long *bad)
{
    unsigned long long mine = 0;
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x)
        mine += p[i] != v;
    if (mine)
        atomicAdd(bad, mine);
}

static unsigned long long *bad_counter;

static void fill(void *p, size_t n, unsigned char v)
{
    fill_bytes<<<256, 256>>>((unsigned char *)p, n, v);
    CUDA_OK(cudaGetLastError());
}

static bool intact(const void *p, size_t n, unsigned char v)
{
    unsigned long long bad = 0;
    CUDA_OK(cudaMemset(bad_counter, 0, sizeof bad));
    count_other<<<256, 256>>>((const unsigned char *)p, n, v, bad_counter);
    CUDA_OK(cudaGetLastError());
    CUDA_OK(cudaMemcpy(&bad, bad_counter, sizeof bad, cudaMemcpyDeviceToHost));
    return bad == 0;
}

static size_t device_free()
{
    size_t f = 0, total = 0;
    CUDA_OK(cudaMemGetInfo(&f, &total));
    return f;
}

static int64_t reserved(tide_allocator *t)
{
    tide_stats s;
    s.struct_size = sizeof s;
    tide_get_stats(t, &s);
    return s.reserved_bytes[TIDE_POOL_ALL].current;
}

static tide_allocator *open_allocator(int device, const int *peers, int npeers, tide_backend *be_out)
{
    tide_backend be;
    tide_allocator *t = NULL;
    if (tide_backend_cuda_peers(device, peers, npeers, &be) != TIDE_OK ||
        tide_create(&be, "expandable_segments:True", &t) != TIDE_OK) {
        fprintf(stderr, "expandable_segments:True on device %d: %s\n", device, tide_last_error());
        exit(1);
    }
    if (be_out)
        *be_out = be;
    return t;
}

static void pages_between_live_blocks(tide_allocator *t)
{
    const size_t MiB = 1 << 20;
    void *low, *mid, *high;
    EXPECT(tide_malloc(t, MiB, 0, &low) == TIDE_OK);
    EXPECT(tide_malloc(t, 9 * MiB, 0, &mid) == TIDE_OK);
    EXPECT(tide_malloc(t, MiB, 0, &high) == TIDE_OK);
    fill(low, MiB, 0x11);
    fill(mid, 9 * MiB, 0x22);
    fill(high, MiB, 0x33);
    EXPECT(tide_free(t, mid) == TIDE_OK);
    size_t free_before = device_free();
    tide_release_report r;
    EXPECT(tide_empty_cache(t, &r) == TIDE_OK);
    size_t free_after = device_free();
    printf("freed middle block: %llu bytes unmapped, device free memory rose by %lld bytes\n",
           (unsigned long long)r.released_bytes, (long long)(free_after - free_before));
    EXPECT(r.released_bytes >= 8 * MiB);
    EXPECT(free_after - free_before == r.released_bytes);
    EXPECT(intact(low, MiB, 0x11));
    EXPECT(intact(high, MiB, 0x33));
    void *again;
    EXPECT(tide_malloc(t, 9 * MiB, 0, &again) == TIDE_OK);
    EXPECT(again == mid);
    fill(again, 9 * MiB, 0x44);
    EXPECT(intact(again, 9 * MiB, 0x44));
    EXPECT(intact(low, MiB, 0x11));
    EXPECT(intact(high, MiB, 0x33));
    EXPECT(tide_check(t) == TIDE_OK);
    EXPECT(tide_free(t, again) == TIDE_OK);
    EXPECT(tide_free(t, low) == TIDE_OK);
    EXPECT(tide_free(t, high) == TIDE_OK);
}

static void random_run(tide_allocator *t, int ops)
{
    enum { LIVE = 48 };
    void *live[LIVE] = {};
    size_t size[LIVE] = {};
    unsigned char tag[LIVE] = {};
    uint64_t x = 0x9E3779B97F4A7C15ull;
    auto rng = [&x]() {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        return x;
    };
    int releases = 0, lost = 0;
    for (int op = 0; op < ops; op++) {
        int i = (int)(rng() % LIVE);
        uint64_t what = rng() % 100;
        if (what < 90) {
            if (live[i]) {
                EXPECT(tide_free(t, live[i]) == TIDE_OK);
                live[i] = nullptr;
            } else {
                size_t n = (size_t)512 << (rng() % 18);
                n += rng() % n;
                if (tide_malloc(t, n, 0, &live[i]) == TIDE_OK) {
                    size[i] = n;
                    tag[i] = (unsigned char)(1 + rng() % 250);
                    fill(live[i], n, tag[i]);
                }
            }
        } else {
            if (what < 95)
                EXPECT(tide_empty_cache(t, nullptr) == TIDE_OK);
            else
                tide_trim(t, (size_t)(rng() % (1ull << 30)), nullptr);
            releases++;
            for (int k = 0; k < LIVE; k++)
                if (live[k] && !intact(live[k], size[k], tag[k]))
                    lost++;
            if (tide_check(t) != TIDE_OK) {
                fprintf(stderr, "op %d: %s\n", op, tide_last_error());
                failures++;
                break;
            }
        }
    }
    for (int k = 0; k < LIVE; k++)
        if (live[k])
            EXPECT(tide_free(t, live[k]) == TIDE_OK);
    printf("random run: %d operations, %d releases of memory, %d live blocks found damaged\n", ops,
           releases, lost);
    EXPECT(lost == 0);
}

static double seconds_since(std::chrono::steady_clock::time_point t0)
{
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

static void map_cost(tide_backend *be)
{
    const size_t page = be->page_size, pages = 256;
    uintptr_t base = 0;
    EXPECT(be->va_reserve(be->ctx, pages * page, &base) == TIDE_OK);
    std::vector<double> one_map, one_unmap;
    for (int rep = 0; rep < 3; rep++) {
        auto t0 = std::chrono::steady_clock::now();
        for (size_t i = 0; i < pages; i++)
            EXPECT(be->map(be->ctx, base + i * page, page) == TIDE_OK);
        one_map.push_back(seconds_since(t0) / pages);
        t0 = std::chrono::steady_clock::now();
        for (size_t i = 0; i < pages; i++)
            EXPECT(be->unmap(be->ctx, base + i * page, page) == TIDE_OK);
        one_unmap.push_back(seconds_since(t0) / pages);
    }
    auto t0 = std::chrono::steady_clock::now();
    EXPECT(be->map(be->ctx, base, pages * page) == TIDE_OK);
    double bulk_map = seconds_since(t0) / pages;
    t0 = std::chrono::steady_clock::now();
    EXPECT(be->unmap(be->ctx, base, pages * page) == TIDE_OK);
    double bulk_unmap = seconds_since(t0) / pages;
    EXPECT(be->va_release(be->ctx, base, pages * page) == TIDE_OK);
    std::sort(one_map.begin(), one_map.end());
    std::sort(one_unmap.begin(), one_unmap.end());
    printf("page size %zu KiB; one page per call: map %.1f us, unmap %.1f us (median of 3 x %zu); "
           "%zu pages in one call: %.1f us and %.1f us per page\n",
           page >> 10, one_map[1] * 1e6, one_unmap[1] * 1e6, pages, pages, bulk_map * 1e6, bulk_unmap * 1e6);
}

static void peer_access(int devices)
{
    if (devices < 2) {
        printf("peer access: skipped (one GPU)\n");
        return;
    }
    int can = 0;
    CUDA_OK(cudaDeviceCanAccessPeer(&can, 1, 0));
    if (!can) {
        printf("peer access: skipped (GPU 1 cannot access GPU 0)\n");
        return;
    }
    int peer = 1;
    tide_allocator *t = open_allocator(0, &peer, 1, nullptr);
    void *p;
    const size_t n = 6 << 20;
    EXPECT(tide_malloc(t, n, 0, &p) == TIDE_OK);
    CUDA_OK(cudaSetDevice(1));
    fill_bytes<<<256, 256>>>((unsigned char *)p, n, 0x5A); // GPU 1 writes GPU 0's block
    CUDA_OK(cudaGetLastError());
    CUDA_OK(cudaDeviceSynchronize());
    CUDA_OK(cudaSetDevice(0));
    bool ok = intact(p, n, 0x5A);
    printf("peer access: GPU 1 wrote a block of GPU 0 mapped with peer access; GPU 0 reads it back %s\n",
           ok ? "intact" : "WRONG");
    EXPECT(ok);
    EXPECT(tide_free(t, p) == TIDE_OK);
    EXPECT(tide_destroy(t) == TIDE_OK);
}

int main()
{
    int devices = 0;
    if (tide_cuda_device_count(&devices) != TIDE_OK || devices == 0) {
        printf("skipped: no GPU\n");
        return 77;
    }
    CUDA_OK(cudaSetDevice(0));
    CUDA_OK(cudaFree(nullptr));
    CUDA_OK(cudaMalloc(&bad_counter, sizeof *bad_counter));
    size_t start_free = device_free();
    tide_backend be;
    tide_allocator *t = open_allocator(0, nullptr, 0, &be);
    pages_between_live_blocks(t);
    random_run(t, getenv("TIDE_GPU_OPS") ? atoi(getenv("TIDE_GPU_OPS")) : 4000);
    EXPECT(tide_empty_cache(t, nullptr) == TIDE_OK);
    EXPECT(reserved(t) == 0);
    printf("after empty_cache: device free memory %lld bytes from where it started\n",
           (long long)device_free() - (long long)start_free);
    /* the address ranges stay reserved until tide_destroy; they hold no memory, but allow the driver
     * a page of bookkeeping */
    EXPECT(llabs((long long)device_free() - (long long)start_free) <= 2 << 20);
    map_cost(&be);
    EXPECT(tide_destroy(t) == TIDE_OK);
    peer_access(devices);
    CUDA_OK(cudaFree(bad_counter));
    if (failures) {
        printf("%d checks FAILED\n", failures);
        return 1;
    }
    printf("all checks passed\n");
    return 0;
}

// Cross-stream safety on a real GPU.
//
// Each round: a block is allocated on stream A; a long kernel on stream B writes it, spins, and checks
// that its data is still there; the host frees the block after recording B's use, at once allocates
// the same size on stream A and writes it there. If tidepool handed the block out again before B was
// done, A's write lands under B's kernel, which sees it.
//
//   cross_stream [rounds]                        B's data must be intact in every round (exit 0)
//   cross_stream --without-record-stream [rounds] the same without tide_record_stream: the test must
//                                                 see corruption (exit 0 if it did), which shows it can
//
// A segment that moves between streams (past the high-water mark, an idle segment of another stream's
// heap serves the request rather than go back to the driver): each round a long kernel on stream A
// writes and checks a block, the host frees it (a free on its own stream: at once), and a request on
// stream B that the trim would have paid for with that segment takes it over and writes it on B. The
// move must wait for A's kernel.
//   cross_stream --moved-segment [rounds]         A's data must be intact in every round, the segment
//                                                 moved in every round, no reservation after the first
//   cross_stream --moved-segment-unguarded [rounds]  B writes the freed block at once, with no
//                                                 allocator between: the test must see corruption
//
// Exit 77 (skipped) where there is no GPU.
#include <cuda_runtime.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>

#include "cuda_check.h"
#include "tidepool.h"
#include "tidepool_cuda.h"


#define TIDE_OK_OR_DIE(call)                                                                       \
    do {                                                                                           \
        tide_status s_ = (call);                                                                   \
        if (s_ != TIDE_OK) {                                                                       \
            fprintf(stderr, "%s:%d: %s: %s\n", __FILE__, __LINE__, #call, tide_last_error());      \
            exit(1);                                                                               \
        }                                                                                          \
    } while (0)

// Writes a pattern, holds the GPU for `cycles`, then counts the words that changed under it.
__global__ void hold_and_check(unsigned *buf, size_t n, unsigned pattern, long long cycles,
                               unsigned long long *changed)
{
    size_t stride = (size_t)gridDim.x * blockDim.x;
    size_t first = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    for (size_t i = first; i < n; i += stride)
        buf[i] = pattern ^ (unsigned)i;
    long long start = clock64();
    while (clock64() - start < cycles) {
    }
    volatile unsigned *v = buf;
    unsigned long long bad = 0;
    for (size_t i = first; i < n; i += stride)
        bad += v[i] != (pattern ^ (unsigned)i);
    if (bad)
        atomicAdd(changed, bad);
}

__global__ void overwrite(unsigned *buf, size_t n, unsigned value)
{
    size_t stride = (size_t)gridDim.x * blockDim.x;
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += stride)
        buf[i] = value;
}

// The rounds described at the top: 0 if B's data was intact in every round (record) or changed in some
// round (without the recorded use).
static int record_stream_rounds(tide_allocator *t, cudaStream_t a, cudaStream_t b, unsigned long long *changed,
                                int rounds, bool record)
{
    const size_t bytes = 4u << 20, n = bytes / sizeof(unsigned);
    const long long cycles = 400000; // about 0.2 ms at 2 GHz
    int corrupted_rounds = 0, reused_rounds = 0;
    unsigned long long total_changed = 0;
    for (int r = 0; r < rounds; r++) {
        CUDA_OK(cudaMemset(changed, 0, sizeof *changed));
        CUDA_OK(cudaDeviceSynchronize());
        void *x, *y;
        TIDE_OK_OR_DIE(tide_malloc(t, bytes, (tide_stream)a, &x));
        hold_and_check<<<132, 256, 0, b>>>((unsigned *)x, n, 0xA5A5A5A5u + r, cycles, changed);
        CUDA_OK(cudaGetLastError());
        if (record)
            TIDE_OK_OR_DIE(tide_record_stream(t, x, (tide_stream)b));
        TIDE_OK_OR_DIE(tide_free(t, x));
        TIDE_OK_OR_DIE(tide_malloc(t, bytes, (tide_stream)a, &y));
        overwrite<<<132, 256, 0, a>>>((unsigned *)y, n, 0x5A5A5A5Au);
        CUDA_OK(cudaGetLastError());
        CUDA_OK(cudaDeviceSynchronize());
        unsigned long long host_changed = 0;
        CUDA_OK(cudaMemcpy(&host_changed, changed, sizeof host_changed, cudaMemcpyDeviceToHost));
        reused_rounds += (x == y);
        corrupted_rounds += host_changed != 0;
        total_changed += host_changed;
        TIDE_OK_OR_DIE(tide_free(t, y));
    }
    tide_stats s;
    s.struct_size = sizeof s;
    TIDE_OK_OR_DIE(tide_get_stats(t, &s));
    TIDE_OK_OR_DIE(tide_check(t));
    printf("%s: %d rounds, %d with the block reused at once, %d with B's data changed under it "
           "(%llu words); %llu pending frees drained\n",
           record ? "with tide_record_stream" : "without tide_record_stream", rounds, reused_rounds,
           corrupted_rounds, total_changed, (unsigned long long)s.num_pending_drained);
    if (record) {
        if (corrupted_rounds) {
            printf("FAILED: use-after-free detected in %d rounds\n", corrupted_rounds);
            return 1;
        }
        printf("PASSED: B's data intact in every round\n");
        return 0;
    }
    if (!corrupted_rounds) {
        printf("FAILED: without the recorded use the test saw no corruption: it cannot fail\n");
        return 1;
    }
    printf("PASSED (negative control): corruption seen in %d of %d rounds without the recorded use\n",
           corrupted_rounds, rounds);
    return 0;
}

// The moved-segment rounds (see the top): 0 if A's data was intact in every round (guarded) or changed
// in some round (unguarded).
static int moved_segment(tide_allocator *t, cudaStream_t a, cudaStream_t b, unsigned long long *changed,
                         int rounds, bool guarded)
{
    const size_t seg_bytes = 30u << 20, n = seg_bytes / sizeof(unsigned), b_bytes = 20u << 20;
    const long long cycles = 2000000; // about 1 ms at 2 GHz
    void *x, *y;
    // One 30 MiB segment, idle on A: the high-water mark is at 30 MiB.
    TIDE_OK_OR_DIE(tide_malloc(t, seg_bytes, (tide_stream)a, &x));
    TIDE_OK_OR_DIE(tide_free(t, x));
    int corrupted_rounds = 0, moved_rounds = 0;
    unsigned long long total_changed = 0;
    tide_stats before;
    before.struct_size = sizeof before;
    TIDE_OK_OR_DIE(tide_get_stats(t, &before));
    for (int r = 0; r < rounds; r++) {
        CUDA_OK(cudaMemset(changed, 0, sizeof *changed));
        CUDA_OK(cudaDeviceSynchronize());
        TIDE_OK_OR_DIE(tide_malloc(t, seg_bytes, (tide_stream)a, &x)); // from A's cache, or back from B
        hold_and_check<<<132, 256, 0, a>>>((unsigned *)x, n, 0xA5A5A5A5u + r, cycles, changed);
        CUDA_OK(cudaGetLastError());
        TIDE_OK_OR_DIE(tide_free(t, x));
        if (guarded) {
            TIDE_OK_OR_DIE(tide_malloc(t, b_bytes, (tide_stream)b, &y));
            moved_rounds += y == x;
        } else {
            y = x;
        }
        overwrite<<<132, 256, 0, b>>>((unsigned *)y, b_bytes / sizeof(unsigned), 0x5A5A5A5Au);
        CUDA_OK(cudaGetLastError());
        CUDA_OK(cudaDeviceSynchronize());
        unsigned long long host_changed = 0;
        CUDA_OK(cudaMemcpy(&host_changed, changed, sizeof host_changed, cudaMemcpyDeviceToHost));
        corrupted_rounds += host_changed != 0;
        total_changed += host_changed;
        if (guarded)
            TIDE_OK_OR_DIE(tide_free(t, y));
    }
    tide_stats after;
    after.struct_size = sizeof after;
    TIDE_OK_OR_DIE(tide_get_stats(t, &after));
    TIDE_OK_OR_DIE(tide_check(t));
    unsigned long long reserved = after.num_device_alloc - before.num_device_alloc;
    printf("%s: %d rounds, the segment moved to stream B in %d, %llu reservations, A's data changed "
           "under its kernel in %d (%llu words)\n",
           guarded ? "moved segment" : "moved segment, unguarded", rounds, moved_rounds, reserved,
           corrupted_rounds, total_changed);
    if (!guarded) {
        if (!corrupted_rounds) {
            printf("FAILED: B's write at once was not seen under A's kernel: the test cannot fail\n");
            return 1;
        }
        printf("PASSED (negative control): corruption seen in %d of %d rounds\n", corrupted_rounds, rounds);
        return 0;
    }
    if (corrupted_rounds || moved_rounds != rounds || reserved != 0) {
        printf("FAILED\n");
        return 1;
    }
    printf("PASSED: the segment moved in every round, A's data intact in every round\n");
    return 0;
}

int main(int argc, char **argv)
{
    bool record = true;
    int moved = 0; // 1: --moved-segment, 2: --moved-segment-unguarded
    int rounds = 200;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--without-record-stream"))
            record = false;
        else if (!strcmp(argv[i], "--moved-segment"))
            moved = 1;
        else if (!strcmp(argv[i], "--moved-segment-unguarded"))
            moved = 2;
        else
            rounds = atoi(argv[i]);
    }
    int count = 0;
    if (tide_cuda_device_count(&count) != TIDE_OK || count == 0) {
        printf("skipped: no GPU (%s)\n", count ? "" : tide_last_error());
        return 77;
    }
    tide_backend backend;
    tide_allocator *t;
    TIDE_OK_OR_DIE(tide_backend_cuda(0, &backend));
    TIDE_OK_OR_DIE(tide_create(&backend, NULL, &t));

    cudaStream_t a, b;
    CUDA_OK(cudaStreamCreateWithFlags(&a, cudaStreamNonBlocking));
    CUDA_OK(cudaStreamCreateWithFlags(&b, cudaStreamNonBlocking));
    unsigned long long *changed;
    CUDA_OK(cudaMalloc(&changed, sizeof *changed));
    int rc = moved ? moved_segment(t, a, b, changed, rounds, moved == 1)
                   : record_stream_rounds(t, a, b, changed, rounds, record);
    tide_release_report rep;
    TIDE_OK_OR_DIE(tide_empty_cache(t, &rep));
    CUDA_OK(cudaFree(changed));
    CUDA_OK(cudaStreamDestroy(a));
    CUDA_OK(cudaStreamDestroy(b));
    TIDE_OK_OR_DIE(tide_destroy(t));
    return rc;
}

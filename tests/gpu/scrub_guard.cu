// scrub:True and guard:True on a real GPU, each against a control without the key.
//
// scrub: a kernel writes a secret into a block, the block is freed and handed out again on the same
// stream; the new owner copies it back: with scrub it must read zeroes, without it reads the secret.
// guard: a kernel writes one byte just past the end (or just before the start) of a block; tide_free
// must return TIDE_ECORRUPT saying where, found by the device-side check; in-bounds writes pass. It also
// prints what guard costs per alloc+free against no guard.
//
// Exit 77 (skipped) where there is no GPU.
#include <cuda_runtime.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>

#include "cuda_check.h"
#include "gpu_expect.h"
#include "tidepool.h"
#include "tidepool_cuda.h"

__global__ void poke(unsigned char *p) { *p = 0; }

static tide_allocator *open_allocator(const char *conf)
{
    tide_backend be;
    tide_allocator *t = NULL;
    if (tide_backend_cuda(0, &be) != TIDE_OK || tide_create(&be, conf, &t) != TIDE_OK) {
        fprintf(stderr, "%s: %s\n", conf, tide_last_error());
        exit(1);
    }
    return t;
}

// Bytes of the last owner's secret the new owner reads.
static size_t leaked(const char *conf, size_t size, cudaStream_t s)
{
    tide_allocator *t = open_allocator(conf);
    unsigned char *p, *q;
    EXPECT(tide_malloc(t, size, (tide_stream)s, (void **)&p) == TIDE_OK);
    fill_bytes<<<64, 256, 0, s>>>(p, size, 0x5E);
    EXPECT(tide_free(t, p) == TIDE_OK);
    EXPECT(tide_malloc(t, size, (tide_stream)s, (void **)&q) == TIDE_OK);
    EXPECT(q == p);
    std::vector<unsigned char> host(size);
    CUDA_OK(cudaMemcpyAsync(host.data(), q, size, cudaMemcpyDeviceToHost, s));
    CUDA_OK(cudaStreamSynchronize(s));
    size_t n = 0;
    for (unsigned char c : host)
        n += c == 0x5E;
    EXPECT(tide_free(t, q) == TIDE_OK);
    EXPECT(tide_destroy(t) == TIDE_OK);
    return n;
}

static tide_status free_after_poke(tide_allocator *t, size_t size, long offset, cudaStream_t s)
{
    unsigned char *p;
    EXPECT(tide_malloc(t, size, (tide_stream)s, (void **)&p) == TIDE_OK);
    poke<<<1, 1, 0, s>>>(p + offset);
    return tide_free(t, p);
}

static double ns_per_pair(const char *conf, cudaStream_t s)
{
    tide_allocator *t = open_allocator(conf);
    const int n = 2000;
    void *p;
    for (int i = 0; i < 100; i++) { // warm
        tide_malloc(t, 4096, (tide_stream)s, &p);
        tide_free(t, p);
    }
    auto start = std::chrono::steady_clock::now();
    for (int i = 0; i < n; i++) {
        tide_malloc(t, 4096 + (size_t)(i % 7) * 512, (tide_stream)s, &p);
        tide_free(t, p);
    }
    double ns = std::chrono::duration<double, std::nano>(std::chrono::steady_clock::now() - start).count() / n;
    tide_destroy(t);
    return ns;
}

int main()
{
    int count = 0;
    if (tide_cuda_device_count(&count) != TIDE_OK || count == 0) {
        printf("skipped: no GPU\n");
        return 77;
    }
    cudaStream_t s;
    CUDA_OK(cudaStreamCreate(&s));

    size_t sizes[] = {512, 100000, 3u << 20};
    for (size_t size : sizes) {
        size_t with = leaked("scrub:True", size, s), without = leaked("scrub:False", size, s);
        printf("scrub, %zu bytes: the new owner read %zu bytes of the secret with scrub, %zu without\n",
               size, with, without);
        EXPECT(with == 0);
        EXPECT(without == size);
    }

    tide_allocator *t = open_allocator("guard:True");
    for (size_t size : {(size_t)1, (size_t)1000, (size_t)4096, (size_t)(5u << 20) + 3}) {
        EXPECT(free_after_poke(t, size, 0, s) == TIDE_OK);
        EXPECT(free_after_poke(t, size, (long)size - 1, s) == TIDE_OK);
        EXPECT(free_after_poke(t, size, (long)size, s) == TIDE_ECORRUPT);
        printf("guard, %zu bytes, one byte past the end: %s\n", size, tide_last_error());
        EXPECT(strstr(tide_last_error(), "after the end") != NULL);
        EXPECT(free_after_poke(t, size, -1, s) == TIDE_ECORRUPT);
        printf("guard, %zu bytes, one byte before the start: %s\n", size, tide_last_error());
        EXPECT(strstr(tide_last_error(), "offset -1") != NULL);
    }
    EXPECT(tide_check(t) == TIDE_OK);
    tide_release_report r;
    EXPECT(tide_empty_cache(t, &r) == TIDE_OK && r.reserved_bytes == 0);
    EXPECT(tide_destroy(t) == TIDE_OK);

    tide_allocator *control = open_allocator(NULL);
    EXPECT(free_after_poke(control, 1000, 1000, s) == TIDE_OK); // unseen without the guard
    CUDA_OK(cudaStreamSynchronize(s));
    EXPECT(tide_destroy(control) == TIDE_OK);

    double plain = ns_per_pair(NULL, s), scrub = ns_per_pair("scrub:True", s), guard = ns_per_pair("guard:True", s);
    printf("cost per alloc+free pair of 4-7 KiB on one stream: %.0f ns plain, %.0f ns scrub:True, %.0f ns "
           "guard:True\n", plain, scrub, guard);
    CUDA_OK(cudaStreamDestroy(s));
    printf("%s\n", failures ? "FAILED" : "scrub and guard: all checks passed");
    return failures ? 1 : 0;
}

/*
 * Two GPUs driven from several threads at once through tide_devices: each thread allocates on both
 * devices, hands blocks to another thread, which frees them with the wrong device as its hint (or none),
 * as a framework's free on a thread whose current device differs would. Every block must go back to
 * the allocator of the device that owns it: afterwards each device's allocator has nothing allocated,
 * its own statistics, and empty_cache returns each device to its starting free memory.
 * Exits 77 (skipped) with fewer than two GPUs.
 */
#include "harness.h"
#include "tidepool_cuda.h"

#define THREADS 8
#define ROUNDS 4000
#define SLOTS 32

static tide_devices *set;
static pthread_mutex_t exchange_lock = PTHREAD_MUTEX_INITIALIZER;
static struct {
    void *p;
    int device;
} exchange[SLOTS];
static int errors;

static void *worker(void *arg)
{
    uint64_t rng = (uint64_t)(uintptr_t)arg * 7919 + 1;
    for (int i = 0; i < ROUNDS; i++) {
        int device = (int)(rng_next(&rng) % 2);
        size_t size = (size_t)(rng_next(&rng) % (4u << 20)) + 1;
        void *p = NULL;
        if (tide_devices_malloc(set, device, size, 0, &p) != TIDE_OK) {
            fprintf(stderr, "malloc on device %d: %s\n", device, tide_last_error());
            __atomic_add_fetch(&errors, 1, __ATOMIC_RELAXED);
            continue;
        }
        size_t slot = rng_next(&rng) % SLOTS;
        pthread_mutex_lock(&exchange_lock);
        void *old = exchange[slot].p;
        int old_device = exchange[slot].device;
        exchange[slot].p = p;
        exchange[slot].device = device;
        pthread_mutex_unlock(&exchange_lock);
        /* free another thread's block, naming the wrong device, or none */
        int hint = rng_next(&rng) % 2 ? 1 - old_device : -1;
        if (old && tide_devices_free(set, hint, old) != TIDE_OK) {
            fprintf(stderr, "free with hint %d: %s\n", hint, tide_last_error());
            __atomic_add_fetch(&errors, 1, __ATOMIC_RELAXED);
        }
    }
    return NULL;
}

int main(void)
{
    int count = 0;
    if (tide_cuda_device_count(&count) != TIDE_OK || count < 2) {
        printf("skipped: needs two GPUs, this machine has %d\n", count);
        return 77;
    }
    CHECK_OK(tide_devices_create(NULL, &set));
    tide_allocator *t[2];
    size_t free_before[2], total;
    for (int d = 0; d < 2; d++) {
        CHECK_OK(tide_devices_get(set, d, &t[d]));
        tide_backend be;
        CHECK_OK(tide_backend_cuda(d, &be));
        CHECK_OK(be.mem_info(be.ctx, &free_before[d], &total));
        tide_backend_close(&be);
    }
    CHECK(t[0] != t[1]);
    pthread_t threads[THREADS];
    for (int i = 0; i < THREADS; i++)
        pthread_create(&threads[i], NULL, worker, (void *)(uintptr_t)(i + 1));
    for (int i = 0; i < THREADS; i++)
        pthread_join(threads[i], NULL);
    for (int i = 0; i < SLOTS; i++)
        if (exchange[i].p)
            CHECK_OK(tide_devices_free(set, 1 - exchange[i].device, exchange[i].p));
    CHECK(errors == 0);
    for (int d = 0; d < 2; d++) {
        tide_stats s = stats_of(t[d]);
        printf("device %d: %lld segments reserved in all, peak %lld MiB reserved, %lld allocations now\n", d,
               (long long)s.num_device_alloc, (long long)(s.reserved_bytes[TIDE_POOL_ALL].peak >> 20),
               (long long)s.allocation[TIDE_POOL_ALL].current);
        CHECK(s.num_device_alloc > 0); /* both devices were used */
        CHECK(s.allocation[TIDE_POOL_ALL].current == 0); /* every block went back to its owner */
        CHECK_OK(tide_check(t[d]));
    }
    CHECK_OK(tide_devices_empty_cache(set));
    for (int d = 0; d < 2; d++) {
        tide_backend be;
        size_t free_after;
        CHECK_OK(tide_backend_cuda(d, &be));
        CHECK_OK(be.mem_info(be.ctx, &free_after, &total));
        tide_backend_close(&be);
        printf("device %d: free memory %zu MiB before, %zu MiB after empty_cache\n", d, free_before[d] >> 20,
               free_after >> 20);
        CHECK(free_after >= free_before[d]);
    }
    CHECK_OK(tide_devices_destroy(set));
    printf("%s\n", harness_failures ? "FAILED" : "two devices from 8 threads: all checks passed");
    return HARNESS_EXIT();
}

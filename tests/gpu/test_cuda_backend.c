/*
 * The CUDA backend on a real GPU: allocate, free, reuse, references, empty_cache returning the device's
 * memory to where it was, the out-of-memory ladder against the real device, driver errors carrying the
 * driver's error name, several threads at once, and tide_devices on one GPU. Exits 77 (skipped) where
 * there is no GPU.
 */
#include "harness.h"
#include "tidepool_cuda.h"

static size_t device_free(tide_backend *be)
{
    size_t free_b = 0, total = 0;
    CHECK_OK(be->mem_info(be->ctx, &free_b, &total));
    return free_b;
}

struct thread_arg {
    tide_allocator *t;
    int errors;
};

static void *hammer(void *p)
{
    struct thread_arg *a = p;
    uint64_t rng = (uint64_t)(uintptr_t)p;
    void *live[16] = {0};
    for (int i = 0; i < 20000; i++) {
        int k = (int)(rng_next(&rng) % 16);
        if (live[k]) {
            a->errors += tide_free(a->t, live[k]) != TIDE_OK;
            live[k] = NULL;
        } else {
            a->errors += tide_malloc(a->t, (size_t)(rng_next(&rng) % (8 << 20)) + 1, 0, &live[k]) != TIDE_OK;
        }
    }
    for (int k = 0; k < 16; k++)
        a->errors += live[k] && tide_free(a->t, live[k]) != TIDE_OK;
    return NULL;
}

/* tide_devices on device 0 (the machine may have one GPU): allocators made on first use, ownership
 * looked up across devices, bad input refused with its words, and everything given back. */
static void test_devices_on_one_gpu(int count)
{
    tide_backend probe; /* for the device's free memory; the set makes its own backends */
    CHECK_OK(tide_backend_cuda(0, &probe));
    tide_backend *be = &probe;
    size_t before = device_free(be);
    tide_devices *set = (tide_devices *)&set;
    CHECK_STATUS(tide_devices_create("bogus:1", &set), TIDE_EINVAL);
    CHECK_MESSAGE("unknown key 'bogus'");
    CHECK(set == NULL);
    CHECK_STATUS(tide_devices_create(NULL, NULL), TIDE_EINVAL);
    CHECK_OK(tide_devices_create(NULL, &set));

    tide_allocator *t = NULL, *again = NULL;
    CHECK_STATUS(tide_devices_get(set, -1, &t), TIDE_EINVAL);
    CHECK_MESSAGE("device -1 is not between 0 and 63");
    CHECK_STATUS(tide_devices_get(set, 64, &t), TIDE_EINVAL);
    CHECK(tide_devices_get(set, count, &t) != TIDE_OK && t == NULL); /* no such GPU */
    printf("tide_devices_get(%d) on a machine of %d GPU(s): %s\n", count, count, tide_last_error());
    CHECK_OK(tide_devices_get(set, 0, &t));
    CHECK_OK(tide_devices_get(set, 0, &again));
    CHECK(t != NULL && t == again);

    void *p = NULL, *q = NULL;
    int local = 0;
    CHECK_OK(tide_devices_malloc(set, 0, 1 << 20, 0, &p));
    CHECK(device_free(be) < before);
    CHECK_OK(tide_devices_record_stream(set, p, 0));
    CHECK_STATUS(tide_devices_record_stream(set, &local, 0), TIDE_EINVAL);
    CHECK_MESSAGE("which no device's allocator owns");
    CHECK_STATUS(tide_devices_free(set, 0, &local), TIDE_EINVAL);
    CHECK_MESSAGE("which no device's allocator owns");
    CHECK_OK(tide_devices_free(set, 0, NULL));
    CHECK_OK(tide_devices_free(set, -1, p)); /* the owner looked up */
    CHECK_STATUS(tide_devices_free(set, 0, p), TIDE_EINVAL); /* twice */
    q = tide_cupy_malloc(set, 4096, 0);
    CHECK(q != NULL);
    tide_cupy_free(set, q, 0);
    CHECK(stats_of(t).allocated_bytes[TIDE_POOL_ALL].current == 0);

    CHECK_STATUS(tide_devices_free(NULL, 0, p), TIDE_EINVAL);
    CHECK_STATUS(tide_devices_record_stream(NULL, p, 0), TIDE_EINVAL);
    CHECK_STATUS(tide_devices_empty_cache(NULL), TIDE_EINVAL);
    CHECK_OK(tide_devices_empty_cache(set));
    CHECK(device_free(be) == before);
    CHECK_OK(tide_devices_destroy(set));
    CHECK_OK(tide_devices_destroy(NULL));
    tide_backend_close(&probe);
}

int main(void)
{
    int count = 0;
    tide_status s = tide_cuda_device_count(&count);
    if (s != TIDE_OK || count == 0) {
        printf("skipped: no GPU (%s)\n", s != TIDE_OK ? tide_last_error() : "no CUDA device");
        return 77;
    }
    tide_backend be;
    CHECK_STATUS(tide_backend_cuda(count + 5, &be), TIDE_EINVAL);
    CHECK_MESSAGE("no CUDA device");
    CHECK_OK(tide_backend_cuda(0, &be));
    size_t before = device_free(&be);

    /* A driver error comes back with the driver's own name for it. (Under compute-sanitizer, which
     * reports every failed driver call, TIDE_NO_DELIBERATE_DRIVER_ERRORS=1 leaves this out.) */
    const char *quiet = getenv("TIDE_NO_DELIBERATE_DRIVER_ERRORS");
    if (!quiet || strcmp(quiet, "1") != 0) {
        CHECK_STATUS(be.release(be.ctx, 0x1000, 4096), TIDE_EDEVICE);
        printf("driver error as reported: %s\n", tide_last_error());
        CHECK_MESSAGE("cuMemFree: CUDA_ERROR_");
    }

    tide_allocator *t;
    CHECK_OK(tide_create(&be, NULL, &t));
    void *p[64];
    for (int i = 0; i < 64; i++)
        CHECK_OK(tide_malloc(t, (size_t)(i + 1) * 300000, 0, &p[i]));
    CHECK(device_free(&be) < before);
    for (int i = 0; i < 64; i++)
        CHECK_OK(tide_free(t, p[i]));
    void *again;
    CHECK_OK(tide_malloc(t, 300000, 0, &again)); /* reused from the cache: no new device memory */
    CHECK_OK(tide_retain(t, again));
    CHECK_OK(tide_free(t, again));
    CHECK(stats_of(t).pending_free_blocks[TIDE_POOL_ALL].current == 1);
    CHECK_OK(tide_release(t, again));
    CHECK_OK(tide_check(t));
    tide_release_report r;
    CHECK_OK(tide_empty_cache(t, &r));
    CHECK(r.reserved_bytes == 0);
    size_t after = device_free(&be);
    printf("device free memory: %zu before, %zu after empty_cache\n", before, after);
    CHECK(after == before);

    /* More than the device has free, less than its total: the ladder runs and reports. */
    size_t free_now = device_free(&be);
    void *huge;
    tide_stats st = stats_of(t);
    if (free_now + (8ull << 30) < (size_t)st.device_total_bytes) {
        CHECK_STATUS(tide_malloc(t, free_now + (4ull << 30), 0, &huge), TIDE_ENOMEM);
        CHECK_MESSAGE("out of memory. Asked");
        printf("out-of-memory report: %s\n", tide_last_error());
    }
    CHECK_OK(tide_set_limit(t, 64 << 20));
    CHECK_STATUS(tide_malloc(t, 100 << 20, 0, &huge), TIDE_ENOMEM);
    CHECK_OK(tide_set_limit(t, (size_t)st.device_total_bytes));

    pthread_t threads[4];
    struct thread_arg args[4];
    for (int i = 0; i < 4; i++) {
        args[i] = (struct thread_arg){t, 0};
        pthread_create(&threads[i], NULL, hammer, &args[i]);
    }
    for (int i = 0; i < 4; i++) {
        pthread_join(threads[i], NULL);
        CHECK(args[i].errors == 0);
    }
    CHECK_OK(tide_check(t));
    CHECK_OK(tide_empty_cache(t, &r));
    CHECK(r.reserved_bytes == 0);
    CHECK(device_free(&be) == before);
    CHECK_OK(tide_destroy(t)); /* which closes be */
    test_devices_on_one_gpu(count);
    return HARNESS_EXIT();
}

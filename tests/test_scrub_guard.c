/*
 * scrub:True (a block is zeroed on its stream before a new owner gets it) and guard:True (canaries
 * around every block, checked at free) on the simulated device. Each is shown against a control
 * without the key, where the same program sees the last owner's data or writes out of bounds unseen.
 */
#include "harness.h"

#define SECRET 0x5E

/* The last owner writes a secret on the device, frees the block, and a new owner gets the same block
 * on the same stream: what does the new owner's kernel read? */
static size_t leaked_bytes(const char *conf, size_t size)
{
    struct fixture f;
    fixture_open(&f, 0, conf);
    tide_stream s;
    CHECK_OK(tide_sim_stream_create(f.sim, &s));
    uint8_t *p, *q;
    CHECK_OK(tide_malloc(f.t, size, s, (void **)&p));
    struct fill_kernel secret = {NULL, p, size, SECRET, NULL};
    CHECK_OK(tide_sim_enqueue(f.sim, s, 0, fill_kernel_run, &secret));
    CHECK_OK(tide_free(f.t, p));
    CHECK_OK(tide_malloc(f.t, size, s, (void **)&q));
    CHECK(q == p); /* the same memory, or the test shows nothing */
    CHECK_OK(tide_sim_stream_synchronize(f.sim, s)); /* the new owner's first kernel reads now */
    size_t leaked = 0;
    for (size_t i = 0; i < size; i++)
        leaked += q[i] == SECRET;
    CHECK_OK(tide_free(f.t, q));
    fixture_close(&f);
    return leaked;
}

static void test_scrub_zeroes_before_reuse(void)
{
    size_t sizes[] = {512, 100000, 3 * MIB + 77};
    for (size_t i = 0; i < sizeof sizes / sizeof *sizes; i++) {
        CHECK(leaked_bytes("scrub:False", sizes[i]) == sizes[i]); /* control: the secret is there */
        CHECK(leaked_bytes("scrub:True", sizes[i]) == 0);
    }
}

/* scrub with a guard: the zeroes stop where the canary starts, and nothing is reported. */
static void test_scrub_with_guard(void)
{
    CHECK(leaked_bytes("scrub:True,guard:True", 4000) == 0);
}

/* A kernel that writes one byte at an offset from a block (an out-of-bounds write when outside). */
struct poke {
    uint8_t *at;
};

static void poke_run(void *arg) { *((struct poke *)arg)->at = 0x00; }

/* Allocates size bytes, lets a kernel write one byte at offset, frees: the status tide_free returns. */
static tide_status free_after_write(struct fixture *f, tide_stream s, size_t size, ptrdiff_t offset)
{
    uint8_t *p;
    CHECK_OK(tide_malloc(f->t, size, s, (void **)&p));
    struct poke k = {p + offset};
    CHECK_OK(tide_sim_enqueue(f->sim, s, 0, poke_run, &k));
    tide_status st = tide_free(f->t, p);
    CHECK_OK(tide_sim_stream_synchronize(f->sim, s));
    return st;
}

static void test_guard_catches_out_of_bounds_writes(void)
{
    struct fixture f;
    fixture_open(&f, 0, "guard:True");
    tide_stream s;
    CHECK_OK(tide_sim_stream_create(f.sim, &s));
    size_t sizes[] = {1, 1000, 1024, 2 * MIB, 7 * MIB + 3};
    for (size_t i = 0; i < sizeof sizes / sizeof *sizes; i++) {
        size_t n = sizes[i];
        CHECK_OK(free_after_write(&f, s, n, 0));
        CHECK_OK(free_after_write(&f, s, n, (ptrdiff_t)n - 1)); /* the last byte is the owner's */
        CHECK_STATUS(free_after_write(&f, s, n, (ptrdiff_t)n), TIDE_ECORRUPT); /* one past the end */
        CHECK_MESSAGE("after the end");
        char where[64];
        snprintf(where, sizeof where, "first at offset %zu", n);
        CHECK_MESSAGE(where);
        CHECK_STATUS(free_after_write(&f, s, n, (ptrdiff_t)n + 300), TIDE_ECORRUPT);
        CHECK_STATUS(free_after_write(&f, s, n, -1), TIDE_ECORRUPT); /* one before the start */
        CHECK_MESSAGE("before the start of the block were overwritten, the first at offset -1");
        CHECK_STATUS(free_after_write(&f, s, n, -512), TIDE_ECORRUPT);
    }
    /* The blocks were freed all the same: nothing is live, everything goes back. */
    CHECK(stats_of(f.t).allocation[TIDE_POOL_ALL].current == 0);
    CHECK_OK(tide_check(f.t));
    /* Every other call finds blocks by the pointer the user got. */
    void *p;
    CHECK_OK(tide_malloc(f.t, 4096, s, &p));
    CHECK((uintptr_t)p % 512 == 0);
    CHECK_OK(tide_retain(f.t, p));
    CHECK_OK(tide_record_stream(f.t, p, 0));
    CHECK_OK(tide_free(f.t, p));
    CHECK_OK(tide_release(f.t, p));
    CHECK_STATUS(tide_free(f.t, p), TIDE_EINVAL); /* a double free is still bad input */
    CHECK_STATUS(tide_free(f.t, (uint8_t *)p + 512), TIDE_EINVAL);
    CHECK_OK(tide_empty_cache(f.t, NULL));
    CHECK(reserved_of(f.t) == 0);
    fixture_close(&f);
}

/* Control: the same out-of-bounds writes without the guard go unseen. */
static void test_without_guard_nothing_is_seen(void)
{
    struct fixture f;
    fixture_open(&f, 0, NULL);
    CHECK_OK(free_after_write(&f, 0, 1000, 1000));
    CHECK_OK(free_after_write(&f, 0, 1000, 1100));
    fixture_close(&f);
}

/* A device that cannot fill or verify: the keys are refused at tide_create, saying why. */
static void test_backend_without_fill(void)
{
    tide_sim *sim;
    CHECK_OK(tide_sim_create(NULL, &sim));
    tide_backend be = tide_sim_backend(sim);
    be.fill = NULL;
    tide_allocator *t = NULL;
    CHECK_STATUS(tide_create(&be, "scrub:True", &t), TIDE_EUNSUPPORTED);
    CHECK_MESSAGE("fill");
    be = tide_sim_backend(sim);
    be.verify = NULL;
    CHECK_STATUS(tide_create(&be, "guard:True", &t), TIDE_EUNSUPPORTED);
    CHECK_MESSAGE("verify");
    CHECK_OK(tide_create(&be, "scrub:True", &t)); /* scrub needs no verify */
    CHECK_OK(tide_destroy(t));
    CHECK_STATUS(tide_create(&be, "scrub:yes", &t), TIDE_EINVAL);
    tide_sim_destroy(sim);
}

/* The device fails while preparing a block: the allocation fails, and nothing is lost. */
static void test_fill_fault(void)
{
    struct fixture f;
    fixture_open(&f, 0, "scrub:True");
    void *p;
    tide_sim_inject_fault(f.sim, TIDE_SIM_FILL, 0, 1);
    CHECK_STATUS(tide_malloc(f.t, 4096, 0, &p), TIDE_EDEVICE);
    CHECK_MESSAGE("scrubbing the block");
    CHECK(p == NULL);
    CHECK(stats_of(f.t).allocation[TIDE_POOL_ALL].current == 0);
    CHECK_OK(tide_check(f.t));
    CHECK_OK(tide_malloc(f.t, 4096, 0, &p));
    CHECK_OK(tide_free(f.t, p));
    fixture_close(&f);
}

/* The device fails the guard check itself: tide_free says so, and the block is freed all the same. */
static void test_verify_fault(void)
{
    struct fixture f;
    fixture_open(&f, 0, "guard:True");
    void *p;
    CHECK_OK(tide_malloc(f.t, 4096, 0, &p));
    tide_sim_inject_fault(f.sim, TIDE_SIM_VERIFY, 0, 1);
    CHECK_STATUS(tide_free(f.t, p), TIDE_EDEVICE);
    CHECK_MESSAGE("checking the block's guard on the sim device");
    CHECK(stats_of(f.t).allocation[TIDE_POOL_ALL].current == 0);
    CHECK_STATUS(tide_free(f.t, p), TIDE_EINVAL); /* it was freed */
    CHECK_OK(tide_check(f.t));
    /* A device error the free absorbs afterwards (a fence it could not record) does not replace the
     * words of the error it returns (found by the fuzzer). */
    tide_stream s2;
    CHECK_OK(tide_sim_stream_create(f.sim, &s2));
    CHECK_OK(tide_malloc(f.t, 4096, 0, &p));
    CHECK_OK(tide_record_stream(f.t, p, s2));
    tide_sim_inject_fault(f.sim, TIDE_SIM_VERIFY, 0, 1);
    tide_sim_inject_fault(f.sim, TIDE_SIM_FENCE_RECORD, 0, 1);
    CHECK_STATUS(tide_free(f.t, p), TIDE_EDEVICE);
    CHECK_MESSAGE("checking the block's guard");
    CHECK_OK(tide_empty_cache(f.t, NULL)); /* the owed synchronize settles the block */
    CHECK_OK(tide_check(f.t));
    fixture_close(&f);
}

int main(void)
{
    RUN(test_scrub_zeroes_before_reuse);
    RUN(test_scrub_with_guard);
    RUN(test_guard_catches_out_of_bounds_writes);
    RUN(test_without_guard_nothing_is_seen);
    RUN(test_backend_without_fill);
    RUN(test_fill_fault);
    RUN(test_verify_fault);
    return HARNESS_EXIT();
}

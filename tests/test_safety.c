/*
 * Use-after-free safety on the simulated device. A kernel that still writes a block after the program
 * freed it must not see that block handed to a new owner. The kernel is held at a gate until the new
 * owner has written its own data, so if tidepool reused the block too early, the old kernel's bytes
 * land in the new owner's block every time, not just when timing is unlucky.
 *
 * This file is also built against a sabotaged library (TIDE_BREAK_PENDING: frees skip the PENDING
 * state); that build must print "use-after-free detected" (tests/CMakeLists.txt), which shows these
 * tests catch the bug they are for.
 */
#include "harness.h"

#define ROUNDS 40
#define OLD_OWNER 0xAA
#define NEW_OWNER 0x55

static int detected;

static void report_corruption(const char *model, int round, const void *block, size_t offset)
{
    fprintf(stderr, "use-after-free detected (%s model, round %d): block %p byte %zu was overwritten "
            "by the kernel of its previous owner\n", model, round, block, offset);
    detected++;
    harness_failures++;
}

/* CUDA's model: the block belongs to stream A, stream B used it (record_stream), the program frees it
 * while B's kernel has not run yet, and allocates the same size on A at once. */
static void test_stream_use_model(void)
{
    struct fixture f;
    fixture_open(&f, 0, NULL);
    tide_stream a, b;
    CHECK_OK(tide_sim_stream_create(f.sim, &a));
    CHECK_OK(tide_sim_stream_create(f.sim, &b));
    for (int round = 0; round < ROUNDS; round++) {
        size_t size = (size_t)(round % 8 + 1) * 96 * 1024 + (round % 3) * MIB;
        struct gate gate;
        gate_init(&gate);
        void *x, *y;
        CHECK_OK(tide_malloc(f.t, size, a, &x));
        CHECK_OK(tide_record_stream(f.t, x, b));
        struct fill_kernel old_kernel = {&gate, x, size, OLD_OWNER, NULL};
        CHECK_OK(tide_sim_enqueue(f.sim, b, 0, fill_kernel_run, &old_kernel));
        CHECK_OK(tide_free(f.t, x));

        CHECK_OK(tide_malloc(f.t, size, a, &y));
        struct fill_kernel new_kernel = {NULL, y, size, NEW_OWNER, NULL};
        CHECK_OK(tide_sim_enqueue(f.sim, a, 0, fill_kernel_run, &new_kernel));
        CHECK_OK(tide_sim_stream_synchronize(f.sim, a));
        gate_open(&gate);
        CHECK_OK(tide_sim_synchronize(f.sim));

        size_t bad = first_mismatch(y, size, NEW_OWNER);
        if (bad != size)
            report_corruption("stream-use", round, y, bad);
        CHECK_OK(tide_free(f.t, y));
        gate_destroy(&gate);
    }
    /* Every fence signalled: nothing may stay pending once the device is idle. */
    CHECK_OK(tide_empty_cache(f.t, NULL));
    CHECK(stats_of(f.t).pending_free_blocks[TIDE_POOL_ALL].current == 0);
    CHECK_OK(tide_check(f.t));
    fixture_close(&f);
}

/* Metal's model: in-flight work holds a reference to the block; the program frees it and allocates the
 * same size on the same stream, then writes the new block from the host (shared memory) at once. */
static void test_reference_model(void)
{
    struct fixture f;
    fixture_open(&f, 0, NULL);
    tide_stream s;
    CHECK_OK(tide_sim_stream_create(f.sim, &s));
    for (int round = 0; round < ROUNDS; round++) {
        size_t size = (size_t)(round % 5 + 1) * 200 * 1024 + (round % 2) * 3 * MIB;
        struct gate gate;
        gate_init(&gate);
        void *x, *y;
        CHECK_OK(tide_malloc(f.t, size, s, &x));
        CHECK_OK(tide_retain(f.t, x));
        struct fill_kernel old_kernel = {&gate, x, size, OLD_OWNER, f.t};
        CHECK_OK(tide_sim_enqueue(f.sim, s, 0, fill_kernel_run, &old_kernel));
        CHECK_OK(tide_free(f.t, x));

        CHECK_OK(tide_malloc(f.t, size, s, &y));
        memset(y, NEW_OWNER, size);
        gate_open(&gate);
        CHECK_OK(tide_sim_synchronize(f.sim));

        size_t bad = first_mismatch(y, size, NEW_OWNER);
        if (bad != size)
            report_corruption("reference", round, y, bad);
        CHECK_OK(tide_free(f.t, y));
        gate_destroy(&gate);
    }
    CHECK(stats_of(f.t).pending_free_blocks[TIDE_POOL_ALL].current == 0);
    CHECK_OK(tide_check(f.t));
    fixture_close(&f);
}

/* Once the old kernel is done, the block is reusable: pending is a wait, never a leak. */
static void test_pending_block_comes_back(void)
{
    struct fixture f;
    fixture_open(&f, 0, NULL);
    tide_stream a, b;
    CHECK_OK(tide_sim_stream_create(f.sim, &a));
    CHECK_OK(tide_sim_stream_create(f.sim, &b));
    struct gate gate;
    gate_init(&gate);
    void *x, *y;
    CHECK_OK(tide_malloc(f.t, 4096, a, &x));
    CHECK_OK(tide_record_stream(f.t, x, b));
    struct fill_kernel k = {&gate, x, 4096, OLD_OWNER, NULL};
    CHECK_OK(tide_sim_enqueue(f.sim, b, 0, fill_kernel_run, &k));
    CHECK_OK(tide_free(f.t, x));
    CHECK(stats_of(f.t).pending_free_blocks[TIDE_POOL_ALL].current == 1);
    gate_open(&gate);
    CHECK_OK(tide_sim_synchronize(f.sim));
    CHECK_OK(tide_malloc(f.t, 4096, a, &y)); /* this malloc drains the signalled fence first */
    CHECK(y == x);
    CHECK(stats_of(f.t).num_pending_drained == 1);
    CHECK_OK(tide_free(f.t, y));
    gate_destroy(&gate);
    fixture_close(&f);
}

int main(void)
{
    RUN(test_stream_use_model);
    RUN(test_reference_model);
    RUN(test_pending_block_comes_back);
    if (detected)
        fprintf(stderr, "%d use-after-free(s) detected\n", detected);
    return HARNESS_EXIT();
}

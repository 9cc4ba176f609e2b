/*
 * Sleep and wake on the simulated device: a sleeping pool gives every page back (the device's mapped
 * pages and held bytes fall, the address ranges stay), every block keeps its address, offloaded
 * contents come back byte for byte after the wake, and the statistics count the pages apart. A wake
 * that runs out of memory leaves the pool asleep and whole; a device error in the middle of either
 * call leaves a state tide_check accepts, and the call made again finishes. A hundred cycles leave
 * reserved memory, host memory and the device's handles where they were.
 */
#include "harness.h"

#include <stdbool.h>

#define ALL TIDE_POOL_ALL

static tide_sim_counters counters(tide_sim *sim)
{
    tide_sim_counters c;
    tide_sim_get_counters(sim, &c);
    return c;
}

static tide_pool_id sleepable_pool(tide_allocator *t)
{
    tide_pool_id pool = 0;
    CHECK_OK(tide_pool_create(t, &pool));
    CHECK_OK(tide_pool_make_sleepable(t, pool));
    return pool;
}

static uint32_t sleeping(tide_allocator *t, tide_pool_id pool)
{
    uint32_t out = 99;
    CHECK_OK(tide_pool_sleeping(t, pool, &out));
    return out;
}

/* Blocks of a few sizes in the pool, each stamped with its own byte. */
#define NBLOCKS 6
static const size_t sizes[NBLOCKS] = {4096, 700 * 1024, 3 * MIB, 5 * MIB, 12 * MIB, 512};

static void fill_pool(tide_allocator *t, tide_pool_id pool, uint8_t *p[NBLOCKS])
{
    for (int i = 0; i < NBLOCKS; i++) {
        CHECK_OK(tide_malloc_pool(t, sizes[i], 0, pool, (void **)&p[i]));
        if (p[i])
            memset(p[i], 0x40 + i, sizes[i]);
    }
}

static bool pool_intact(uint8_t *const p[NBLOCKS])
{
    for (int i = 0; i < NBLOCKS; i++)
        if (first_mismatch(p[i], sizes[i], (uint8_t)(0x40 + i)) != sizes[i])
            return false;
    return true;
}

static void free_all(tide_allocator *t, uint8_t *p[NBLOCKS])
{
    for (int i = 0; i < NBLOCKS; i++)
        CHECK_OK(tide_free(t, p[i]));
}

/* Discard and offload, over an allocator with and without expandable segments: the pages go, the
 * addresses stay, the contents come back (offload). */
static void sleep_and_wake(const char *conf, unsigned flags)
{
    struct fixture f;
    fixture_open(&f, 4 * GIB, conf);
    void *outside;
    CHECK_OK(tide_malloc(f.t, 5 * MIB, 0, &outside)); /* memory outside the pool stays as it is */
    tide_pool_id pool = sleepable_pool(f.t);
    uint8_t *p[NBLOCKS];
    fill_pool(f.t, pool, p);
    size_t pool_reserved = 0, pool_allocated = 0;
    CHECK_OK(tide_pool_memory(f.t, pool, &pool_reserved, &pool_allocated));
    tide_stats before = stats_of(f.t);
    uint64_t held = held_by_device(f.sim), maps = counters(f.sim).calls[TIDE_SIM_MAP];
    uint64_t ranges = counters(f.sim).va_ranges;

    CHECK_OK(tide_pool_sleep(f.t, pool, flags));
    CHECK(sleeping(f.t, pool) == 1);
    CHECK_OK(tide_check(f.t));
    tide_sim_counters c = counters(f.sim);
    /* every page of the pool went back to the device, and no address range */
    CHECK(held - c.held_bytes == pool_reserved);
    CHECK(c.va_ranges == ranges);
    tide_stats s = stats_of(f.t);
    CHECK(s.reserved_bytes[ALL].current == before.reserved_bytes[ALL].current - (int64_t)pool_reserved);
    CHECK(s.asleep_bytes[ALL].current == (int64_t)pool_reserved);
    CHECK(s.allocated_bytes[ALL].current == before.allocated_bytes[ALL].current); /* the tensors live */
    CHECK(s.reserved_bytes[ALL].current + s.asleep_bytes[ALL].current ==
          s.allocated_bytes[ALL].current + s.pending_free_bytes[ALL].current + s.cached_bytes[ALL].current);
    if (flags & TIDE_SLEEP_OFFLOAD) { /* the blocks' contents, not the pool's cache */
        CHECK(c.host_bytes >= pool_allocated && c.host_bytes < pool_allocated + 4 * MIB);
        CHECK(s.offloaded_bytes[ALL].current == (int64_t)c.host_bytes);
    } else {
        CHECK(c.host_bytes == 0 && s.offloaded_bytes[ALL].current == 0);
    }
    size_t reserved_now = 1;
    CHECK_OK(tide_pool_memory(f.t, pool, &reserved_now, NULL));
    CHECK(reserved_now == 0);
    /* every block keeps its address: the pointer is still the pool's */
    for (int i = 0; i < NBLOCKS; i++) {
        tide_pool_id of = 0;
        CHECK_OK(tide_pool_of(f.t, p[i], &of));
        CHECK(of == pool);
    }
    void *q = (void *)1;
    CHECK_STATUS(tide_malloc_pool(f.t, 4096, 0, pool, &q), TIDE_EINVAL);
    CHECK_MESSAGE("asleep");
    CHECK(q == NULL);
    char *snapshot = NULL; /* the snapshot says which segments sleep */
    CHECK_OK(tide_snapshot_json(f.t, &snapshot));
    CHECK(snapshot && strstr(snapshot, "\"asleep\": true") && strstr(snapshot, "\"asleep\": false"));
    tide_string_free(snapshot);
    /* a second sleep has nothing left to do */
    CHECK_OK(tide_pool_sleep(f.t, pool, flags));
    CHECK(counters(f.sim).calls[TIDE_SIM_UNMAP] == c.calls[TIDE_SIM_UNMAP]);
    /* the cache outside the pool is not the pool's: empty_cache leaves the sleeping pool alone */
    CHECK_OK(tide_empty_cache(f.t, NULL));
    CHECK_OK(tide_check(f.t));

    uint64_t copied = c.host_bytes;
    CHECK_OK(tide_pool_wake(f.t, pool));
    CHECK(sleeping(f.t, pool) == 0);
    CHECK_OK(tide_check(f.t));
    c = counters(f.sim);
    /* the host buffer stays for the pool's next offload, counted */
    CHECK(c.host_bytes == copied && stats_of(f.t).sleep_host_cached_bytes == copied);
    CHECK_OK(tide_pool_memory(f.t, pool, &reserved_now, NULL));
    CHECK(reserved_now == pool_reserved);
    s = stats_of(f.t);
    CHECK(s.asleep_bytes[ALL].current == 0 && s.offloaded_bytes[ALL].current == 0);
    /* one map call per run of the pool: here the blocks lie in one or two runs */
    CHECK(c.calls[TIDE_SIM_MAP] - maps <= 2);
    if (flags & TIDE_SLEEP_OFFLOAD)
        CHECK(pool_intact(p));
    /* the pool takes allocations again, and its blocks are its own */
    void *r = NULL;
    CHECK_OK(tide_malloc_pool(f.t, 4096, 0, pool, &r));
    memset(r, 1, 4096);
    CHECK_OK(tide_free(f.t, r));
    if (flags & TIDE_SLEEP_OFFLOAD) { /* the next sleep copies into the kept buffer: no new pinning */
        uint64_t host_allocs = counters(f.sim).calls[TIDE_SIM_HOST_ALLOC];
        CHECK_OK(tide_pool_sleep(f.t, pool, flags));
        CHECK(counters(f.sim).calls[TIDE_SIM_HOST_ALLOC] == host_allocs);
        CHECK(stats_of(f.t).sleep_host_cached_bytes == 0 && counters(f.sim).host_bytes == copied);
        CHECK_OK(tide_pool_wake(f.t, pool));
        CHECK(pool_intact(p));
        CHECK_OK(tide_empty_cache(f.t, NULL)); /* device memory only: the pool's buffer stays */
        CHECK(counters(f.sim).host_bytes == copied);
        CHECK_OK(tide_pool_empty_cache(f.t, pool, NULL)); /* the pool's: it goes */
        CHECK(counters(f.sim).host_bytes == 0 && counters(f.sim).host_buffers == 0);
        CHECK(stats_of(f.t).sleep_host_cached_bytes == 0);
        CHECK_OK(tide_check(f.t));
    }
    free_all(f.t, p);
    CHECK_OK(tide_free(f.t, outside));
    CHECK_OK(tide_pool_release(f.t, pool));
    CHECK_OK(tide_empty_cache(f.t, NULL));
    CHECK(held_by_device(f.sim) == 0);
    CHECK_OK(tide_check(f.t));
    fixture_close(&f);
}

static void test_discard(void) { sleep_and_wake("", TIDE_SLEEP_DISCARD); }
static void test_offload(void) { sleep_and_wake("", TIDE_SLEEP_OFFLOAD); }
static void test_offload_expandable(void) { sleep_and_wake("expandable_segments:True", TIDE_SLEEP_OFFLOAD); }
static void test_discard_expandable_guard(void)
{
    sleep_and_wake("expandable_segments:True,guard:True", TIDE_SLEEP_DISCARD);
}

/* Blocks freed while the pool sleeps (under guard:True too, whose canaries went with the pages), and
 * a free the device still held before the sleep: drained by the sleep's synchronize, not copied. */
static void test_frees_while_asleep(void)
{
    struct fixture f;
    fixture_open(&f, 4 * GIB, "guard:True");
    tide_stream s1;
    CHECK_OK(tide_sim_stream_create(f.sim, &s1));
    tide_pool_id pool = sleepable_pool(f.t);
    uint8_t *keep, *pending, *later;
    CHECK_OK(tide_malloc_pool(f.t, 8 * MIB, 0, pool, (void **)&keep));
    CHECK_OK(tide_malloc_pool(f.t, 8 * MIB, 0, pool, (void **)&pending));
    CHECK_OK(tide_malloc_pool(f.t, 8 * MIB, 0, pool, (void **)&later));
    memset(keep, 7, 8 * MIB);
    struct fill_kernel k = {NULL, pending, 8 * MIB, 3, NULL};
    CHECK_OK(tide_sim_enqueue(f.sim, s1, 20000, fill_kernel_run, &k));
    CHECK_OK(tide_record_stream(f.t, pending, s1));
    CHECK_OK(tide_free(f.t, pending)); /* pending: s1's kernel still runs */
    CHECK(stats_of(f.t).pending_free_bytes[ALL].current > 0);
    CHECK_OK(tide_pool_sleep(f.t, pool, TIDE_SLEEP_OFFLOAD));
    tide_stats s = stats_of(f.t);
    CHECK(s.pending_free_bytes[ALL].current == 0); /* drained before the pages went */
    CHECK(s.offloaded_bytes[ALL].current < (int64_t)(24 * MIB)); /* the two live blocks (and the gap between) */
    CHECK_OK(tide_free(f.t, later)); /* allowed while asleep; nothing of it is touched */
    CHECK_OK(tide_check(f.t));
    CHECK_OK(tide_pool_wake(f.t, pool));
    CHECK(first_mismatch(keep, 8 * MIB, 7) == 8 * MIB);
    CHECK_OK(tide_free(f.t, keep));
    CHECK_OK(tide_check(f.t));
    CHECK_OK(tide_pool_release(f.t, pool));
    fixture_close(&f);
}

/* A wake with too little room: cached memory outside the pool goes first; if that is not enough, the
 * pool stays asleep and whole, the message says how much it needs, and a later wake succeeds. */
static void test_wake_out_of_memory(void)
{
    struct fixture f;
    fixture_open(&f, 256 * MIB, "");
    tide_pool_id pool = sleepable_pool(f.t);
    uint8_t *p[NBLOCKS];
    fill_pool(f.t, pool, p);
    CHECK_OK(tide_pool_sleep(f.t, pool, TIDE_SLEEP_OFFLOAD));
    /* the device is filled outside the pool, then freed: cached, which the wake releases */
    void *big;
    CHECK_OK(tide_malloc(f.t, 240 * MIB, 0, &big));
    CHECK_OK(tide_free(f.t, big));
    CHECK_OK(tide_pool_wake(f.t, pool));
    CHECK(pool_intact(p));
    CHECK_OK(tide_check(f.t));
    CHECK_OK(tide_pool_sleep(f.t, pool, TIDE_SLEEP_OFFLOAD));
    /* now held: the wake cannot have it */
    CHECK_OK(tide_malloc(f.t, 240 * MIB, 0, &big));
    tide_sim_counters before = counters(f.sim);
    tide_stats s_before = stats_of(f.t);
    CHECK_STATUS(tide_pool_wake(f.t, pool), TIDE_ENOMEM);
    CHECK_MESSAGE("needs");
    CHECK_MESSAGE("stays asleep");
    CHECK(sleeping(f.t, pool) == 1);
    CHECK_OK(tide_check(f.t));
    tide_sim_counters after = counters(f.sim);
    CHECK(after.held_bytes == before.held_bytes && after.host_bytes == before.host_bytes);
    CHECK(stats_of(f.t).asleep_bytes[ALL].current == s_before.asleep_bytes[ALL].current);
    CHECK_OK(tide_free(f.t, big));
    CHECK_OK(tide_pool_wake(f.t, pool));
    CHECK(pool_intact(p));
    free_all(f.t, p);
    CHECK_OK(tide_pool_release(f.t, pool));
    CHECK_OK(tide_check(f.t));
    fixture_close(&f);
}

/* A device error at each step of sleep and of wake: the pool stays asleep, tide_check accepts the
 * state, and the same call made again finishes; the contents survive. */
static void test_faults_then_repeat(void)
{
    const tide_sim_op sleep_ops[] = {TIDE_SIM_SYNCHRONIZE, TIDE_SIM_HOST_ALLOC, TIDE_SIM_COPY_TO_HOST,
                                     TIDE_SIM_UNMAP};
    const tide_sim_op wake_ops[] = {TIDE_SIM_MAP, TIDE_SIM_COPY_TO_DEVICE};
    for (size_t k = 0; k < sizeof sleep_ops / sizeof sleep_ops[0] + sizeof wake_ops / sizeof wake_ops[0]; k++) {
        for (uint32_t skip = 0; skip < 3; skip++) {
            bool in_sleep = k < sizeof sleep_ops / sizeof sleep_ops[0];
            tide_sim_op op = in_sleep ? sleep_ops[k] : wake_ops[k - sizeof sleep_ops / sizeof sleep_ops[0]];
            struct fixture f;
            fixture_open(&f, 4 * GIB, "");
            tide_pool_id pool = sleepable_pool(f.t);
            uint8_t *p[NBLOCKS];
            fill_pool(f.t, pool, p);
            void *spread; /* a second run: a block past a gap of unmapped pages */
            CHECK_OK(tide_malloc_pool(f.t, 16 * MIB, 0, pool, &spread));
            if (!in_sleep)
                CHECK_OK(tide_pool_sleep(f.t, pool, TIDE_SLEEP_OFFLOAD));
            /* a map that fails is out of memory: the wake releases cache and tries once more */
            tide_sim_inject_fault(f.sim, op, skip, op == TIDE_SIM_MAP ? 2 : 1);
            tide_status s = in_sleep ? tide_pool_sleep(f.t, pool, TIDE_SLEEP_OFFLOAD) : tide_pool_wake(f.t, pool);
            tide_sim_inject_fault(f.sim, op, 0, 0); /* a fault the call did not reach is dropped */
            bool failed = counters(f.sim).failures[op] > 0;
            CHECK(failed == (s != TIDE_OK));
            if (failed != (s != TIDE_OK))
                fprintf(stderr, "  op %s skip %u: %s (%s)\n", tide_sim_op_name(op), skip, tide_status_name(s),
                        tide_last_error());
            CHECK_OK(tide_check(f.t));
            if (failed) {
                CHECK(*tide_last_error() != '\0');
                if (!(in_sleep && op == TIDE_SIM_SYNCHRONIZE))
                    CHECK(sleeping(f.t, pool) == 1);
            }
            if (in_sleep)
                CHECK_OK(tide_pool_sleep(f.t, pool, TIDE_SLEEP_OFFLOAD));
            CHECK_OK(tide_check(f.t));
            CHECK_OK(tide_pool_wake(f.t, pool));
            CHECK_OK(tide_check(f.t));
            CHECK(sleeping(f.t, pool) == 0);
            /* a sleep interrupted after some runs' copies were taken still brings back every block */
            if (!(in_sleep && op == TIDE_SIM_UNMAP && failed))
                CHECK(pool_intact(p));
            CHECK(counters(f.sim).host_bytes == stats_of(f.t).sleep_host_cached_bytes);
            free_all(f.t, p);
            CHECK_OK(tide_free(f.t, spread));
            CHECK_OK(tide_pool_release(f.t, pool));
            CHECK(counters(f.sim).host_bytes == 0);
            fixture_close(&f);
        }
    }
}

/* Destroying the allocator while a pool sleeps gives back everything: pages, ranges, host copies. */
static void test_destroy_while_asleep(void)
{
    struct fixture f;
    fixture_open(&f, 4 * GIB, "");
    tide_pool_id pool = sleepable_pool(f.t);
    uint8_t *p[NBLOCKS];
    fill_pool(f.t, pool, p);
    CHECK_OK(tide_pool_sleep(f.t, pool, TIDE_SLEEP_OFFLOAD));
    free_all(f.t, p);
    CHECK_OK(tide_pool_release(f.t, pool)); /* released asleep: its memory waits for the wake or the end */
    CHECK_OK(tide_empty_cache(f.t, NULL));
    CHECK(counters(f.sim).host_bytes > 0);
    CHECK_OK(tide_check(f.t));
    CHECK_OK(tide_destroy(f.t));
    tide_sim_counters c = counters(f.sim);
    CHECK(c.held_bytes == 0 && c.host_bytes == 0 && c.va_ranges == 0 && c.live_fences == 0);
    tide_sim_destroy(f.sim);
}

/* A released pool that wakes gives its memory back at the next empty_cache. */
static void test_released_then_woken(void)
{
    struct fixture f;
    fixture_open(&f, 4 * GIB, "");
    tide_pool_id pool = sleepable_pool(f.t);
    void *a;
    CHECK_OK(tide_malloc_pool(f.t, 16 * MIB, 0, pool, &a));
    CHECK_OK(tide_pool_sleep(f.t, pool, TIDE_SLEEP_DISCARD));
    CHECK_OK(tide_pool_release(f.t, pool));
    CHECK_OK(tide_free(f.t, a));
    CHECK_OK(tide_pool_wake(f.t, pool));
    CHECK(held_by_device(f.sim) > 0);
    CHECK_OK(tide_empty_cache(f.t, NULL));
    CHECK(held_by_device(f.sim) == 0);
    CHECK_OK(tide_check(f.t));
    fixture_close(&f);
}

/* Bad input changes nothing. */
static void test_bad_input(void)
{
    struct fixture f;
    fixture_open(&f, 4 * GIB, "");
    tide_pool_id plain = 0, pool = sleepable_pool(f.t);
    CHECK_OK(tide_pool_create(f.t, &plain));
    void *a;
    CHECK_OK(tide_malloc_pool(f.t, 4096, 0, plain, &a));
    CHECK_STATUS(tide_pool_make_sleepable(f.t, plain), TIDE_EINVAL); /* it holds memory */
    CHECK_MESSAGE("right after tide_pool_create");
    CHECK_STATUS(tide_pool_sleep(f.t, plain, 0), TIDE_EINVAL);
    CHECK_MESSAGE("not sleepable");
    CHECK_STATUS(tide_pool_wake(f.t, plain), TIDE_EINVAL);
    CHECK_STATUS(tide_pool_sleep(f.t, 0, 0), TIDE_EINVAL);
    CHECK_STATUS(tide_pool_sleep(f.t, 12345, 0), TIDE_EINVAL);
    CHECK_STATUS(tide_pool_sleep(f.t, pool, 6), TIDE_EINVAL);
    CHECK_MESSAGE("unknown flags");
    CHECK_STATUS(tide_pool_sleeping(f.t, pool, NULL), TIDE_EINVAL);
    CHECK(sleeping(f.t, pool) == 0);
    CHECK_OK(tide_capture_begin(f.t));
    CHECK_STATUS(tide_pool_sleep(f.t, pool, 0), TIDE_EBUSY);
    CHECK_OK(tide_capture_end(f.t));
    CHECK(sleeping(f.t, pool) == 0);
    CHECK_OK(tide_pool_wake(f.t, pool)); /* awake: nothing to do */
    /* tide_pool_restore refuses a sleeping pool */
    void *b;
    CHECK_OK(tide_malloc_pool(f.t, 4096, 0, pool, &b));
    tide_pool_block blocks[1];
    size_t n = 0;
    CHECK_OK(tide_pool_blocks(f.t, pool, blocks, 1, &n));
    CHECK_OK(tide_pool_sleep(f.t, pool, 0));
    CHECK_STATUS(tide_pool_restore(f.t, pool, blocks, n), TIDE_EINVAL);
    CHECK_MESSAGE("asleep");
    CHECK_OK(tide_pool_wake(f.t, pool));
    CHECK_OK(tide_free(f.t, b));
    CHECK_OK(tide_free(f.t, a));
    CHECK_OK(tide_check(f.t));
    CHECK_OK(tide_pool_release(f.t, plain));
    CHECK_OK(tide_pool_release(f.t, pool));
    fixture_close(&f);
}

/* A backend without virtual memory cannot keep addresses; one without the host calls cannot offload. */
static void test_backend_without_calls(void)
{
    tide_sim *sim;
    CHECK_OK(tide_sim_create(NULL, &sim));
    tide_backend be = tide_sim_backend(sim);
    be.host_alloc = NULL;
    tide_allocator *t;
    CHECK_OK(tide_create(&be, "", &t));
    tide_pool_id pool = sleepable_pool(t);
    CHECK_STATUS(tide_pool_sleep(t, pool, TIDE_SLEEP_OFFLOAD), TIDE_EUNSUPPORTED);
    CHECK(sleeping(t, pool) == 0);
    CHECK_OK(tide_destroy(t));
    be = tide_sim_backend(sim);
    be.map = NULL;
    be.unmap = NULL;
    be.va_reserve = NULL;
    be.va_release = NULL;
    be.page_size = 0;
    CHECK_OK(tide_create(&be, "", &t));
    CHECK_OK(tide_pool_create(t, &pool));
    CHECK_STATUS(tide_pool_make_sleepable(t, pool), TIDE_EUNSUPPORTED);
    CHECK_OK(tide_destroy(t));
    tide_sim_destroy(sim);
}

/* A hundred cycles: reserved memory, host memory, the device's mappings and ranges end where they
 * began, and each wake maps in as few calls as the first. */
static void test_hundred_cycles(void)
{
    struct fixture f;
    fixture_open(&f, 4 * GIB, "");
    tide_pool_id weights = sleepable_pool(f.t), kv = sleepable_pool(f.t);
    uint8_t *p[NBLOCKS];
    fill_pool(f.t, weights, p);
    void *cache;
    CHECK_OK(tide_malloc_pool(f.t, 64 * MIB, 0, kv, &cache));
    tide_sim_counters start = counters(f.sim);
    int64_t reserved = reserved_of(f.t);
    uint64_t first_maps = 0, first_host = 0, first_buffers = 0, host_allocs = 0;
    for (int cycle = 0; cycle < 100; cycle++) {
        CHECK_OK(tide_pool_sleep(f.t, weights, TIDE_SLEEP_OFFLOAD));
        CHECK_OK(tide_pool_sleep(f.t, kv, TIDE_SLEEP_DISCARD));
        void *train; /* the other phase uses the memory */
        CHECK_OK(tide_malloc(f.t, 96 * MIB, 0, &train));
        memset(train, 0xEE, 4 * MIB); /* (its first pages: touching all of it only costs time here) */
        CHECK_OK(tide_free(f.t, train));
        uint64_t maps = counters(f.sim).calls[TIDE_SIM_MAP];
        CHECK_OK(tide_pool_wake(f.t, weights));
        CHECK_OK(tide_pool_wake(f.t, kv));
        maps = counters(f.sim).calls[TIDE_SIM_MAP] - maps;
        if (cycle == 0)
            first_maps = maps;
        CHECK(maps == first_maps);
        CHECK_OK(tide_empty_cache(f.t, NULL)); /* the trainer's cache goes, the pools' stay */
        /* host memory: the weights' buffers (one per run), pinned by the first cycle, reused by every
         * other */
        tide_sim_counters now = counters(f.sim);
        if (cycle == 0) {
            first_host = now.host_bytes;
            first_buffers = now.host_buffers;
            host_allocs = now.calls[TIDE_SIM_HOST_ALLOC];
        }
        CHECK(now.host_bytes == first_host && now.host_buffers == first_buffers);
        CHECK(now.calls[TIDE_SIM_HOST_ALLOC] == host_allocs);
    }
    CHECK(pool_intact(p));
    tide_sim_counters end = counters(f.sim);
    CHECK(reserved_of(f.t) == reserved);
    CHECK(end.held_bytes == start.held_bytes);
    CHECK(first_host > 0 && end.host_bytes == first_host);
    CHECK(end.va_ranges <= start.va_ranges + 1); /* the trainer's stream has its range, if any */
    CHECK(end.live_fences == start.live_fences);
    CHECK_OK(tide_check(f.t));
    free_all(f.t, p);
    CHECK_OK(tide_free(f.t, cache));
    CHECK_OK(tide_pool_release(f.t, weights)); /* its last release: the kept buffer goes */
    CHECK(counters(f.sim).host_bytes == 0 && counters(f.sim).host_buffers == 0);
    CHECK_OK(tide_pool_release(f.t, kv));
    fixture_close(&f);
}

int main(void)
{
    RUN(test_discard);
    RUN(test_offload);
    RUN(test_offload_expandable);
    RUN(test_discard_expandable_guard);
    RUN(test_frees_while_asleep);
    RUN(test_wake_out_of_memory);
    RUN(test_faults_then_repeat);
    RUN(test_destroy_while_asleep);
    RUN(test_released_then_woken);
    RUN(test_bad_input);
    RUN(test_backend_without_calls);
    RUN(test_hundred_cycles);
    return HARNESS_EXIT();
}

/*
 * Capture is a property of a stream: while one stream captures a graph, its own pending frees wait
 * (its fences may not be queried) and the rest of the device drains as usual; what acts on the whole
 * device (synchronize, release, empty_cache, trim) waits for every capture. Allocating to a private
 * pool is not a capture: a pool routes allocations and nothing else, so the out-of-memory ladder,
 * draining and tide_empty_cache go on (PyTorch's use_mem_pool).
 */
#include "harness.h"

#define ALL TIDE_POOL_ALL

static tide_sim_counters counters(tide_sim *sim)
{
    tide_sim_counters c;
    tide_sim_get_counters(sim, &c);
    return c;
}

/* A block on stream, used by side and freed: PENDING behind a fence on side. */
static void *pending_on(struct fixture *f, tide_stream stream, tide_stream side)
{
    void *p = NULL;
    CHECK_OK(tide_malloc(f->t, 1000, stream, &p));
    CHECK_OK(tide_record_stream(f->t, p, side));
    CHECK_OK(tide_sim_enqueue(f->sim, side, 1000, NULL, NULL));
    CHECK_OK(tide_free(f->t, p));
    return p;
}

static int64_t pending_blocks(tide_allocator *t) { return stats_of(t).pending_free_blocks[ALL].current; }

/* One stream captures: its pending block waits, another stream's drains, and the device-wide calls
 * wait for the capture's end. */
static void test_a_capture_holds_back_only_its_stream(void)
{
    struct fixture f;
    fixture_open(&f, 0, NULL);
    tide_stream capturing, other, side;
    CHECK_OK(tide_sim_stream_create(f.sim, &capturing));
    CHECK_OK(tide_sim_stream_create(f.sim, &other));
    CHECK_OK(tide_sim_stream_create(f.sim, &side));
    pending_on(&f, capturing, side);
    pending_on(&f, other, side);
    CHECK_OK(tide_sim_synchronize(f.sim)); /* both fences have signalled; nobody has asked yet */
    CHECK(pending_blocks(f.t) == 2);

    CHECK_OK(tide_capture_begin_stream(f.t, capturing));
    uint32_t depth = 9;
    CHECK_OK(tide_capturing(f.t, capturing, &depth));
    CHECK(depth == 1);
    CHECK_OK(tide_capturing(f.t, other, &depth));
    CHECK(depth == 0);
    tide_sim_counters before = counters(f.sim);
    void *big;
    CHECK_OK(tide_malloc(f.t, 30 * MIB, capturing, &big)); /* no fit: a poll, not of this stream */
    CHECK(pending_blocks(f.t) == 2);
    CHECK(counters(f.sim).calls[TIDE_SIM_FENCE_QUERY] == before.calls[TIDE_SIM_FENCE_QUERY]);
    void *elsewhere;
    CHECK_OK(tide_malloc(f.t, 30 * MIB, other, &elsewhere)); /* the other stream drains */
    CHECK(pending_blocks(f.t) == 1);
    CHECK_STATUS(tide_empty_cache(f.t, NULL), TIDE_EBUSY);
    CHECK_STATUS(tide_trim(f.t, 0, NULL), TIDE_EBUSY);
    CHECK(counters(f.sim).calls[TIDE_SIM_SYNCHRONIZE] == before.calls[TIDE_SIM_SYNCHRONIZE]);
    CHECK_OK(tide_check(f.t));

    CHECK_OK(tide_capture_end_stream(f.t, capturing));
    void *after;
    CHECK_OK(tide_malloc(f.t, 40 * MIB, capturing, &after)); /* the capture is over: it drains */
    CHECK(pending_blocks(f.t) == 0);
    CHECK_OK(tide_free(f.t, big));
    CHECK_OK(tide_free(f.t, elsewhere));
    CHECK_OK(tide_free(f.t, after));
    CHECK_OK(tide_empty_cache(f.t, NULL));
    CHECK(reserved_of(f.t) == 0);
    fixture_close(&f);
}

/* Captures nest per stream, and several streams capture at once; a capture begun without a stream
 * holds back every stream, as before. */
static void test_captures_nest_and_count(void)
{
    struct fixture f;
    fixture_open(&f, 0, NULL);
    tide_stream a, b;
    CHECK_OK(tide_sim_stream_create(f.sim, &a));
    CHECK_OK(tide_sim_stream_create(f.sim, &b));
    uint32_t depth = 0;
    CHECK_OK(tide_capture_begin_stream(f.t, a));
    CHECK_OK(tide_capture_begin_stream(f.t, a));
    CHECK_OK(tide_capture_begin_stream(f.t, b));
    CHECK_OK(tide_capturing(f.t, a, &depth));
    CHECK(depth == 2);
    CHECK_OK(tide_capture_begin(f.t));
    CHECK_OK(tide_capturing(f.t, 0, &depth));
    CHECK(depth == 1); /* the capture without a stream holds every stream back */
    CHECK_OK(tide_capture_end(f.t));
    CHECK_OK(tide_capture_end_stream(f.t, a));
    CHECK_OK(tide_capture_end_stream(f.t, b));
    CHECK_STATUS(tide_empty_cache(f.t, NULL), TIDE_EBUSY); /* a's outer capture is still underway */
    CHECK_OK(tide_capture_end_stream(f.t, a));
    CHECK_OK(tide_empty_cache(f.t, NULL));
    fixture_close(&f);
}

/* Bad input changes nothing: ending a capture that did not begin, more streams than the table holds,
 * a NULL out. */
static void test_bad_captures_change_nothing(void)
{
    struct fixture f;
    fixture_open(&f, 0, NULL);
    CHECK_STATUS(tide_capture_end_stream(f.t, 7), TIDE_EINVAL);
    CHECK_MESSAGE("is not capturing");
    CHECK_STATUS(tide_capture_end(f.t), TIDE_EINVAL);
    CHECK_OK(tide_capture_begin_stream(f.t, 7));
    CHECK_STATUS(tide_capture_end(f.t), TIDE_EINVAL); /* a stream's capture is not tide_capture_begin's */
    CHECK_STATUS(tide_capture_end_stream(f.t, 8), TIDE_EINVAL);
    CHECK_OK(tide_capture_end_stream(f.t, 7));
    for (tide_stream s = 100; s < 164; s++)
        CHECK_OK(tide_capture_begin_stream(f.t, s));
    CHECK_STATUS(tide_capture_begin_stream(f.t, 164), TIDE_EINVAL);
    CHECK_MESSAGE("64 streams are capturing");
    uint32_t depth = 5;
    CHECK_OK(tide_capturing(f.t, 164, &depth));
    CHECK(depth == 0);
    CHECK_STATUS(tide_capturing(f.t, 164, NULL), TIDE_EINVAL);
    for (tide_stream s = 100; s < 164; s++)
        CHECK_OK(tide_capture_end_stream(f.t, s));
    CHECK_OK(tide_empty_cache(f.t, NULL)); /* every capture ended: nothing left behind */
    fixture_close(&f);
}

/* A pool scope (PyTorch's use_mem_pool) begins no capture: inside it the ladder runs, pending frees
 * drain and the cache empties, the pool's own idle segments kept while it is in use. */
static void test_a_pool_is_not_a_capture(void)
{
    struct fixture f;
    fixture_open(&f, 0, "limit:80MiB,trim_on_growth:False");
    tide_stream side;
    CHECK_OK(tide_sim_stream_create(f.sim, &side));
    tide_pool_id pool;
    CHECK_OK(tide_pool_create(f.t, &pool));
    void *in_pool, *cached;
    CHECK_OK(tide_malloc_pool(f.t, 8 * MIB, 0, pool, &in_pool));
    CHECK_OK(tide_malloc(f.t, 40 * MIB, 0, &cached));
    CHECK_OK(tide_free(f.t, cached));
    pending_on(&f, 0, side);
    CHECK_OK(tide_sim_synchronize(f.sim));
    void *big;
    CHECK_OK(tide_malloc_pool(f.t, 50 * MIB, 0, pool, &big)); /* the ladder releases the 40 MiB */
    CHECK(stats_of(f.t).num_alloc_retries == 1);
    CHECK(pending_blocks(f.t) == 0);
    CHECK_OK(tide_free(f.t, big));
    CHECK_OK(tide_empty_cache(f.t, NULL)); /* works; the pool in use keeps its memory */
    size_t reserved = 0;
    CHECK_OK(tide_pool_memory(f.t, pool, &reserved, NULL));
    CHECK(reserved >= 58 * MIB);
    CHECK_OK(tide_free(f.t, in_pool));
    CHECK_OK(tide_pool_release(f.t, pool));
    CHECK_OK(tide_empty_cache(f.t, NULL));
    CHECK(reserved_of(f.t) == 0);
    fixture_close(&f);
}

/* Emptying one pool's cache (PyTorch's empty_cache of a MemPool) gives back its idle segments, in use
 * or not, and leaves other pools and the memory outside pools cached. */
static void test_empty_one_pool(void)
{
    struct fixture f;
    fixture_open(&f, 0, "trim_on_growth:False");
    tide_pool_id one, other;
    CHECK_OK(tide_pool_create(f.t, &one));
    CHECK_OK(tide_pool_create(f.t, &other));
    void *a, *b, *c, *live;
    CHECK_OK(tide_malloc_pool(f.t, 30 * MIB, 0, one, &a));
    CHECK_OK(tide_malloc_pool(f.t, 12 * MIB, 0, one, &live));
    CHECK_OK(tide_malloc_pool(f.t, 30 * MIB, 0, other, &b));
    CHECK_OK(tide_malloc(f.t, 30 * MIB, 0, &c));
    CHECK_OK(tide_free(f.t, a));
    CHECK_OK(tide_free(f.t, b));
    CHECK_OK(tide_free(f.t, c));
    int64_t before = reserved_of(f.t);
    tide_release_report r;
    CHECK_OK(tide_pool_empty_cache(f.t, one, &r));
    CHECK(r.released_bytes == 30 * MIB && r.released_segments == 1);
    CHECK(reserved_of(f.t) == before - (int64_t)(30 * MIB));
    size_t reserved = 0;
    CHECK_OK(tide_pool_memory(f.t, one, &reserved, NULL));
    CHECK(reserved == 12 * MIB); /* its live block's segment stays */
    CHECK_OK(tide_pool_memory(f.t, other, &reserved, NULL));
    CHECK(reserved == 30 * MIB);
    CHECK_STATUS(tide_pool_empty_cache(f.t, 999, NULL), TIDE_EINVAL);
    CHECK(reserved_of(f.t) == before - (int64_t)(30 * MIB)); /* bad input changed nothing */
    CHECK_OK(tide_capture_begin_stream(f.t, 0));
    CHECK_STATUS(tide_pool_empty_cache(f.t, other, NULL), TIDE_EBUSY);
    CHECK_OK(tide_capture_end_stream(f.t, 0));
    CHECK_OK(tide_check(f.t));
    CHECK_OK(tide_pool_empty_cache(f.t, 0, NULL)); /* pool 0: tide_empty_cache, pools in use kept */
    CHECK_OK(tide_pool_memory(f.t, other, &reserved, NULL));
    CHECK(reserved == 30 * MIB);
    CHECK_OK(tide_free(f.t, live));
    CHECK_OK(tide_pool_release(f.t, one));
    CHECK_OK(tide_pool_release(f.t, other));
    CHECK_OK(tide_empty_cache(f.t, NULL));
    CHECK(reserved_of(f.t) == 0);
    fixture_close(&f);
}

int main(void)
{
    RUN(test_a_capture_holds_back_only_its_stream);
    RUN(test_captures_nest_and_count);
    RUN(test_bad_captures_change_nothing);
    RUN(test_a_pool_is_not_a_capture);
    RUN(test_empty_one_pool);
    return HARNESS_EXIT();
}

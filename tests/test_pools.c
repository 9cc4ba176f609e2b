/*
 * Private pools and graph capture on the simulated device: a pool's memory is never reused outside
 * it, stays reserved while the pool is in use (empty_cache, trim and the out-of-memory ladder leave
 * it alone) and goes back once the pool is released and its blocks are free; pending frees inside a
 * pool; and during a capture the device is asked nothing a capture forbids (no fence query or record,
 * no synchronize, no release), the fences owed being recorded when the capture ends.
 */
#include "harness.h"

#include <stdbool.h>

#define ALL TIDE_POOL_ALL

static size_t pool_reserved(tide_allocator *t, tide_pool_id pool)
{
    size_t reserved = 0;
    CHECK_OK(tide_pool_memory(t, pool, &reserved, NULL));
    return reserved;
}

static tide_sim_counters counters(tide_sim *sim)
{
    tide_sim_counters c;
    tide_sim_get_counters(sim, &c);
    return c;
}

/* Blocks of a pool come back to the pool; an allocation outside it never gets them. */
static void test_pool_memory_is_kept_apart(void)
{
    struct fixture f;
    fixture_open(&f, 0, NULL);
    tide_pool_id pool;
    CHECK_OK(tide_pool_create(f.t, &pool));
    CHECK(pool != 0);
    void *p, *q, *r;
    CHECK_OK(tide_malloc_pool(f.t, 4 * MIB, 0, pool, &p));
    tide_pool_id of = 0;
    CHECK_OK(tide_pool_of(f.t, p, &of));
    CHECK(of == pool);
    uintptr_t base = 0;
    size_t seg_size = 0;
    CHECK_STATUS(tide_segment_of(f.t, (char *)p + 100, &base, &seg_size), TIDE_EINVAL); /* not a block */
    CHECK_OK(tide_segment_of(f.t, p, &base, &seg_size));
    CHECK(base <= (uintptr_t)p && (uintptr_t)p + 4 * MIB <= base + seg_size);
    size_t reserved = pool_reserved(f.t, pool);
    CHECK(reserved >= 4 * MIB);
    CHECK_OK(tide_free(f.t, p));
    CHECK_OK(tide_malloc(f.t, 4 * MIB, 0, &q)); /* the same size and stream, outside the pool */
    CHECK(q != p);
    CHECK_OK(tide_pool_of(f.t, q, &of));
    CHECK(of == 0);
    CHECK(pool_reserved(f.t, pool) == reserved); /* the pool did not lend its free block */
    CHECK_OK(tide_malloc_pool(f.t, 4 * MIB, 0, pool, &r));
    CHECK(r == p); /* the pool's own block, reused inside it */
    CHECK_OK(tide_check(f.t));
    CHECK_OK(tide_free(f.t, q));
    CHECK_OK(tide_free(f.t, r));
    CHECK_OK(tide_pool_release(f.t, pool));
    fixture_close(&f);
}

/* In use, a pool's cache survives tide_empty_cache and tide_trim; released, it goes back. */
static void test_pool_memory_goes_back_once_released(void)
{
    struct fixture f;
    fixture_open(&f, 0, NULL);
    tide_pool_id pool;
    CHECK_OK(tide_pool_create(f.t, &pool));
    void *p, *live;
    CHECK_OK(tide_malloc_pool(f.t, 3 * MIB, 0, pool, &p));
    CHECK_OK(tide_malloc_pool(f.t, 1000, 0, pool, &live));
    CHECK_OK(tide_free(f.t, p));
    size_t kept = pool_reserved(f.t, pool);
    CHECK(kept > 0);
    CHECK_OK(tide_empty_cache(f.t, NULL));
    CHECK(pool_reserved(f.t, pool) == kept);
    CHECK_STATUS(tide_trim(f.t, 0, NULL), TIDE_EBUSY);
    CHECK(pool_reserved(f.t, pool) == kept);

    CHECK_OK(tide_pool_release(f.t, pool));
    uint32_t uses = 1;
    CHECK_OK(tide_pool_use_count(f.t, pool, &uses));
    CHECK(uses == 0);
    CHECK_OK(tide_empty_cache(f.t, NULL)); /* the large segment is wholly free: it goes */
    CHECK(pool_reserved(f.t, pool) > 0 && pool_reserved(f.t, pool) < kept); /* the small one holds live */
    /* A released pool takes no new allocation; its live block stays valid until freed. */
    void *x = (void *)1;
    CHECK_STATUS(tide_malloc_pool(f.t, 1000, 0, pool, &x), TIDE_EINVAL);
    CHECK(x == NULL);
    CHECK_MESSAGE("was released");
    memset(live, 7, 1000);
    CHECK_OK(tide_free(f.t, live));
    CHECK_OK(tide_empty_cache(f.t, NULL));
    CHECK(pool_reserved(f.t, pool) == 0 && reserved_of(f.t) == 0);
    CHECK_OK(tide_check(f.t));
    fixture_close(&f);
}

static void test_use_count_and_bad_ids(void)
{
    struct fixture f;
    fixture_open(&f, 0, NULL);
    tide_pool_id a, b;
    CHECK_OK(tide_pool_create(f.t, &a));
    CHECK_OK(tide_pool_create(f.t, &b));
    CHECK(a != b);
    uint32_t n = 0;
    CHECK_OK(tide_pool_retain(f.t, a));
    CHECK_OK(tide_pool_use_count(f.t, a, &n));
    CHECK(n == 2);
    CHECK_OK(tide_pool_release(f.t, a));
    CHECK_OK(tide_pool_release(f.t, a));
    CHECK_OK(tide_pool_use_count(f.t, a, &n));
    CHECK(n == 0);
    CHECK_STATUS(tide_pool_release(f.t, a), TIDE_EINVAL);
    CHECK_MESSAGE("was released");
    CHECK_STATUS(tide_pool_retain(f.t, a), TIDE_EINVAL);
    CHECK_STATUS(tide_pool_use_count(f.t, 999, &n), TIDE_EINVAL);
    CHECK_MESSAGE("never created");
    void *p = (void *)1;
    CHECK_STATUS(tide_malloc_pool(f.t, 64, 0, 999, &p), TIDE_EINVAL);
    CHECK(p == NULL);
    CHECK_STATUS(tide_malloc_pool(f.t, 0, 0, b, &p), TIDE_EINVAL); /* size 0, as tide_malloc */
    CHECK_OK(tide_malloc_pool(f.t, 64, 0, 0, &p));                 /* pool 0: tide_malloc */
    tide_pool_id of = 5;
    CHECK_OK(tide_pool_of(f.t, p, &of));
    CHECK(of == 0);
    CHECK_OK(tide_free(f.t, p));
    CHECK_STATUS(tide_pool_of(f.t, p, &of), TIDE_EINVAL);
    CHECK_STATUS(tide_capture_end(f.t), TIDE_EINVAL); /* no capture began */
    CHECK_OK(tide_pool_release(f.t, b));
    CHECK_OK(tide_check(f.t));
    fixture_close(&f);
}

/* Under pressure, the ladder releases every idle segment but a pool's in use. */
static void test_ladder_leaves_a_pool_in_use_alone(void)
{
    struct fixture f;
    fixture_open(&f, 0, "limit:22MiB");
    tide_pool_id pool;
    CHECK_OK(tide_pool_create(f.t, &pool));
    void *p, *q = (void *)1;
    CHECK_OK(tide_malloc_pool(f.t, 4 * MIB, 0, pool, &p)); /* a 20 MiB segment of the pool's */
    CHECK_OK(tide_free(f.t, p));
    size_t kept = pool_reserved(f.t, pool);
    CHECK(kept == 20 * MIB);
    CHECK_STATUS(tide_malloc(f.t, 4 * MIB, 0, &q), TIDE_ENOMEM);
    CHECK(pool_reserved(f.t, pool) == kept);
    CHECK_OK(tide_malloc_pool(f.t, 4 * MIB, 0, pool, &p)); /* still there for the pool */
    CHECK_OK(tide_free(f.t, p));
    CHECK_OK(tide_pool_release(f.t, pool));
    CHECK_OK(tide_malloc(f.t, 4 * MIB, 0, &q)); /* released: the ladder may take it now */
    CHECK(pool_reserved(f.t, pool) == 0);
    CHECK_OK(tide_free(f.t, q));
    CHECK_OK(tide_check(f.t));
    fixture_close(&f);
}

/* A pool's block held by the device waits, PENDING, inside the pool. */
static void test_pending_frees_inside_a_pool(void)
{
    struct fixture f;
    fixture_open(&f, 0, NULL);
    tide_pool_id pool;
    CHECK_OK(tide_pool_create(f.t, &pool));
    void *p, *q;
    CHECK_OK(tide_malloc_pool(f.t, 2 * MIB, 0, pool, &p));
    CHECK_OK(tide_retain(f.t, p));
    CHECK_OK(tide_free(f.t, p));
    CHECK(stats_of(f.t).pending_free_blocks[ALL].current == 1);
    CHECK_OK(tide_malloc_pool(f.t, 2 * MIB, 0, pool, &q));
    CHECK(q != p); /* still held */
    CHECK_OK(tide_release(f.t, p));
    CHECK(stats_of(f.t).pending_free_blocks[ALL].current == 0);
    void *r;
    CHECK_OK(tide_malloc_pool(f.t, 2 * MIB, 0, pool, &r));
    CHECK(r == p);
    CHECK_OK(tide_free(f.t, q));
    CHECK_OK(tide_free(f.t, r));
    CHECK_OK(tide_pool_release(f.t, pool));
    CHECK_OK(tide_empty_cache(f.t, NULL));
    CHECK(reserved_of(f.t) == 0);
    fixture_close(&f);
}

/* During a capture: no fence query, fence record, synchronize or release reaches the device. A block
 * used by another stream and freed during the capture is recorded when it ends, and drains after. */
static void test_capture_asks_the_device_nothing_it_forbids(void)
{
    struct fixture f;
    fixture_open(&f, 0, NULL);
    tide_stream capture, side;
    CHECK_OK(tide_sim_stream_create(f.sim, &capture));
    CHECK_OK(tide_sim_stream_create(f.sim, &side));
    /* Before: a pending block whose fence is recorded, and cached memory outside the pool. */
    void *old, *cached;
    CHECK_OK(tide_malloc(f.t, 1000, capture, &old));
    CHECK_OK(tide_record_stream(f.t, old, side));
    CHECK_OK(tide_sim_enqueue(f.sim, side, 20000, NULL, NULL));
    CHECK_OK(tide_free(f.t, old));
    CHECK_OK(tide_malloc(f.t, 8 * MIB, 0, &cached));
    CHECK_OK(tide_free(f.t, cached));

    tide_pool_id pool;
    CHECK_OK(tide_pool_create(f.t, &pool));
    tide_sim_counters before = counters(f.sim);
    CHECK_OK(tide_capture_begin(f.t));
    void *a, *b, *c;
    CHECK_OK(tide_malloc_pool(f.t, 1 * MIB, capture, pool, &a));
    CHECK_OK(tide_record_stream(f.t, a, side));
    CHECK_OK(tide_free(f.t, a)); /* PENDING: its fence waits for the capture's end */
    CHECK(stats_of(f.t).pending_free_blocks[ALL].current == 2);
    CHECK_OK(tide_malloc_pool(f.t, 1 * MIB, capture, pool, &b));
    CHECK(b != a);
    CHECK_OK(tide_malloc(f.t, 1000, capture, &c)); /* drains nothing: no fence is queried */
    CHECK_STATUS(tide_empty_cache(f.t, NULL), TIDE_EBUSY);
    CHECK_MESSAGE("during a graph capture");
    CHECK_STATUS(tide_trim(f.t, 0, NULL), TIDE_EBUSY);
    CHECK_OK(tide_set_limit(f.t, 4 * MIB)); /* lower than what is reserved: nothing released now */
    CHECK_OK(tide_check(f.t));
    tide_sim_counters during = counters(f.sim);
    CHECK(during.calls[TIDE_SIM_FENCE_QUERY] == before.calls[TIDE_SIM_FENCE_QUERY]);
    CHECK(during.calls[TIDE_SIM_FENCE_RECORD] == before.calls[TIDE_SIM_FENCE_RECORD]);
    CHECK(during.calls[TIDE_SIM_SYNCHRONIZE] == before.calls[TIDE_SIM_SYNCHRONIZE]);
    CHECK(during.calls[TIDE_SIM_RELEASE] == before.calls[TIDE_SIM_RELEASE]);
    CHECK(during.calls[TIDE_SIM_RESERVE] > before.calls[TIDE_SIM_RESERVE]); /* growing is allowed */
    CHECK_OK(tide_capture_end(f.t));
    CHECK(counters(f.sim).calls[TIDE_SIM_FENCE_RECORD] == before.calls[TIDE_SIM_FENCE_RECORD] + 1);
    CHECK_OK(tide_set_limit(f.t, 80 * GIB));
    CHECK_OK(tide_sim_synchronize(f.sim));
    CHECK_OK(tide_empty_cache(f.t, NULL));
    CHECK(stats_of(f.t).pending_free_blocks[ALL].current == 0);
    void *again;
    CHECK_OK(tide_malloc_pool(f.t, 1 * MIB, capture, pool, &again));
    CHECK(again == a); /* drained, inside the pool */
    CHECK_OK(tide_free(f.t, again));
    CHECK_OK(tide_free(f.t, b));
    CHECK_OK(tide_free(f.t, c));
    CHECK_OK(tide_pool_release(f.t, pool));
    CHECK_OK(tide_empty_cache(f.t, NULL));
    CHECK(reserved_of(f.t) == 0);
    CHECK_OK(tide_check(f.t));
    fixture_close(&f);
}

/* Out of room during a capture: TIDE_ENOMEM without synchronizing or releasing. */
static void test_capture_out_of_memory_skips_the_ladder(void)
{
    struct fixture f;
    fixture_open(&f, 0, "limit:24MiB");
    void *cached, *p = (void *)1;
    CHECK_OK(tide_malloc(f.t, 4 * MIB, 0, &cached));
    CHECK_OK(tide_free(f.t, cached)); /* 20 MiB cached: the ladder would release it */
    tide_pool_id pool;
    CHECK_OK(tide_pool_create(f.t, &pool));
    tide_sim_counters before = counters(f.sim);
    CHECK_OK(tide_capture_begin(f.t));
    CHECK_OK(tide_capture_begin(f.t)); /* captures nest */
    CHECK_STATUS(tide_malloc_pool(f.t, 8 * MIB, 0, pool, &p), TIDE_ENOMEM);
    CHECK(p == NULL);
    tide_sim_counters during = counters(f.sim);
    CHECK(during.calls[TIDE_SIM_SYNCHRONIZE] == before.calls[TIDE_SIM_SYNCHRONIZE]);
    CHECK(during.calls[TIDE_SIM_RELEASE] == before.calls[TIDE_SIM_RELEASE]);
    CHECK_OK(tide_capture_end(f.t));
    CHECK_STATUS(tide_empty_cache(f.t, NULL), TIDE_EBUSY); /* one capture is still underway */
    CHECK_OK(tide_capture_end(f.t));
    CHECK_OK(tide_malloc_pool(f.t, 8 * MIB, 0, pool, &p)); /* now the ladder may release the cache */
    CHECK_OK(tide_free(f.t, p));
    CHECK_OK(tide_pool_release(f.t, pool));
    fixture_close(&f);
}

/* tide_destroy with a capture never ended and a block waiting for it: everything goes back. */
static void test_destroy_during_a_capture(void)
{
    struct fixture f;
    fixture_open(&f, 0, NULL);
    tide_stream side;
    CHECK_OK(tide_sim_stream_create(f.sim, &side));
    tide_pool_id pool;
    CHECK_OK(tide_pool_create(f.t, &pool));
    CHECK_OK(tide_capture_begin(f.t));
    void *p;
    CHECK_OK(tide_malloc_pool(f.t, 4096, 0, pool, &p));
    CHECK_OK(tide_record_stream(f.t, p, side));
    CHECK_OK(tide_free(f.t, p));
    CHECK_OK(tide_destroy(f.t));
    f.t = NULL;
    CHECK(counters(f.sim).held_bytes == 0 && counters(f.sim).live_fences == 0);
    fixture_close(&f);
}

/* The snapshot names each segment's pool. */
static void test_snapshot_names_the_pool(void)
{
    struct fixture f;
    fixture_open(&f, 0, NULL);
    tide_pool_id pool;
    CHECK_OK(tide_pool_create(f.t, &pool));
    void *p;
    CHECK_OK(tide_malloc_pool(f.t, 4096, 0, pool, &p));
    char *json = NULL, want[64];
    CHECK_OK(tide_snapshot_json(f.t, &json));
    snprintf(want, sizeof want, "\"private_pool\": %llu", (unsigned long long)pool);
    CHECK(json && strstr(json, want));
    tide_string_free(json);
    CHECK_OK(tide_free(f.t, p));
    CHECK_OK(tide_pool_release(f.t, pool));
    fixture_close(&f);
}

/* The pool's ACTIVE blocks now (at most 8). */
static size_t blocks_of(tide_allocator *t, tide_pool_id pool, tide_pool_block out[8])
{
    size_t n = 0;
    CHECK_OK(tide_pool_blocks(t, pool, out, 8, &n));
    CHECK(n <= 8);
    return n;
}

static bool same_blocks(const tide_pool_block *x, size_t nx, const tide_pool_block *y, size_t ny)
{
    if (nx != ny)
        return false;
    for (size_t i = 0; i < nx; i++)
        if (x[i].ptr != y[i].ptr || x[i].size != y[i].size || x[i].requested != y[i].requested ||
            x[i].stream != y[i].stream)
            return false;
    return true;
}

/* A checkpoint, then more allocations and frees in the pool (one waiting on another stream's work),
 * then back to the checkpoint: exactly its blocks are allocated, at their addresses, and nothing new in
 * the pool lands on them. Bad checkpoints change nothing. */
static void test_checkpoint_and_restore(void)
{
    struct fixture f;
    fixture_open(&f, 0, NULL);
    tide_stream side;
    CHECK_OK(tide_sim_stream_create(f.sim, &side));
    tide_pool_id pool;
    CHECK_OK(tide_pool_create(f.t, &pool));
    void *a, *b, *c, *d, *e, *outside;
    CHECK_OK(tide_malloc_pool(f.t, 1 * MIB, 0, pool, &a));
    CHECK_OK(tide_malloc_pool(f.t, 1536 * 1024, 0, pool, &b)); /* freed: a hole between a and c */
    CHECK_OK(tide_malloc_pool(f.t, 2 * MIB + 100, 0, pool, &c));
    CHECK_OK(tide_free(f.t, b));
    tide_pool_block checkpoint[8], now[8];
    size_t n = blocks_of(f.t, pool, checkpoint);
    CHECK(n == 2);
    CHECK(checkpoint[0].ptr < checkpoint[1].ptr);
    CHECK(checkpoint[0].requested + checkpoint[1].requested == 1 * MIB + 2 * MIB + 100);
    size_t count = 99;
    CHECK_OK(tide_pool_blocks(f.t, pool, NULL, 0, &count)); /* the count alone */
    CHECK(count == 2);

    /* After the checkpoint: a freed, its memory taken by d; e new; c freed while another stream uses it. */
    CHECK_OK(tide_free(f.t, a));
    CHECK_OK(tide_malloc_pool(f.t, 1 * MIB + 4096, 0, pool, &d));
    CHECK_OK(tide_malloc_pool(f.t, 64 * 1024, side, pool, &e));
    CHECK_OK(tide_record_stream(f.t, c, side));
    CHECK_OK(tide_sim_enqueue(f.sim, side, 20000, NULL, NULL));
    CHECK_OK(tide_free(f.t, c)); /* PENDING until the side stream's work is done */
    CHECK(stats_of(f.t).pending_free_blocks[ALL].current == 1);
    CHECK_OK(tide_malloc(f.t, 1 * MIB, 0, &outside));

    /* Refused, changing nothing: out of order, a block that is not the pool's, a size that is no
     * block's, an unknown pool. */
    size_t before = blocks_of(f.t, pool, now);
    tide_pool_block swapped[2] = {checkpoint[1], checkpoint[0]};
    CHECK_STATUS(tide_pool_restore(f.t, pool, swapped, 2), TIDE_EINVAL);
    CHECK_MESSAGE("out of order");
    tide_pool_block foreign = checkpoint[0];
    foreign.ptr = (uintptr_t)outside;
    CHECK_STATUS(tide_pool_restore(f.t, pool, &foreign, 1), TIDE_EINVAL);
    CHECK_MESSAGE("does not lie in pool");
    tide_pool_block odd = checkpoint[0];
    odd.size += 1;
    CHECK_STATUS(tide_pool_restore(f.t, pool, &odd, 1), TIDE_EINVAL);
    CHECK_STATUS(tide_pool_restore(f.t, pool + 100, checkpoint, n), TIDE_EINVAL);
    CHECK_STATUS(tide_pool_restore(f.t, pool, NULL, 1), TIDE_EINVAL);
    CHECK_OK(tide_capture_begin(f.t));
    CHECK_STATUS(tide_pool_restore(f.t, pool, checkpoint, n), TIDE_EBUSY);
    CHECK_OK(tide_capture_end(f.t));
    tide_pool_block after[8];
    CHECK(same_blocks(now, before, after, blocks_of(f.t, pool, after)));
    CHECK(stats_of(f.t).pending_free_blocks[ALL].current == 1);

    uint64_t syncs = counters(f.sim).calls[TIDE_SIM_SYNCHRONIZE];
    CHECK_OK(tide_pool_restore(f.t, pool, checkpoint, n));
    CHECK(counters(f.sim).calls[TIDE_SIM_SYNCHRONIZE] == syncs + 1); /* c waited for the side stream */
    CHECK(same_blocks(checkpoint, n, now, blocks_of(f.t, pool, now)));
    CHECK(stats_of(f.t).pending_free_blocks[ALL].current == 0);
    size_t allocated = 0;
    CHECK_OK(tide_pool_memory(f.t, pool, NULL, &allocated));
    CHECK(allocated == checkpoint[0].size + checkpoint[1].size);
    CHECK_OK(tide_check(f.t));
    /* d and e were freed by the restore: freeing them again is a double free. */
    CHECK_STATUS(tide_free(f.t, e), TIDE_EINVAL);
    /* New allocations in the pool keep off the restored blocks. */
    void *fresh[4];
    for (int i = 0; i < 4; i++) {
        CHECK_OK(tide_malloc_pool(f.t, (size_t)(i + 1) * 300 * 1024, 0, pool, &fresh[i]));
        for (size_t k = 0; k < n; k++)
            CHECK((uintptr_t)fresh[i] + (size_t)(i + 1) * 300 * 1024 <= checkpoint[k].ptr ||
                  (uintptr_t)fresh[i] >= checkpoint[k].ptr + checkpoint[k].size);
    }
    for (int i = 0; i < 4; i++)
        CHECK_OK(tide_free(f.t, fresh[i]));
    CHECK_OK(tide_free(f.t, (void *)checkpoint[0].ptr));
    CHECK_OK(tide_free(f.t, (void *)checkpoint[1].ptr));
    CHECK_OK(tide_free(f.t, outside));
    CHECK_OK(tide_pool_release(f.t, pool));
    CHECK_STATUS(tide_pool_restore(f.t, pool, checkpoint, 0), TIDE_EINVAL); /* released */
    CHECK_OK(tide_empty_cache(f.t, NULL));
    CHECK(reserved_of(f.t) == 0);
    fixture_close(&f);
}

/* Memory still held after the restore's frees (a reference from tide_retain): TIDE_EBUSY, and once it
 * is released the same checkpoint restores. Under guard:True, so the restored block's canaries are
 * written (its later free checks them). */
static void test_restore_meets_held_memory(void)
{
    struct fixture f;
    fixture_open(&f, 0, "guard:True");
    tide_pool_id pool;
    CHECK_OK(tide_pool_create(f.t, &pool));
    void *a, *x;
    CHECK_OK(tide_malloc_pool(f.t, 5000, 0, pool, &a));
    tide_pool_block checkpoint[8], now[8];
    size_t n = blocks_of(f.t, pool, checkpoint);
    CHECK(n == 1 && checkpoint[0].ptr == (uintptr_t)a && checkpoint[0].requested == 5000);
    CHECK_OK(tide_free(f.t, a));
    CHECK_OK(tide_malloc_pool(f.t, 5000, 0, pool, &x));
    CHECK(x == a);
    CHECK_OK(tide_retain(f.t, x)); /* in-flight work holds it */
    CHECK_STATUS(tide_pool_restore(f.t, pool, checkpoint, n), TIDE_EBUSY);
    CHECK_MESSAGE("still held");
    CHECK(blocks_of(f.t, pool, now) == 0); /* x was freed; it waits for the reference */
    CHECK_OK(tide_release(f.t, x));
    CHECK_OK(tide_pool_restore(f.t, pool, checkpoint, n));
    CHECK(same_blocks(checkpoint, n, now, blocks_of(f.t, pool, now)));
    CHECK_OK(tide_check(f.t));
    CHECK_OK(tide_free(f.t, a)); /* the canaries the restore wrote are intact */
    CHECK_OK(tide_pool_release(f.t, pool));
    fixture_close(&f);
}

/* The restore's synchronize drains PENDING blocks everywhere, outside the pool too: every heap's peaks
 * are brought up to date after it, so tide_check passes (it had found a cached peak below its value on
 * the stream's own heap). */
static void test_restore_settles_every_heap(void)
{
    struct fixture f;
    fixture_open(&f, 0, NULL);
    tide_stream side;
    CHECK_OK(tide_sim_stream_create(f.sim, &side));
    tide_pool_id pool;
    CHECK_OK(tide_pool_create(f.t, &pool));
    void *a, *b, *x;
    CHECK_OK(tide_malloc_pool(f.t, 4096, 0, pool, &a));
    tide_pool_block checkpoint[8];
    size_t n = blocks_of(f.t, pool, checkpoint);
    CHECK(n == 1);
    CHECK_OK(tide_malloc(f.t, 4096, 0, &x)); /* outside the pool: PENDING until the side stream is done */
    CHECK_OK(tide_record_stream(f.t, x, side));
    CHECK_OK(tide_malloc_pool(f.t, 4096, 0, pool, &b)); /* in it: the restore must wait for the device */
    CHECK_OK(tide_record_stream(f.t, b, side));
    CHECK_OK(tide_sim_enqueue(f.sim, side, 20000, NULL, NULL));
    CHECK_OK(tide_free(f.t, x));
    CHECK_OK(tide_free(f.t, b));
    CHECK(stats_of(f.t).pending_free_blocks[ALL].current == 2);
    CHECK_OK(tide_pool_restore(f.t, pool, checkpoint, n));
    CHECK(stats_of(f.t).pending_free_blocks[ALL].current == 0);
    CHECK_OK(tide_check(f.t));
    CHECK_OK(tide_free(f.t, a));
    CHECK_OK(tide_pool_release(f.t, pool));
    fixture_close(&f);
}

/* A forged checkpoint is refused with TIDE_EINVAL and the words given, changing nothing: the pool's
 * blocks, the statistics and the device's counters are as they were, and tide_check passes. */
static void expect_refused(struct fixture *f, tide_pool_id pool, const tide_pool_block *blocks, size_t n,
                           const char *words, int line)
{
    tide_pool_block before[8], after[8];
    size_t nbefore = blocks_of(f->t, pool, before);
    tide_stats s0 = stats_of(f->t);
    tide_sim_counters c0 = counters(f->sim);
    tide_status s = tide_pool_restore(f->t, pool, blocks, n);
    if (s != TIDE_EINVAL || !strstr(tide_last_error(), words)) {
        fprintf(stderr, "%s:%d: a forged checkpoint: %s, \"%s\" (expected TIDE_EINVAL, \"%s\")\n", __FILE__,
                line, tide_status_name(s), tide_last_error(), words);
        harness_failures++;
    }
    tide_stats s1 = stats_of(f->t);
    tide_sim_counters c1 = counters(f->sim);
    CHECK(same_blocks(before, nbefore, after, blocks_of(f->t, pool, after)));
    CHECK(memcmp(&s0, &s1, sizeof s0) == 0);
    CHECK(memcmp(&c0, &c1, sizeof c0) == 0);
    CHECK_OK(tide_check(f->t));
}
#define REFUSED(f, pool, blocks, n, words) expect_refused(f, pool, blocks, n, words, __LINE__)

/* Checkpoints are input: every field of every block is checked against the pool's segments before
 * anything changes (address, size, requested bytes, stream, order, count), with and without guard:True.
 * Then the pool's own checkpoint still restores. */
static void test_forged_checkpoints_change_nothing(void)
{
    static const char *const confs[] = {"", "guard:True", "expandable_segments:True,guard:True"};
    for (size_t k = 0; k < sizeof confs / sizeof *confs; k++) {
        struct fixture f;
        fixture_open(&f, 0, confs[k]);
        size_t guard = strstr(confs[k], "guard") ? 512 : 0;
        tide_stream side, other;
        CHECK_OK(tide_sim_stream_create(f.sim, &side));
        CHECK_OK(tide_sim_stream_create(f.sim, &other));
        tide_pool_id pool;
        CHECK_OK(tide_pool_create(f.t, &pool));
        void *a, *hole, *b, *e, *outside;
        CHECK_OK(tide_malloc_pool(f.t, 1 * MIB, 0, pool, &a));
        CHECK_OK(tide_malloc_pool(f.t, 8192, 0, pool, &hole));
        CHECK_OK(tide_malloc_pool(f.t, 65536, 0, pool, &b));
        CHECK_OK(tide_malloc_pool(f.t, 4096, side, pool, &e));
        CHECK_OK(tide_malloc(f.t, 4096, other, &outside));
        CHECK_OK(tide_free(f.t, hole));
        tide_pool_block cp[8];
        size_t n = blocks_of(f.t, pool, cp);
        CHECK(n == 3);
        if (n != 3) {
            fixture_close(&f);
            continue;
        }
        size_t at = 0; /* a, the first block on stream 0 */
        while (at < n && cp[at].ptr != (uintptr_t)a)
            at++;
        CHECK(at < n && cp[at].stream == 0);
        const tide_pool_block base = cp[at < n ? at : 0];
        uintptr_t seg = 0;
        size_t seg_size = 0;
        CHECK_OK(tide_segment_of(f.t, a, &seg, &seg_size));
        tide_pool_block x[4];

        /* The address. */
        x[0] = base;
        x[0].ptr += 8; /* inside the pool's memory, not on a 512-byte boundary */
        x[0].size -= 512;
        x[0].requested = 100;
        REFUSED(&f, pool, x, 1, "512-byte boundary");
        x[0] = base;
        x[0].ptr = 0;
        REFUSED(&f, pool, x, 1, guard ? "512-byte boundary" : "does not lie in pool");
        x[0] = base;
        x[0].ptr = UINTPTR_MAX - 1023 + guard; /* the last 1024 bytes of the address space */
        x[0].size = 1024 + 2 * guard;
        x[0].requested = 100;
        REFUSED(&f, pool, x, 1, "end of the address space");
        x[0] = base;
        x[0].ptr = (uintptr_t)outside;
        REFUSED(&f, pool, x, 1, "does not lie in pool");
        /* The size: a wrap past 2^64 that would end inside the segment, none, odd, too small for the
         * guards, past the segment's end. */
        x[0] = base;
        x[0].size = (size_t)0 - 512;
        x[0].requested = 100;
        REFUSED(&f, pool, x, 1, "end of the address space");
        x[0].size = 0;
        REFUSED(&f, pool, x, 1, "size");
        x[0] = base;
        x[0].size += 1;
        REFUSED(&f, pool, x, 1, "size");
        if (guard) {
            x[0] = base;
            x[0].size = 512;
            x[0].requested = 1;
            REFUSED(&f, pool, x, 1, "size");
            x[0].size = 2 * guard;
            REFUSED(&f, pool, x, 1, "size");
        }
        x[0] = base;
        x[0].size = seg + seg_size - (base.ptr - guard) + 512;
        REFUSED(&f, pool, x, 1, "does not lie in pool");
        /* The requested bytes: none, more than the block holds between its guards, absurd. */
        x[0] = base;
        x[0].requested = 0;
        REFUSED(&f, pool, x, 1, "requested");
        x[0].requested = base.size - 2 * guard + 1;
        REFUSED(&f, pool, x, 1, "requested");
        x[0].requested = SIZE_MAX;
        REFUSED(&f, pool, x, 1, "requested");
        /* The stream: one the pool never used, and one it serves whose memory lies elsewhere. */
        x[0] = base;
        x[0].stream = other;
        REFUSED(&f, pool, x, 1, "stream");
        x[0].stream = side;
        REFUSED(&f, pool, x, 1, "does not lie in pool");
        /* Order and overlap: twice the same block, a block inside the one before it, a good checkpoint
         * with a forged block after it (refused before any of its blocks is freed). */
        x[0] = x[1] = base;
        REFUSED(&f, pool, x, 2, "overlaps");
        x[1].ptr += 512;
        x[1].size -= 512;
        x[1].requested = 100;
        REFUSED(&f, pool, x, 2, "overlaps");
        tide_pool_block longer[4];
        memcpy(longer, cp, 3 * sizeof *cp);
        longer[3] = cp[2];
        longer[3].ptr += 8;
        REFUSED(&f, pool, longer, 4, "block 3");
        /* The count: more blocks than the pool's memory could hold is refused before any is read. */
        x[0] = x[1] = x[2] = x[3] = base;
        REFUSED(&f, pool, x, SIZE_MAX, "more blocks");
        REFUSED(&f, pool, x, seg_size / 512 + 1 + 64 * 1024, "more blocks");

        /* The pool's own checkpoint, after all that, restores exactly. */
        tide_pool_block now[8];
        CHECK_OK(tide_pool_restore(f.t, pool, cp, n));
        CHECK(same_blocks(cp, n, now, blocks_of(f.t, pool, now)));
        CHECK_OK(tide_check(f.t));
        void *fresh;
        CHECK_OK(tide_malloc_pool(f.t, 1000, 0, pool, &fresh));
        CHECK((uintptr_t)fresh % 512 == 0);
        CHECK_OK(tide_free(f.t, fresh));
        for (size_t i = 0; i < n; i++)
            CHECK_OK(tide_free(f.t, (void *)cp[i].ptr));
        CHECK_OK(tide_free(f.t, outside));
        CHECK_OK(tide_pool_release(f.t, pool));
        fixture_close(&f);
    }
}

/* Pools made and released again and again (a graph captured anew each phase) reuse the heaps of
 * released pools that hold nothing: far more pools than the allocator has heaps. A released pool's
 * heap that still holds a block stays that pool's. */
static void test_released_pools_lend_their_heaps(void)
{
    struct fixture f;
    fixture_open(&f, 0, NULL);
    tide_stream side;
    CHECK_OK(tide_sim_stream_create(f.sim, &side));
    tide_pool_id first = 0, pool = 0;
    for (int i = 0; i < 3 * 1024; i++) {
        void *p, *q;
        CHECK_OK(tide_pool_create(f.t, &pool));
        if (!first)
            first = pool;
        CHECK_OK(tide_malloc_pool(f.t, 4096, 0, pool, &p));
        CHECK_OK(tide_malloc_pool(f.t, 2 * MIB, side, pool, &q));
        CHECK_OK(tide_free(f.t, p));
        CHECK_OK(tide_free(f.t, q));
        CHECK_OK(tide_pool_release(f.t, pool));
        CHECK_OK(tide_empty_cache(f.t, NULL)); /* the released pool's memory goes back */
    }
    uint32_t uses = 7;
    CHECK_OK(tide_pool_use_count(f.t, first, &uses)); /* long forgotten, still known as released */
    CHECK(uses == 0);
    CHECK_STATUS(tide_pool_retain(f.t, first), TIDE_EINVAL);
    CHECK_MESSAGE("was released");
    CHECK_STATUS(tide_pool_use_count(f.t, pool + 1, &uses), TIDE_EINVAL); /* never made */

    tide_pool_id holder, next;
    void *kept, *fresh;
    CHECK_OK(tide_pool_create(f.t, &holder));
    CHECK_OK(tide_malloc_pool(f.t, 4096, 0, holder, &kept));
    CHECK_OK(tide_pool_release(f.t, holder)); /* released, its block still allocated */
    CHECK_OK(tide_pool_create(f.t, &next));
    CHECK_OK(tide_malloc_pool(f.t, 4096, 0, next, &fresh));
    tide_pool_id of = 0;
    CHECK_OK(tide_pool_of(f.t, kept, &of));
    CHECK(of == holder);
    CHECK_OK(tide_pool_of(f.t, fresh, &of));
    CHECK(of == next);
    CHECK_OK(tide_check(f.t));
    CHECK_OK(tide_free(f.t, kept));
    CHECK_OK(tide_free(f.t, fresh));
    CHECK_OK(tide_pool_release(f.t, next));
    CHECK_OK(tide_empty_cache(f.t, NULL));
    CHECK(reserved_of(f.t) == 0);
    fixture_close(&f);
}

int main(void)
{
    RUN(test_pool_memory_is_kept_apart);
    RUN(test_pool_memory_goes_back_once_released);
    RUN(test_use_count_and_bad_ids);
    RUN(test_ladder_leaves_a_pool_in_use_alone);
    RUN(test_pending_frees_inside_a_pool);
    RUN(test_capture_asks_the_device_nothing_it_forbids);
    RUN(test_capture_out_of_memory_skips_the_ladder);
    RUN(test_destroy_during_a_capture);
    RUN(test_snapshot_names_the_pool);
    RUN(test_checkpoint_and_restore);
    RUN(test_restore_meets_held_memory);
    RUN(test_restore_settles_every_heap);
    RUN(test_forged_checkpoints_change_nothing);
    RUN(test_released_pools_lend_their_heaps);
    return HARNESS_EXIT();
}

/*
 * tide_snapshot_take: the snapshot as structures agrees with the JSON snapshot and with the
 * statistics, its blocks tile each segment, and it names pools, states and the largest cached block.
 */
#include "harness.h"

#include <stdbool.h>

#define ALL TIDE_POOL_ALL

/* Every segment's blocks tile it; the sums agree with the statistics. */
static void check_against_stats(tide_allocator *t, const tide_snapshot *s)
{
    tide_stats st = stats_of(t);
    int64_t reserved = 0, allocated = 0, active = 0, requested = 0, cached_largest = 0;
    int64_t allocations = 0;
    for (size_t i = 0; i < s->nsegments; i++) {
        const tide_snapshot_segment *seg = &s->segments[i];
        reserved += (int64_t)seg->size;
        allocated += (int64_t)seg->allocated_bytes;
        active += (int64_t)seg->active_bytes;
        requested += (int64_t)seg->requested_bytes;
        CHECK(seg->first_block + seg->nblocks <= s->nblocks);
        uintptr_t at = seg->address;
        for (size_t k = seg->first_block; k < seg->first_block + seg->nblocks; k++) {
            const tide_snapshot_block *b = &s->blocks[k];
            uintptr_t start = b->address - (b->state == TIDE_BLOCK_CACHED ? 0 : s->guard_bytes);
            CHECK(start == at); /* tiles the segment */
            at += b->size;
            allocations += b->state == TIDE_BLOCK_ACTIVE;
            if (b->state == TIDE_BLOCK_CACHED && (int64_t)b->size > cached_largest)
                cached_largest = (int64_t)b->size;
        }
        CHECK(at == seg->address + seg->size);
    }
    CHECK(reserved == st.reserved_bytes[ALL].current);
    CHECK(allocated == st.allocated_bytes[ALL].current);
    CHECK(active == st.active_bytes[ALL].current);
    CHECK(requested == st.requested_bytes[ALL].current);
    CHECK(allocations == st.allocation[ALL].current);
    CHECK((int64_t)s->largest_cached == cached_largest);
    CHECK((int64_t)s->nsegments == st.segment[ALL].current);
}

static void test_snapshot_agrees(const char *config)
{
    struct fixture f;
    fixture_open(&f, 0, config);
    tide_stream side;
    CHECK_OK(tide_sim_stream_create(f.sim, &side));
    tide_pool_id pool;
    CHECK_OK(tide_pool_create(f.t, &pool));
    void *a, *b, *c, *d, *e;
    CHECK_OK(tide_malloc(f.t, 1000, 0, &a));
    CHECK_OK(tide_malloc(f.t, 3 * MIB, 0, &b));
    CHECK_OK(tide_malloc(f.t, 30 * MIB, side, &c));
    CHECK_OK(tide_malloc_pool(f.t, 5 * MIB, 0, pool, &d));
    CHECK_OK(tide_malloc(f.t, 4 * MIB, 0, &e));
    CHECK_OK(tide_retain(f.t, e));
    CHECK_OK(tide_free(f.t, e)); /* PENDING */
    CHECK_OK(tide_free(f.t, b)); /* cached */
    tide_snapshot *s = NULL;
    CHECK_OK(tide_snapshot_take(f.t, &s));
    CHECK(s && s->nsegments >= 3);
    if (!s)
        return; /* CHECK has recorded the failure; nothing to walk */
    check_against_stats(f.t, s);
    bool saw_pool = false, saw_pending = false, saw_side = false;
    for (size_t i = 0; i < s->nsegments; i++) {
        const tide_snapshot_segment *seg = &s->segments[i];
        for (size_t k = seg->first_block; k < seg->first_block + seg->nblocks; k++) {
            const tide_snapshot_block *blk = &s->blocks[k];
            if (blk->address == (uintptr_t)d)
                saw_pool = seg->private_pool == pool && blk->state == TIDE_BLOCK_ACTIVE && blk->requested == 5 * MIB;
            if (blk->address == (uintptr_t)e)
                saw_pending = blk->state == TIDE_BLOCK_PENDING_FREE && blk->requested == 0;
            if (blk->address == (uintptr_t)c)
                saw_side = seg->stream == side && seg->private_pool == 0;
        }
    }
    CHECK(saw_pool && saw_pending && saw_side);
    /* The JSON snapshot lists the same segments, in the same order. */
    char *json = NULL;
    CHECK_OK(tide_snapshot_json(f.t, &json));
    const char *at = json;
    for (size_t i = 0; i < s->nsegments && at; i++) {
        char key[64];
        snprintf(key, sizeof key, "{\"address\": %llu, \"size\": %zu", (unsigned long long)s->segments[i].address,
                 s->segments[i].size);
        at = strstr(at, key);
        CHECK(at != NULL);
    }
    tide_string_free(json);
    tide_snapshot_free(s);
    CHECK_OK(tide_release(f.t, e));
    CHECK_OK(tide_free(f.t, a));
    CHECK_OK(tide_free(f.t, c));
    CHECK_OK(tide_free(f.t, d));
    CHECK_OK(tide_pool_release(f.t, pool));
    CHECK_OK(tide_empty_cache(f.t, NULL));
    CHECK_OK(tide_snapshot_take(f.t, &s));
    CHECK(s->nsegments == 0 && s->nblocks == 0 && s->largest_cached == 0);
    tide_snapshot_free(s);
    CHECK_STATUS(tide_snapshot_take(f.t, NULL), TIDE_EINVAL);
    CHECK_STATUS(tide_snapshot_take(NULL, &s), TIDE_EINVAL);
    tide_snapshot_free(NULL);
    fixture_close(&f);
}

static void test_plain(void) { test_snapshot_agrees(NULL); }
static void test_guarded(void) { test_snapshot_agrees("guard:True"); }
static void test_expandable(void) { test_snapshot_agrees("expandable_segments:True"); }

int main(void)
{
    RUN(test_plain);
    RUN(test_guarded);
    RUN(test_expandable);
    return HARNESS_EXIT();
}

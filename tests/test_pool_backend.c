/*
 * A pool with its own backend (PyTorch's MemPool(allocator=...)): its segments are reserved and
 * released through that table, each one given back to the table that reserved it by whatever releases
 * it (empty_cache, the ladder, destroy), with tidepool's caching on top; nothing else uses the table.
 */
#include "harness.h"

/* A counting table over the simulated device, as an ncclMemAlloc would be. */
struct counting {
    tide_backend inner;
    int reserves, releases;
    size_t held;
};

static tide_status counting_reserve(void *ctx, size_t size, uintptr_t *out)
{
    struct counting *c = ctx;
    tide_status s = c->inner.reserve(c->inner.ctx, size, out);
    if (s == TIDE_OK) {
        c->reserves++;
        c->held += size;
    }
    return s;
}

static tide_status counting_release(void *ctx, uintptr_t addr, size_t size)
{
    struct counting *c = ctx;
    c->releases++;
    c->held -= size;
    return c->inner.release(c->inner.ctx, addr, size);
}

static tide_backend counting_backend(struct counting *c, tide_sim *sim)
{
    memset(c, 0, sizeof *c);
    c->inner = tide_sim_backend(sim);
    tide_backend b;
    memset(&b, 0, sizeof b);
    b.struct_size = sizeof b;
    b.name = "counting";
    b.ctx = c;
    b.reserve = counting_reserve;
    b.release = counting_release;
    return b;
}

static void test_segments_come_from_the_pools_backend(void)
{
    struct fixture f;
    fixture_open(&f, 0, NULL);
    struct counting c;
    tide_backend b = counting_backend(&c, f.sim);
    tide_pool_id pool, plain;
    CHECK_OK(tide_pool_create_with_backend(f.t, &b, &pool));
    CHECK_OK(tide_pool_create(f.t, &plain));
    void *p, *q, *outside, *other;
    CHECK_OK(tide_malloc_pool(f.t, 30 * MIB, 0, pool, &p));
    CHECK(c.reserves == 1 && c.held == 30 * MIB);
    CHECK_OK(tide_malloc_pool(f.t, 1000, 0, pool, &q)); /* a small-pool segment, from it too */
    CHECK(c.reserves == 2);
    CHECK_OK(tide_malloc(f.t, 30 * MIB, 0, &outside));
    CHECK_OK(tide_malloc_pool(f.t, 30 * MIB, 0, plain, &other));
    CHECK(c.reserves == 2); /* nothing else comes from it */
    CHECK_OK(tide_free(f.t, p));
    void *again;
    CHECK_OK(tide_malloc_pool(f.t, 30 * MIB, 0, pool, &again)); /* cached on top: no new reservation */
    CHECK(again == p && c.reserves == 2);
    CHECK_OK(tide_check(f.t));
    CHECK_OK(tide_free(f.t, again));
    CHECK_OK(tide_pool_empty_cache(f.t, pool, NULL)); /* the 30 MiB goes back to it */
    CHECK(c.releases == 1 && c.held == 2 * MIB);
    CHECK_OK(tide_free(f.t, outside));
    CHECK_OK(tide_free(f.t, other));
    CHECK_OK(tide_pool_release(f.t, plain));
    CHECK_OK(tide_empty_cache(f.t, NULL));
    CHECK(c.releases == 1); /* its pool is in use: kept */
    /* destroy gives the last segment back through the pool's table */
    CHECK_STATUS(tide_destroy(f.t), TIDE_EBUSY); /* q is live */
    f.t = NULL;
    CHECK(c.releases == 2 && c.held == 0);
    fixture_close(&f);
}

/* Under pressure: the ladder releases an idle segment of a released pool through its table. */
static void test_the_ladder_gives_back_through_the_table(void)
{
    struct fixture f;
    fixture_open(&f, 0, "limit:64MiB,trim_on_growth:False");
    struct counting c;
    tide_backend b = counting_backend(&c, f.sim);
    tide_pool_id pool;
    CHECK_OK(tide_pool_create_with_backend(f.t, &b, &pool));
    void *p, *big;
    CHECK_OK(tide_malloc_pool(f.t, 40 * MIB, 0, pool, &p));
    CHECK_OK(tide_free(f.t, p));
    CHECK_OK(tide_pool_release(f.t, pool));
    CHECK_OK(tide_malloc(f.t, 40 * MIB, 0, &big)); /* room only once the pool's segment goes */
    CHECK(c.releases == 1 && c.held == 0);
    CHECK_OK(tide_check(f.t));
    CHECK_OK(tide_free(f.t, big));
    fixture_close(&f);
}

static void test_bad_tables_are_refused(void)
{
    struct fixture f;
    fixture_open(&f, 0, NULL);
    struct counting c;
    tide_backend b = counting_backend(&c, f.sim);
    tide_pool_id pool = 7;
    b.release = NULL;
    CHECK_STATUS(tide_pool_create_with_backend(f.t, &b, &pool), TIDE_EINVAL);
    CHECK(pool == 0);
    CHECK_STATUS(tide_pool_create_with_backend(f.t, NULL, &pool), TIDE_EINVAL);
    fixture_close(&f);
    fixture_open(&f, 0, "expandable_segments:True");
    b = counting_backend(&c, f.sim);
    CHECK_STATUS(tide_pool_create_with_backend(f.t, &b, &pool), TIDE_EUNSUPPORTED);
    CHECK_MESSAGE("expandable_segments");
    fixture_close(&f);
}

int main(void)
{
    RUN(test_segments_come_from_the_pools_backend);
    RUN(test_the_ladder_gives_back_through_the_table);
    RUN(test_bad_tables_are_refused);
    return HARNESS_EXIT();
}

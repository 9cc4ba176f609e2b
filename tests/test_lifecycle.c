/*
 * Every state transition of a block, for both ways the device holds memory (references, and stream
 * uses with fences), and the pool, split and merge rules. tide_check runs after every step.
 */
#include "harness.h"

#include <stdatomic.h>

#define ALL TIDE_POOL_ALL

static void checked(struct fixture *f) { CHECK_OK(tide_check(f->t)); }

static void test_malloc_rounds_aligns_and_picks_pools(void)
{
    struct fixture f;
    fixture_open(&f, 0, NULL);
    void *p, *q, *r, *big;
    CHECK_OK(tide_malloc(f.t, 1, 0, &p));
    CHECK((uintptr_t)p % 512 == 0);
    tide_stats s = stats_of(f.t);
    CHECK(s.allocated_bytes[ALL].current == 512);
    CHECK(s.requested_bytes[ALL].current == 1);
    CHECK(s.allocation[TIDE_POOL_SMALL].current == 1);
    CHECK(s.reserved_bytes[TIDE_POOL_SMALL].current == (int64_t)(2 * MIB));

    CHECK_OK(tide_malloc(f.t, MIB, 0, &q));         /* 1 MiB: still the small pool */
    CHECK_OK(tide_malloc(f.t, MIB + 1, 0, &r));     /* above: the large pool, a 20 MiB segment
                                                       (19 such blocks fit; 20 MiB is the granule above) */
    CHECK_OK(tide_malloc(f.t, 33 * MIB + 5, 0, &big)); /* 10 MiB or more: a segment of its own size */
    s = stats_of(f.t);
    CHECK(s.allocation[TIDE_POOL_SMALL].current == 2);
    CHECK(s.allocation[TIDE_POOL_LARGE].current == 2);
    CHECK(s.reserved_bytes[TIDE_POOL_LARGE].current == (int64_t)(20 * MIB + 34 * MIB));
    /* The 34 MiB segment keeps its last 1 MiB - 512 with the block: too small a rest to split off. */
    CHECK(s.allocated_bytes[TIDE_POOL_LARGE].current == (int64_t)(MIB + 512 + 34 * MIB));
    CHECK(s.num_device_alloc == 3);
    checked(&f);
    CHECK_OK(tide_free(f.t, p));
    CHECK_OK(tide_free(f.t, q));
    CHECK_OK(tide_free(f.t, r));
    CHECK_OK(tide_free(f.t, big));
    s = stats_of(f.t);
    CHECK(s.allocated_bytes[ALL].current == 0 && s.allocation[ALL].current == 0);
    CHECK(s.cached_bytes[ALL].current == s.reserved_bytes[ALL].current);
    checked(&f);
    fixture_close(&f);
}

static void test_free_makes_block_free_and_reusable_on_its_stream(void)
{
    struct fixture f;
    fixture_open(&f, 0, NULL);
    void *p, *q;
    CHECK_OK(tide_malloc(f.t, 3000, 0, &p));
    CHECK_OK(tide_free(f.t, p));
    tide_stats s = stats_of(f.t);
    CHECK(s.pending_free_blocks[ALL].current == 0);
    CHECK(s.allocated_bytes[ALL].current == 0);
    CHECK_OK(tide_malloc(f.t, 3000, 0, &q));
    CHECK(q == p);
    CHECK(stats_of(f.t).num_device_alloc == 1);
    CHECK_OK(tide_free(f.t, q));
    checked(&f);
    fixture_close(&f);
}

static void test_split_and_merge(void)
{
    struct fixture f;
    fixture_open(&f, 0, NULL);
    uint8_t *a, *b, *c;
    CHECK_OK(tide_malloc(f.t, 4096, 0, (void **)&a));
    CHECK_OK(tide_malloc(f.t, 4096, 0, (void **)&b));
    CHECK_OK(tide_malloc(f.t, 4096, 0, (void **)&c));
    /* Carved one after another from one 2 MiB segment. */
    CHECK(stats_of(f.t).segment[ALL].current == 1);
    CHECK(b == a + 4096 && c == b + 4096);
    CHECK_OK(tide_free(f.t, b));
    tide_stats s = stats_of(f.t);
    /* b's hole and the rest of the segment: FREE, but in a segment that cannot be released */
    CHECK(s.inactive_split_bytes[ALL].current == (int64_t)(2 * MIB - 2 * 4096));
    checked(&f);
    CHECK_OK(tide_free(f.t, a)); /* merges with b's hole */
    checked(&f);
    CHECK_OK(tide_free(f.t, c)); /* merges everything: the segment is wholly free again */
    s = stats_of(f.t);
    CHECK(s.inactive_split_bytes[ALL].current == 0);
    CHECK(s.cached_bytes[ALL].current == (int64_t)(2 * MIB));
    checked(&f);
    /* A wholly free segment serves a request of its whole size without a new reservation. */
    void *whole;
    CHECK_OK(tide_malloc(f.t, MIB, 0, &whole));
    CHECK(whole == a);
    CHECK_OK(tide_free(f.t, whole));
    fixture_close(&f);
}

static void test_references_hold_a_freed_block_pending(void)
{
    struct fixture f;
    fixture_open(&f, 0, NULL);
    void *p, *q;
    CHECK_OK(tide_malloc(f.t, 8192, 0, &p));
    CHECK_OK(tide_retain(f.t, p));
    CHECK_OK(tide_retain(f.t, p));
    CHECK_OK(tide_free(f.t, p)); /* ACTIVE -> PENDING */
    tide_stats s = stats_of(f.t);
    CHECK(s.pending_free_blocks[ALL].current == 1);
    CHECK(s.pending_free_bytes[ALL].current == 8192);
    CHECK(s.active_bytes[ALL].current == 8192);
    CHECK(s.allocated_bytes[ALL].current == 0);
    checked(&f);
    CHECK_OK(tide_malloc(f.t, 8192, 0, &q));
    CHECK(q != p); /* never hands out a PENDING block */
    CHECK_OK(tide_release(f.t, p));
    CHECK(stats_of(f.t).pending_free_blocks[ALL].current == 1); /* one reference left */
    CHECK_OK(tide_release(f.t, p));                             /* PENDING -> FREE */
    s = stats_of(f.t);
    CHECK(s.pending_free_blocks[ALL].current == 0);
    CHECK(s.num_pending_drained == 1);
    checked(&f);
    /* Retain and release while ACTIVE: the free is then immediate. */
    CHECK_OK(tide_retain(f.t, q));
    CHECK_OK(tide_release(f.t, q));
    CHECK_OK(tide_free(f.t, q));
    CHECK(stats_of(f.t).pending_free_blocks[ALL].current == 0);
    checked(&f);
    fixture_close(&f);
}

static void test_stream_uses_hold_a_freed_block_until_fences_signal(void)
{
    struct fixture f;
    fixture_open(&f, 0, NULL);
    tide_stream a, b, c, d;
    CHECK_OK(tide_sim_stream_create(f.sim, &a));
    CHECK_OK(tide_sim_stream_create(f.sim, &b));
    CHECK_OK(tide_sim_stream_create(f.sim, &c));
    CHECK_OK(tide_sim_stream_create(f.sim, &d));
    struct gate gb, gc, gd;
    gate_init(&gb);
    gate_init(&gc);
    gate_init(&gd);
    void *p, *q;
    CHECK_OK(tide_malloc(f.t, 65536, a, &p));
    CHECK_OK(tide_record_stream(f.t, p, a)); /* its own stream: nothing to wait for */
    CHECK_OK(tide_record_stream(f.t, p, b));
    CHECK_OK(tide_record_stream(f.t, p, c));
    CHECK_OK(tide_record_stream(f.t, p, d)); /* three other streams: more than the inline room */
    CHECK_OK(tide_record_stream(f.t, p, c)); /* recorded twice counts once */
    uint8_t *bytes = p; /* each kernel writes its own bytes of the block */
    struct fill_kernel kb = {&gb, bytes, 16, 1, NULL}, kc = {&gc, bytes + 16, 16, 2, NULL},
                       kd = {&gd, bytes + 32, 16, 3, NULL};
    CHECK_OK(tide_sim_enqueue(f.sim, b, 0, fill_kernel_run, &kb));
    CHECK_OK(tide_sim_enqueue(f.sim, c, 0, fill_kernel_run, &kc));
    CHECK_OK(tide_sim_enqueue(f.sim, d, 0, fill_kernel_run, &kd));
    CHECK_OK(tide_free(f.t, p));
    tide_sim_counters cnt;
    tide_sim_get_counters(f.sim, &cnt);
    CHECK(cnt.calls[TIDE_SIM_FENCE_RECORD] == 3);
    CHECK(stats_of(f.t).pending_free_blocks[ALL].current == 1);
    checked(&f);

    gate_open(&gb);
    gate_open(&gd);
    CHECK_OK(tide_sim_stream_synchronize(f.sim, b));
    CHECK_OK(tide_sim_stream_synchronize(f.sim, d));
    CHECK_OK(tide_malloc(f.t, 512, a, &q)); /* polls: b's and d's fences signalled, c's not */
    CHECK(stats_of(f.t).pending_free_blocks[ALL].current == 1);
    CHECK_OK(tide_free(f.t, q));
    checked(&f);

    gate_open(&gc);
    CHECK_OK(tide_sim_stream_synchronize(f.sim, c));
    CHECK_OK(tide_malloc(f.t, 512, a, &q));
    CHECK(stats_of(f.t).pending_free_blocks[ALL].current == 0);
    CHECK(stats_of(f.t).num_pending_drained == 1);
    CHECK_OK(tide_free(f.t, q));
    checked(&f);
    /* Fences are pooled: a second round creates no new ones. */
    tide_sim_get_counters(f.sim, &cnt);
    uint64_t created = cnt.calls[TIDE_SIM_FENCE_CREATE];
    CHECK_OK(tide_malloc(f.t, 65536, a, &p));
    CHECK_OK(tide_record_stream(f.t, p, b));
    CHECK_OK(tide_free(f.t, p));
    CHECK_OK(tide_sim_synchronize(f.sim));
    tide_sim_get_counters(f.sim, &cnt);
    CHECK(cnt.calls[TIDE_SIM_FENCE_CREATE] == created);
    gate_destroy(&gb);
    gate_destroy(&gc);
    gate_destroy(&gd);
    fixture_close(&f);
}

static void test_references_and_fences_together(void)
{
    struct fixture f;
    fixture_open(&f, 0, NULL);
    tide_stream b;
    CHECK_OK(tide_sim_stream_create(f.sim, &b));
    struct gate g;
    gate_init(&g);
    void *p;
    CHECK_OK(tide_malloc(f.t, 4096, 0, &p));
    CHECK_OK(tide_retain(f.t, p));
    CHECK_OK(tide_record_stream(f.t, p, b));
    struct fill_kernel k = {&g, p, 16, 7, NULL};
    CHECK_OK(tide_sim_enqueue(f.sim, b, 0, fill_kernel_run, &k));
    CHECK_OK(tide_free(f.t, p));
    CHECK_OK(tide_release(f.t, p)); /* the reference is gone, the fence is not */
    CHECK(stats_of(f.t).pending_free_blocks[ALL].current == 1);
    gate_open(&g);
    CHECK_OK(tide_empty_cache(f.t, NULL)); /* synchronizes, drains, releases */
    tide_stats s = stats_of(f.t);
    CHECK(s.pending_free_blocks[ALL].current == 0);
    CHECK(s.reserved_bytes[ALL].current == 0);
    checked(&f);
    gate_destroy(&g);
    fixture_close(&f);
}

static void test_each_stream_keeps_its_own_blocks(void)
{
    struct fixture f;
    fixture_open(&f, 0, NULL);
    tide_stream a, b;
    CHECK_OK(tide_sim_stream_create(f.sim, &a));
    CHECK_OK(tide_sim_stream_create(f.sim, &b));
    void *p, *keep, *q;
    CHECK_OK(tide_malloc(f.t, 4096, a, &keep)); /* keeps a's segment in use, so it stays a's */
    CHECK_OK(tide_malloc(f.t, 4096, a, &p));
    CHECK_OK(tide_free(f.t, p));
    CHECK_OK(tide_malloc(f.t, 4096, b, &q));
    CHECK(q != p); /* a block cached on stream a is not given to stream b */
    tide_stats s = stats_of(f.t);
    CHECK(s.segment[ALL].current == 2);
    CHECK(s.num_streams == 2);
    CHECK_OK(tide_free(f.t, q));
    CHECK_OK(tide_free(f.t, keep));
    checked(&f);
    fixture_close(&f);
}

static void test_pending_block_is_never_merged(void)
{
    struct fixture f;
    fixture_open(&f, 0, NULL);
    uint8_t *a, *b, *c;
    CHECK_OK(tide_malloc(f.t, 4096, 0, (void **)&a));
    CHECK_OK(tide_malloc(f.t, 4096, 0, (void **)&b));
    CHECK_OK(tide_malloc(f.t, 4096, 0, (void **)&c));
    CHECK_OK(tide_retain(f.t, b));
    CHECK_OK(tide_free(f.t, b));
    CHECK_OK(tide_free(f.t, a));
    CHECK_OK(tide_free(f.t, c));
    checked(&f);
    /* The segment is not wholly free: b sits in the middle, pending. */
    tide_stats s = stats_of(f.t);
    CHECK(s.pending_free_bytes[ALL].current == 4096);
    CHECK(s.inactive_split_bytes[ALL].current == (int64_t)(2 * MIB - 4096));
    tide_release_report r;
    CHECK_OK(tide_empty_cache(f.t, &r));
    CHECK(r.released_segments == 0 && r.pending_blocks == 1); /* a pending block pins its segment */
    CHECK_OK(tide_release(f.t, b));
    s = stats_of(f.t);
    CHECK(s.inactive_split_bytes[ALL].current == 0);
    CHECK(s.cached_bytes[ALL].current == (int64_t)(2 * MIB));
    checked(&f);
    fixture_close(&f);
}

static void test_failed_fence_owes_a_synchronize(void)
{
    struct fixture f;
    fixture_open(&f, 0, NULL);
    tide_stream b;
    CHECK_OK(tide_sim_stream_create(f.sim, &b));
    void *p, *q;
    CHECK_OK(tide_malloc(f.t, 4096, 0, &p));
    CHECK_OK(tide_record_stream(f.t, p, b));
    tide_sim_inject_fault(f.sim, TIDE_SIM_FENCE_CREATE, 0, 1);
    CHECK_OK(tide_free(f.t, p)); /* the free succeeds; the block waits for a device synchronize */
    tide_stats s = stats_of(f.t);
    CHECK(s.pending_free_blocks[ALL].current == 1);
    CHECK(s.num_fence_errors == 1);
    CHECK_OK(tide_malloc(f.t, 4096, 0, &q));
    CHECK(q != p);
    checked(&f);
    CHECK_OK(tide_free(f.t, q));
    CHECK_OK(tide_empty_cache(f.t, NULL));
    s = stats_of(f.t);
    CHECK(s.pending_free_blocks[ALL].current == 0);
    CHECK(s.reserved_bytes[ALL].current == 0);
    /* Same for a failed fence record. */
    CHECK_OK(tide_malloc(f.t, 4096, 0, &p));
    CHECK_OK(tide_record_stream(f.t, p, b));
    tide_sim_inject_fault(f.sim, TIDE_SIM_FENCE_RECORD, 0, 1);
    CHECK_OK(tide_free(f.t, p));
    CHECK(stats_of(f.t).pending_free_blocks[ALL].current == 1);
    CHECK_OK(tide_empty_cache(f.t, NULL));
    CHECK(stats_of(f.t).pending_free_blocks[ALL].current == 0);
    checked(&f);
    fixture_close(&f);
}

/* max_split_size_mb: a segment reserved for a request of the size or more serves no smaller request
 * while a segment of its own fits under the most ever reserved, and large requests share it; a segment
 * reserved for a request just below the size, which its 2 MiB granules take above it, serves that
 * request again (under PyTorch's rule, by block size, each step of such a loop reserved a segment more:
 * reserved ran away). Past the mark, the large segment serves the small request rather than the peak
 * rising. */
static void test_max_split_size_keeps_large_segments_for_large_requests(void)
{
    struct fixture f;
    fixture_open(&f, 0, "max_split_size_mb:64");
    void *big, *other, *small, *again, *rest;
    CHECK_OK(tide_malloc(f.t, 100 * MIB, 0, &big));
    CHECK_OK(tide_malloc(f.t, 40 * MIB, 0, &other));
    CHECK_OK(tide_free(f.t, other));
    CHECK_OK(tide_free(f.t, big));
    CHECK_OK(tide_trim(f.t, 100 * MIB, NULL)); /* the 40 MiB segment goes, the mark stays at 140 */
    CHECK(stats_of(f.t).reserved_bytes[ALL].current == (int64_t)(100 * MIB));
    CHECK_OK(tide_malloc(f.t, 30 * MIB, 0, &small)); /* below 64 MiB: a segment of its own */
    CHECK((uintptr_t)small + 30 * MIB <= (uintptr_t)big || (uintptr_t)small >= (uintptr_t)big + 100 * MIB);
    CHECK_OK(tide_malloc(f.t, 90 * MIB, 0, &again)); /* 64 MiB or more: from the large one, split */
    CHECK(again == big);
    CHECK(stats_of(f.t).allocated_bytes[ALL].current == (int64_t)(30 * MIB + 90 * MIB));
    CHECK_OK(tide_free(f.t, again));
    /* at the mark (130 of 140 MiB reserved), a 12 MiB request is served from the large segment */
    CHECK_OK(tide_malloc(f.t, 12 * MIB, 0, &rest));
    CHECK((uintptr_t)rest >= (uintptr_t)big && (uintptr_t)rest < (uintptr_t)big + 100 * MIB);
    CHECK(stats_of(f.t).reserved_bytes[ALL].peak == (int64_t)(140 * MIB));
    CHECK_OK(tide_free(f.t, rest));
    CHECK_OK(tide_free(f.t, small));
    /* just below the size, in a segment of 64 MiB: the same request takes it again, step after step */
    uint64_t reserved = stats_of(f.t).num_device_alloc;
    for (int step = 0; step < 5; step++) {
        CHECK_OK(tide_malloc(f.t, 63 * MIB + 1024, 0, &rest));
        CHECK_OK(tide_free(f.t, rest));
    }
    CHECK(stats_of(f.t).num_device_alloc <= reserved + 1);
    checked(&f);
    fixture_close(&f);
}

/* max_split_size_mb protects the segments of large requests from smaller ones only while a large request
 * could still grow under the mark. Four idle 100 MiB segments and 40 MiB of room under the mark: under
 * the rule alone, the 10 MiB requests took two segments of their own (the room), the next two split a
 * 100 MiB segment past the mark all the same, and the four 100 MiB requests that followed reserved a
 * fifth: 540 MiB. With less room than a 100 MiB segment, the small requests share one of the idle
 * segments (never the last wholly free one: the test above keeps that), and the peak is 500 MiB. */
static void test_max_split_size_gives_way_when_the_room_is_short(void)
{
    struct fixture f;
    fixture_open(&f, 0, "max_split_size_mb:64");
    void *large[4], *mid, *small[6];
    for (int i = 0; i < 4; i++)
        CHECK_OK(tide_malloc(f.t, 100 * MIB, 0, &large[i]));
    CHECK_OK(tide_malloc(f.t, 40 * MIB, 0, &mid));
    CHECK_OK(tide_free(f.t, mid));
    for (int i = 0; i < 4; i++)
        CHECK_OK(tide_free(f.t, large[i]));
    CHECK_OK(tide_trim(f.t, 400 * MIB, NULL)); /* the 40 MiB segment goes, the mark stays at 440 */
    CHECK(stats_of(f.t).reserved_bytes[ALL].current == (int64_t)(400 * MIB));
    uintptr_t base0 = 0, base;
    size_t size;
    for (int i = 0; i < 6; i++) {
        CHECK_OK(tide_malloc(f.t, 10 * MIB, 0, &small[i]));
        CHECK_OK(tide_segment_of(f.t, small[i], &base, &size));
        CHECK(size == 100 * MIB);
        CHECK(i == 0 || base == base0); /* all in the one segment */
        base0 = base;
    }
    CHECK(stats_of(f.t).reserved_bytes[ALL].current == (int64_t)(400 * MIB));
    for (int i = 0; i < 4; i++)
        CHECK_OK(tide_malloc(f.t, 100 * MIB, 0, &large[i]));
    CHECK(stats_of(f.t).reserved_bytes[ALL].peak == (int64_t)(500 * MIB));
    for (int i = 0; i < 4; i++)
        CHECK_OK(tide_free(f.t, large[i]));
    for (int i = 0; i < 6; i++)
        CHECK_OK(tide_free(f.t, small[i]));
    checked(&f);
    fixture_close(&f);
}

/* A segment reserved for a large tensor serves no request of less than 1/32 of it while the program is
 * below its peak: a small block would keep the whole segment reserved after the tensor is gone. At the
 * high-water mark the rule is lifted: a cached block serves rather than the peak rising. */
static void test_a_large_segment_is_not_pinned_by_small_requests(void)
{
    struct fixture f;
    fixture_open(&f, 0, NULL);
    void *big, *other, *small, *mid;
    CHECK_OK(tide_malloc(f.t, 1024 * MIB, 0, &big));
    CHECK_OK(tide_malloc(f.t, 64 * MIB, 0, &other));
    CHECK_OK(tide_free(f.t, other));
    CHECK_OK(tide_free(f.t, big));
    CHECK_OK(tide_trim(f.t, 1024 * MIB, NULL)); /* the 64 MiB segment goes, the mark stays at 1088 */
    CHECK(stats_of(f.t).reserved_bytes[ALL].current == (int64_t)(1024 * MIB));
    CHECK_OK(tide_malloc(f.t, 8 * MIB, 0, &small)); /* below 32 MiB: a segment of its own */
    CHECK((uintptr_t)small + 8 * MIB <= (uintptr_t)big || (uintptr_t)small >= (uintptr_t)big + 1024 * MIB);
    CHECK_OK(tide_malloc(f.t, 40 * MIB, 0, &mid)); /* 32 MiB or more: from the large one, split */
    CHECK(mid == big);
    CHECK_OK(tide_free(f.t, mid));
    /* the large segment holds nothing: all of it can be given back while the small block lives */
    CHECK_OK(tide_trim(f.t, 16 * MIB, NULL));
    CHECK(stats_of(f.t).reserved_bytes[ALL].current == (int64_t)(16 * MIB));
    CHECK_OK(tide_free(f.t, small));
    checked(&f);
    fixture_close(&f);

    fixture_open(&f, 0, NULL);
    CHECK_OK(tide_malloc(f.t, 1024 * MIB, 0, &big));
    CHECK_OK(tide_free(f.t, big));
    /* at the mark: a new segment would raise the peak, so the large segment serves */
    CHECK_OK(tide_malloc(f.t, 8 * MIB, 0, &small));
    CHECK(small == big);
    CHECK(stats_of(f.t).reserved_bytes[ALL].peak == (int64_t)(1024 * MIB));
    CHECK_OK(tide_free(f.t, small));
    checked(&f);
    fixture_close(&f);
}

static int within(const void *p, const void *base, size_t size)
{
    return (uintptr_t)p >= (uintptr_t)base && (uintptr_t)p < (uintptr_t)base + size;
}

/* Past the mark a small request takes a cached block of a large segment, and keeps that segment
 * reserved while it lives. A second one goes to a segment a small block pins already, not to the one
 * whose free block fits it best: the first segment stays free for the large request it was made for. */
static void test_small_blocks_past_the_mark_gather_in_one_large_segment(void)
{
    struct fixture f;
    fixture_open(&f, 0, NULL);
    void *a, *b, *x, *y, *s1, *s2, *z, *again;
    CHECK_OK(tide_malloc(f.t, 1024 * MIB, 0, &a));
    CHECK_OK(tide_malloc(f.t, 1024 * MIB, 0, &b));
    CHECK_OK(tide_free(f.t, a));
    CHECK_OK(tide_free(f.t, b));
    /* both segments in use, one each (x's keeps 424 MiB free, y's 324 MiB); the mark is at 2 GiB */
    CHECK_OK(tide_malloc(f.t, 600 * MIB, 0, &x));
    CHECK_OK(tide_malloc(f.t, 700 * MIB, 0, &y));
    CHECK((x == a && y == b) || (x == b && y == a));
    CHECK_OK(tide_malloc(f.t, 8 * MIB, 0, &s1)); /* past the mark: the best fit, in y's segment */
    CHECK(within(s1, y, 1024 * MIB));
    CHECK_OK(tide_free(f.t, x));
    CHECK_OK(tide_malloc(f.t, 1000 * MIB, 0, &z)); /* x's segment again, 24 MiB left free */
    CHECK(z == x);
    /* that 24 MiB block fits it best, but y's segment holds a small block already */
    CHECK_OK(tide_malloc(f.t, 8 * MIB, 0, &s2));
    CHECK(within(s2, y, 1024 * MIB));
    CHECK_OK(tide_free(f.t, z));
    checked(&f);
    /* x's segment is wholly free: a gigabyte request takes it, with no new reservation */
    CHECK_OK(tide_malloc(f.t, 1024 * MIB, 0, &again));
    CHECK(again == x);
    tide_stats st = stats_of(f.t);
    CHECK(st.num_device_alloc == 2);
    CHECK(st.reserved_bytes[ALL].peak == (int64_t)(2048 * MIB));
    CHECK_OK(tide_free(f.t, again));
    CHECK_OK(tide_free(f.t, s1));
    CHECK_OK(tide_free(f.t, s2));
    CHECK_OK(tide_free(f.t, y));
    checked(&f);
    fixture_close(&f);
}

/* A kernel on a busy stream: it runs some time after its launch, then says it is done. */
struct late_kernel {
    uint8_t *ptr;
    size_t size;
    _Atomic int done;
};

static void late_kernel_run(void *arg)
{
    struct late_kernel *k = arg;
    memset(k->ptr, 0xAB, k->size);
    atomic_store(&k->done, 1);
}

/* Past the mark, a growth gives back its own stream's idle segment before another stream's, even a
 * smaller one that would cover as well: taking the other stream's made two streams trade segments
 * back and forth, each growth giving back what the other stream needed next. */
static void test_a_growth_gives_back_its_own_streams_segment_first(void)
{
    struct fixture f;
    fixture_open(&f, 0, NULL);
    tide_stream b;
    CHECK_OK(tide_sim_stream_create(f.sim, &b));
    void *a36, *a16, *b40, *b48;
    CHECK_OK(tide_malloc(f.t, 36 * MIB, 0, &a36));
    CHECK_OK(tide_malloc(f.t, 16 * MIB, 0, &a16));
    CHECK_OK(tide_malloc(f.t, 40 * MIB, b, &b40));
    CHECK_OK(tide_free(f.t, a16));
    CHECK_OK(tide_free(f.t, a36));
    CHECK_OK(tide_free(f.t, b40));
    CHECK_OK(tide_trim(f.t, 76 * MIB, NULL)); /* the 16 MiB segment, idle longest, goes; the mark stays */
    CHECK(stats_of(f.t).reserved_bytes[ALL].current == (int64_t)(76 * MIB));
    /* 48 MiB on b fits neither idle segment and passes the mark by 32 MiB: stream 0's 36 MiB segment
     * would cover that and is the smaller, but b's own 40 MiB one goes */
    CHECK_OK(tide_malloc(f.t, 48 * MIB, b, &b48));
    CHECK(stats_of(f.t).reserved_bytes[ALL].current == (int64_t)(84 * MIB));
    uint64_t reserves = stats_of(f.t).num_device_alloc;
    CHECK_OK(tide_malloc(f.t, 36 * MIB, 0, &a36)); /* stream 0 finds its segment */
    CHECK(stats_of(f.t).num_device_alloc == reserves);
    CHECK_OK(tide_free(f.t, a36));
    CHECK_OK(tide_free(f.t, b48));
    checked(&f);
    fixture_close(&f);
}

/* Past the mark, the idle segment the trim would give back moves to the stream that needs it, if the
 * request takes at least half of it: no driver call, and not before the other stream's work that used
 * it is done. */
static void test_idle_segment_moves_to_another_stream_past_the_mark(void)
{
    struct fixture f;
    fixture_open(&f, 0, NULL);
    tide_stream side;
    CHECK_OK(tide_sim_stream_create(f.sim, &side));
    void *a, *b, *p;
    CHECK_OK(tide_malloc(f.t, 30 * MIB, 0, &a));
    CHECK_OK(tide_malloc(f.t, 30 * MIB, 0, &b));
    /* a kernel still to run on stream 0 uses a, which the program frees at once, as stream order lets it */
    struct late_kernel k = {a, 30 * MIB, 0};
    CHECK_OK(tide_sim_enqueue(f.sim, 0, 200 * 1000, late_kernel_run, &k));
    CHECK_OK(tide_free(f.t, a));
    CHECK_OK(tide_free(f.t, b));
    CHECK_OK(tide_malloc(f.t, 20 * MIB, side, &p));
    CHECK(atomic_load(&k.done) == 1); /* the move waited for stream 0's work */
    CHECK(within(p, a, 30 * MIB) || within(p, b, 30 * MIB));
    tide_stats st = stats_of(f.t);
    CHECK(st.num_device_alloc == 2);
    CHECK(st.num_device_free == 0);
    CHECK(st.reserved_bytes[ALL].current == (int64_t)(60 * MIB));
    checked(&f);
    /* the segment is the side stream's now: freed there, it is that stream's cache */
    CHECK_OK(tide_free(f.t, p));
    void *again;
    CHECK_OK(tide_malloc(f.t, 30 * MIB, side, &again));
    CHECK(within(again, p, 30 * MIB) || within(p, again, 30 * MIB));
    CHECK(stats_of(f.t).num_device_alloc == 2);
    CHECK_OK(tide_free(f.t, again));
    checked(&f);
    fixture_close(&f);

    /* A request that would leave more of the segment free than it takes gets a segment of its own: the
     * rest would stay on the side stream, pinned by whatever long-lived block comes there next. */
    fixture_open(&f, 0, NULL);
    CHECK_OK(tide_sim_stream_create(f.sim, &side));
    CHECK_OK(tide_malloc(f.t, 30 * MIB, 0, &a));
    CHECK_OK(tide_malloc(f.t, 30 * MIB, 0, &b));
    CHECK_OK(tide_free(f.t, a));
    CHECK_OK(tide_free(f.t, b));
    CHECK_OK(tide_malloc(f.t, 12 * MIB, side, &p));
    st = stats_of(f.t);
    CHECK(st.num_device_alloc == 3); /* the trim gave one of stream 0's back and reserved 12 MiB */
    CHECK(st.num_device_free == 1);
    CHECK_OK(tide_free(f.t, p));
    checked(&f);
    fixture_close(&f);
}

/* A request of 1 to 10 MiB gets a segment of as many such requests as fit in 20 MiB, rounded up to the
 * 2 MiB granule: no tail that only smaller requests could use. */
static void test_mid_size_segments_hold_whole_requests(void)
{
    static const struct {
        size_t request, segment;
    } cases[] = {
        {8 * MIB, 16 * MIB},            /* two, not two and a 4 MiB tail */
        {3 * MIB, 18 * MIB},            /* six */
        {7 * MIB, 14 * MIB},            /* two */
        {6 * MIB + 1, 20 * MIB},        /* three of 6 MiB + 512 (18 MiB + 1.5 KiB), rounded up */
        {4 * MIB, 20 * MIB},            /* five: exactly 20 */
        {3 * MIB / 2, 20 * MIB},        /* thirteen (19.5 MiB), rounded up */
        {10 * MIB, 10 * MIB},           /* 10 MiB and above: a segment of the request's own size */
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        struct fixture f;
        fixture_open(&f, 0, NULL);
        void *p;
        CHECK_OK(tide_malloc(f.t, cases[i].request, 0, &p));
        tide_stats s = stats_of(f.t);
        if (s.reserved_bytes[TIDE_POOL_LARGE].current != (int64_t)cases[i].segment) {
            fprintf(stderr, "a request of %zu bytes reserved %lld bytes, expected %zu\n", cases[i].request,
                    (long long)s.reserved_bytes[TIDE_POOL_LARGE].current, cases[i].segment);
            harness_failures++;
        }
        CHECK_OK(tide_free(f.t, p));
        fixture_close(&f);
    }
}

/* The small pool's segments: 2 MiB while it holds 16 MiB or less, then the power of two at or above an
 * eighth of what it holds, at most 32 MiB (heap.c, small_segment_size). */
static size_t small_segment_expected(int64_t small_reserved)
{
    size_t size = 2 * MIB;
    while (size < (size_t)small_reserved / 8 && size < 32 * MIB)
        size *= 2;
    return size;
}

static void test_the_small_pool_grows_with_what_it_holds(void)
{
    struct fixture f;
    fixture_open(&f, 0, NULL);
    enum { BLOCKS = 1024 }; /* 512 KiB each: 512 MiB of small blocks */
    static void *p[BLOCKS];
    int64_t reserved = 0;
    uint64_t reservations = 0;
    size_t largest = 0;
    for (int i = 0; i < BLOCKS; i++) {
        CHECK_OK(tide_malloc(f.t, 512 * 1024, 0, &p[i]));
        tide_stats s = stats_of(f.t);
        int64_t now = s.reserved_bytes[TIDE_POOL_SMALL].current;
        if (now != reserved) {
            size_t added = (size_t)(now - reserved);
            if (added != small_segment_expected(reserved)) {
                fprintf(stderr, "holding %lld bytes, the small pool grew by %zu, expected %zu\n",
                        (long long)reserved, added, small_segment_expected(reserved));
                harness_failures++;
            }
            largest = added > largest ? added : largest;
            reserved = now;
            reservations++;
        }
    }
    CHECK(largest == 32 * MIB);
    /* 9 of 2 MiB, 4 each of 4, 8 and 16, then 12 of 32 MiB: 33 driver calls, not 256 */
    CHECK(reservations == 33);
    CHECK(stats_of(f.t).num_device_alloc == reservations);
    CHECK(reserved - (int64_t)(BLOCKS * 512 * 1024) < (int64_t)(32 * MIB));
    for (int i = 0; i < BLOCKS; i++)
        CHECK_OK(tide_free(f.t, p[i]));
    CHECK_OK(tide_empty_cache(f.t, NULL));
    CHECK(reserved_of(f.t) == 0);
    fixture_close(&f);
}

int main(void)
{
    RUN(test_malloc_rounds_aligns_and_picks_pools);
    RUN(test_free_makes_block_free_and_reusable_on_its_stream);
    RUN(test_split_and_merge);
    RUN(test_references_hold_a_freed_block_pending);
    RUN(test_stream_uses_hold_a_freed_block_until_fences_signal);
    RUN(test_references_and_fences_together);
    RUN(test_each_stream_keeps_its_own_blocks);
    RUN(test_pending_block_is_never_merged);
    RUN(test_failed_fence_owes_a_synchronize);
    RUN(test_max_split_size_keeps_large_segments_for_large_requests);
    RUN(test_max_split_size_gives_way_when_the_room_is_short);
    RUN(test_mid_size_segments_hold_whole_requests);
    RUN(test_the_small_pool_grows_with_what_it_holds);
    RUN(test_a_large_segment_is_not_pinned_by_small_requests);
    RUN(test_small_blocks_past_the_mark_gather_in_one_large_segment);
    RUN(test_a_growth_gives_back_its_own_streams_segment_first);
    RUN(test_idle_segment_moves_to_another_stream_past_the_mark);
    return HARNESS_EXIT();
}

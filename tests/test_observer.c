/*
 * tide_observe: an observer hears every segment reserved and released (pages mapped and unmapped with
 * expandable segments), out of memory and empty_cache, as they happen, with or without a history:
 * what a communication library's registration of segments (PyTorch's ProcessGroupNCCL) and a live
 * memory timeline need.
 */
#include "harness.h"

#define MAX_SEEN 256

struct seen {
    int n;
    tide_event events[MAX_SEEN];
    int64_t held;            /* reserved minus released, as the observer counts it */
};

static void note(void *ctx, const tide_event *e)
{
    struct seen *s = ctx;
    if (s->n < MAX_SEEN)
        s->events[s->n++] = *e;
    if (e->kind == TIDE_EVENT_SEGMENT_RESERVED)
        s->held += (int64_t)e->size;
    if (e->kind == TIDE_EVENT_SEGMENT_RELEASED)
        s->held -= (int64_t)e->size;
}

static int count_kind(const struct seen *s, uint32_t kind)
{
    int n = 0;
    for (int i = 0; i < s->n; i++)
        n += s->events[i].kind == kind;
    return n;
}

static void test_segments_as_they_happen(const char *config)
{
    struct fixture f;
    fixture_open(&f, 256 * MIB, config);
    struct seen s;
    memset(&s, 0, sizeof s);
    CHECK_OK(tide_observe(f.t, note, &s));
    void *p, *q;
    CHECK_OK(tide_malloc(f.t, 30 * MIB, 0, &p));
    CHECK(count_kind(&s, TIDE_EVENT_SEGMENT_RESERVED) >= 1);
    CHECK(s.held == reserved_of(f.t)); /* at each moment, what the device holds */
    const tide_event *first = &s.events[0];
    CHECK(first->addr <= (uint64_t)(uintptr_t)p && (uint64_t)(uintptr_t)p + 30 * MIB <= first->addr + first->size);
    CHECK_OK(tide_malloc(f.t, 1000, 0, &q));
    CHECK(s.held == reserved_of(f.t));
    CHECK_OK(tide_free(f.t, p));
    CHECK_OK(tide_free(f.t, q));
    CHECK(count_kind(&s, TIDE_EVENT_SEGMENT_RELEASED) == 0); /* cached, not released */
    CHECK_OK(tide_empty_cache(f.t, NULL));
    CHECK(s.held == 0 && reserved_of(f.t) == 0);
    CHECK(count_kind(&s, TIDE_EVENT_SEGMENT_RELEASED) >= 1);
    CHECK(s.events[s.n - 1].kind == TIDE_EVENT_EMPTY_CACHE);
    CHECK(s.events[s.n - 1].seq == 0); /* no history on */

    void *big = (void *)1;
    CHECK_STATUS(tide_malloc(f.t, 200 * MIB, 0, &big), TIDE_ENOMEM); /* the limit, 128 MiB */
    CHECK(s.events[s.n - 1].kind == TIDE_EVENT_OOM && s.events[s.n - 1].size == 200 * MIB);

    /* Removed: heard no more. */
    int before = s.n;
    CHECK_OK(tide_observe(f.t, NULL, NULL));
    CHECK_OK(tide_malloc(f.t, 30 * MIB, 0, &p));
    CHECK_OK(tide_free(f.t, p));
    CHECK_OK(tide_empty_cache(f.t, NULL));
    CHECK(s.n == before);
    fixture_close(&f);
}

static void test_reserved_segments(void) { test_segments_as_they_happen("limit:128MiB"); }
static void test_expandable_pages(void) { test_segments_as_they_happen("limit:128MiB,expandable_segments:True"); }

/* With a history on, the observer's events carry the history's numbers, and both agree. */
static void test_with_a_history(void)
{
    struct fixture f;
    fixture_open(&f, 0, NULL);
    struct seen s;
    memset(&s, 0, sizeof s);
    CHECK_OK(tide_history_start(f.t, 1024, TIDE_HISTORY_ORDERED));
    CHECK_OK(tide_observe(f.t, note, &s));
    void *p;
    CHECK_OK(tide_malloc(f.t, 30 * MIB, 0, &p));
    CHECK_OK(tide_free(f.t, p));
    CHECK_OK(tide_empty_cache(f.t, NULL));
    tide_event events[16];
    size_t n = 0;
    CHECK_OK(tide_history_read(f.t, events, 16, &n, NULL));
    int matched = 0;
    for (size_t i = 0; i < n; i++)
        for (int j = 0; j < s.n; j++)
            if (events[i].seq == s.events[j].seq && events[i].kind == s.events[j].kind &&
                events[i].addr == s.events[j].addr && events[i].size == s.events[j].size)
                matched++;
    CHECK(matched == s.n && s.n == 3); /* reserved, released, empty_cache */
    CHECK_STATUS(tide_observe(NULL, note, &s), TIDE_EINVAL);
    fixture_close(&f);
}

/* Frees that wait for the device: requested when the block goes PENDING, completed when it becomes
 * FREE, at the user's pointer; a free completed at once is not heard (it completed in its call). */
static void test_pending_frees(const char *config)
{
    struct fixture f;
    fixture_open(&f, 0, config);
    struct seen s;
    memset(&s, 0, sizeof s);
    tide_stream side;
    CHECK_OK(tide_sim_stream_create(f.sim, &side));
    CHECK_OK(tide_observe(f.t, note, &s));
    void *p, *q, *r;
    CHECK_OK(tide_malloc(f.t, 1000, 0, &p));
    CHECK_OK(tide_malloc(f.t, 1000, 0, &q));
    CHECK_OK(tide_malloc(f.t, 1000, 0, &r));
    int reserved = s.n;
    CHECK_OK(tide_free(f.t, q)); /* at once */
    CHECK(s.n == reserved);
    CHECK_OK(tide_retain(f.t, p));
    CHECK_OK(tide_free(f.t, p));
    CHECK(s.n == reserved + 1 && s.events[s.n - 1].kind == TIDE_EVENT_FREE_REQUESTED);
    CHECK(s.events[s.n - 1].addr == (uintptr_t)p && s.events[s.n - 1].size >= 1000);
    CHECK_OK(tide_release(f.t, p));
    CHECK(s.n == reserved + 2 && s.events[s.n - 1].kind == TIDE_EVENT_FREE_COMPLETED);
    CHECK(s.events[s.n - 1].addr == (uintptr_t)p);
    /* a fence: completed when a later call finds it signalled */
    CHECK_OK(tide_record_stream(f.t, r, side));
    CHECK_OK(tide_sim_enqueue(f.sim, side, 1000, NULL, NULL));
    CHECK_OK(tide_free(f.t, r));
    CHECK(s.events[s.n - 1].kind == TIDE_EVENT_FREE_REQUESTED && s.events[s.n - 1].addr == (uintptr_t)r);
    CHECK_OK(tide_empty_cache(f.t, NULL));
    int completed = 0;
    for (int i = reserved + 2; i < s.n; i++)
        completed += s.events[i].kind == TIDE_EVENT_FREE_COMPLETED && s.events[i].addr == (uintptr_t)r;
    CHECK(completed == 1);
    fixture_close(&f);
}

static void test_pending_frees_plain(void) { test_pending_frees(NULL); }
static void test_pending_frees_guarded(void) { test_pending_frees("guard:True"); }

/* The order a communication library needs: a segment is heard reserved once the device holds it, and
 * released while the device still holds it (what it deregisters is there, as under PyTorch's
 * allocator, which tells its trackers before cudaFree). A release the device refuses is heard as
 * reserved again, so that what the observer counts stays what the device holds. */
struct witness {
    struct seen seen;
    tide_sim *sim;
    int out_of_order; /* events heard when the device did not hold what the order above says */
};

static void witness_note(void *ctx, const tide_event *e)
{
    struct witness *w = ctx;
    if (e->kind == TIDE_EVENT_SEGMENT_RESERVED || e->kind == TIDE_EVENT_SEGMENT_RELEASED) {
        tide_sim_counters c;
        tide_sim_get_counters(w->sim, &c);
        /* Before a reservation's event the device holds what was heard so far and this segment; before a
         * release's, still what was heard so far, this segment with it. */
        int64_t device_should_hold = w->seen.held + (e->kind == TIDE_EVENT_SEGMENT_RESERVED ? (int64_t)e->size : 0);
        w->out_of_order += (int64_t)c.held_bytes != device_should_hold;
    }
    note(&w->seen, e);
}

static void test_released_while_still_there(const char *config, tide_sim_op release_op)
{
    struct fixture f;
    fixture_open(&f, 256 * MIB, config);
    struct witness w;
    memset(&w, 0, sizeof w);
    w.sim = f.sim;
    CHECK_OK(tide_observe(f.t, witness_note, &w));
    void *p, *q;
    CHECK_OK(tide_malloc(f.t, 30 * MIB, 0, &p));
    CHECK_OK(tide_malloc(f.t, 1000, 0, &q));
    CHECK_OK(tide_free(f.t, p));
    CHECK_OK(tide_free(f.t, q));
    CHECK_OK(tide_empty_cache(f.t, NULL));
    CHECK(count_kind(&w.seen, TIDE_EVENT_SEGMENT_RELEASED) >= 1);
    CHECK(w.out_of_order == 0);
    CHECK(w.seen.held == 0);

    /* The device refuses the release: heard released, then reserved again (with expandable segments
     * tide_empty_cache then unmaps the pages another way, and says the first failed). */
    CHECK_OK(tide_malloc(f.t, 30 * MIB, 0, &p));
    CHECK_OK(tide_free(f.t, p));
    int before = w.seen.n;
    tide_sim_inject_fault(f.sim, release_op, 0, 1);
    CHECK(tide_empty_cache(f.t, NULL) != TIDE_OK);
    CHECK(w.seen.n >= before + 2);
    CHECK(w.seen.events[before].kind == TIDE_EVENT_SEGMENT_RELEASED);
    CHECK(w.seen.events[before + 1].kind == TIDE_EVENT_SEGMENT_RESERVED);
    CHECK(w.seen.events[before + 1].addr == w.seen.events[before].addr &&
          w.seen.events[before + 1].size == w.seen.events[before].size);
    CHECK(w.seen.held == reserved_of(f.t));
    CHECK(w.out_of_order == 0);
    CHECK_OK(tide_empty_cache(f.t, NULL)); /* the device takes it now */
    CHECK(w.seen.held == 0 && reserved_of(f.t) == 0 && w.out_of_order == 0);
    CHECK_OK(tide_observe(f.t, NULL, NULL));
    fixture_close(&f);
}

static void test_released_while_still_there_reserved(void) { test_released_while_still_there(NULL, TIDE_SIM_RELEASE); }
static void test_released_while_still_there_expandable(void)
{
    test_released_while_still_there("expandable_segments:True", TIDE_SIM_UNMAP);
}

int main(void)
{
    RUN(test_reserved_segments);
    RUN(test_expandable_pages);
    RUN(test_with_a_history);
    RUN(test_pending_frees_plain);
    RUN(test_pending_frees_guarded);
    RUN(test_released_while_still_there_reserved);
    RUN(test_released_while_still_there_expandable);
    return HARNESS_EXIT();
}

/*
 * Seeing memory: the history, the snapshot and the leak report.
 *  - Replaying a real trace with the history on, the events and the snapshot agree with the statistics
 *    at every checkpoint: live bytes rebuilt from alloc and free events equal requested_bytes, segment
 *    events add up to reserved_bytes, and the snapshot's blocks add up to allocated, pending and cached.
 *  - The leak report names exactly the allocations left live, by tag and call site.
 *  - The ring keeps the newest events and counts the dropped ones; nothing is recorded when off.
 */
#include "harness.h"
#include "trace.h"

#include <stdatomic.h>
#include <stdbool.h>
#include <unistd.h>

/* From src/history.c: names a code address as the leak report does. */
void describe_code_address(void *addr, char *buf, size_t cap);

#define EVENTS (1u << 20)

/* ---- a tiny reader of the snapshot's JSON: sums block sizes by state --------------------------------- */

struct snapshot_sums {
    int64_t active, pending, cached, segments_bytes, segments;
};

static struct snapshot_sums sum_snapshot(const char *json)
{
    struct snapshot_sums s = {0, 0, 0, 0, 0};
    const char *stats = strstr(json, "\"stats\":");
    for (const char *p = strstr(json, "\"pool\":"); p && (!stats || p < stats); p = strstr(p + 1, "\"pool\":")) {
        /* the segment's size is the number before its "pool" key */
        const char *size = p;
        while (size > json && strncmp(size, "\"size\": ", 8) != 0)
            size--;
        s.segments_bytes += (int64_t)strtoull(size + 8, NULL, 10);
        s.segments++;
    }
    for (const char *p = strstr(json, "\"state\": \""); p && (!stats || p < stats);
         p = strstr(p + 1, "\"state\": \"")) {
        const char *size = p;
        while (size > json && strncmp(size, "\"size\": ", 8) != 0)
            size--;
        int64_t n = (int64_t)strtoull(size + 8, NULL, 10);
        const char *state = p + 10;
        if (!strncmp(state, "active", 6))
            s.active += n;
        else if (!strncmp(state, "pending_free", 12))
            s.pending += n;
        else
            s.cached += n;
    }
    return s;
}

/* ---- the replay ----------------------------------------------------------------------------------------- */

struct live_map { /* requested bytes by address, from the events (open addressing) */
    uint64_t *keys, *values;
    size_t cap;
};

static size_t slot_of(struct live_map *m, uint64_t key)
{
    size_t i = (size_t)(key >> 9) * 0x9E3779B97F4A7C15ull % m->cap;
    while (m->keys[i] && m->keys[i] != key)
        i = (i + 1) % m->cap;
    return i;
}

static void test_history_and_snapshot_agree_with_stats(void)
{
    char err[256];
    struct trace tr;
    if (trace_load(TIDE_TRACES_DIR "/lstm_loop.csv.gz", &tr, err, sizeof err) != 0) {
        fprintf(stderr, "%s\n", err);
        harness_failures++;
        return;
    }
    struct fixture f;
    fixture_open(&f, 0, NULL);
    tide_stream s2;
    CHECK_OK(tide_sim_stream_create(f.sim, &s2));
    CHECK_OK(tide_history_start(f.t, EVENTS, 0));
    void **ptrs = calloc(tr.nallocs, sizeof *ptrs);
    tide_event *events = malloc(EVENTS * sizeof *events);
    struct live_map m = {calloc(1 << 16, 8), calloc(1 << 16, 8), 1 << 16};
    int checkpoints = 0;
    for (size_t i = 0; i < tr.nops; i++) {
        const struct trace_op *op = &tr.ops[i];
        if (op->kind == TRACE_ALLOC) {
            CHECK_OK(tide_malloc(f.t, op->size, 0, &ptrs[op->id]));
            if (op->id % 5 == 0) { /* some blocks are used by another stream: they go pending */
                CHECK_OK(tide_record_stream(f.t, ptrs[op->id], s2));
                CHECK_OK(tide_sim_enqueue(f.sim, s2, 20, NULL, NULL));
            }
        } else {
            CHECK_OK(tide_free(f.t, ptrs[op->id]));
            ptrs[op->id] = NULL;
        }
        if (i % 1500 == 750)
            CHECK_OK(tide_empty_cache(f.t, NULL));
        if (i % 97 != 0)
            continue;
        /* a checkpoint: everything recorded so far, rebuilt from the start (the stream's own events
         * and the segment events interleave in blocks: only the whole adds up at every point) */
        size_t n = 0;
        uint64_t dropped = 0;
        CHECK_OK(tide_history_read(f.t, events, EVENTS, &n, &dropped));
        CHECK(dropped == 0);
        memset(m.keys, 0, m.cap * sizeof *m.keys);
        int64_t live_requested = 0, reserved = 0;
        for (size_t k = 0; k < n; k++) {
            const tide_event *e = &events[k];
            /* in order, each number once; a free completed at once reads as two with one seq */
            CHECK(k == 0 || e->seq > events[k - 1].seq ||
                  (e->seq == events[k - 1].seq && e->kind == TIDE_EVENT_FREE_COMPLETED));
            size_t slot = slot_of(&m, e->addr);
            if (e->kind == TIDE_EVENT_ALLOC) {
                CHECK(m.keys[slot] == 0); /* no two live blocks at one address: the stream's order */
                m.keys[slot] = e->addr;
                m.values[slot] = e->size;
                live_requested += (int64_t)e->size;
            } else if (e->kind == TIDE_EVENT_FREE_REQUESTED) {
                CHECK(m.keys[slot] == e->addr);
                live_requested -= (int64_t)m.values[slot];
                /* remove with backward-shift deletion */
                m.keys[slot] = 0;
                for (size_t j = (slot + 1) % m.cap; m.keys[j]; j = (j + 1) % m.cap) {
                    uint64_t key = m.keys[j], v = m.values[j];
                    m.keys[j] = 0;
                    size_t to = slot_of(&m, key);
                    m.keys[to] = key;
                    m.values[to] = v;
                }
            } else if (e->kind == TIDE_EVENT_SEGMENT_RESERVED) {
                reserved += (int64_t)e->size;
            } else if (e->kind == TIDE_EVENT_SEGMENT_RELEASED) {
                reserved -= (int64_t)e->size;
            }
            if (harness_failures)
                break;
        }
        char *json = NULL;
        CHECK_OK(tide_snapshot_json(f.t, &json));
        tide_stats st = stats_of(f.t);
        struct snapshot_sums sums = sum_snapshot(json ? json : "");
        tide_string_free(json);
        /* nothing else runs tidepool now but the stream's fence draining in the next malloc, so the
         * three views are of the same moment */
        CHECK(live_requested == st.requested_bytes[TIDE_POOL_ALL].current);
        CHECK(reserved == st.reserved_bytes[TIDE_POOL_ALL].current);
        CHECK(sums.segments_bytes == st.reserved_bytes[TIDE_POOL_ALL].current);
        CHECK(sums.segments == st.segment[TIDE_POOL_ALL].current);
        CHECK(sums.active == st.allocated_bytes[TIDE_POOL_ALL].current);
        CHECK(sums.pending == st.pending_free_bytes[TIDE_POOL_ALL].current);
        CHECK(sums.cached == st.cached_bytes[TIDE_POOL_ALL].current);
        checkpoints++;
        if (harness_failures)
            break;
    }
    CHECK(checkpoints > 100);
    for (size_t id = 0; id < tr.nallocs; id++)
        if (ptrs[id])
            CHECK_OK(tide_free(f.t, ptrs[id]));
    CHECK_OK(tide_sim_synchronize(f.sim));
    CHECK_OK(tide_empty_cache(f.t, NULL));
    size_t n = 0;
    CHECK_OK(tide_history_read(f.t, events, EVENTS, &n, NULL));
    size_t kinds[TIDE_EVENT_KIND_COUNT] = {0};
    for (size_t i = 0; i < n; i++)
        kinds[events[i].kind]++;
    /* every free completes: at once, or when its pending use ends */
    CHECK(kinds[TIDE_EVENT_ALLOC] == tr.nallocs);
    CHECK(kinds[TIDE_EVENT_FREE_REQUESTED] == tr.nallocs);
    CHECK(kinds[TIDE_EVENT_FREE_COMPLETED] == tr.nallocs);
    CHECK(kinds[TIDE_EVENT_SEGMENT_RESERVED] == kinds[TIDE_EVENT_SEGMENT_RELEASED]);
    CHECK(kinds[TIDE_EVENT_EMPTY_CACHE] > 1);
    fprintf(stderr, "lstm_loop with history: %zu events, %d checkpoints agreed\n", n, checkpoints);
    free(m.keys);
    free(m.values);
    free(events);
    free(ptrs);
    trace_free(&tr);
    fixture_close(&f);
}

/* ---- the leak report -------------------------------------------------------------------------------------- */

__attribute__((noinline)) void *allocate_weights(tide_allocator *t, size_t n);
__attribute__((noinline)) void *allocate_weights(tide_allocator *t, size_t n)
{
    void *p = NULL;
    CHECK_OK(tide_malloc(t, n, 0, &p));
    return p;
}

static void test_leak_report_names_what_is_left(void)
{
    struct fixture f;
    fixture_open(&f, 0, NULL);
    char *report = NULL;
    uint64_t live = 99;
    CHECK_OK(tide_leak_report(f.t, &report, &live));
    CHECK(live == 0 && report && strstr(report, "no leaks"));
    tide_string_free(report);

    CHECK_OK(tide_history_start(f.t, 1000, 0));
    tide_set_tag("weights");
    void *w[3];
    for (int i = 0; i < 3; i++)
        w[i] = allocate_weights(f.t, (size_t)(i + 1) * MIB);
    tide_set_tag("activations");
    void *a[4];
    for (int i = 0; i < 4; i++)
        CHECK_OK(tide_malloc(f.t, 1000, 0, &a[i]));
    tide_set_tag(NULL);
    void *untagged;
    CHECK_OK(tide_malloc(f.t, 4096, 0, &untagged));
    CHECK_OK(tide_free(f.t, a[0])); /* freed: not a leak */
    CHECK_OK(tide_free(f.t, a[1]));
    void *held;
    CHECK_OK(tide_malloc(f.t, 8192, 0, &held));
    CHECK_OK(tide_retain(f.t, held));
    CHECK_OK(tide_free(f.t, held)); /* freed, but still referenced */

    CHECK_OK(tide_leak_report(f.t, &report, &live));
    fprintf(stderr, "%s", report);
    CHECK(live == 6); /* 3 weights, 2 activations, 1 untagged */
    CHECK(strstr(report, "6 allocations still live, 6.0 MiB requested in all"));
    const char *weights = strstr(report, "6.0 MiB in 3 allocations (largest 3.0 MiB), tag 'weights', allocated at ");
    const char *acts = strstr(report, "2.0 KiB in 2 allocations (largest 1000 B), tag 'activations'");
    CHECK(weights && acts && weights < acts); /* largest first */
    CHECK(weights && strstr(weights, "allocate_weights"));
    CHECK(strstr(report, "4.0 KiB in 1 allocation (largest 4.0 KiB), tag (none)"));
    CHECK(strstr(report, "8.0 KiB in 1 freed block still referenced"));
    tide_string_free(report);

    for (int i = 0; i < 3; i++)
        CHECK_OK(tide_free(f.t, w[i]));
    CHECK_OK(tide_free(f.t, a[2]));
    CHECK_OK(tide_free(f.t, a[3]));
    CHECK_OK(tide_free(f.t, untagged));
    CHECK_OK(tide_release(f.t, held));
    CHECK_OK(tide_leak_report(f.t, &report, &live));
    CHECK(live == 0 && strstr(report, "no leaks"));
    tide_string_free(report);
    fixture_close(&f);
}

/* leak_report:True: tide_destroy prints the report to stderr when something is live, and nothing when
 * not. stderr is sent to a file for the check. */
static size_t destroy_and_capture(tide_allocator *t, tide_status *status, char *out, size_t cap)
{
    fflush(stderr);
    int saved = dup(2);
    FILE *tmp = tmpfile();
    dup2(fileno(tmp), 2);
    *status = tide_destroy(t);
    fflush(stderr);
    dup2(saved, 2);
    close(saved);
    rewind(tmp);
    size_t n = fread(out, 1, cap - 1, tmp);
    out[n] = '\0';
    fclose(tmp);
    return n;
}

static void test_leak_report_at_destroy(void)
{
    tide_sim *sim;
    CHECK_OK(tide_sim_create(NULL, &sim));
    tide_backend be = tide_sim_backend(sim);
    tide_allocator *t;
    char text[4096];
    tide_status s;
    CHECK_OK(tide_create(&be, "leak_report:True", &t));
    void *p;
    CHECK_OK(tide_malloc(t, 4096, 0, &p));
    CHECK_OK(tide_free(t, p));
    CHECK(destroy_and_capture(t, &s, text, sizeof text) == 0); /* nothing live: nothing said */
    CHECK_OK(s);

    CHECK_OK(tide_create(&be, "leak_report:True", &t));
    CHECK_OK(tide_history_start(t, 100, 0));
    tide_set_tag("forgotten");
    CHECK_OK(tide_malloc(t, 3000, 0, &p));
    tide_set_tag(NULL);
    destroy_and_capture(t, &s, text, sizeof text);
    CHECK_STATUS(s, TIDE_EBUSY);
    CHECK(strstr(text, "1 allocation still live") && strstr(text, "tag 'forgotten'"));
    CHECK(held_by_device(sim) == 0);
    tide_sim_destroy(sim);
}

/* ---- the ring ----------------------------------------------------------------------------------------------- */

static void test_ring_keeps_the_newest(void)
{
    struct fixture f;
    fixture_open(&f, 0, NULL);
    void *p;
    CHECK_STATUS(tide_history_start(f.t, 0, 0), TIDE_EINVAL);
    CHECK_STATUS(tide_history_start(f.t, 10, 0x80), TIDE_EINVAL);
    CHECK_STATUS(tide_annotate(f.t, "no history"), TIDE_EINVAL);
    CHECK_OK(tide_malloc(f.t, 512, 0, &p)); /* off: not recorded */
    CHECK_OK(tide_free(f.t, p));
    CHECK_OK(tide_history_start(f.t, 8, TIDE_HISTORY_STACKS));
    CHECK_OK(tide_annotate(f.t, "step 1"));
    for (int i = 0; i < 10; i++) { /* 20 places: an alloc, a free completed at once */
        CHECK_OK(tide_malloc(f.t, 512, 0, &p));
        CHECK_OK(tide_free(f.t, p));
    }
    CHECK_OK(tide_history_stop(f.t));
    CHECK_OK(tide_malloc(f.t, 512, 0, &p)); /* stopped: not recorded */
    CHECK_OK(tide_free(f.t, p));
    tide_event ev[16];
    size_t n = 0;
    uint64_t dropped = 0;
    CHECK_OK(tide_history_read(f.t, ev, 16, &n, &dropped));
    /* 21 places: the annotation, then per pair an alloc and a free completed at once */
    CHECK(dropped == 21 - 8);
    CHECK(n == 12); /* the last 8 places: 4 pairs, each free read as requested + completed */
    for (size_t i = 0; i < n; i++) {
        CHECK(ev[i].seq >= dropped);
        CHECK(i == 0 || ev[i].seq >= ev[i - 1].seq);
        CHECK(i == 0 || ev[i].time_ns >= ev[i - 1].time_ns);
        CHECK(ev[i].kind == TIDE_EVENT_FREE_COMPLETED || ev[i].nframes > 0); /* stacks were asked for */
    }
    CHECK(ev[n - 1].kind == TIDE_EVENT_FREE_COMPLETED);
    char where[256];
    describe_code_address(ev[n - 2].frames[0], where, sizeof where);
    CHECK(strstr(where, "test_history") != NULL); /* the first frame is the caller's */
    char *json = NULL;
    CHECK_OK(tide_history_json(f.t, &json));
    CHECK(json && strstr(json, "\"dropped\": 13") && strstr(json, "\"kind\": \"free_completed\""));
    CHECK(json && strstr(json, "test_history"));
    tide_string_free(json);
    CHECK(strcmp(tide_event_kind_name(TIDE_EVENT_SEGMENT_RESERVED), "segment_reserved") == 0);
    fixture_close(&f);
}

/* Tags and annotations are the program's text: in the history's and the snapshot's JSON, quotes,
 * backslashes and control characters come out escaped. The calls refuse NULLs with their words. */
static void test_json_escapes_the_programs_text(void)
{
    struct fixture f;
    fixture_open(&f, 0, NULL);
    CHECK_OK(tide_history_start(f.t, 64, 0));
    tide_set_tag("say \"hi\"\\ \n\t end");
    void *p;
    CHECK_OK(tide_malloc(f.t, 512, 0, &p));
    tide_set_tag(NULL);
    CHECK_OK(tide_annotate(f.t, "step \"1\"\x01"));
    const char *escaped_tag = "say \\\"hi\\\"\\\\ \\u000a\\u0009 end";
    char *json = NULL;
    CHECK_OK(tide_history_json(f.t, &json));
    CHECK(json && strstr(json, escaped_tag));
    CHECK(json && strstr(json, "step \\\"1\\\"\\u0001"));
    CHECK(json && !strchr(json, '\t') && !strchr(json, '\x01'));
    tide_string_free(json);
    json = NULL;
    CHECK_OK(tide_snapshot_json(f.t, &json));
    CHECK(json && strstr(json, escaped_tag));
    tide_string_free(json);

    CHECK_STATUS(tide_history_start(NULL, 64, 0), TIDE_EINVAL);
    CHECK_MESSAGE("tide_history_start: the allocator is NULL");
    CHECK_STATUS(tide_history_stop(NULL), TIDE_EINVAL);
    CHECK_STATUS(tide_annotate(NULL, "x"), TIDE_EINVAL);
    CHECK_STATUS(tide_annotate(f.t, NULL), TIDE_EINVAL);
    CHECK_MESSAGE("tide_annotate: the text is NULL");
    tide_event ev[4];
    size_t n = 0;
    uint64_t dropped = 0;
    CHECK_STATUS(tide_history_read(NULL, ev, 4, &n, &dropped), TIDE_EINVAL);
    CHECK_STATUS(tide_history_read(f.t, ev, 4, NULL, &dropped), TIDE_EINVAL);
    CHECK_MESSAGE("tide_history_read: count is NULL");
    CHECK_STATUS(tide_history_json(f.t, NULL), TIDE_EINVAL);
    CHECK_MESSAGE("tide_history_json: out is NULL");
    size_t len = 0;
    CHECK_STATUS(tide_stats_json(f.t, NULL, 5, &len), TIDE_EINVAL);
    CHECK_MESSAGE("buf is NULL but cap is 5");
    CHECK_OK(tide_history_stop(f.t));
    CHECK_OK(tide_free(f.t, p));
    fixture_close(&f);
}

/* Several threads record at once, each on its own stream (each stream's ring draws numbers 512 at a
 * time): every event arrives once, each stream's in its own order, with times that do not go back
 * within a stream. */
#define RECORDERS 4
#define PAIRS_PER_RECORDER 3000

struct recorder {
    struct fixture *f;
    tide_stream stream;
};

static void *record_pairs(void *arg)
{
    struct recorder *r = arg;
    for (int i = 0; i < PAIRS_PER_RECORDER; i++) {
        void *p;
        if (tide_malloc(r->f->t, 512 + (size_t)i, r->stream, &p) != TIDE_OK || tide_free(r->f->t, p) != TIDE_OK)
            harness_failures++;
    }
    return NULL;
}

/* RECORDERS threads, each on a stream of its own (or all on one), run body while a history with these
 * flags records. */
static void record_from_threads(struct fixture *f, struct recorder rec[RECORDERS], unsigned flags,
                                void *(*body)(void *), bool one_stream)
{
    pthread_t th[RECORDERS];
    for (int i = 0; i < RECORDERS; i++) {
        rec[i].f = f;
        if (one_stream && i > 0)
            rec[i].stream = rec[0].stream;
        else
            CHECK_OK(tide_sim_stream_create(f->sim, &rec[i].stream));
    }
    CHECK_OK(tide_history_start(f->t, 1 << 16, flags));
    for (int i = 0; i < RECORDERS; i++)
        pthread_create(&th[i], NULL, body, &rec[i]);
    for (int i = 0; i < RECORDERS; i++)
        pthread_join(th[i], NULL);
}

static void test_threads_record_at_once(void)
{
    struct fixture f;
    fixture_open(&f, 0, NULL);
    struct recorder rec[RECORDERS];
    record_from_threads(&f, rec, 0, record_pairs, false);
    CHECK_OK(tide_history_stop(f.t));
    size_t cap = 4 * RECORDERS * PAIRS_PER_RECORDER, n = 0;
    tide_event *ev = calloc(cap, sizeof *ev);
    uint64_t dropped = 1;
    CHECK_OK(tide_history_read(f.t, ev, cap, &n, &dropped));
    /* per stream: allocs, frees requested and completed, each in the order the thread made them */
    size_t allocs[RECORDERS] = {0}, frees[RECORDERS] = {0};
    uint64_t last_time[RECORDERS] = {0}, last_size[RECORDERS] = {0};
    for (size_t i = 0; i < n; i++) {
        int k = -1;
        for (int j = 0; j < RECORDERS; j++)
            if (ev[i].stream == rec[j].stream)
                k = j;
        /* A segment event names the stream whose segment it is, but the thread that needed the memory
         * records it: only allocations and frees are surely the stream's own thread's. */
        if (k < 0 || ev[i].kind == TIDE_EVENT_SEGMENT_RESERVED || ev[i].kind == TIDE_EVENT_SEGMENT_RELEASED)
            continue;
        CHECK(ev[i].time_ns >= last_time[k]);
        last_time[k] = ev[i].time_ns;
        if (ev[i].kind == TIDE_EVENT_ALLOC) {
            CHECK(ev[i].size == 512 + allocs[k]); /* this thread's next allocation, none lost */
            last_size[k] = ev[i].size;
            allocs[k]++;
        } else if (ev[i].kind == TIDE_EVENT_FREE_COMPLETED) {
            frees[k]++;
        }
    }
    for (int k = 0; k < RECORDERS; k++)
        CHECK(allocs[k] == PAIRS_PER_RECORDER && frees[k] == PAIRS_PER_RECORDER && last_size[k] > 0);
    CHECK(dropped == 0);
    free(ev);
    fixture_close(&f);
}

/* TIDE_HISTORY_ORDERED: threads that take turns (a lock decides the order), each on a stream of its
 * own, find their events in exactly that order, and with times in that order. Without the flag, the
 * streams' events interleave in blocks of up to 512 and this fails. */
static pthread_mutex_t turn = PTHREAD_MUTEX_INITIALIZER;
static size_t next_ticket;

static void *allocate_in_turn(void *arg)
{
    struct recorder *r = arg;
    for (int i = 0; i < PAIRS_PER_RECORDER; i++) {
        void *p;
        pthread_mutex_lock(&turn);
        size_t ticket = ++next_ticket; /* the ticket is the size: the order is in the events */
        tide_status s = tide_malloc(r->f->t, ticket, r->stream, &p);
        pthread_mutex_unlock(&turn);
        if (s != TIDE_OK || tide_free(r->f->t, p) != TIDE_OK)
            harness_failures++;
    }
    return NULL;
}

/* The allocations of the threads that took turns, in the history: how many are out of the turns' order
 * (or out of time order), and whether the last came last. */
static uint64_t turns_out_of_order(const tide_event *ev, size_t n, bool *all_there)
{
    uint64_t expect = 1, last_time = 0, out_of_order = 0;
    for (size_t i = 0; i < n; i++) {
        if (ev[i].kind != TIDE_EVENT_ALLOC)
            continue;
        out_of_order += ev[i].size != expect || ev[i].time_ns < last_time;
        expect = ev[i].size + 1;
        last_time = ev[i].time_ns;
    }
    *all_there = expect == RECORDERS * PAIRS_PER_RECORDER + 1; /* every allocation, the last one last */
    return out_of_order;
}

static void test_threads_ordered(void)
{
    struct fixture f;
    fixture_open(&f, 0, NULL);
    struct recorder rec[RECORDERS];
    next_ticket = 0;
    record_from_threads(&f, rec, TIDE_HISTORY_ORDERED, allocate_in_turn, false);
    size_t cap = 4 * RECORDERS * PAIRS_PER_RECORDER, n = 0;
    tide_event *ev = calloc(cap, sizeof *ev);
    CHECK_OK(tide_history_read(f.t, ev, cap, &n, NULL));
    bool all_there = false;
    CHECK(turns_out_of_order(ev, n, &all_there) == 0);
    CHECK(all_there);
    char *json = NULL;
    CHECK_OK(tide_history_json(f.t, &json));
    CHECK(json && strstr(json, "\"ordered\": true"));
    tide_string_free(json);
    CHECK(tide_history_start(f.t, 16, 4) == TIDE_EINVAL); /* an unknown flag */
    free(ev);
    fixture_close(&f);
}

/* Without TIDE_HISTORY_ORDERED, one stream's events are still in their exact order, whichever threads
 * made them: the stream's heap records them under its lock. (Threads claiming numbers for their own
 * events, as the history once did, interleave them in blocks and fail this.) */
static void test_one_stream_in_order_from_threads(void)
{
    struct fixture f;
    fixture_open(&f, 0, NULL);
    struct recorder rec[RECORDERS];
    next_ticket = 0;
    record_from_threads(&f, rec, 0, allocate_in_turn, true);
    size_t cap = 4 * RECORDERS * PAIRS_PER_RECORDER, n = 0;
    tide_event *ev = calloc(cap, sizeof *ev);
    CHECK_OK(tide_history_read(f.t, ev, cap, &n, NULL));
    bool all_there = false;
    uint64_t out_of_order = turns_out_of_order(ev, n, &all_there);
    CHECK(out_of_order == 0);
    CHECK(all_there);
    fprintf(stderr, "%d threads on one stream: %zu events, %llu allocations out of order\n", RECORDERS, n,
            (unsigned long long)out_of_order);
    free(ev);
    fixture_close(&f);
}

/* The history started, read and stopped again and again (RESTARTS times; each round makes its own
 * events, so none waits on the other threads, even under valgrind) while threads allocate on their
 * streams: a start frees the history before it, which no heap, reader or shared writer may be using
 * then (run under ThreadSanitizer and AddressSanitizer by make check-tsan and check-sanitize). */
#define RESTARTS 24
static _Atomic(bool) keep_allocating;

static void *allocate_until_told(void *arg)
{
    struct recorder *r = arg;
    for (size_t i = 0; atomic_load(&keep_allocating); i++) {
        void *p;
        if (tide_malloc(r->f->t, 512 + (i % 4096) * 512, r->stream, &p) != TIDE_OK || tide_free(r->f->t, p) != TIDE_OK)
            harness_failures++;
        if (i % 4096 == 0 && tide_empty_cache(r->f->t, NULL) != TIDE_OK) /* shared events too */
            harness_failures++;
    }
    return NULL;
}

static void test_restart_while_recording(void)
{
    struct fixture f;
    fixture_open(&f, 0, NULL);
    struct recorder rec[RECORDERS];
    pthread_t th[RECORDERS];
    atomic_store(&keep_allocating, true);
    for (int i = 0; i < RECORDERS; i++) {
        rec[i].f = &f;
        CHECK_OK(tide_sim_stream_create(f.sim, &rec[i].stream));
        pthread_create(&th[i], NULL, allocate_until_told, &rec[i]);
    }
    size_t cap = 4096, n = 0, foreign = 0, reads = 0;
    tide_event *ev = calloc(cap, sizeof *ev);
    for (int round = 0; round < RESTARTS; round++) {
        CHECK_OK(tide_history_start(f.t, 1024, round % 3 == 2 ? TIDE_HISTORY_ORDERED : 0));
        for (int k = 0; k < 16; k++) { /* events of this thread's own, whatever the others have done */
            void *p;
            CHECK_OK(tide_malloc(f.t, 4096, 0, &p));
            CHECK_OK(tide_free(f.t, p));
        }
        CHECK_OK(tide_history_read(f.t, ev, cap, &n, NULL));
        reads += n >= 32;
        for (size_t i = 0; i < n; i++) { /* every event is one of the threads' streams', or stream 0 */
            bool known = ev[i].stream == 0;
            for (int j = 0; j < RECORDERS; j++)
                known |= ev[i].stream == rec[j].stream;
            foreign += !known;
        }
        if (round % 2)
            CHECK_OK(tide_history_stop(f.t));
    }
    atomic_store(&keep_allocating, false);
    for (int i = 0; i < RECORDERS; i++)
        pthread_join(th[i], NULL);
    CHECK(foreign == 0);
    CHECK(reads == RESTARTS); /* every round saw events */
    free(ev);
    fixture_close(&f);
}

int main(void)
{
    RUN(test_history_and_snapshot_agree_with_stats);
    RUN(test_leak_report_names_what_is_left);
    RUN(test_ring_keeps_the_newest);
    RUN(test_json_escapes_the_programs_text);
    RUN(test_leak_report_at_destroy);
    RUN(test_threads_record_at_once);
    RUN(test_threads_ordered);
    RUN(test_one_stream_in_order_from_threads);
    RUN(test_restart_while_recording);
    return HARNESS_EXIT();
}

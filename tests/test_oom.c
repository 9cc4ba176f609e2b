/*
 * Memory pressure: the limit, the garbage-collection threshold, tide_trim, and the out-of-memory ladder
 * step by step (drain pending, release cached, synchronize and release, fail with a report), driven by
 * limits and by the simulated device's fault injection.
 */
#include "harness.h"
#include "replay.h"

#include <time.h>

#define ALL TIDE_POOL_ALL

static void test_limit_is_never_exceeded(void)
{
    struct fixture f;
    fixture_open(&f, 0, "limit:64MiB");
    void *p[64];
    int n = 0;
    tide_status s;
    while ((s = tide_malloc(f.t, 3 * MIB + 1000, 0, &p[n])) == TIDE_OK) {
        CHECK(reserved_of(f.t) <= (int64_t)(64 * MIB));
        n++;
    }
    CHECK_STATUS(s, TIDE_ENOMEM);
    CHECK(n >= 15 && n < 21); /* 60 MiB of 64 usable in 20 MiB segments plus a 4 MiB one */
    CHECK(stats_of(f.t).reserved_bytes[ALL].peak <= (int64_t)(64 * MIB));
    for (int i = 0; i < n; i++)
        CHECK_OK(tide_free(f.t, p[i]));
    CHECK_OK(tide_check(f.t));
    fixture_close(&f);
}

static void test_segment_shrinks_to_fit_under_the_limit(void)
{
    struct fixture f;
    fixture_open(&f, 0, "limit:10MiB");
    void *p;
    CHECK_OK(tide_malloc(f.t, 3 * MIB, 0, &p)); /* a 20 MiB segment would not fit: a 4 MiB one does */
    tide_stats s = stats_of(f.t);
    CHECK(s.reserved_bytes[ALL].current == (int64_t)(4 * MIB));
    CHECK(s.num_alloc_retries == 0);
    CHECK_OK(tide_free(f.t, p));
    fixture_close(&f);
}

/* Step 1 and 2: a block pending on another stream, whose fence has signalled, is drained; its segment,
 * now wholly free, is released; the allocation then fits under the limit. No synchronize needed. */
static void test_ladder_drains_then_releases(void)
{
    struct fixture f;
    fixture_open(&f, 0, "limit:40MiB");
    tide_stream a, b, c;
    CHECK_OK(tide_sim_stream_create(f.sim, &a));
    CHECK_OK(tide_sim_stream_create(f.sim, &b));
    CHECK_OK(tide_sim_stream_create(f.sim, &c));
    void *pb, *pa;
    CHECK_OK(tide_malloc(f.t, 15 * MIB, b, &pb));
    CHECK_OK(tide_record_stream(f.t, pb, c));
    CHECK_OK(tide_free(f.t, pb));                 /* pending on c's fence (c is idle: signalled) */
    CHECK(stats_of(f.t).pending_free_blocks[ALL].current == 1);
    CHECK_OK(tide_malloc(f.t, 30 * MIB, a, &pa)); /* 15 + 30 > 40: needs b's memory back */
    tide_stats s = stats_of(f.t);
    CHECK(s.num_alloc_retries == 1);
    CHECK(s.num_pending_drained == 1);
    CHECK(s.num_device_free == 1);
    CHECK(s.num_sync_all_streams == 0);
    CHECK(s.num_ooms == 0);
    CHECK(s.reserved_bytes[ALL].current == (int64_t)(30 * MIB));
    CHECK_OK(tide_check(f.t));
    CHECK_OK(tide_free(f.t, pa));
    fixture_close(&f);
}

/* Step 3: the pending block's kernel is still running; only a device synchronize frees it. */
static void test_ladder_synchronizes_when_it_must(void)
{
    struct fixture f;
    fixture_open(&f, 0, "limit:40MiB");
    tide_stream a, b, c;
    CHECK_OK(tide_sim_stream_create(f.sim, &a));
    CHECK_OK(tide_sim_stream_create(f.sim, &b));
    CHECK_OK(tide_sim_stream_create(f.sim, &c));
    void *pb, *pa;
    CHECK_OK(tide_malloc(f.t, 15 * MIB, b, &pb));
    CHECK_OK(tide_record_stream(f.t, pb, c));
    struct fill_kernel k = {NULL, pb, 4096, 3, NULL};
    CHECK_OK(tide_sim_enqueue(f.sim, c, 30000, fill_kernel_run, &k)); /* busy for 30 ms */
    CHECK_OK(tide_free(f.t, pb));
    CHECK_OK(tide_malloc(f.t, 30 * MIB, a, &pa));
    tide_stats s = stats_of(f.t);
    CHECK(s.num_alloc_retries == 1);
    CHECK(s.num_sync_all_streams == 1);
    CHECK(s.num_pending_drained == 1);
    CHECK(s.num_ooms == 0);
    CHECK_OK(tide_check(f.t));
    CHECK_OK(tide_free(f.t, pa));
    fixture_close(&f);
}

/* Step 4: nothing can be freed; the failure says where the memory is. */
static void test_ladder_fails_with_a_report(void)
{
    struct fixture f;
    fixture_open(&f, 256 * MIB, "limit:64MiB");
    void *live, *held, *p = (void *)1;
    CHECK_OK(tide_malloc(f.t, 40 * MIB, 0, &live));
    CHECK_OK(tide_malloc(f.t, 12 * MIB, 0, &held));
    CHECK_OK(tide_retain(f.t, held));
    CHECK_OK(tide_free(f.t, held));
    tide_stats before = stats_of(f.t);
    CHECK_STATUS(tide_malloc(f.t, 20 * MIB, 0, &p), TIDE_ENOMEM);
    CHECK(p == NULL);
    CHECK_MESSAGE("out of memory. Asked 20.0 MiB");
    CHECK_MESSAGE("free on the device of 256.0 MiB");
    CHECK_MESSAGE("reserved 52.0 MiB (limit 64.0 MiB)");
    CHECK_MESSAGE("40.0 MiB allocated");
    CHECK_MESSAGE("12.0 MiB pending free");
    CHECK_MESSAGE("0 B cached of which 0 B releasable");
    CHECK_MESSAGE("the device has room for it but the limit does not: raise limit");
    tide_stats s = stats_of(f.t);
    CHECK(s.num_ooms == 1 && s.num_alloc_retries == 1);
    CHECK(s.num_sync_all_streams == 1);
    CHECK(s.reserved_bytes[ALL].current == before.reserved_bytes[ALL].current);
    CHECK_OK(tide_check(f.t));
    CHECK_OK(tide_release(f.t, held));
    CHECK_OK(tide_malloc(f.t, 20 * MIB, 0, &p)); /* now there is room */
    CHECK_OK(tide_free(f.t, p));
    CHECK_OK(tide_free(f.t, live));
    fixture_close(&f);
}

/* A limit below the smallest segment (2 MiB) fails every request, and the failure says so: the limit,
 * not fragmentation, is what to change. Nothing is reserved by the attempt. */
static void test_limit_below_a_segment_is_named(void)
{
    struct fixture f;
    fixture_open(&f, 0, "limit:1MiB");
    void *p = (void *)1;
    CHECK_STATUS(tide_malloc(f.t, 4096, 0, &p), TIDE_ENOMEM);
    CHECK(p == NULL);
    CHECK_MESSAGE("a segment of at least 2.0 MiB");
    CHECK_MESSAGE("the smallest segment that holds it is larger than the limit: raise limit");
    CHECK(!strstr(tide_last_error(), "max_split_size_mb"));
    CHECK(reserved_of(f.t) == 0);
    CHECK_OK(tide_check(f.t));
    fixture_close(&f);
}

/* The device itself says no: the ladder retries after each step; once the device agrees, it works. */
static void test_device_refusals(void)
{
    struct fixture f;
    fixture_open(&f, 0, NULL);
    void *p;
    tide_sim_inject_fault(f.sim, TIDE_SIM_RESERVE, 0, 1); /* the first reservation fails */
    CHECK_OK(tide_malloc(f.t, 4096, 0, &p));
    tide_stats s = stats_of(f.t);
    CHECK(s.num_alloc_retries == 1 && s.num_ooms == 0);
    CHECK_OK(tide_free(f.t, p));

    tide_sim_inject_fault(f.sim, TIDE_SIM_RESERVE, 0, UINT32_MAX); /* every one fails */
    CHECK_STATUS(tide_malloc(f.t, 5 * MIB, 0, &p), TIDE_ENOMEM);
    CHECK_MESSAGE("out of memory");
    tide_sim_counters c;
    tide_sim_get_counters(f.sim, &c);
    /* 20 MiB then 6 MiB, at step 0, 1, 2 and 3 */
    CHECK(c.failures[TIDE_SIM_RESERVE] == 1 + 8);
    CHECK_OK(tide_check(f.t));
    tide_sim_inject_fault(f.sim, TIDE_SIM_RESERVE, 0, 0);
    CHECK_OK(tide_malloc(f.t, 5 * MIB, 0, &p));
    CHECK_OK(tide_free(f.t, p));
    fixture_close(&f);
}

/* The device refuses to take a segment back (empty_cache, trim, a release to make room): the call says
 * so, and the segment stays cached and counted, to be released later. Found by the fuzzer: the refused
 * segment was put back through a heap pointer that detaching had cleared. */
static void test_device_refuses_a_release(void)
{
    struct fixture f;
    fixture_open(&f, 0, NULL);
    void *p, *q;
    CHECK_OK(tide_malloc(f.t, 4096, 0, &p));
    CHECK_OK(tide_malloc(f.t, 3 * MIB, 0, &q));
    CHECK_OK(tide_free(f.t, p));
    CHECK_OK(tide_free(f.t, q));
    int64_t reserved = reserved_of(f.t);

    tide_sim_inject_fault(f.sim, TIDE_SIM_RELEASE, 0, 1);
    tide_release_report r;
    CHECK_STATUS(tide_empty_cache(f.t, &r), TIDE_EDEVICE);
    CHECK_MESSAGE("injected fault in release");
    CHECK_OK(tide_check(f.t));
    CHECK(reserved_of(f.t) > 0 && reserved_of(f.t) < reserved); /* one refused, the other released */
    CHECK(held_by_device(f.sim) == (uint64_t)reserved_of(f.t));

    tide_sim_inject_fault(f.sim, TIDE_SIM_RELEASE, 0, 1);
    CHECK_STATUS(tide_trim(f.t, 0, NULL), TIDE_EDEVICE);
    CHECK_OK(tide_check(f.t));
    CHECK(held_by_device(f.sim) == (uint64_t)reserved_of(f.t));

    CHECK_OK(tide_malloc(f.t, 4096, 0, &p)); /* the refused segment is still usable */
    CHECK_OK(tide_free(f.t, p));
    CHECK_OK(tide_empty_cache(f.t, &r));
    CHECK(reserved_of(f.t) == 0 && held_by_device(f.sim) == 0);
    fixture_close(&f);
}

/* tide_destroy says when the device refused to take memory back. */
static void test_destroy_reports_a_refused_release(void)
{
    struct fixture f;
    fixture_open(&f, 0, NULL);
    void *p;
    CHECK_OK(tide_malloc(f.t, 4096, 0, &p));
    CHECK_OK(tide_free(f.t, p));
    tide_sim_inject_fault(f.sim, TIDE_SIM_RELEASE, 0, 1);
    CHECK_STATUS(tide_destroy(f.t), TIDE_EDEVICE);
    CHECK_MESSAGE("refused to take back 2.0 MiB");
    CHECK(held_by_device(f.sim) == 2 * MIB); /* lost to the device, as it said */
    tide_sim_destroy(f.sim);
}

/* The device's real limit, not tidepool's: another user of the device holds most of it, so the
 * device refuses a segment that tidepool's own limit would allow. Step 2 of the ladder gives back a
 * cached segment, and the device then has room. */
static void test_device_memory_runs_out(void)
{
    struct fixture f;
    fixture_open(&f, 64 * MIB, "trim_on_growth:False"); /* the cached segment goes only when it must */
    void *a, *c, *other_block;
    tide_allocator *other;                          /* another program on the same device */
    CHECK_OK(tide_create(&f.backend, NULL, &other));
    CHECK_OK(tide_malloc(other, 40 * MIB, 0, &other_block));
    CHECK_OK(tide_malloc(f.t, 10 * MIB, 0, &a));
    CHECK_OK(tide_free(f.t, a));                    /* cached, 10 MiB; the device has 14 MiB free */
    CHECK_OK(tide_malloc(f.t, 20 * MIB, 0, &c));    /* the device says no until the 10 go back */
    tide_stats s = stats_of(f.t);
    CHECK(s.num_alloc_retries == 1 && s.num_device_free == 1 && s.num_ooms == 0);
    CHECK_OK(tide_free(f.t, c));
    CHECK_OK(tide_free(other, other_block));
    CHECK_OK(tide_destroy(other));
    fixture_close(&f);
}

static void test_gc_threshold_releases_oldest_first(void)
{
    struct fixture f;
    fixture_open(&f, 0, "limit:200MiB,garbage_collection_threshold:0.5,trim_on_growth:False");
    tide_stream a, b;
    CHECK_OK(tide_sim_stream_create(f.sim, &a));
    CHECK_OK(tide_sim_stream_create(f.sim, &b));
    void *old, *young, *p, *again;
    CHECK_OK(tide_malloc(f.t, 30 * MIB, b, &old));
    CHECK_OK(tide_malloc(f.t, 30 * MIB, b, &young));
    CHECK_OK(tide_free(f.t, old));   /* idle first: the oldest */
    CHECK_OK(tide_free(f.t, young));
    CHECK_OK(tide_malloc(f.t, 46 * MIB, a, &p)); /* 60 + 46 > 100: one idle segment must go */
    tide_stats s = stats_of(f.t);
    CHECK(s.num_gc_released == 1);
    CHECK(s.reserved_bytes[ALL].current == (int64_t)(76 * MIB));
    CHECK(s.num_alloc_retries == 0); /* the GC is not the out-of-memory ladder */
    CHECK_OK(tide_malloc(f.t, 30 * MIB, b, &again));
    CHECK(again == young); /* the younger one was kept */
    CHECK_OK(tide_free(f.t, again));
    CHECK_OK(tide_free(f.t, p));
    CHECK_OK(tide_check(f.t));
    fixture_close(&f);
}

/* Across streams, the oldest idle segment goes first too: one idled while its heap was the only one
 * (no clock read then, idle_append) before one idled later on another stream; and between two idled
 * while several heaps exist, the one idled first. Stream a's segment is the older each time; without
 * the times, the search (release_oldest) would take the later heap, b's. */
static void test_gc_releases_oldest_first_across_streams(void)
{
    for (int all_heaps_first = 0; all_heaps_first < 2; all_heaps_first++) {
        struct fixture f;
        fixture_open(&f, 0, "limit:200MiB,garbage_collection_threshold:0.5,trim_on_growth:False");
        tide_stream streams[3];
        for (int i = 0; i < 3; i++)
            CHECK_OK(tide_sim_stream_create(f.sim, &streams[i]));
        tide_stream a = streams[0], b = streams[1], c = streams[2];
        void *older, *younger, *again, *small[3] = {NULL, NULL, NULL};
        if (all_heaps_first) /* kept live, so that their segments are not idle */
            for (int i = 0; i < 3; i++)
                CHECK_OK(tide_malloc(f.t, 1, streams[i], &small[i]));
        CHECK_OK(tide_malloc(f.t, 30 * MIB, a, &older));
        CHECK_OK(tide_free(f.t, older)); /* with all_heaps_first 0, a's heap is still the only one */
        CHECK_OK(tide_malloc(f.t, 30 * MIB, b, &younger));
        struct timespec pause = {0, 20 * 1000 * 1000}; /* past the coarse clock's tick */
        nanosleep(&pause, NULL);
        CHECK_OK(tide_free(f.t, younger));
        void *big;
        CHECK_OK(tide_malloc(f.t, 46 * MIB, c, &big)); /* over the threshold: one idle segment goes */
        tide_stats s = stats_of(f.t);
        CHECK(s.num_gc_released == 1);
        CHECK_OK(tide_malloc(f.t, 30 * MIB, b, &again));
        CHECK(again == younger); /* the younger one was kept */
        CHECK_OK(tide_free(f.t, again));
        CHECK_OK(tide_free(f.t, big));
        for (int i = 0; i < 3; i++)
            CHECK_OK(tide_free(f.t, small[i]));
        CHECK_OK(tide_check(f.t));
        fixture_close(&f);
    }
}

/* Growth past the most ever reserved gives idle segments back first: memory the program freed and
 * no longer fits its requests is not held beside the new segment. */
static void test_growth_past_high_water_gives_idle_segments_back(void)
{
    struct fixture f;
    fixture_open(&f, 0, NULL);
    void *a, *b, *c;
    CHECK_OK(tide_malloc(f.t, 30 * MIB, 0, &a));
    CHECK_OK(tide_malloc(f.t, 12 * MIB, 0, &b));
    CHECK_OK(tide_free(f.t, b));                    /* idle: 12 MiB cannot serve what comes next */
    CHECK_OK(tide_malloc(f.t, 16 * MIB, 0, &c));    /* 42 + 16 would pass the mark of 42 */
    tide_stats s = stats_of(f.t);
    CHECK(s.reserved_bytes[ALL].current == (int64_t)(46 * MIB));
    CHECK(s.reserved_bytes[ALL].peak == (int64_t)(46 * MIB));
    CHECK(s.num_device_free == 1 && s.num_alloc_retries == 0);
    /* Below the mark, idle segments stay cached: no driver call for memory the program may reuse. */
    CHECK_OK(tide_free(f.t, c));
    CHECK_OK(tide_malloc(f.t, 4 * MIB, 0, &b));     /* fits in c's idle segment */
    CHECK(stats_of(f.t).num_device_alloc == 3);
    CHECK_OK(tide_free(f.t, b));
    CHECK_OK(tide_free(f.t, a));
    CHECK_OK(tide_check(f.t));
    fixture_close(&f);
}

/* Past the mark by less than an idle segment holds, the smallest idle segment that covers the overshoot
 * goes, not the one idle longest: giving back more than needed loses memory the program was using. */
static void test_high_water_gives_back_the_smallest_segment_that_covers(void)
{
    struct fixture f;
    fixture_open(&f, 0, NULL);
    void *live, *a, *x, *w, *z, *again;
    CHECK_OK(tide_malloc(f.t, 40 * MIB, 0, &live));
    CHECK_OK(tide_malloc(f.t, 30 * MIB, 0, &a));
    CHECK_OK(tide_malloc(f.t, 12 * MIB, 0, &x));
    CHECK_OK(tide_malloc(f.t, 22 * MIB, 0, &w));   /* each its own segment; the mark is 104 MiB */
    CHECK_OK(tide_free(f.t, a));
    CHECK_OK(tide_trim(f.t, 74 * MIB, NULL));      /* a's segment goes; the mark stays at 104 */
    CHECK_OK(tide_free(f.t, w));                   /* idle first: the oldest, 22 MiB */
    CHECK_OK(tide_free(f.t, x));                   /* then 12 MiB */
    tide_stats s = stats_of(f.t);
    CHECK(s.reserved_bytes[ALL].current == (int64_t)(74 * MIB));
    uint64_t frees = s.num_device_free, allocs = s.num_device_alloc;
    CHECK_OK(tide_malloc(f.t, 40 * MIB, 0, &z));   /* fits neither; 74 + 40 passes 104 by 10 MiB */
    s = stats_of(f.t);
    CHECK(s.num_device_free == frees + 1);          /* one segment went: x's 12 MiB covers the 10 */
    CHECK(s.reserved_bytes[ALL].current == (int64_t)(102 * MIB));
    CHECK_OK(tide_malloc(f.t, 20 * MIB, 0, &again)); /* w's 22 MiB segment is still there to serve it */
    CHECK(stats_of(f.t).num_device_alloc == allocs + 1);
    CHECK_OK(tide_free(f.t, again));
    CHECK_OK(tide_free(f.t, z));
    CHECK_OK(tide_free(f.t, live));
    CHECK_OK(tide_check(f.t));
    fixture_close(&f);
}

/* A loop that needs a segment back right after giving it up must not reserve and release it in every
 * step: once a size comes back, the mark rises and the memory stays. The LSTM trace does exactly that
 * (a 29.7 MiB buffer every step, beside 1.6 MiB ones); without the rise it makes ~600 device
 * allocations per 200 steps. */
static void test_high_water_does_not_churn(void)
{
    struct trace t;
    char err[512];
    if (trace_load(TIDE_TRACES_DIR "/lstm_loop.csv.gz", &t, err, sizeof err) != 0) {
        fprintf(stderr, "%s\n", err);
        harness_failures++;
        return;
    }
    struct replay_options o = {0};
    o.passes = 3;
    struct replay_result r;
    CHECK(replay_run(&t, &o, &r, err, sizeof err) == 0);
    fprintf(stderr, "lstm_loop, 3 passes: %llu device allocations, %llu in the first pass, %llu in two\n",
            (unsigned long long)r.device_allocs, (unsigned long long)r.device_allocs_first_pass,
            (unsigned long long)r.device_allocs_two_passes);
    /* The steady state reserves nothing. Each pass after the first begins a new phase, the program
     * having let go of every block (heap_emptied): what it reserves again is what the first phase's end
     * gave back, less than the first pass reserved, and the same each time. */
    uint64_t second = r.device_allocs_two_passes - r.device_allocs_first_pass;
    CHECK(second < r.device_allocs_first_pass && r.device_allocs - r.device_allocs_two_passes == second);
    CHECK(r.device_allocs_first_pass < 40);
    replay_result_free(&r);
    trace_free(&t);
}

static void test_trim_to_a_target(void)
{
    struct fixture f;
    fixture_open(&f, 0, NULL);
    void *p[4], *live;
    for (int i = 0; i < 4; i++)
        CHECK_OK(tide_malloc(f.t, 12 * MIB, 0, &p[i])); /* four 12 MiB segments */
    CHECK_OK(tide_malloc(f.t, 12 * MIB, 0, &live));
    for (int i = 0; i < 4; i++)
        CHECK_OK(tide_free(f.t, p[i]));
    tide_release_report r;
    CHECK_OK(tide_trim(f.t, 40 * MIB, &r));
    CHECK(r.released_segments == 2 && r.reserved_bytes == 36 * MIB);
    CHECK_STATUS(tide_trim(f.t, 4 * MIB, &r), TIDE_EBUSY);
    CHECK_MESSAGE("still above the target");
    CHECK_MESSAGE("12.0 MiB allocated");
    CHECK(r.reserved_bytes == 12 * MIB);
    CHECK_OK(tide_check(f.t));
    CHECK_OK(tide_free(f.t, live));
    CHECK_OK(tide_trim(f.t, 0, &r));
    CHECK(held_by_device(f.sim) == 0);
    fixture_close(&f);
}

/* A trim gives back the segment idle longest, whichever stream's it is. The two segments here go idle
 * well within a millisecond of each other: a coarse clock stamped them alike, and which went back then
 * hung on the order of the streams' heaps (here the later one, stream b's). */
static void test_trim_gives_back_the_segment_idle_longest_across_streams(void)
{
    struct fixture f;
    fixture_open(&f, 0, NULL);
    tide_stream b;
    CHECK_OK(tide_sim_stream_create(f.sim, &b));
    void *on0, *onb;
    CHECK_OK(tide_malloc(f.t, 16 * MIB, 0, &on0)); /* stream 0's heap is the first */
    CHECK_OK(tide_malloc(f.t, 16 * MIB, b, &onb));
    CHECK_OK(tide_free(f.t, on0)); /* idle first */
    CHECK_OK(tide_free(f.t, onb));
    tide_release_report r;
    CHECK_OK(tide_trim(f.t, 16 * MIB, &r));
    CHECK(r.released_segments == 1);
    uint64_t reserves = stats_of(f.t).num_device_alloc;
    CHECK_OK(tide_malloc(f.t, 16 * MIB, b, &onb)); /* stream b's segment stayed */
    CHECK(stats_of(f.t).num_device_alloc == reserves);
    CHECK_OK(tide_malloc(f.t, 16 * MIB, 0, &on0)); /* stream 0's went back */
    CHECK(stats_of(f.t).num_device_alloc == reserves + 1);
    CHECK_OK(tide_free(f.t, on0));
    CHECK_OK(tide_free(f.t, onb));
    CHECK_OK(tide_check(f.t));
    fixture_close(&f);
}

static void test_lowering_the_limit_releases_cache(void)
{
    struct fixture f;
    fixture_open(&f, 0, NULL);
    void *p, *q;
    CHECK_OK(tide_malloc(f.t, 50 * MIB, 0, &p));
    CHECK_OK(tide_malloc(f.t, 50 * MIB, 0, &q));
    CHECK_OK(tide_free(f.t, p));
    CHECK_OK(tide_set_limit(f.t, 60 * MIB));
    CHECK(reserved_of(f.t) == (int64_t)(50 * MIB));
    CHECK_STATUS(tide_malloc(f.t, 20 * MIB, 0, &p), TIDE_ENOMEM);
    CHECK_OK(tide_malloc(f.t, 8 * MIB, 0, &p)); /* in an 8 MiB segment, not the usual 20 MiB */
    CHECK(reserved_of(f.t) <= (int64_t)(60 * MIB));
    CHECK_OK(tide_free(f.t, p));
    CHECK_OK(tide_free(f.t, q));
    fixture_close(&f);
}

/* Programs that shrink their batch on running out of memory (accelerate's find_executable_batch_size,
 * the Trainer's auto_find_batch_size) recognize the failure by " out of memory." in its text: every
 * way of running out says so, the limit, the device and a request larger than the device. */
static void test_oom_message_is_recognizable(void)
{
    struct fixture f;
    fixture_open(&f, 256 * MIB, "limit:64MiB");
    void *p = (void *)1;
    CHECK_STATUS(tide_malloc(f.t, 100 * MIB, 0, &p), TIDE_ENOMEM); /* past the limit */
    CHECK_MESSAGE(" out of memory.");
    CHECK_STATUS(tide_malloc(f.t, 300 * MIB, 0, &p), TIDE_ENOMEM); /* past the device */
    CHECK_MESSAGE(" out of memory.");
    CHECK_MESSAGE("more than the device's total memory");
    tide_sim_inject_fault(f.sim, TIDE_SIM_RESERVE, 0, UINT32_MAX); /* the device refuses */
    CHECK_STATUS(tide_malloc(f.t, 4096, 0, &p), TIDE_ENOMEM);
    CHECK_MESSAGE(" out of memory.");
    tide_sim_inject_fault(f.sim, TIDE_SIM_RESERVE, 0, 0);
    CHECK(p == NULL);
    fixture_close(&f);
}

int main(void)
{
    RUN(test_limit_is_never_exceeded);
    RUN(test_segment_shrinks_to_fit_under_the_limit);
    RUN(test_ladder_drains_then_releases);
    RUN(test_ladder_synchronizes_when_it_must);
    RUN(test_ladder_fails_with_a_report);
    RUN(test_limit_below_a_segment_is_named);
    RUN(test_device_refusals);
    RUN(test_device_refuses_a_release);
    RUN(test_destroy_reports_a_refused_release);
    RUN(test_device_memory_runs_out);
    RUN(test_gc_threshold_releases_oldest_first);
    RUN(test_gc_releases_oldest_first_across_streams);
    RUN(test_growth_past_high_water_gives_idle_segments_back);
    RUN(test_high_water_gives_back_the_smallest_segment_that_covers);
    RUN(test_high_water_does_not_churn);
    RUN(test_trim_to_a_target);
    RUN(test_trim_gives_back_the_segment_idle_longest_across_streams);
    RUN(test_lowering_the_limit_releases_cache);
    RUN(test_oom_message_is_recognizable);
    return HARNESS_EXIT();
}

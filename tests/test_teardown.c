/*
 * Teardown and emptying with completion callbacks in flight that call tidepool back: no call may wait
 * for the device while it holds a lock such a callback needs. Each test runs under a watchdog, so a
 * deadlock fails the test in seconds instead of hanging it.
 */
#include "harness.h"

#include <signal.h>
#include <unistd.h>

static void watchdog_fired(int sig)
{
    (void)sig;
    static const char msg[] = "test_teardown: deadlock: a call did not return within the watchdog's time\n";
    (void)!write(2, msg, sizeof msg - 1);
    _exit(1);
}

static void watchdog(unsigned seconds)
{
    signal(SIGALRM, watchdog_fired);
    alarm(seconds);
}

/* A completion callback: the work that held the block is done. */
struct release_work {
    tide_allocator *t;
    void *p;
};

static void release_done(void *arg)
{
    struct release_work *w = arg;
    CHECK_OK(tide_release(w->t, w->p));
}

/* The program: destroy while a queued callback will still release a freed block. */
static void test_destroy_with_a_release_in_flight(void)
{
    struct fixture f;
    fixture_open(&f, 0, NULL);
    void *p;
    CHECK_OK(tide_malloc(f.t, 4096, 0, &p));
    CHECK_OK(tide_retain(f.t, p));
    struct release_work w = {f.t, p};
    CHECK_OK(tide_sim_enqueue(f.sim, 0, 100000, release_done, &w));
    CHECK_OK(tide_free(f.t, p));
    watchdog(10);
    CHECK_OK(tide_destroy(f.t)); /* the release comes first: nothing is left live or held */
    alarm(0);
    tide_sim_counters c;
    tide_sim_get_counters(f.sim, &c);
    CHECK(c.held_bytes == 0 && c.live_fences == 0);
    tide_sim_destroy(f.sim);
}

/* Many blocks on several streams, each released by a callback, some freed before, some after. */
static void test_destroy_with_many_callbacks_in_flight(void)
{
    struct fixture f;
    fixture_open(&f, 0, NULL);
    enum { STREAMS = 3, BLOCKS = 60 };
    tide_stream streams[STREAMS] = {0};
    for (int s = 1; s < STREAMS; s++)
        CHECK_OK(tide_sim_stream_create(f.sim, &streams[s]));
    static struct release_work w[BLOCKS];
    for (int i = 0; i < BLOCKS; i++) {
        tide_stream s = streams[i % STREAMS];
        CHECK_OK(tide_malloc(f.t, (size_t)(i + 1) * 8192, s, &w[i].p));
        w[i].t = f.t;
        CHECK_OK(tide_retain(f.t, w[i].p));
        CHECK_OK(tide_sim_enqueue(f.sim, s, 2000 + 500 * (uint32_t)i, release_done, &w[i]));
        if (i % 2 == 0)
            CHECK_OK(tide_free(f.t, w[i].p));
    }
    watchdog(20);
    /* The odd blocks are still allocated: destroy says so, and gives everything back. */
    CHECK_STATUS(tide_destroy(f.t), TIDE_EBUSY);
    CHECK_MESSAGE("30 allocations");
    alarm(0);
    tide_sim_counters c;
    tide_sim_get_counters(f.sim, &c);
    CHECK(c.held_bytes == 0 && c.live_fences == 0);
    tide_sim_destroy(f.sim);
}

/* A callback that reads the whole allocator's statistics (which takes the pressure lock) while another
 * thread empties the cache (which waits for the device). */
struct stats_work {
    tide_allocator *t;
    void *p;
};

static void stats_then_release(void *arg)
{
    struct stats_work *w = arg;
    tide_stats s;
    s.struct_size = sizeof s;
    CHECK_OK(tide_get_stats(w->t, &s));
    CHECK_OK(tide_release(w->t, w->p));
}

static void test_empty_cache_with_a_callback_reading_statistics(void)
{
    struct fixture f;
    fixture_open(&f, 0, NULL);
    void *p;
    CHECK_OK(tide_malloc(f.t, 1 << 20, 0, &p));
    CHECK_OK(tide_retain(f.t, p));
    struct stats_work w = {f.t, p};
    CHECK_OK(tide_sim_enqueue(f.sim, 0, 100000, stats_then_release, &w));
    CHECK_OK(tide_free(f.t, p));
    watchdog(10);
    tide_release_report r;
    CHECK_OK(tide_empty_cache(f.t, &r));
    alarm(0);
    CHECK(r.pending_blocks == 0 && r.reserved_bytes == 0); /* the callback ran during the synchronize */
    fixture_close(&f);
}

/* The out-of-memory ladder synchronizes the device (step 3); a callback that needs the whole allocator
 * meanwhile must get it. */
static void test_out_of_memory_ladder_with_a_callback_reading_statistics(void)
{
    struct fixture f;
    fixture_open(&f, 64 * MIB, NULL);
    void *p, *q;
    CHECK_OK(tide_malloc(f.t, 40 * MIB, 0, &p));
    CHECK_OK(tide_retain(f.t, p));
    struct stats_work w = {f.t, p};
    CHECK_OK(tide_sim_enqueue(f.sim, 0, 100000, stats_then_release, &w));
    CHECK_OK(tide_free(f.t, p)); /* PENDING until the callback */
    watchdog(10);
    /* Fits only once the pending block is drained and its segment given back: step 3. */
    CHECK_OK(tide_malloc(f.t, 50 * MIB, 0, &q));
    alarm(0);
    CHECK_OK(tide_free(f.t, q));
    fixture_close(&f);
}

int main(void)
{
    RUN(test_destroy_with_a_release_in_flight);
    RUN(test_destroy_with_many_callbacks_in_flight);
    RUN(test_empty_cache_with_a_callback_reading_statistics);
    RUN(test_out_of_memory_ladder_with_a_callback_reading_statistics);
    return HARNESS_EXIT();
}

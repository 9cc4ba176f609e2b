/*
 * A history with stacks (TIDE_HISTORY_STACKS) while threads allocate: no lock of tidepool is held while
 * a stack is taken, and reading the history while threads allocate finishes.
 *
 * backtrace() takes microseconds. Taken under a heap's spin lock, it kept the lock held nearly all the
 * time a thread allocated, and a reader (tide_history_json) waiting for that lock, yielding between
 * tries, rarely found it free: reads took seconds, unbounded. This program defines backtrace() itself,
 * in front of the C library's, so that a test can hold a thread inside it while another thread calls
 * tidepool. The library is linked in statically, so its calls come here.
 */
#define _GNU_SOURCE /* RTLD_NEXT */
#include "harness.h"

#include <dlfcn.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <time.h>

#define HOLD_SECONDS 5 /* how long a held backtrace waits to be let go before it gives up */

/* ---- backtrace(), with a way to hold one thread inside it ----------------------------------------- */

static _Thread_local bool hold_my_next_backtrace;
static pthread_mutex_t hold_lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t hold_cond = PTHREAD_COND_INITIALIZER;
static bool warmed_up, go, held_inside, let_go, gave_up;

/* Waits under hold_lock until *flag, at most HOLD_SECONDS; false if it never came. */
static bool wait_for(const bool *flag)
{
    struct timespec until;
    clock_gettime(CLOCK_REALTIME, &until);
    until.tv_sec += HOLD_SECONDS;
    pthread_mutex_lock(&hold_lock);
    while (!*flag)
        if (pthread_cond_timedwait(&hold_cond, &hold_lock, &until) != 0)
            break;
    bool came = *flag;
    pthread_mutex_unlock(&hold_lock);
    return came;
}

static void set_flag(bool *flag)
{
    pthread_mutex_lock(&hold_lock);
    *flag = true;
    pthread_cond_broadcast(&hold_cond);
    pthread_mutex_unlock(&hold_lock);
}

int backtrace(void **buffer, int size);
int backtrace(void **buffer, int size)
{
    if (hold_my_next_backtrace) {
        hold_my_next_backtrace = false;
        set_flag(&held_inside);
        if (!wait_for(&let_go))
            set_flag(&gave_up); /* nobody could call in meanwhile: a lock was held across this call */
    }
    int (*real)(void **, int) = (int (*)(void **, int))dlsym(RTLD_NEXT, "backtrace");
    return real ? real(buffer, size) : 0;
}

/* ---- a thread held while taking its stack ------------------------------------------------------------ */

struct held_call {
    struct fixture *f;
    tide_stream stream;
    int what; /* 0: tide_malloc, 1: tide_free, 2: tide_release */
    void *p;
    tide_status status;
};

/* Not static: the test names it from a stack (dladdr sees what the program exports). */
void *call_held(void *arg);
void *call_held(void *arg)
{
    struct held_call *c = arg;
    /* First a heap cached for this thread's stream, as in a program that allocated before the history
     * began: the history's start must make the thread forget it. */
    void *p;
    if (tide_malloc(c->f->t, 4096, c->stream, &p) != TIDE_OK || tide_free(c->f->t, p) != TIDE_OK)
        harness_failures++;
    set_flag(&warmed_up);
    wait_for(&go);
    hold_my_next_backtrace = true;
    if (c->what == 0)
        c->status = tide_malloc(c->f->t, 4096, c->stream, &c->p);
    else if (c->what == 1)
        c->status = tide_free(c->f->t, c->p);
    else
        c->status = tide_release(c->f->t, c->p);
    return NULL;
}

/* While one thread is inside backtrace() for a tide_malloc, tide_free or tide_release on a stream, the
 * main thread allocates and frees on that stream, reads the history and checks the allocator, all of
 * which take that stream's heap lock. Before, the held thread held that lock: the main thread waited,
 * and the held thread gave up after HOLD_SECONDS. */
static void test_no_lock_held_across_backtrace(void)
{
    static const char *const names[] = {"tide_malloc", "tide_free", "tide_release"};
    for (int what = 0; what < 3; what++) {
        struct fixture f;
        fixture_open(&f, 0, NULL);
        tide_stream s;
        CHECK_OK(tide_sim_stream_create(f.sim, &s));
        void *mine;
        CHECK_OK(tide_malloc(f.t, 8192, s, &mine)); /* the stream's heap and a segment exist */
        struct held_call c = {&f, s, what, NULL, TIDE_EINVAL};
        if (what > 0)
            CHECK_OK(tide_malloc(f.t, 4096, s, &c.p));
        if (what == 2) { /* the last reference's release frees the block */
            CHECK_OK(tide_retain(f.t, c.p));
            CHECK_OK(tide_free(f.t, c.p));
        }
        warmed_up = go = held_inside = let_go = gave_up = false;
        pthread_t th;
        pthread_create(&th, NULL, call_held, &c);
        CHECK(wait_for(&warmed_up));
        CHECK_OK(tide_history_start(f.t, 1024, TIDE_HISTORY_STACKS));
        set_flag(&go);
        if (!wait_for(&held_inside)) /* the held call took no stack at all */
            fprintf(stderr, "%s: no stack was taken\n", names[what]);
        CHECK(held_inside);

        void *p;
        CHECK_OK(tide_malloc(f.t, 4096, s, &p));
        CHECK_OK(tide_free(f.t, p));
        char *json = NULL;
        CHECK_OK(tide_history_json(f.t, &json));
        tide_string_free(json);
        CHECK_OK(tide_check(f.t));

        pthread_mutex_lock(&hold_lock);
        bool in_time = !gave_up;
        pthread_mutex_unlock(&hold_lock);
        set_flag(&let_go);
        pthread_join(th, NULL);
        if (!in_time)
            fprintf(stderr, "%s: a lock was held while the stack was taken (the other thread waited "
                            "%d s)\n", names[what], HOLD_SECONDS);
        CHECK(in_time);
        CHECK_OK(c.status);

        /* The held call's event has its stack, taken before the lock: its caller is call_held. */
        tide_event ev[64];
        size_t n = 0;
        CHECK_OK(tide_history_read(f.t, ev, 64, &n, NULL));
        uint32_t kind = what == 0 ? TIDE_EVENT_ALLOC : what == 1 ? TIDE_EVENT_FREE_REQUESTED : TIDE_EVENT_FREE_COMPLETED;
        uint64_t addr = (uint64_t)(uintptr_t)c.p;
        bool found = false;
        for (size_t i = 0; i < n; i++) {
            if (ev[i].kind != kind || ev[i].addr != addr || ev[i].stream != s)
                continue;
            Dl_info info;
            found = ev[i].nframes > 0 && dladdr(ev[i].frames[0], &info) && info.dli_sname &&
                    strcmp(info.dli_sname, "call_held") == 0;
        }
        if (!found)
            fprintf(stderr, "%s: its event's innermost frame is not its caller\n", names[what]);
        CHECK(found);
        CHECK_OK(tide_history_stop(f.t));
        CHECK_OK(tide_free(f.t, mine));
        if (what == 0)
            CHECK_OK(tide_free(f.t, c.p));
        fixture_close(&f);
    }
}

/* ---- reading while threads allocate ---------------------------------------------------------------- */

#define THREADS 4
#define READS 20 /* TIDE_HISTORY_READS changes it (valgrind runs 3) */
static _Atomic(bool) keep_allocating;
static _Atomic(long) calls_made;

struct worker {
    struct fixture *f;
    tide_stream stream;
    unsigned seed;
    long ops;
};

static void *allocate(void *arg)
{
    struct worker *w = arg;
    void *held[16] = {0};
    while (atomic_load(&keep_allocating)) {
        w->seed = w->seed * 1103515245u + 12345u;
        unsigned k = (w->seed >> 16) % 16;
        if (held[k]) {
            if (tide_free(w->f->t, held[k]) != TIDE_OK)
                harness_failures++;
            held[k] = NULL;
        } else if (tide_malloc(w->f->t, 512 + (w->seed >> 8) % 100000, w->stream, &held[k]) != TIDE_OK) {
            harness_failures++;
        }
        w->ops++;
        atomic_fetch_add_explicit(&calls_made, 1, memory_order_relaxed);
    }
    for (int k = 0; k < 16; k++)
        if (held[k] && tide_free(w->f->t, held[k]) != TIDE_OK)
            harness_failures++;
    return NULL;
}

static double seconds_now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* Four threads allocate and free (two on one stream, two on streams of their own) while the main thread
 * reads the history as JSON READS times. Before, with 4,096 events, a read took 0.8 to 9 s on a
 * two-core machine, the reader waiting for the heaps' locks; now about 0.15 s. The test's ctest
 * TIMEOUT fails it if the reads do not end. */
static void test_read_while_threads_record_stacks(void)
{
    struct fixture f;
    fixture_open(&f, 0, NULL);
    struct worker w[THREADS];
    pthread_t th[THREADS];
    tide_stream shared;
    CHECK_OK(tide_sim_stream_create(f.sim, &shared));
    CHECK_OK(tide_history_start(f.t, 4096, TIDE_HISTORY_STACKS));
    atomic_store(&keep_allocating, true);
    for (int i = 0; i < THREADS; i++) {
        w[i] = (struct worker){&f, shared, 7u * (unsigned)i + 1, 0};
        if (i >= 2)
            CHECK_OK(tide_sim_stream_create(f.sim, &w[i].stream));
        pthread_create(&th[i], NULL, allocate, &w[i]);
    }
    while (atomic_load(&calls_made) < 4096) /* the ring full of events with stacks */
        nanosleep(&(struct timespec){0, 1000000}, NULL);
    const char *env = getenv("TIDE_HISTORY_READS");
    int reads = env ? atoi(env) : READS;
    double start = seconds_now(), slowest = 0;
    int frames = 0;
    for (int r = 0; r < reads; r++) {
        double t0 = seconds_now();
        char *json = NULL;
        CHECK_OK(tide_history_json(f.t, &json));
        double took = seconds_now() - t0;
        slowest = took > slowest ? took : slowest;
        frames += json && strstr(json, "\"frames\": [\"");
        tide_string_free(json);
    }
    double all = seconds_now() - start;
    atomic_store(&keep_allocating, false);
    long ops = 0;
    for (int i = 0; i < THREADS; i++) {
        pthread_join(th[i], NULL);
        ops += w[i].ops;
    }
    fprintf(stderr, "%d reads in %.2f s (slowest %.2f s) while %d threads made %ld calls\n", reads, all,
            slowest, THREADS, ops);
    CHECK(frames == reads); /* each read had events with stacks */
    CHECK_OK(tide_history_stop(f.t));
    fixture_close(&f);
}

int main(void)
{
    RUN(test_no_lock_held_across_backtrace);
    RUN(test_read_while_threads_record_stacks);
    return HARNESS_EXIT();
}

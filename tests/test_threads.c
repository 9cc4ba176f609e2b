/*
 * Several threads at once (32): each allocates on its own stream and on a shared one, frees blocks
 * other threads allocated, records stream uses, and hands blocks to simulated kernels whose
 * completions release them from the device's own threads. A byte pattern in each block must survive
 * until it is freed. Now and then a worker and its helper thread free the same block at the same
 * instant: exactly one free succeeds, the other is refused as a double free. A checker thread runs
 * tide_check throughout and now and then tide_trim and tide_empty_cache under the workers' feet; at
 * the end everything goes back.
 *
 * TIDE_THREAD_OPS (operations per thread, default 20000) makes it longer: 125000 is a million
 * allocations and a million frees, the stress run of docs/reliability.md (built with ThreadSanitizer).
 */
#include "harness.h"

#include <sched.h>
#include <semaphore.h>
#include <stdbool.h>
#include <stdatomic.h>
#include <time.h>

#define THREADS 32
#define SLOTS 64
#define CONTEST_EVERY 16     /* one operation in 16 is a double free raced by two threads */

/* A worker's partner in double frees: it waits for a block, then frees it at the same moment as the
 * worker does. */
struct contest {
    tide_allocator *t;
    sem_t wake, finished;
    void *p;                 /* the block both free; NULL: the helper ends */
    _Atomic(int) ready, go;  /* the rendezvous that makes the two frees start together */
    tide_status result;
    char message[256];
};

struct shared {
    struct fixture f;
    tide_stream own[THREADS], common;
    pthread_mutex_t lock;          /* the exchange: blocks any thread may free */
    struct {
        uint8_t *p;
        size_t size;
        uint8_t tag;
    } exchange[SLOTS];
    unsigned long ops_per_thread;
    _Atomic(int) done;
    _Atomic(unsigned long) kernels, cross_frees, errors, contests, helper_won;
};

struct ref_kernel {
    tide_allocator *t;
    uint8_t *p;
    size_t size;
    uint8_t tag;
    struct shared *sh;
};

static void check_pattern(struct shared *sh, const uint8_t *p, size_t size, uint8_t tag)
{
    size_t n = size < 64 ? size : 64;
    if (first_mismatch(p, n, tag) != n || first_mismatch(p + size - n, n, tag) != n) {
        fprintf(stderr, "block %p lost its pattern\n", (const void *)p);
        atomic_fetch_add(&sh->errors, 1);
    }
}

static void fill_pattern(uint8_t *p, size_t size, uint8_t tag)
{
    size_t n = size < 64 ? size : 64;
    memset(p, tag, n);
    memset(p + size - n, tag, n);
}

/* Runs on a simulated stream's thread: the kernel reads its block, then its completion releases it. */
static void kernel_run(void *arg)
{
    struct ref_kernel *k = arg;
    check_pattern(k->sh, k->p, k->size, k->tag);
    if (tide_release(k->t, k->p) != TIDE_OK) {
        fprintf(stderr, "release from a completion: %s\n", tide_last_error());
        atomic_fetch_add(&k->sh->errors, 1);
    }
    free(k);
}

struct worker {
    struct shared *sh;
    int index;
    uint64_t rng;
    struct contest contest;
};

static void *helper_run(void *arg)
{
    struct contest *c = arg;
    for (;;) {
        sem_wait(&c->wake);
        if (!c->p)
            return NULL;
        atomic_store(&c->ready, 1);
        while (!atomic_load(&c->go))
            sched_yield();
        c->result = tide_free(c->t, c->p);
        snprintf(c->message, sizeof c->message, "%s", c->result == TIDE_OK ? "" : tide_last_error());
        sem_post(&c->finished);
    }
}

static bool refused_as_double_free(tide_status s, const char *message)
{
    return s == TIDE_EINVAL && (strstr(message, "double free") || strstr(message, "freed twice"));
}

/* The worker and its helper free p together. The block is held by the device (tide_retain) until
 * both frees have returned, so it cannot be handed to anyone else in between: the second free can
 * only be a double free of the same block. */
static void race_double_free(struct worker *w, tide_allocator *t, uint8_t *p)
{
    struct contest *c = &w->contest;
    tide_retain(t, p);
    c->p = p;
    atomic_store(&c->ready, 0);
    atomic_store(&c->go, 0);
    sem_post(&c->wake);
    while (!atomic_load(&c->ready))
        sched_yield();
    atomic_store(&c->go, 1);
    tide_status mine = tide_free(t, p);
    char message[256];
    snprintf(message, sizeof message, "%s", mine == TIDE_OK ? "" : tide_last_error());
    sem_wait(&c->finished);
    bool one_won = (mine == TIDE_OK && refused_as_double_free(c->result, c->message)) ||
                   (c->result == TIDE_OK && refused_as_double_free(mine, message));
    if (!one_won) {
        fprintf(stderr, "thread %d: a raced double free: %s / %s (\"%s\" / \"%s\")\n", w->index,
                tide_status_name(mine), tide_status_name(c->result), message, c->message);
        atomic_fetch_add(&w->sh->errors, 1);
    }
    if (c->result == TIDE_OK)
        atomic_fetch_add(&w->sh->helper_won, 1);
    atomic_fetch_add(&w->sh->contests, 1);
    if (tide_release(t, p) != TIDE_OK)
        atomic_fetch_add(&w->sh->errors, 1);
}

static void *worker_run(void *arg)
{
    struct worker *w = arg;
    struct shared *sh = w->sh;
    tide_allocator *t = sh->f.t;
    for (unsigned long i = 0; i < sh->ops_per_thread; i++) {
        uint64_t r = rng_next(&w->rng);
        size_t size = (size_t)1 << (r % 22);
        size += (r >> 8) % size;
        tide_stream stream = (r >> 40) % 4 == 0 ? sh->common : sh->own[w->index];
        uint8_t tag = (uint8_t)((r >> 32) | 1);
        uint8_t *p;
        if (tide_malloc(t, size, stream, (void **)&p) != TIDE_OK) {
            fprintf(stderr, "thread %d: %s\n", w->index, tide_last_error());
            atomic_fetch_add(&sh->errors, 1);
            continue;
        }
        fill_pattern(p, size, tag);
        if (i % CONTEST_EVERY == CONTEST_EVERY - 1) {
            race_double_free(w, t, p);
            continue;
        }
        switch ((r >> 48) % 4) {
        case 0: /* free it here at once */
            check_pattern(sh, p, size, tag);
            if (tide_free(t, p) != TIDE_OK)
                atomic_fetch_add(&sh->errors, 1);
            break;
        case 1: { /* a kernel uses it and releases it when done; free it now */
            struct ref_kernel *k = malloc(sizeof *k);
            if (!k) {
                fprintf(stderr, "thread %d: out of host memory\n", w->index);
                atomic_fetch_add(&sh->errors, 1);
                tide_free(t, p);
                break;
            }
            *k = (struct ref_kernel){t, p, size, tag, sh};
            tide_retain(t, p);
            tide_sim_enqueue(sh->f.sim, sh->own[(w->index + 1) % THREADS], (uint32_t)(r % 50), kernel_run, k);
            atomic_fetch_add(&sh->kernels, 1);
            if (tide_free(t, p) != TIDE_OK)
                atomic_fetch_add(&sh->errors, 1);
            break;
        }
        case 2: /* another stream uses it */
            tide_record_stream(t, p, sh->own[(w->index + 3) % THREADS]);
            tide_sim_enqueue(sh->f.sim, sh->own[(w->index + 3) % THREADS], (uint32_t)(r % 30), NULL, NULL);
            if (tide_free(t, p) != TIDE_OK)
                atomic_fetch_add(&sh->errors, 1);
            break;
        default: { /* leave it for any thread to free; free what was there */
            size_t slot = (r >> 20) % SLOTS;
            pthread_mutex_lock(&sh->lock);
            uint8_t *old = sh->exchange[slot].p;
            size_t old_size = sh->exchange[slot].size;
            uint8_t old_tag = sh->exchange[slot].tag;
            sh->exchange[slot].p = p;
            sh->exchange[slot].size = size;
            sh->exchange[slot].tag = tag;
            pthread_mutex_unlock(&sh->lock);
            if (old) {
                check_pattern(sh, old, old_size, old_tag);
                if (tide_free(t, old) != TIDE_OK)
                    atomic_fetch_add(&sh->errors, 1);
                atomic_fetch_add(&sh->cross_frees, 1);
            }
        }
        }
    }
    return NULL;
}

/* Checks every invariant while the workers run, and now and then gives memory back under them. */
static void *checker_run(void *arg)
{
    struct shared *sh = arg;
    for (unsigned long round = 1; !atomic_load(&sh->done); round++) {
        if (tide_check(sh->f.t) != TIDE_OK) {
            fprintf(stderr, "tide_check during the run: %s\n", tide_last_error());
            atomic_fetch_add(&sh->errors, 1);
        }
        tide_status s = TIDE_OK;
        if (round % 50 == 0)
            s = tide_empty_cache(sh->f.t, NULL);
        else if (round % 10 == 0)
            s = tide_trim(sh->f.t, 64 * MIB, NULL);
        if (s != TIDE_OK && s != TIDE_EBUSY) {
            fprintf(stderr, "empty_cache or trim during the run: %s\n", tide_last_error());
            atomic_fetch_add(&sh->errors, 1);
        }
        tide_stats stats;
        stats.struct_size = sizeof stats;
        tide_get_stats(sh->f.t, &stats);
        struct timespec ts = {0, 2000000};
        nanosleep(&ts, NULL);
    }
    return NULL;
}

static void test_threads_on_streams(void)
{
    struct shared *sh = calloc(1, sizeof *sh);
    const char *env = getenv("TIDE_THREAD_OPS");
    sh->ops_per_thread = env && *env ? strtoul(env, NULL, 10) : 20000;
    /* TIDE_THREADS_DEVICE_GIB: a smaller simulated device, whose address ranges (one per stream with
     * expandable segments, as large as the device) fit in valgrind's address space. */
    const char *gib = getenv("TIDE_THREADS_DEVICE_GIB");
    uint64_t device = gib && *gib ? (uint64_t)strtoul(gib, NULL, 10) << 30 : 0;
    fixture_open(&sh->f, device, getenv("TIDE_THREADS_CONF")); /* e.g. expandable_segments:True */
    pthread_mutex_init(&sh->lock, NULL);
    for (int i = 0; i < THREADS; i++)
        CHECK_OK(tide_sim_stream_create(sh->f.sim, &sh->own[i]));
    CHECK_OK(tide_sim_stream_create(sh->f.sim, &sh->common));

    pthread_t threads[THREADS], helpers[THREADS], checker;
    struct worker *workers = calloc(THREADS, sizeof *workers);
    for (int i = 0; i < THREADS; i++) {
        workers[i].sh = sh;
        workers[i].index = i;
        workers[i].rng = 1000 + (uint64_t)i;
        workers[i].contest.t = sh->f.t;
        sem_init(&workers[i].contest.wake, 0, 0);
        sem_init(&workers[i].contest.finished, 0, 0);
        pthread_create(&helpers[i], NULL, helper_run, &workers[i].contest);
        pthread_create(&threads[i], NULL, worker_run, &workers[i]);
    }
    pthread_create(&checker, NULL, checker_run, sh);
    for (int i = 0; i < THREADS; i++) {
        pthread_join(threads[i], NULL);
        workers[i].contest.p = NULL;
        sem_post(&workers[i].contest.wake);
        pthread_join(helpers[i], NULL);
        sem_destroy(&workers[i].contest.wake);
        sem_destroy(&workers[i].contest.finished);
    }
    free(workers);
    atomic_store(&sh->done, 1);
    pthread_join(checker, NULL);

    for (int i = 0; i < SLOTS; i++)
        if (sh->exchange[i].p)
            CHECK_OK(tide_free(sh->f.t, sh->exchange[i].p));
    CHECK_OK(tide_sim_synchronize(sh->f.sim));
    CHECK(atomic_load(&sh->errors) == 0);
    CHECK(atomic_load(&sh->kernels) > 0 && atomic_load(&sh->cross_frees) > 0);
    CHECK(atomic_load(&sh->contests) == THREADS * (sh->ops_per_thread / CONTEST_EVERY));
    CHECK_OK(tide_check(sh->f.t));
    tide_release_report r;
    CHECK_OK(tide_empty_cache(sh->f.t, &r));
    CHECK(r.reserved_bytes == 0 && r.pending_blocks == 0);
    tide_stats s = stats_of(sh->f.t);
    CHECK(s.allocation[TIDE_POOL_ALL].current == 0);
    CHECK(s.num_streams == THREADS + 1);
    tide_sim_counters c;
    tide_sim_get_counters(sh->f.sim, &c);
    fprintf(stderr, "%d threads x %lu operations, %lu kernel releases, %lu cross-thread frees, %lu raced "
            "double frees (the helper's free first in %lu), %llu pending blocks drained; the device saw "
            "%llu segment reservations and %llu page maps\n",
            THREADS, sh->ops_per_thread, atomic_load(&sh->kernels), atomic_load(&sh->cross_frees),
            atomic_load(&sh->contests), atomic_load(&sh->helper_won),
            (unsigned long long)s.num_pending_drained, (unsigned long long)c.calls[TIDE_SIM_RESERVE],
            (unsigned long long)c.calls[TIDE_SIM_MAP]);
    fixture_close(&sh->f);
    pthread_mutex_destroy(&sh->lock);
    free(sh);
}

int main(void)
{
    RUN(test_threads_on_streams);
    return HARNESS_EXIT();
}

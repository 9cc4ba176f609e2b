/*
 * A small test harness: CHECK macros that count failures and say where, and a fixture that creates a
 * simulated device and an allocator over it.
 */
#ifndef TIDE_TEST_HARNESS_H
#define TIDE_TEST_HARNESS_H

#include "tidepool.h"
#include "tidepool_sim.h"

#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int harness_failures;

#define CHECK(cond)                                                                                \
    do {                                                                                           \
        if (!(cond)) {                                                                             \
            fprintf(stderr, "%s:%d: CHECK failed: %s\n", __FILE__, __LINE__, #cond);               \
            harness_failures++;                                                                    \
        }                                                                                          \
    } while (0)

#define CHECK_STATUS(expr, expected)                                                               \
    do {                                                                                           \
        tide_status check_s_ = (expr);                                                             \
        if (check_s_ != (expected)) {                                                              \
            fprintf(stderr, "%s:%d: %s returned %s, expected %s (last error: %s)\n", __FILE__,     \
                    __LINE__, #expr, tide_status_name(check_s_), tide_status_name(expected),        \
                    tide_last_error());                                                            \
            harness_failures++;                                                                    \
        }                                                                                          \
    } while (0)

#define CHECK_OK(expr) CHECK_STATUS(expr, TIDE_OK)

/* The last error message contains text. */
#define CHECK_MESSAGE(text)                                                                        \
    do {                                                                                           \
        if (!strstr(tide_last_error(), (text))) {                                                  \
            fprintf(stderr, "%s:%d: last error \"%s\" does not mention \"%s\"\n", __FILE__,        \
                    __LINE__, tide_last_error(), (text));                                          \
            harness_failures++;                                                                    \
        }                                                                                          \
    } while (0)

#define RUN(test)                                                                                  \
    do {                                                                                           \
        int before_ = harness_failures;                                                            \
        test();                                                                                    \
        fprintf(stderr, "%s %s\n", harness_failures == before_ ? "ok  " : "FAIL", #test);          \
    } while (0)

#define HARNESS_EXIT() (harness_failures ? (fprintf(stderr, "%d check(s) failed\n", harness_failures), 1) : 0)

#define MIB ((size_t)1 << 20)
#define GIB ((size_t)1 << 30)

struct fixture {
    tide_sim *sim;
    tide_backend backend;
    tide_allocator *t;
};

/* A simulated device made with options o and an allocator with config conf. */
static inline void fixture_open_sim(struct fixture *f, const tide_sim_options *o, const char *conf)
{
    if (tide_sim_create(o, &f->sim) != TIDE_OK) {
        fprintf(stderr, "tide_sim_create: %s\n", tide_last_error());
        exit(2);
    }
    f->backend = tide_sim_backend(f->sim);
    if (tide_create(&f->backend, conf, &f->t) != TIDE_OK) {
        fprintf(stderr, "tide_create: %s\n", tide_last_error());
        exit(2);
    }
}

/* A simulated device of total bytes (0: 80 GiB) and an allocator with config conf. */
static inline void fixture_open(struct fixture *f, uint64_t total, const char *conf)
{
    tide_sim_options o = {sizeof o, total, 0, 0};
    fixture_open_sim(f, &o, conf);
}

/* Destroys the allocator (expecting a clean end) and the device, and checks nothing is left. */
static inline void fixture_close(struct fixture *f)
{
    CHECK_OK(tide_destroy(f->t));
    tide_sim_counters c;
    tide_sim_get_counters(f->sim, &c);
    CHECK(c.held_bytes == 0);
    CHECK(c.live_fences == 0);
    tide_sim_destroy(f->sim);
    f->t = NULL;
    f->sim = NULL;
}

static inline tide_stats stats_of(tide_allocator *t)
{
    tide_stats s;
    s.struct_size = sizeof s;
    if (tide_get_stats(t, &s) != TIDE_OK)
        harness_failures++;
    return s;
}

static inline int64_t reserved_of(tide_allocator *t) { return stats_of(t).reserved_bytes[TIDE_POOL_ALL].current; }

static inline uint64_t held_by_device(tide_sim *sim)
{
    tide_sim_counters c;
    tide_sim_get_counters(sim, &c);
    return c.held_bytes;
}

/* ---- simulated kernels ------------------------------------------------------------------------------ */

/* A gate a kernel waits at, so a test decides exactly when "the device" gets to it. */
struct gate {
    pthread_mutex_t m;
    pthread_cond_t c;
    int open;
};

static inline void gate_init(struct gate *g)
{
    pthread_mutex_init(&g->m, NULL);
    pthread_cond_init(&g->c, NULL);
    g->open = 0;
}

static inline void gate_open(struct gate *g)
{
    pthread_mutex_lock(&g->m);
    g->open = 1;
    pthread_cond_broadcast(&g->c);
    pthread_mutex_unlock(&g->m);
}

static inline void gate_pass(struct gate *g)
{
    pthread_mutex_lock(&g->m);
    while (!g->open)
        pthread_cond_wait(&g->c, &g->m);
    pthread_mutex_unlock(&g->m);
}

static inline void gate_destroy(struct gate *g)
{
    pthread_mutex_destroy(&g->m);
    pthread_cond_destroy(&g->c);
}

/* A kernel that (after its gate, if any) fills a block with one byte value, then (if t is set)
 * releases its reference to the block, as a completion callback would. */
struct fill_kernel {
    struct gate *gate;
    uint8_t *ptr;
    size_t size;
    uint8_t value;
    tide_allocator *release_from;
};

static inline void fill_kernel_run(void *arg)
{
    struct fill_kernel *k = arg;
    if (k->gate)
        gate_pass(k->gate);
    memset(k->ptr, k->value, k->size);
    if (k->release_from)
        tide_release(k->release_from, k->ptr);
}

/* The first offset in [p, p+n) whose byte is not value, or n. */
static inline size_t first_mismatch(const uint8_t *p, size_t n, uint8_t value)
{
    for (size_t i = 0; i < n; i++)
        if (p[i] != value)
            return i;
    return n;
}

/* A small deterministic generator (splitmix64), so randomized tests repeat exactly for a seed. */
static inline uint64_t rng_next(uint64_t *state)
{
    uint64_t z = (*state += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

#endif

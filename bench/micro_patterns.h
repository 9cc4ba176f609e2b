/*
 * The micro-benchmark patterns, for any allocator behind a small table of functions: the simulated
 * device (bench/micro_sim.c, any machine) and the GPU (bench/micro_gpu.cpp: tidepool, PyTorch's caching
 * allocator and cudaMallocAsync in one process).
 *
 *   same 1 MiB          one size, allocated and freed again and again
 *   random 256B-4MiB    log-uniform sizes, 64 live, each step frees a random one and allocates anew
 *   random 1MiB-256MiB  the same with 16 live
 *   threads             the small random pattern from T threads at once, each on its own stream
 *   1 thread, 7 busy    the one-thread pattern while seven other cores run arithmetic (a control)
 *   8 allocators        the threaded pattern with each thread on an allocator of its own: nothing of
 *                       the allocator is shared, so its scaling is the machine's (a control)
 *
 * Sizes are drawn before timing starts. Results are nanoseconds per alloc+free pair; the threaded
 * pattern reports the time per pair of all threads together (wall time / all pairs).
 */
#ifndef TIDE_BENCH_MICRO_PATTERNS_H
#define TIDE_BENCH_MICRO_PATTERNS_H

#include <math.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#ifdef __linux__
#include <sched.h>
#endif

struct bench_allocator {
    const char *name;
    void *ctx;
    void *(*alloc)(void *ctx, size_t size, uintptr_t stream);
    void (*free)(void *ctx, void *ptr, size_t size, uintptr_t stream);
};

static inline double bench_now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static inline uint64_t bench_rng(uint64_t *s)
{
    uint64_t z = (*s += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

/* n sizes log-uniform in [lo, hi] */
static inline size_t *bench_sizes(size_t n, size_t lo, size_t hi, uint64_t seed)
{
    size_t *sizes = (size_t *)malloc(n * sizeof *sizes);
    double llo = log((double)lo), lhi = log((double)hi);
    for (size_t i = 0; i < n; i++) {
        double u = (double)(bench_rng(&seed) >> 11) / 9007199254740992.0;
        sizes[i] = (size_t)exp(llo + u * (lhi - llo));
    }
    return sizes;
}

static inline double bench_same_size(const struct bench_allocator *a, size_t size, size_t pairs,
                                     uintptr_t stream)
{
    void *warm = a->alloc(a->ctx, size, stream);
    a->free(a->ctx, warm, size, stream);
    double t0 = bench_now();
    for (size_t i = 0; i < pairs; i++) {
        void *p = a->alloc(a->ctx, size, stream);
        a->free(a->ctx, p, size, stream);
    }
    return (bench_now() - t0) * 1e9 / (double)pairs;
}

/* BENCH_PIN=1: each thread of the threaded pattern runs on its own physical core (the first CPU of
 * each core, from sysfs), so that two threads never share a core's two hardware threads. Where the
 * scheduler places threads on SMT siblings, throughput measures the core's sharing, not the allocator's.
 * Returns the number of cores found (0: not pinning). */
static inline int bench_pin_cpus(int *cpus, int cap)
{
#ifdef __linux__
    const char *pin = getenv("BENCH_PIN");
    if (!pin || strcmp(pin, "1") != 0)
        return 0;
    int n = 0;
    long seen[256];
    for (int cpu = 0; cpu < 1024 && n < cap && n < 256; cpu++) {
        char path[128];
        long core = -1, package = -1;
        snprintf(path, sizeof path, "/sys/devices/system/cpu/cpu%d/topology/core_id", cpu);
        FILE *f = fopen(path, "r");
        if (!f)
            break;
        if (fscanf(f, "%ld", &core) != 1)
            core = -1;
        fclose(f);
        snprintf(path, sizeof path, "/sys/devices/system/cpu/cpu%d/topology/physical_package_id", cpu);
        if ((f = fopen(path, "r"))) {
            if (fscanf(f, "%ld", &package) != 1)
                package = -1;
            fclose(f);
        }
        long key = package * 100000 + core;
        int dup = 0;
        for (int i = 0; i < n; i++)
            dup |= seen[i] == key;
        if (!dup) {
            seen[n] = key;
            cpus[n++] = cpu;
        }
    }
    return n;
#else
    (void)cpus;
    (void)cap;
    return 0;
#endif
}

static inline void bench_pin_self(int cpu)
{
#if defined(__linux__) && defined(CPU_ZERO) /* CPU_ZERO needs _GNU_SOURCE */
    cpu_set_t set;
    CPU_ZERO(&set);
    CPU_SET(cpu, &set);
    if (sched_setaffinity(0, sizeof set, &set) != 0)
        perror("sched_setaffinity");
#else
    (void)cpu;
#endif
}

struct bench_random_args {
    const struct bench_allocator *a;
    size_t lo, hi, pairs;
    int live;
    uint64_t seed;
    uintptr_t stream;
    double ns_per_pair;
    pthread_barrier_t *start, *stop; /* threaded runs: everyone starts and stops timing together */
    int cpu;                         /* BENCH_PIN: the CPU this thread runs on; -1: anywhere */
};

/* Keeps `live` blocks; each step frees a random one and allocates a new random size in its place.
 * One warm-up pass fills the cache, then the timed pass runs the same sizes again. */
static inline void *bench_random_run(void *p)
{
    struct bench_random_args *r = (struct bench_random_args *)p;
    const struct bench_allocator *a = r->a;
    if (r->cpu >= 0)
        bench_pin_self(r->cpu);
    size_t *sizes = bench_sizes(r->pairs + (size_t)r->live, r->lo, r->hi, r->seed);
    uint64_t pick = r->seed ^ 0x5555;
    size_t *victims = (size_t *)malloc(r->pairs * sizeof *victims);
    for (size_t i = 0; i < r->pairs; i++)
        victims[i] = (size_t)(bench_rng(&pick) % (uint64_t)r->live);
    void **ptrs = (void **)calloc((size_t)r->live, sizeof *ptrs);
    size_t *held = (size_t *)calloc((size_t)r->live, sizeof *held);
    for (int round = 0; round < 2; round++) {
        for (int k = 0; k < r->live; k++) {
            held[k] = sizes[k];
            ptrs[k] = a->alloc(a->ctx, held[k], r->stream);
        }
        if (round == 1 && r->start)
            pthread_barrier_wait(r->start);
        double t0 = bench_now();
        for (size_t i = 0; i < r->pairs; i++) {
            size_t k = victims[i];
            a->free(a->ctx, ptrs[k], held[k], r->stream);
            held[k] = sizes[(size_t)r->live + i];
            ptrs[k] = a->alloc(a->ctx, held[k], r->stream);
        }
        r->ns_per_pair = (bench_now() - t0) * 1e9 / (double)r->pairs;
        if (round == 1 && r->stop)
            pthread_barrier_wait(r->stop);
        for (int k = 0; k < r->live; k++)
            a->free(a->ctx, ptrs[k], held[k], r->stream);
    }
    free(sizes);
    free(victims);
    free(ptrs);
    free(held);
    return NULL;
}

static inline double bench_random(const struct bench_allocator *a, size_t lo, size_t hi, int live,
                                  size_t pairs, uintptr_t stream)
{
    struct bench_random_args r = {a, lo, hi, pairs, live, 42, stream, 0, NULL, NULL, -1};
    bench_random_run(&r);
    return r.ns_per_pair;
}

/* The three one-thread patterns, by number, so that every benchmark runs the same ones; how many pairs
 * is each caller's (a slower allocator, or a finer interleaving, wants fewer). */
enum { BENCH_SAME_SIZE, BENCH_SMALL_RANDOM, BENCH_LARGE_RANDOM, BENCH_ONE_THREAD_PATTERNS };
static const char *const bench_one_thread_names[BENCH_ONE_THREAD_PATTERNS] = {
    "same 1 MiB", "random 256B-4MiB, 64 live", "random 1MiB-256MiB, 16 live"};

enum { BENCH_SMALL_LIVE = 64, BENCH_LARGE_LIVE = 16 }; /* blocks the random patterns keep live */

static inline double bench_one_thread(int pattern, const struct bench_allocator *a, size_t pairs,
                                      uintptr_t stream)
{
    switch (pattern) {
    case BENCH_SAME_SIZE: return bench_same_size(a, 1u << 20, pairs, stream);
    case BENCH_SMALL_RANDOM: return bench_random(a, 256, 4u << 20, BENCH_SMALL_LIVE, pairs, stream);
    default: return bench_random(a, 1u << 20, 256u << 20, BENCH_LARGE_LIVE, pairs, stream);
    }
}

/* How many alloc+free pairs bench_one_thread makes in all for `pairs` timed ones: the same size warms
 * up with one; a random pattern runs two passes (bench_random_run), each filling its live blocks first
 * and freeing them last. */
static inline unsigned long long bench_one_thread_pairs_made(int pattern, size_t pairs)
{
    switch (pattern) {
    case BENCH_SAME_SIZE: return (unsigned long long)pairs + 1;
    case BENCH_SMALL_RANDOM: return 2 * ((unsigned long long)pairs + BENCH_SMALL_LIVE);
    default: return 2 * ((unsigned long long)pairs + BENCH_LARGE_LIVE);
    }
}

/* Threads timed together: each waits on `start` when ready and on `stop` when done; bench_gate_wall
 * gives the wall seconds between the two, and joins them. */
struct bench_gate {
    pthread_barrier_t start, stop;
    pthread_t threads[64];
    int n;
};

static inline void bench_gate_init(struct bench_gate *g, int threads)
{
    pthread_barrier_init(&g->start, NULL, (unsigned)threads + 1);
    pthread_barrier_init(&g->stop, NULL, (unsigned)threads + 1);
    g->n = 0;
}

static inline void bench_gate_launch(struct bench_gate *g, void *(*run)(void *), void *arg)
{
    pthread_create(&g->threads[g->n++], NULL, run, arg);
}

static inline double bench_gate_wall(struct bench_gate *g)
{
    pthread_barrier_wait(&g->start);
    double t0 = bench_now();
    pthread_barrier_wait(&g->stop);
    double wall = bench_now() - t0;
    for (int i = 0; i < g->n; i++)
        pthread_join(g->threads[i], NULL);
    pthread_barrier_destroy(&g->start);
    pthread_barrier_destroy(&g->stop);
    return wall;
}

/* The small random pattern from `threads` threads, thread i on streams[i] through each[i] (the same
 * allocator for all, or one each). Returns wall ns per pair of all threads together, timed from when
 * all are ready to when all are done. */
static inline double bench_threads_each(const struct bench_allocator *const *each, int threads,
                                        const uintptr_t *streams, size_t pairs_per_thread)
{
    struct bench_random_args args[64];
    struct bench_gate g;
    bench_gate_init(&g, threads);
    int cpus[64];
    int ncpus = bench_pin_cpus(cpus, 64);
    for (int i = 0; i < threads; i++) {
        args[i] = (struct bench_random_args){each[i], 256, 4u << 20, pairs_per_thread, 64, 1000 + (uint64_t)i,
                                             streams[i], 0, &g.start, &g.stop, i < ncpus ? cpus[i] : -1};
        bench_gate_launch(&g, bench_random_run, &args[i]);
    }
    return bench_gate_wall(&g) * 1e9 / (double)(pairs_per_thread * (size_t)threads);
}

/* The same, every thread through one allocator. */
static inline double bench_threads(const struct bench_allocator *a, int threads, const uintptr_t *streams,
                                   size_t pairs_per_thread)
{
    const struct bench_allocator *each[64];
    for (int i = 0; i < threads; i++)
        each[i] = a;
    return bench_threads_each(each, threads, streams, pairs_per_thread);
}

/* ---- controls for the threaded pattern ----------------------------------------------------------------
 * Eight threads' throughput over one thread's mixes the allocator's scaling with the machine's: a
 * virtual machine's CPUs may share physical cores with other work, which slows memory-touching code
 * in phases of about a second (docs/performance.md, How we measure). Three controls separate the two:
 *   - bench_arithmetic: arithmetic alone (no memory, nothing shared), as one dependent chain a thread
 *     (most of a core stays idle) or as eight chains (the core's units kept busy);
 *   - bench_threads_busy: the one-thread pattern while other cores run arithmetic;
 *   - bench_threads_each (above) with an allocator per thread: the same work, nothing of the allocator
 *     shared between the threads. */

struct bench_spin_args {
    uint64_t iterations;              /* 0: until *stop is set */
    int wide;                         /* 8 independent chains (the core's ALUs all busy), or 1 chain */
    const volatile int *stop;
    uint64_t result;                  /* kept, so the work is not optimized away */
    pthread_barrier_t *start, *done;
    int cpu;
};

static inline void *bench_spin_run(void *p)
{
    struct bench_spin_args *s = (struct bench_spin_args *)p;
    if (s->cpu >= 0)
        bench_pin_self(s->cpu);
    uint64_t x[8];
    for (int c = 0; c < 8; c++)
        x[c] = 0x243F6A8885A308D3ull * (uint64_t)(c + 1) ^ (uint64_t)s->cpu;
    int chains = s->wide ? 8 : 1;
    if (s->start)
        pthread_barrier_wait(s->start);
    for (uint64_t i = 0; s->iterations ? i < s->iterations : !__atomic_load_n(s->stop, __ATOMIC_RELAXED); i++)
        for (int k = 0; k < 64; k++) /* xorshift: each chain a dependent run of single-cycle operations */
            for (int c = 0; c < chains; c++) {
                x[c] ^= x[c] << 13;
                x[c] ^= x[c] >> 7;
                x[c] ^= x[c] << 17;
            }
    s->result = x[0] ^ x[1] ^ x[2] ^ x[3] ^ x[4] ^ x[5] ^ x[6] ^ x[7];
    if (s->done)
        pthread_barrier_wait(s->done);
    return NULL;
}

/* Arithmetic from `threads` threads at once, each the same amount: wall ns per unit of all threads
 * together. One chain waits on each operation, and leaves most of a core's units idle (so it scales
 * even where two threads share a core); eight chains keep them busy, as an allocator's code does. */
static inline double bench_arithmetic(int threads, uint64_t iterations, int wide)
{
    struct bench_spin_args args[64];
    struct bench_gate g;
    bench_gate_init(&g, threads);
    int cpus[64];
    int ncpus = bench_pin_cpus(cpus, 64);
    for (int i = 0; i < threads; i++) {
        args[i] = (struct bench_spin_args){iterations, wide, NULL, 0, &g.start, &g.stop, i < ncpus ? cpus[i] : -1};
        bench_gate_launch(&g, bench_spin_run, &args[i]);
    }
    return bench_gate_wall(&g) * 1e9 / (double)(iterations * (uint64_t)threads);
}

/* The one-thread pattern while `busy` other threads run arithmetic (pinned to the next cores with
 * BENCH_PIN=1). */
static inline double bench_threads_busy(const struct bench_allocator *a, int busy, const uintptr_t *streams,
                                        size_t pairs)
{
    pthread_t th[64];
    struct bench_spin_args args[64];
    volatile int stop = 0;
    int cpus[64];
    int ncpus = bench_pin_cpus(cpus, 64);
    for (int i = 0; i < busy; i++) {
        args[i] = (struct bench_spin_args){0, 1, &stop, 0, NULL, NULL, i + 1 < ncpus ? cpus[i + 1] : -1};
        pthread_create(&th[i], NULL, bench_spin_run, &args[i]);
    }
    struct timespec ramp = {0, 20 * 1000 * 1000}; /* the cores' clocks settle under load */
    nanosleep(&ramp, NULL);
    double ns = bench_threads(a, 1, streams, pairs);
    __atomic_store_n(&stop, 1, __ATOMIC_RELAXED);
    for (int i = 0; i < busy; i++)
        pthread_join(th[i], NULL);
    return ns;
}

static inline int bench_compare_double(const void *x, const void *y)
{
    double a = *(const double *)x, b = *(const double *)y;
    return (a > b) - (a < b);
}

/* The median of n values (sorts them); 0 where there are none. */
static inline double bench_median(double *v, int n)
{
    if (n < 1)
        return 0.0;
    qsort(v, (size_t)n, sizeof *v, bench_compare_double);
    return v[n / 2];
}

#endif

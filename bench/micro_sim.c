/*
 * The micro-benchmark on the simulated device: tidepool's own cost per alloc+free pair, on any machine.
 *
 *   build/bench/micro_sim [reps]
 *   build/bench/micro_sim --count same|small|large|past_mark PAIRS
 *
 * --count runs one one-thread pattern once, PAIRS pairs, and prints how many alloc+free pairs it made in
 * all (a random pattern's warm-up pass, and each pass's filling and emptying, count too):
 * bench/callgrind_micro.sh counts that run's instructions per pair. past_mark is tidepool's own (no
 * other allocator has its fit rules): see past_the_mark below.
 *
 * (The GPU version, `gpu_bench micro` in bench/gpu_bench.cpp, runs the same patterns against
 * PyTorch's allocator and cudaMallocAsync in one process.)
 */
#define _GNU_SOURCE /* sched_setaffinity, for BENCH_PIN=1 */
#include "micro_patterns.h"
#include "tidepool.h"
#include "tidepool_sim.h"
#include "tidepool_bench.h"

#include <stdbool.h>
#include <string.h>
#include <unistd.h>

/* The threaded pattern with nothing of the allocator shared: an allocator (and a device) per thread.
 * Returns ns per pair, or a negative number if one could not be made. */
static double separate_allocators(const tide_sim_options *o, int reps)
{
    tide_sim *sims[8] = {0};
    tide_allocator *own[8] = {0};
    struct bench_allocator tables[8];
    const struct bench_allocator *each[8];
    uintptr_t streams[8] = {0}; /* each device's default stream */
    double ns = -1, v[32];
    int made = 0;
    for (; made < 8; made++) {
        if (tide_sim_create(o, &sims[made]) != TIDE_OK)
            goto done;
        tide_backend be = tide_sim_backend(sims[made]);
        if (tide_create(&be, NULL, &own[made]) != TIDE_OK)
            goto done;
        tables[made] = bench_tidepool("tidepool (sim)", own[made]);
        each[made] = &tables[made];
    }
    for (int r = 0; r < reps; r++)
        v[r] = bench_threads_each(each, 8, streams, 500000);
    ns = bench_median(v, reps);
done:
    for (int i = 0; i < 8; i++) {
        if (own[i])
            tide_destroy(own[i]);
        if (sims[i])
            tide_sim_destroy(sims[i]);
    }
    return ns;
}

/* Arithmetic alone, one thread's time over eight threads' (see bench_arithmetic). */
static double arithmetic_scaling(int wide, int reps)
{
    double one[32], eight[32];
    uint64_t iterations = wide ? 250000 : 2000000;
    for (int r = 0; r < reps; r++) {
        one[r] = bench_arithmetic(1, iterations, wide);
        eight[r] = bench_arithmetic(8, iterations, wide);
    }
    return bench_median(one, reps) / bench_median(eight, reps);
}

/* --count: the pattern's number, or -1 for a name it does not know. */
static int pattern_named(const char *name)
{
    static const char *const names[BENCH_ONE_THREAD_PATTERNS] = {"same", "small", "large"};
    for (int i = 0; i < BENCH_ONE_THREAD_PATTERNS; i++)
        if (strcmp(name, names[i]) == 0)
            return i;
    return -1;
}

/* A program at its high-water mark whose requests take blocks of a segment the fit rules keep for
 * larger ones: past the mark they serve rather than a new segment (pressure.c). A 64 MiB block made and
 * freed leaves one segment, which below the mark serves requests of 2 MiB or more; a 4 KiB block stays
 * live (a program that holds nothing ends its phase); then pairs of 1.5 and 1.25 MiB in turn, each taken
 * from that segment, since a segment of its own would pass the mark. The sizes alternate so that a
 * free's parked block is not simply taken back. Returns the pairs made, the first three included. */
static unsigned long long past_the_mark(const struct bench_allocator *a, size_t pairs)
{
    void *big = a->alloc(a->ctx, 64u << 20, 0), *kept = a->alloc(a->ctx, 4096, 0);
    a->free(a->ctx, big, 64u << 20, 0);
    for (size_t i = 0; i < pairs; i++) {
        size_t size = i % 2 ? (5u << 20) / 4 : (3u << 20) / 2;
        void *p = a->alloc(a->ctx, size, 0);
        a->free(a->ctx, p, size, 0);
    }
    a->free(a->ctx, kept, 4096, 0);
    return (unsigned long long)pairs + 2;
}

static int count_one(tide_allocator *t, int argc, char **argv)
{
    char *end = NULL;
    bool past_mark = argc == 4 && strcmp(argv[2], "past_mark") == 0;
    int pattern = argc == 4 && !past_mark ? pattern_named(argv[2]) : -1;
    unsigned long long pairs = argc == 4 ? strtoull(argv[3], &end, 10) : 0;
    if ((pattern < 0 && !past_mark) || !end || *end || pairs == 0 || pairs > 100000000) {
        fprintf(stderr, "usage: micro_sim --count same|small|large|past_mark PAIRS (1 to 100000000)\n");
        return 2;
    }
    struct bench_allocator a = bench_tidepool("tidepool (sim)", t);
    if (past_mark) {
        printf("pairs %llu\n", past_the_mark(&a, (size_t)pairs));
        return 0;
    }
    bench_one_thread(pattern, &a, (size_t)pairs, 0);
    printf("pairs %llu\n", bench_one_thread_pairs_made(pattern, (size_t)pairs));
    return 0;
}

int main(int argc, char **argv)
{
    int reps = argc > 1 ? atoi(argv[1]) : 5;
    if (reps < 1 || reps > 31)
        reps = 5;
    tide_sim_options o = {sizeof o, 1ull << 40, 0};
    tide_sim *sim;
    tide_allocator *t;
    if (tide_sim_create(&o, &sim) != TIDE_OK)
        return 1;
    tide_backend be = tide_sim_backend(sim);
    if (tide_create(&be, NULL, &t) != TIDE_OK)
        return 1;
    if (argc > 1 && strcmp(argv[1], "--count") == 0) {
        int status = count_one(t, argc, argv);
        tide_destroy(t);
        tide_sim_destroy(sim);
        return status;
    }
    struct bench_allocator a = bench_tidepool("tidepool (sim)", t);
    uintptr_t streams[8];
    for (int i = 0; i < 8; i++)
        tide_sim_stream_create(sim, &streams[i]);

    double v[32];
    printf("tidepool on the simulated device, median of %d runs, ns per alloc+free pair\n", reps);
    for (int r = 0; r < reps; r++)
        v[r] = bench_one_thread(BENCH_SAME_SIZE, &a, 2000000, 0);
    printf("  same 1 MiB            %8.1f\n", bench_median(v, reps));
    for (int r = 0; r < reps; r++)
        v[r] = bench_one_thread(BENCH_SMALL_RANDOM, &a, 1000000, 0);
    printf("  random 256B-4MiB, 64  %8.1f\n", bench_median(v, reps));
    for (int r = 0; r < reps; r++)
        v[r] = bench_one_thread(BENCH_LARGE_RANDOM, &a, 200000, 0);
    printf("  random 1-256MiB, 16   %8.1f\n", bench_median(v, reps));
    double one = 0, eight = 0;
    for (int threads = 1; threads <= 8; threads *= 2) {
        for (int r = 0; r < reps; r++)
            v[r] = bench_threads(&a, threads, streams, 500000);
        double ns = bench_median(v, reps);
        if (threads == 1)
            one = ns;
        eight = ns;
        printf("  %d thread%s, own streams %8.1f   (throughput %.2fx one thread)\n", threads,
               threads == 1 ? " " : "s", ns, one / ns);
    }

    /* The controls (bench/micro_patterns.h): what of that scaling is the machine's. */
    double separate = separate_allocators(&o, reps);
    if (separate > 0)
        printf("  8 allocators, 1 each  %8.1f   (throughput %.2fx one thread)\n", separate, one / separate);
    else
        printf("  8 allocators, 1 each  (could not make them: %s)\n", tide_last_error());
    long cpus = sysconf(_SC_NPROCESSORS_ONLN);
    if (cpus >= 8) {
        for (int r = 0; r < reps; r++)
            v[r] = bench_threads_busy(&a, 7, streams, 500000);
        double busy = bench_median(v, reps);
        printf("  1 thread, 7 busy      %8.1f   (8 threads give %.2fx this)\n", busy, busy / eight);
    } else {
        printf("  1 thread, 7 busy      (needs 8 CPUs; this machine has %ld)\n", cpus);
    }
    printf("  arithmetic alone, one chain a thread, scales %.2fx from 1 to 8 threads on this machine\n",
           arithmetic_scaling(0, reps));
    printf("  arithmetic alone, eight chains a thread, scales %.2fx from 1 to 8 threads on this machine\n",
           arithmetic_scaling(1, reps));
    tide_empty_cache(t, NULL);
    tide_destroy(t);
    tide_sim_destroy(sim);
    return 0;
}

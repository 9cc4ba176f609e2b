/*
 * The micro-benchmark on the simulated device: tidepool's own cost per alloc+free pair, on any machine.
 *
 *   build/bench/micro_sim [reps]
 *
 * (The GPU version, `gpu_bench micro` in bench/gpu_bench.cpp, runs the same patterns against
 * PyTorch's allocator and cudaMallocAsync in one process.)
 */
#define _GNU_SOURCE /* sched_setaffinity, for BENCH_PIN=1 */
#include "micro_patterns.h"
#include "tidepool.h"

#include <string.h>
#include <unistd.h>

static void *t_alloc(void *ctx, size_t size, uintptr_t stream)
{
    void *p = NULL;
    if (tide_malloc((tide_allocator *)ctx, size, stream, &p) != TIDE_OK) {
        fprintf(stderr, "tide_malloc: %s\n", tide_last_error());
        exit(1);
    }
    return p;
}

static void t_free(void *ctx, void *p, size_t size, uintptr_t stream)
{
    (void)size;
    (void)stream;
    if (tide_free((tide_allocator *)ctx, p) != TIDE_OK) {
        fprintf(stderr, "tide_free: %s\n", tide_last_error());
        exit(1);
    }
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
    struct bench_allocator a = {"tidepool (sim)", t, t_alloc, t_free};
    uintptr_t streams[8];
    for (int i = 0; i < 8; i++)
        tide_sim_stream_create(sim, &streams[i]);

    double v[32];
    printf("tidepool on the simulated device, median of %d runs, ns per alloc+free pair\n", reps);
    for (int r = 0; r < reps; r++)
        v[r] = bench_same_size(&a, 1u << 20, 2000000, 0);
    printf("  same 1 MiB            %8.1f\n", bench_median(v, reps));
    for (int r = 0; r < reps; r++)
        v[r] = bench_random(&a, 256, 4u << 20, 64, 1000000, 0);
    printf("  random 256B-4MiB, 64  %8.1f\n", bench_median(v, reps));
    for (int r = 0; r < reps; r++)
        v[r] = bench_random(&a, 1u << 20, 256u << 20, 16, 200000, 0);
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
    /* The control with nothing of the allocator shared: an allocator (and a device) per thread. */
    tide_sim *own_sim[8];
    tide_allocator *own[8];
    struct bench_allocator own_b[8];
    const struct bench_allocator *each[8];
    uintptr_t own_streams[8] = {0};
    for (int i = 0; i < 8; i++) {
        if (tide_sim_create(&o, &own_sim[i]) != TIDE_OK)
            return 1;
        tide_backend own_be = tide_sim_backend(own_sim[i]);
        if (tide_create(&own_be, NULL, &own[i]) != TIDE_OK)
            return 1;
        own_b[i] = (struct bench_allocator){"tidepool (sim)", own[i], t_alloc, t_free};
        each[i] = &own_b[i];
    }
    for (int r = 0; r < reps; r++)
        v[r] = bench_threads_each(each, 8, own_streams, 500000);
    double separate = bench_median(v, reps);
    printf("  8 allocators, 1 each  %8.1f   (throughput %.2fx one thread)\n", separate, one / separate);
    for (int i = 0; i < 8; i++) {
        tide_destroy(own[i]);
        tide_sim_destroy(own_sim[i]);
    }
    long cpus = sysconf(_SC_NPROCESSORS_ONLN);
    if (cpus >= 8) {
        for (int r = 0; r < reps; r++)
            v[r] = bench_threads_busy(&a, 7, streams, 500000);
        double busy = bench_median(v, reps);
        printf("  1 thread, 7 busy      %8.1f   (8 threads give %.2fx this)\n", busy, busy / eight);
    } else {
        printf("  1 thread, 7 busy      (needs 8 CPUs; this machine has %ld)\n", cpus);
    }
    for (int wide = 0; wide < 2; wide++) {
        double arith[2][32];
        uint64_t iterations = wide ? 250000 : 2000000;
        for (int r = 0; r < reps; r++) {
            arith[0][r] = bench_arithmetic(1, iterations, wide);
            arith[1][r] = bench_arithmetic(8, iterations, wide);
        }
        printf("  arithmetic alone, %s, scales %.2fx from 1 to 8 threads on this machine\n",
               wide ? "eight chains a thread" : "one chain a thread", bench_median(arith[0], reps) / bench_median(arith[1], reps));
    }
    tide_empty_cache(t, NULL);
    tide_destroy(t);
    tide_sim_destroy(sim);
    return 0;
}

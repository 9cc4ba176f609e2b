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
    double one = 0;
    for (int threads = 1; threads <= 8; threads *= 2) {
        for (int r = 0; r < reps; r++)
            v[r] = bench_threads(&a, threads, streams, 500000);
        double ns = bench_median(v, reps);
        if (threads == 1)
            one = ns;
        printf("  %d thread%s, own streams %8.1f   (throughput %.2fx one thread)\n", threads,
               threads == 1 ? " " : "s", ns, one / ns);
    }
    tide_empty_cache(t, NULL);
    tide_destroy(t);
    tide_sim_destroy(sim);
    return 0;
}

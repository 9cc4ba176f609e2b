/* Run 20: what slows down in the H200 host's slow phase? A time series, one row per sample: a dependent
 * arithmetic chain, pointer chases in 256 KiB, 16 MiB and 512 MiB, and tidepool replaying lstm_loop and
 * gpt2_varlen on the simulated device (the allocator alone), with the CPU the process ran on and the
 * steal time the kernel counted over the sample.
 *   host_phase SECONDS lstm_loop.csv.gz gpt2_varlen.csv.gz */

#include "micro_patterns.h"
#include "tidepool.h"
#include "trace.h"
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static double alu(void)
{
    volatile uint64_t sink;
    uint64_t x = 1;
    double t0 = bench_now();
    for (int i = 0; i < 20000000; i++)
        x = x * 6364136223846793005ull + 1442695040888963407ull;
    sink = x; (void)sink;
    return (bench_now() - t0) * 1e9 / 20000000;
}

/* Eight independent chains: bound by the core's throughput, not a chain's latency, so it slows when
 * another hardware thread shares the core, where one chain hardly does. */
static double alu8(void)
{
    volatile uint64_t sink;
    uint64_t x[8] = {1, 2, 3, 4, 5, 6, 7, 8};
    double t0 = bench_now();
    for (int i = 0; i < 5000000; i++)
        for (int k = 0; k < 8; k++)
            x[k] = x[k] * 6364136223846793005ull + 1442695040888963407ull;
    sink = x[0] ^ x[1] ^ x[2] ^ x[3] ^ x[4] ^ x[5] ^ x[6] ^ x[7]; (void)sink;
    return (bench_now() - t0) * 1e9 / 5000000;
}

/* Table updates in L1 (16 KiB) at xorshift indices: loads, stores and integer work, independent
 * across iterations, as an allocator's hot path is. */
static double l1mix(void)
{
    static uint32_t table[4096];
    uint64_t x = 88172645463325252ull;
    double t0 = bench_now();
    for (int i = 0; i < 10000000; i++) {
        x ^= x << 13; x ^= x >> 7; x ^= x << 17;
        table[x & 4095] += (uint32_t)x;
    }
    double ns = (bench_now() - t0) * 1e9 / 10000000;
    volatile uint32_t sink = table[x & 4095]; (void)sink;
    return ns;
}

uint64_t frontend_pass(const uint32_t *d, uint64_t x);
/* 800 static branches in 22 KB of code (frontend.c), each with a fixed outcome: ns per branch. */
static double frontend(void)
{
    static uint32_t d[64];
    uint64_t s = 7, x = 1;
    for (int i = 0; i < 64; i++) d[i] = (uint32_t)(bench_rng(&s) % 1000);
    double t0 = bench_now();
    for (int i = 0; i < 20000; i++)
        x = frontend_pass(d, x);
    volatile uint64_t sink = x; (void)sink;
    return (bench_now() - t0) * 1e9 / (20000.0 * 800);
}

static size_t *make_chase(size_t bytes)
{
    size_t n = bytes / sizeof(size_t);
    size_t *next = malloc(bytes), *perm = malloc(bytes);
    for (size_t i = 0; i < n; i++) perm[i] = i;
    uint64_t s = 42;
    for (size_t i = n - 1; i > 0; i--) { size_t j = bench_rng(&s) % (i + 1); size_t t = perm[i]; perm[i] = perm[j]; perm[j] = t; }
    for (size_t i = 0; i < n; i++) next[perm[i]] = perm[(i + 1) % n];
    free(perm);
    return next;
}

static double chase(const size_t *next, int steps)
{
    volatile size_t sink;
    size_t p = 0;
    double t0 = bench_now();
    for (int i = 0; i < steps; i++) p = next[p];
    sink = p; (void)sink;
    return (bench_now() - t0) * 1e9 / steps;
}

static double replay(tide_allocator *t, const struct trace *tr, void **ptr)
{
    double t0 = bench_now();
    for (size_t i = 0; i < tr->nops; i++) {
        const struct trace_op *op = &tr->ops[i];
        if (op->kind == TRACE_ALLOC) { if (tide_malloc(t, op->size, 0, &ptr[op->id])) exit(1); }
        else if (op->kind == TRACE_FREE) { if (tide_free(t, ptr[op->id])) exit(1); ptr[op->id] = NULL; }
    }
    double ns = (bench_now() - t0) * 1e9 / tr->nops;
    for (size_t i = 0; i < tr->nallocs; i++) { if (ptr[i]) tide_free(t, ptr[i]); ptr[i] = NULL; }
    return ns;
}

static unsigned long long steal(void)
{
    FILE *f = fopen("/proc/stat", "r");
    unsigned long long v[8] = {0};
    if (f) { if (fscanf(f, "cpu %llu %llu %llu %llu %llu %llu %llu %llu", &v[0], &v[1], &v[2], &v[3], &v[4], &v[5], &v[6], &v[7]) != 8) v[7] = 0; fclose(f); }
    return v[7];
}

int main(int argc, char **argv)
{
    if (argc < 4) return 2;
    double seconds = atof(argv[1]);
    struct trace tr[2]; char err[256];
    void **ptr[2];
    for (int k = 0; k < 2; k++) {
        if (trace_load(argv[2 + k], &tr[k], err, sizeof err)) { fprintf(stderr, "%s\n", err); return 1; }
        ptr[k] = calloc(tr[k].nallocs, sizeof(void *));
    }
    tide_sim *sim; tide_allocator *t;
    tide_sim_create(NULL, &sim);
    tide_backend be = tide_sim_backend(sim);
    if (tide_create(&be, NULL, &t)) return 1;
    size_t *c1 = make_chase(256 << 10), *c2 = make_chase(16 << 20), *c3 = make_chase(512 << 20);
    replay(t, &tr[0], ptr[0]); replay(t, &tr[1], ptr[1]);
    printf("| t (s) | cpu | steal (ticks) | alu ns/iter | alu8 ns/iter | l1mix ns/iter | frontend ns/branch | chase 256K ns | 16M | 512M | lstm_loop ns/op (median of 5) | gpt2_varlen ns/op (median of 5) |\n|---|---|---|---|---|---|---|---|---|---|---|---|\n");
    double start = bench_now();
    while (bench_now() - start < seconds) {
        unsigned long long s0 = steal();
        int cpu = sched_getcpu();
        double a = alu(), a8 = alu8(), m = l1mix(), fe = frontend(), x1 = chase(c1, 2000000), x2 = chase(c2, 2000000), x3 = chase(c3, 500000);
        double v1[5], v2[5];
        for (int k = 0; k < 5; k++) { v1[k] = replay(t, &tr[0], ptr[0]); v2[k] = replay(t, &tr[1], ptr[1]); }
        double r1 = bench_median(v1, 5), r2 = bench_median(v2, 5);

        printf("| %.1f | %d | %llu | %.3f | %.3f | %.3f | %.3f | %.2f | %.2f | %.1f | %.1f | %.1f |\n", bench_now() - start, cpu, steal() - s0, a, a8, m, fe, x1, x2, x3, r1, r2);
        fflush(stdout);
    }
    return 0;
}

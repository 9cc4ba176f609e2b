/*
 * Sleep and wake on the simulated device: what tide_pool_sleep and tide_pool_wake cost, in driver calls,
 * host memory and time, and whether a reinforcement-learning loop that sleeps and wakes its engine's
 * pools between phases holds flat memory.
 *
 * Part 1, for each size N (GiB): a sleepable pool holds N GiB of blocks shaped like a model's weights
 * (a few large matrices, many medium ones, some small), every byte written. It sleeps with its contents
 * offloaded and wakes, then sleeps discarding them and wakes; for each call: its time, the device's
 * calls (unmap, map, host_alloc, copy_to_host, copy_to_device), the host memory it took, and the
 * device's held bytes after it. On the simulated device a "copy" is a memcpy and a map an mprotect, so
 * times are the host's, not a GPU's; the calls and bytes are what a GPU would see.
 *
 * Part 2, the loop: an engine (weights, offloaded between phases, and a KV cache, discarded) and a
 * trainer (the default pool) that do not both fit on the device. One cycle is recorded (its sizes drawn
 * from a seeded generator) and replayed: wake the engine, roll out (activations in the default pool,
 * the KV cache written), sleep the engine, train (gradients and activations), empty the trainer's
 * cache. The
 * device's held bytes, the allocator's reserved bytes, host memory (offloaded) and the process's
 * resident set are recorded at the end of each phase of each cycle: flat means the same at every
 * cycle after the first.
 *
 *   build-x/bench/sleep_wake [--sizes 1,2,4] [--cycles 300]
 */
#include "tidepool.h"
#include "tidepool_sim.h"

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#define MIB ((size_t)1 << 20)
#define GIB ((size_t)1 << 30)

static void must(tide_status s, const char *what)
{
    if (s != TIDE_OK) {
        fprintf(stderr, "sleep_wake: %s: %s: %s\n", what, tide_status_name(s), tide_last_error());
        exit(1);
    }
}

static double now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec * 1e3 + (double)ts.tv_nsec / 1e6;
}

static uint64_t rng(uint64_t *s)
{
    uint64_t z = (*s += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

static size_t resident_bytes(void)
{
    FILE *f = fopen("/proc/self/statm", "r");
    unsigned long size = 0, resident = 0;
    if (f) {
        if (fscanf(f, "%lu %lu", &size, &resident) != 2)
            resident = 0;
        fclose(f);
    }
    return (size_t)resident * (size_t)sysconf(_SC_PAGESIZE);
}

static tide_sim_counters counters(tide_sim *sim)
{
    tide_sim_counters c;
    tide_sim_get_counters(sim, &c);
    return c;
}

/* ---- part 1 ------------------------------------------------------------------------------------------- */

struct weights {
    void **p;
    size_t n, bytes;
};

/* N GiB in blocks shaped like a model's: 1/2 in 256 MiB matrices, 3/8 in 16 MiB ones, 1/8 in 256 KiB
 * ones (biases, norms), every byte written. */
static struct weights make_weights(tide_allocator *t, tide_pool_id pool, size_t total)
{
    struct weights w = {NULL, 0, 0};
    const size_t shapes[3][2] = {{256 * MIB, 4}, {16 * MIB, 3}, {256 * 1024, 1}}; /* size, eighths */
    size_t cap = 0;
    for (int k = 0; k < 3; k++)
        cap += total * shapes[k][1] / 8 / shapes[k][0] + 1;
    w.p = calloc(cap, sizeof *w.p);
    for (int k = 0; k < 3; k++)
        for (size_t got = 0; got + shapes[k][0] <= total * shapes[k][1] / 8; got += shapes[k][0]) {
            must(tide_malloc_pool(t, shapes[k][0], 0, pool, &w.p[w.n]), "allocating weights");
            memset(w.p[w.n], (int)(w.n & 0xFF), shapes[k][0]);
            w.n++;
            w.bytes += shapes[k][0];
        }
    return w;
}

static void report_call(const char *what, double ms, tide_sim_counters a, tide_sim_counters b, size_t host_peak)
{
    printf("  %-14s %9.1f ms  unmap %4llu  map %4llu  host_alloc %4llu  copy_to_host %5llu  copy_to_device "
           "%5llu  host %7.1f MiB  device holds %8.1f MiB\n",
           what, ms, (unsigned long long)(b.calls[TIDE_SIM_UNMAP] - a.calls[TIDE_SIM_UNMAP]),
           (unsigned long long)(b.calls[TIDE_SIM_MAP] - a.calls[TIDE_SIM_MAP]),
           (unsigned long long)(b.calls[TIDE_SIM_HOST_ALLOC] - a.calls[TIDE_SIM_HOST_ALLOC]),
           (unsigned long long)(b.calls[TIDE_SIM_COPY_TO_HOST] - a.calls[TIDE_SIM_COPY_TO_HOST]),
           (unsigned long long)(b.calls[TIDE_SIM_COPY_TO_DEVICE] - a.calls[TIDE_SIM_COPY_TO_DEVICE]),
           (double)host_peak / (double)MIB, (double)b.held_bytes / (double)MIB);
}

static void part_sizes(const size_t *sizes, int nsizes)
{
    printf("Part 1: sleep and wake of a pool of N GiB of weights (every byte written)\n");
    for (int i = 0; i < nsizes; i++) {
        size_t total = sizes[i] * GIB;
        tide_sim *sim;
        tide_sim_options o = {sizeof o, 2 * total + 2 * GIB, 0, 0};
        must(tide_sim_create(&o, &sim), "tide_sim_create");
        tide_backend be = tide_sim_backend(sim);
        tide_allocator *t;
        must(tide_create(&be, "", &t), "tide_create");
        tide_pool_id pool;
        must(tide_pool_create(t, &pool), "tide_pool_create");
        must(tide_pool_make_sleepable(t, pool), "tide_pool_make_sleepable");
        struct weights w = make_weights(t, pool, total);
        size_t reserved = 0;
        must(tide_pool_memory(t, pool, &reserved, NULL), "tide_pool_memory");
        printf(" N = %zu GiB: %zu blocks, %.1f MiB allocated, %.1f MiB reserved in the pool\n", sizes[i], w.n,
               (double)w.bytes / (double)MIB, (double)reserved / (double)MIB);
        for (int mode = 0; mode < 2; mode++) {
            unsigned flags = mode == 0 ? TIDE_SLEEP_OFFLOAD : TIDE_SLEEP_DISCARD;
            tide_sim_counters a = counters(sim);
            double t0 = now_ms();
            must(tide_pool_sleep(t, pool, flags), "tide_pool_sleep");
            double ms = now_ms() - t0;
            tide_sim_counters b = counters(sim);
            report_call(mode == 0 ? "sleep offload" : "sleep discard", ms, a, b, b.host_bytes);
            size_t host = b.host_bytes;
            t0 = now_ms();
            must(tide_pool_wake(t, pool), "tide_pool_wake");
            ms = now_ms() - t0;
            tide_sim_counters c = counters(sim);
            report_call(mode == 0 ? "wake (offload)" : "wake (discard)", ms, b, c, host);
            /* an offload's host buffers stay for the next offload; a discard's sleep gave them back */
            if (c.host_bytes != (mode == 0 ? host : 0) || c.held_bytes != a.held_bytes) {
                fprintf(stderr, "sleep_wake: the wake did not end where the sleep began\n");
                exit(1);
            }
        }
        for (size_t k = 0; k < w.n; k++)
            must(tide_free(t, w.p[k]), "tide_free");
        free(w.p);
        must(tide_pool_release(t, pool), "tide_pool_release");
        must(tide_destroy(t), "tide_destroy");
        tide_sim_destroy(sim);
    }
}

/* ---- part 2 ------------------------------------------------------------------------------------------- */

struct sample {
    uint64_t held, reserved, host, rss;
};

static struct sample sample_of(tide_sim *sim, tide_allocator *t)
{
    tide_sim_counters c = counters(sim);
    tide_stats s;
    s.struct_size = sizeof s;
    must(tide_get_stats(t, &s), "tide_get_stats");
    return (struct sample){c.held_bytes, (uint64_t)s.reserved_bytes[TIDE_POOL_ALL].current, c.host_bytes,
                           resident_bytes()};
}

/* Allocates seeded random sizes in the default pool up to `budget` bytes, writes their first page,
 * frees them in random order: one phase's activations. */
static void phase_of_activations(tide_allocator *t, uint64_t *seed, size_t budget)
{
    void *p[256];
    int n = 0;
    size_t used = 0;
    while (n < 256) {
        size_t size = (size_t)(rng(seed) % (16 * MIB)) + 4096;
        if (used + size > budget)
            break;
        must(tide_malloc(t, size, 0, &p[n]), "an activation");
        memset(p[n], 1, 4096);
        used += size;
        n++;
    }
    while (n > 0) {
        int k = (int)(rng(seed) % (uint64_t)n);
        must(tide_free(t, p[k]), "freeing an activation");
        p[k] = p[--n];
    }
}

static void part_loop(int cycles)
{
    /* A 1 GiB device: the engine (128 MiB of weights, a 384 MiB KV cache, up to 256 MiB of activations)
     * and the trainer (256 MiB of gradients, up to 512 MiB of activations) do not fit together. Small,
     * so that hundreds of cycles of the simulated device's memcpy and page faults take minutes. */
    tide_sim *sim;
    tide_sim_options o = {sizeof o, 1 * GIB, 0, 0};
    must(tide_sim_create(&o, &sim), "tide_sim_create");
    tide_backend be = tide_sim_backend(sim);
    tide_allocator *t;
    must(tide_create(&be, "", &t), "tide_create");
    tide_pool_id weights, kv;
    must(tide_pool_create(t, &weights), "tide_pool_create");
    must(tide_pool_make_sleepable(t, weights), "tide_pool_make_sleepable");
    must(tide_pool_create(t, &kv), "tide_pool_create");
    must(tide_pool_make_sleepable(t, kv), "tide_pool_make_sleepable");
    struct weights w = make_weights(t, weights, 128 * MIB); /* 64 MiB of it in blocks: no 256 MiB matrix fits */
    void *cache;
    must(tide_malloc_pool(t, 384 * MIB, 0, kv, &cache), "the KV cache");
    struct sample first[4] = {{0}}, lo[4] = {{0}}, hi[4] = {{0}}; /* filled by the cycles (at least 3: main) */
    double sleep_ms = 0, wake_ms = 0;
    tide_sim_counters start = counters(sim);
    for (int cycle = 0; cycle < cycles; cycle++) {
        struct sample at[4];
        uint64_t seed = 42; /* the recorded cycle, replayed */
        if (cycle > 0) {
            double t0 = now_ms();
            must(tide_pool_wake(t, weights), "waking the weights");
            must(tide_pool_wake(t, kv), "waking the KV cache");
            wake_ms += now_ms() - t0;
        }
        memset(cache, (int)(cycle & 0xFF), 4 * MIB); /* the rollout writes its cache */
        phase_of_activations(t, &seed, 256 * MIB);
        at[0] = sample_of(sim, t); /* after the rollout */
        double t0 = now_ms();
        must(tide_pool_sleep(t, weights, TIDE_SLEEP_OFFLOAD), "sleeping the weights");
        must(tide_pool_sleep(t, kv, TIDE_SLEEP_DISCARD), "sleeping the KV cache");
        sleep_ms += now_ms() - t0;
        at[1] = sample_of(sim, t); /* the engine asleep */
        void *grads;
        must(tide_malloc(t, 256 * MIB, 0, &grads), "the gradients");
        memset(grads, 2, 4 * MIB);
        phase_of_activations(t, &seed, 512 * MIB);
        must(tide_free(t, grads), "freeing the gradients");
        at[2] = sample_of(sim, t); /* after the training step */
        must(tide_empty_cache(t, NULL), "tide_empty_cache");
        at[3] = sample_of(sim, t); /* the trainer's cache given back */
        for (int k = 0; k < 4; k++) {
            if (cycle == 0)
                first[k] = at[k];
            if (cycle <= 1) {
                lo[k] = hi[k] = at[k];
                continue;
            }
#define MINMAX(f)                                                                                  \
    lo[k].f = at[k].f < lo[k].f ? at[k].f : lo[k].f;                                               \
    hi[k].f = at[k].f > hi[k].f ? at[k].f : hi[k].f
            MINMAX(held);
            MINMAX(reserved);
            MINMAX(host);
            MINMAX(rss);
#undef MINMAX
        }
    }
    must(tide_check(t), "tide_check");
    tide_sim_counters end = counters(sim);
    static const char *const phase[4] = {"after rollout", "engine asleep", "after training", "after empty_cache"};
    printf("\nPart 2: RL-style loop, %d cycles on a 1 GiB simulated device (engine: %.0f MiB of weights "
           "offloaded, a 384 MiB KV cache discarded, 256 MiB of activations; trainer: 256 MiB of gradients, "
           "512 MiB of activations)\n", cycles, (double)w.bytes / (double)MIB);
    printf("  %-18s %28s %28s %26s %28s\n", "phase", "device holds MiB (min..max)", "reserved MiB (min..max)",
           "host copy MiB (min..max)", "process RSS MiB (min..max)");
    for (int k = 0; k < 4; k++)
        printf("  %-18s %13.1f .. %-12.1f %13.1f .. %-12.1f %12.1f .. %-11.1f %13.1f .. %-12.1f\n", phase[k],
               (double)lo[k].held / (double)MIB, (double)hi[k].held / (double)MIB,
               (double)lo[k].reserved / (double)MIB, (double)hi[k].reserved / (double)MIB,
               (double)lo[k].host / (double)MIB, (double)hi[k].host / (double)MIB,
               (double)lo[k].rss / (double)MIB, (double)hi[k].rss / (double)MIB);
    printf("  (cycles 2..%d; the first cycle: after rollout %.1f MiB held, engine asleep %.1f MiB)\n", cycles,
           (double)first[0].held / (double)MIB, (double)first[1].held / (double)MIB);
    printf("  per cycle: sleep %.2f ms, wake %.2f ms; device calls per cycle: map %.1f, unmap %.1f, "
           "copy_to_host %.1f, copy_to_device %.1f; address ranges %llu -> %llu\n",
           sleep_ms / cycles, wake_ms / (cycles - 1),
           (double)(end.calls[TIDE_SIM_MAP] - start.calls[TIDE_SIM_MAP]) / cycles,
           (double)(end.calls[TIDE_SIM_UNMAP] - start.calls[TIDE_SIM_UNMAP]) / cycles,
           (double)(end.calls[TIDE_SIM_COPY_TO_HOST] - start.calls[TIDE_SIM_COPY_TO_HOST]) / cycles,
           (double)(end.calls[TIDE_SIM_COPY_TO_DEVICE] - start.calls[TIDE_SIM_COPY_TO_DEVICE]) / cycles,
           (unsigned long long)start.va_ranges, (unsigned long long)end.va_ranges);
    bool flat = true;
    for (int k = 0; k < 4; k++)
        flat = flat && lo[k].held == hi[k].held && lo[k].reserved == hi[k].reserved && lo[k].host == hi[k].host;
    printf("  flat: %s (device held, reserved and host copy identical at each phase of every cycle after the "
           "first)\n", flat ? "yes" : "NO");
    must(tide_pool_wake(t, weights), "waking the weights");
    must(tide_pool_wake(t, kv), "waking the KV cache");
    for (size_t k = 0; k < w.n; k++)
        must(tide_free(t, w.p[k]), "tide_free");
    free(w.p);
    must(tide_free(t, cache), "tide_free");
    must(tide_pool_release(t, weights), "tide_pool_release");
    must(tide_pool_release(t, kv), "tide_pool_release");
    must(tide_destroy(t), "tide_destroy");
    tide_sim_destroy(sim);
    if (!flat)
        exit(1);
}

int main(int argc, char **argv)
{
    size_t sizes[8] = {1, 2, 4};
    int nsizes = 3, cycles = 300;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--sizes") && i + 1 < argc) {
            nsizes = 0;
            for (char *s = strtok(argv[++i], ","); s && nsizes < 8; s = strtok(NULL, ","))
                sizes[nsizes++] = strtoull(s, NULL, 10);
        } else if (!strcmp(argv[i], "--cycles") && i + 1 < argc) {
            cycles = atoi(argv[++i]);
        } else {
            fprintf(stderr, "usage: %s [--sizes 1,2,4] [--cycles 300]\n", argv[0]);
            return 2;
        }
    }
    if (cycles < 3)
        cycles = 3;
    part_sizes(sizes, nsizes);
    part_loop(cycles);
    return 0;
}

/*
 * Run 29: does the large random micro pattern's timed loop call the driver? The pattern of
 * bench/micro_patterns.h (16 live, 1-256 MiB, seed 42), written out against tidepool on the simulated
 * device, with the segments reserved and released during each pass's timed loop counted.
 *   gcc -O2 -Iinclude -Ibench bench/results/2026-12-02-run29/timed_loop_driver_calls.c build/libtidepool.a -lpthread -ldl -lm -o /tmp/lg && /tmp/lg
 */
#include "micro_patterns.h"
#include "tidepool.h"
#include "tidepool_bench.h"
#include <stdio.h>
int main(int argc, char **argv) {
    size_t lo = argc > 1 ? strtoull(argv[1], 0, 10) << 20 : 1u << 20;
    size_t hi = argc > 2 ? strtoull(argv[2], 0, 10) << 20 : 256u << 20;
    int live = argc > 3 ? atoi(argv[3]) : 16;
    size_t pairs = 200000;
    tide_sim_options o = {sizeof o, 1ull << 40, 0, 0};
    tide_sim *sim; tide_sim_create(&o, &sim);
    tide_backend be = tide_sim_backend(sim);
    tide_allocator *t; tide_create(&be, NULL, &t);
    size_t *sizes = bench_sizes(pairs + live, lo, hi, 42);
    uint64_t pick = 42 ^ 0x5555;
    size_t *victims = malloc(pairs * sizeof *victims);
    for (size_t i = 0; i < pairs; i++) victims[i] = bench_rng(&pick) % live;
    void *ptrs[256];
    for (int round = 0; round < 2; round++) {
        for (int k = 0; k < live; k++) tide_malloc(t, sizes[k], 0, &ptrs[k]);
        tide_stats s0 = {.struct_size = sizeof s0}; tide_get_stats(t, &s0);
        for (size_t i = 0; i < pairs; i++) {
            size_t k = victims[i];
            tide_free(t, ptrs[k]);
            tide_malloc(t, sizes[live + i], 0, &ptrs[k]);
        }
        tide_stats s1 = {.struct_size = sizeof s1}; tide_get_stats(t, &s1);
        printf("round %d: device allocs in timed loop %llu frees %llu, retries %llu, reserved %.1f MiB\n", round,
               (unsigned long long)(s1.num_device_alloc - s0.num_device_alloc),
               (unsigned long long)(s1.num_device_free - s0.num_device_free),
               (unsigned long long)(s1.num_alloc_retries - s0.num_alloc_retries),
               s1.reserved_bytes[0].current / 1048576.0);
        for (int k = 0; k < live; k++) tide_free(t, ptrs[k]);
    }
    return 0;
}

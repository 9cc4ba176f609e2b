/*
 * What the history costs on the allocator's fastest path: tide_malloc + tide_free of 4 KiB on one
 * stream of the simulated device, 2 million pairs with the history off, then on, ROUNDS times.
 *
 *   build/bench/history_micro [RING_EVENTS] [ROUNDS]     (defaults 65536 and 6)
 *
 * Prints ns per pair, off and on, for each round, and the median of the ratios.
 */
#include "tidepool.h"

#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#define PAIRS 2000000

static double now(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

static int by_value(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

static double pairs_ns(tide_allocator *t)
{
    void *p;
    double t0 = now();
    for (int i = 0; i < PAIRS; i++) {
        if (tide_malloc(t, 4096, 0, &p) != TIDE_OK || tide_free(t, p) != TIDE_OK) {
            fprintf(stderr, "history_micro: %s\n", tide_last_error());
            exit(1);
        }
    }
    return (now() - t0) * 1e9 / PAIRS;
}

int main(int argc, char **argv)
{
    size_t ring = argc > 1 ? strtoul(argv[1], NULL, 10) : 65536;
    int rounds = argc > 2 ? atoi(argv[2]) : 6;
    if (rounds < 1 || rounds > 100 || ring == 0) {
        fprintf(stderr, "usage: history_micro [RING_EVENTS] [ROUNDS 1-100]\n");
        return 2;
    }
    tide_sim *sim;
    tide_allocator *t;
    if (tide_sim_create(NULL, &sim) != TIDE_OK)
        return 1;
    tide_backend be = tide_sim_backend(sim);
    if (tide_create(&be, NULL, &t) != TIDE_OK) {
        fprintf(stderr, "history_micro: %s\n", tide_last_error());
        return 1;
    }
    double ratios[100] = {0};
    pairs_ns(t); /* warm up: the segment, the block structs */
    for (int r = 0; r < rounds; r++) {
        tide_history_stop(t);
        double off = pairs_ns(t);
        if (tide_history_start(t, ring, 0) != TIDE_OK) {
            fprintf(stderr, "history_micro: %s\n", tide_last_error());
            return 1;
        }
        double on = pairs_ns(t);
        ratios[r] = on / off;
        printf("round %d: off %.1f ns per pair, on (%zu-event ring) %.1f, ratio %.3f\n", r + 1, off, ring, on,
               ratios[r]);
    }
    qsort(ratios, (size_t)rounds, sizeof *ratios, by_value);
    printf("median ratio %.3f\n", ratios[rounds / 2]);
    tide_history_stop(t);
    tide_destroy(t);
    tide_sim_destroy(sim);
    return 0;
}

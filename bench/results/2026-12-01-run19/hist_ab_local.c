/* Local: the history's cost on trace replays, simulated device, no kernels; off and on taking turns in
 * one process, each turn after an untimed replay in its state, order alternating (as gpu_bench history). */
#include "micro_patterns.h"
#include "tidepool.h"
#include "trace.h"
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
static tide_allocator *T;
static double replay(const struct trace *t, void **ptr)
{
    double t0 = bench_now();
    for (size_t i = 0; i < t->nops; i++) {
        const struct trace_op *op = &t->ops[i];
        if (op->kind == TRACE_ALLOC) { if (tide_malloc(T, op->size, 0, &ptr[op->id])) { fprintf(stderr, "%s\n", tide_last_error()); exit(1);} }
        else if (op->kind == TRACE_FREE) { tide_free(T, ptr[op->id]); ptr[op->id] = NULL; }
    }
    double s = bench_now() - t0;
    for (size_t i = 0; i < t->nallocs; i++) if (ptr[i]) { tide_free(T, ptr[i]); ptr[i] = NULL; }
    return s * 1e9 / (double)t->nops;
}
int main(int argc, char **argv)
{
    size_t events = strtoul(argv[1], 0, 10); int rounds = atoi(argv[2]);
    tide_sim_options o = {sizeof o, 80ull << 30, 0}; tide_sim *sim; tide_sim_create(&o, &sim);
    tide_backend be = tide_sim_backend(sim); tide_create(&be, NULL, &T);
    for (int a = 3; a < argc; a++) {
        struct trace t; char err[256];
        if (trace_load(argv[a], &t, err, sizeof err)) { fprintf(stderr, "%s\n", err); return 1; }
        void **ptr = calloc(t.nallocs, sizeof *ptr);
        double off[64], on[64], ratio[64];
        replay(&t, ptr);
        for (int r = 0; r < rounds; r++) {
            for (int k = 0; k < 2; k++) {
                int hist = (k + r) % 2;
                if (hist) tide_history_start(T, events, 0);
                replay(&t, ptr);
                double ns = replay(&t, ptr);
                if (hist) { tide_history_stop(T); on[r] = ns; } else off[r] = ns;
            }
            ratio[r] = on[r] / off[r];
        }
        printf("%-28s off %.1f on %.1f  median ratio %+.1f%%\n", strrchr(argv[a], '/') + 1, bench_median(off, rounds), bench_median(on, rounds), 100 * (bench_median(ratio, rounds) - 1));
        free(ptr); trace_free(&t);
    }
    tide_destroy(T); tide_sim_destroy(sim); return 0;
}

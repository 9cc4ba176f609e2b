/*
 * Run 30: gpu_bench replay's sequence on the simulated device, one allocator for every trace given: for
 * each, tide_empty_cache and tide_reset_peak_stats, a cold pass (empty_cache lines honoured), then WARM
 * (default 15) passes without them. Prints every driver call made in a warm pass: the pass, the
 * operation, and what it was. CONF: the allocator's config.
 *
 *   gcc -O2 -Iinclude -Itools bench/results/2026-12-02-run30/warm_pass_calls.c build/libtidepool_replay.a \
 *       build/libtidepool.a -lpthread -lm -o /tmp/warm_pass_calls
 */
#include "tidepool.h"
#include "trace.h"
#include <stdio.h>
#include <stdlib.h>
static long long calls(tide_allocator *t, long long *al, long long *fr) { tide_stats s; s.struct_size = sizeof s; tide_get_stats(t, &s); *al = s.num_device_alloc; *fr = s.num_device_free; return *al + *fr; }
int main(int argc, char **argv)
{
    tide_sim *sim; tide_sim_create(NULL, &sim);
    tide_backend be = tide_sim_backend(sim);
    tide_allocator *t;
    const char *conf = getenv("CONF");
    if (tide_create(&be, conf && *conf ? conf : NULL, &t) != TIDE_OK) { puts(tide_last_error()); return 1; }
    int warm = getenv("WARM") ? atoi(getenv("WARM")) : 15;
    for (int i = 1; i < argc; i++) {
        struct trace tr; char err[256];
        if (trace_load(argv[i], &tr, err, sizeof err)) { puts(err); return 1; }
        void **ptr = calloc(tr.nallocs + 1, sizeof *ptr);
        tide_empty_cache(t, NULL); tide_reset_peak_stats(t);
        for (int p = 0; p <= warm; p++) {
            long long a0, f0, a, f; calls(t, &a0, &f0);
            for (size_t k = 0; k < tr.nops; k++) {
                const struct trace_op *op = &tr.ops[k];
                if (op->kind == TRACE_ALLOC) { tide_malloc(t, op->size, 0, &ptr[op->id]); }
                else if (op->kind == TRACE_FREE) { tide_free(t, ptr[op->id]); ptr[op->id] = NULL; }
                else if (p == 0) tide_empty_cache(t, NULL);
                if (p > 0) { calls(t, &a, &f); if (a + f != a0 + f0) { printf("  %s pass %d op %zu/%zu (%s %llu B): +%lld allocs +%lld frees\n", argv[i] + 7, p, k, tr.nops, op->kind == TRACE_ALLOC ? "alloc" : "free", (unsigned long long)op->size, a - a0, f - f0); a0 = a; f0 = f; } }
            }
            for (size_t k = 0; k < tr.nallocs; k++) if (ptr[k]) { tide_free(t, ptr[k]); ptr[k] = NULL; }
        }
        trace_free(&tr); free(ptr);
    }
    tide_destroy(t); tide_sim_destroy(sim);
}

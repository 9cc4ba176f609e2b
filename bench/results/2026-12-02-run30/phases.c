/*
 * Run 30: phases of a program in one allocator on the simulated device. For each trace given, in
 * order: tide_empty_cache, then tide_reset_peak_stats (unless NORESET is set), then the trace replayed
 * on the default stream (its empty_cache lines honoured) and what is still live freed. Prints the most
 * reserved after any allocation of the phase, and the driver allocations and frees it made.
 * CONF: the allocator's config; RESET_EVERY=N: also tide_reset_peak_stats after every N operations.
 *
 *   gcc -O2 -Iinclude -Itools bench/results/2026-12-02-run30/phases.c build/libtidepool_replay.a \
 *       build/libtidepool.a -lpthread -lm -o /tmp/phases
 *   CONF=expandable_segments:True /tmp/phases traces/gpt2_varlen.csv.gz traces/gpt2_varlen.csv.gz
 */
#include "tidepool.h"
#include "trace.h"
#include <stdio.h>
#include <stdlib.h>
static long long reserved(tide_allocator *t, long long *nalloc) { tide_stats s; s.struct_size = sizeof s; tide_get_stats(t, &s); *nalloc = s.num_device_alloc + s.num_device_free; return s.reserved_bytes[TIDE_POOL_ALL].current; }
int main(int argc, char **argv)
{
    tide_sim *sim; tide_sim_create(NULL, &sim);
    tide_backend be = tide_sim_backend(sim);
    tide_allocator *t;
    const char *conf = getenv("CONF");
    if (tide_create(&be, conf && *conf ? conf : NULL, &t) != TIDE_OK) { puts(tide_last_error()); return 1; }
    long every = getenv("RESET_EVERY") ? atol(getenv("RESET_EVERY")) : 0;
    for (int i = 1; i < argc; i++) {
        struct trace tr; char err[256];
        if (trace_load(argv[i], &tr, err, sizeof err)) { puts(err); return 1; }
        void **ptr = calloc(tr.nallocs + 1, sizeof *ptr);
        tide_empty_cache(t, NULL);
        if (!getenv("NORESET")) tide_reset_peak_stats(t);
        long long n0, n, peak = 0;
        reserved(t, &n0);
        for (size_t k = 0; k < tr.nops; k++) {
            const struct trace_op *op = &tr.ops[k];
            if (op->kind == TRACE_ALLOC) {
                if (tide_malloc(t, op->size, 0, &ptr[op->id]) != TIDE_OK) { puts(tide_last_error()); return 1; }
                long long r = reserved(t, &n); if (r > peak) peak = r;
            } else if (op->kind == TRACE_FREE) { tide_free(t, ptr[op->id]); ptr[op->id] = NULL; }
            else tide_empty_cache(t, NULL);
            if (every && (k + 1) % every == 0) tide_reset_peak_stats(t);
        }
        reserved(t, &n);
        for (size_t k = 0; k < tr.nallocs; k++) if (ptr[k]) tide_free(t, ptr[k]);
        printf("  %-26s peak %8.1f MiB  device allocs+frees %lld\n", argv[i] + 7, peak / 1048576.0, n - n0);
        trace_free(&tr); free(ptr);
    }
    tide_destroy(t); tide_sim_destroy(sim);
}

#include "micro_patterns.h"
#include "tidepool.h"
#include "trace.h"
#include <stdio.h>
#include <stdlib.h>
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
int main(int argc, char **argv)
{
    int fresh = atoi(argv[1]), n = atoi(argv[2]);
    struct trace tr; char err[256];
    if (trace_load(argv[3], &tr, err, sizeof err)) return 1;
    void **ptr = calloc(tr.nallocs, sizeof(void *));
    tide_sim *sim; tide_allocator *t;
    tide_sim_create(NULL, &sim);
    tide_backend be = tide_sim_backend(sim);
    tide_create(&be, NULL, &t);
    replay(t, &tr, ptr);
    for (int i = 0; i < n; i++) {
        if (fresh) { tide_destroy(t); tide_create(&be, NULL, &t); replay(t, &tr, ptr); }
        printf("%.1f ", replay(t, &tr, ptr));
    }
    printf("\n");
    return 0;
}

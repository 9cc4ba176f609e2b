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
static double nullpass(const struct trace *tr, void **ptr)
{
    static char arena[64];
    double t0 = bench_now();
    for (size_t i = 0; i < tr->nops; i++) {
        const struct trace_op *op = &tr->ops[i];
        if (op->kind == TRACE_ALLOC) ptr[op->id] = arena + (op->size & 63);
        else if (op->kind == TRACE_FREE) { if (!ptr[op->id]) exit(1); ptr[op->id] = NULL; }
    }
    double ns = (bench_now() - t0) * 1e9 / tr->nops;
    for (size_t i = 0; i < tr->nallocs; i++) ptr[i] = NULL;
    return ns;
}
int main(int argc, char **argv)
{
    int n = atoi(argv[1]);
    struct trace tr; char err[256];
    if (trace_load(argv[2], &tr, err, sizeof err)) return 1;
    void **ptr = calloc(tr.nallocs, sizeof(void *));
    tide_sim *sim[4]; tide_allocator *t[4];
    for (int k = 0; k < 4; k++) {
        tide_sim_create(NULL, &sim[k]);
        tide_backend be = tide_sim_backend(sim[k]);
        tide_create(&be, NULL, &t[k]);
        replay(t[k], &tr, ptr);
    }
    for (int i = 0; i < n; i++) {
        for (int k = 0; k < 4; k++) printf("%5.1f ", replay(t[k], &tr, ptr));
        printf(" null %4.1f\n", nullpass(&tr, ptr));
    }
    return 0;
}

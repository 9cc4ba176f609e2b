/*
 * One timed pass over an allocation trace through any allocator behind struct bench_allocator: the
 * loop that bench/gpu_bench.cpp (tidepool, PyTorch's allocator and cudaMallocAsync on the GPU) and
 * bench/history_replay.c (tidepool on the simulated device) both time, so that their figures are
 * measured alike. Every stream's operations go to the one stream given.
 */
#ifndef TIDE_BENCH_REPLAY_PASS_H
#define TIDE_BENCH_REPLAY_PASS_H

#include "micro_patterns.h"
#include "trace.h"

/* ptr and size hold t->nallocs entries, all NULL and 0 on entry; they are left so. The trace's
 * empty_cache lines call empty_cache(arg) where it is given and are skipped where it is NULL. What is
 * still live at the end is freed after the clock stops. Returns nanoseconds per operation. */
static inline double bench_replay_pass(const struct bench_allocator *a, const struct trace *t, void **ptr,
                                       size_t *size, uintptr_t stream, void (*empty_cache)(void *arg),
                                       void *arg)
{
    double t0 = bench_now();
    for (size_t i = 0; i < t->nops; i++) {
        const struct trace_op *op = &t->ops[i];
        if (op->kind == TRACE_ALLOC) {
            size[op->id] = op->size;
            ptr[op->id] = a->alloc(a->ctx, op->size, stream);
        } else if (op->kind == TRACE_EMPTY_CACHE) {
            if (empty_cache)
                empty_cache(arg);
        } else {
            a->free(a->ctx, ptr[op->id], size[op->id], stream);
            ptr[op->id] = NULL;
        }
    }
    double seconds = bench_now() - t0;
    for (size_t i = 0; i < t->nallocs; i++) {
        if (ptr[i])
            a->free(a->ctx, ptr[i], size[i], stream);
        ptr[i] = NULL;
        size[i] = 0;
    }
    return seconds * 1e9 / (double)(t->nops ? t->nops : 1);
}

#endif

/*
 * tidepool behind struct bench_allocator (micro_patterns.h), for the benchmarks that time it: any failure
 * ends the benchmark with tidepool's message, since a timing with a failed call in it means nothing.
 */
#ifndef TIDE_BENCH_TIDEPOOL_BENCH_H
#define TIDE_BENCH_TIDEPOOL_BENCH_H

#include "micro_patterns.h"
#include "tidepool.h"

static inline void *bench_tide_alloc(void *ctx, size_t size, uintptr_t stream)
{
    void *p = NULL;
    if (tide_malloc((tide_allocator *)ctx, size, stream, &p) != TIDE_OK) {
        fprintf(stderr, "tide_malloc(%zu): %s\n", size, tide_last_error());
        exit(1);
    }
    return p;
}

static inline void bench_tide_free(void *ctx, void *p, size_t size, uintptr_t stream)
{
    (void)size;
    (void)stream;
    if (tide_free((tide_allocator *)ctx, p) != TIDE_OK) {
        fprintf(stderr, "tide_free: %s\n", tide_last_error());
        exit(1);
    }
}

/* The table for allocator t, under the given name. */
static inline struct bench_allocator bench_tidepool(const char *name, tide_allocator *t)
{
    struct bench_allocator a = {name, t, bench_tide_alloc, bench_tide_free};
    return a;
}

#endif

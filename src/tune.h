/*
 * tidepool's sizes. The first group may be tuned (each can be set with -D at build time); the second
 * may not: the segment map and the free index depend on it.
 */
#ifndef TIDE_TUNE_H
#define TIDE_TUNE_H

#include "tidepool.h"

#include <stddef.h>

#define KiB ((size_t)1024)
#define MiB (1024 * KiB)
#define GiB (1024 * MiB)

/* ---- Sizes: may be tuned ------------------------------------------------------------------------ */
#ifndef TIDE_UNIT
#define TIDE_UNIT 512                         /* every block size is a multiple of this */
#endif
#define TIDE_GUARD_BYTES TIDE_UNIT            /* guard: canary before a block, and at least this after */
#define TIDE_GUARD_BYTE 0xCB                  /* guard: the canary's value */
#ifndef TIDE_SMALL_MAX
#define TIDE_SMALL_MAX (1 * MiB)              /* requests up to this come from the small pool */
#endif
#ifndef TIDE_SMALL_SEGMENT
#define TIDE_SMALL_SEGMENT (2 * MiB)          /* the small pool's first segments (heap.c) ... */
#endif
#ifndef TIDE_SMALL_SEGMENT_MAX
#define TIDE_SMALL_SEGMENT_MAX (32 * MiB)     /* ... and its largest, once it holds 8 times as much */
#endif
#ifndef TIDE_LARGE_SEGMENT
#define TIDE_LARGE_SEGMENT (20 * MiB)         /* at most this for large requests below ... (heap.c) */
#endif
#ifndef TIDE_LARGE_DIRECT_MIN
#define TIDE_LARGE_DIRECT_MIN (10 * MiB)      /* ... this; larger ones get a segment of their own size */
#endif
#ifndef TIDE_LARGE_SPLIT_MIN_REST
#define TIDE_LARGE_SPLIT_MIN_REST (1 * MiB)   /* a large block is split only if more than this is left */
#endif
#ifndef TIDE_FIT_SCAN
#define TIDE_FIT_SCAN 16                      /* blocks compared in the request's own size class */
#endif
#ifndef TIDE_HOLD_SLACK_PER_1024
#define TIDE_HOLD_SLACK_PER_1024 30           /* reserved memory may pass the high-water mark without a
                                                 trim while within 30/1024 (2.9%) of the most the program
                                                 has held (may_pass_mark, segment.c): under the 3% that
                                                 expandable segments aim to stay within */
#endif
#ifndef TIDE_SEGMENT_SHARE_SHIFT
#define TIDE_SEGMENT_SHARE_SHIFT 5            /* below the high-water mark, a segment reserved for a
                                                 request of m bytes serves requests of m/32 or more
                                                 (fit_rules, free_index.c) */
#endif
#ifndef TIDE_PHASE_ALLOCS_PER_SEGMENT
#define TIDE_PHASE_ALLOCS_PER_SEGMENT 2000    /* the program's letting go of every block ends a phase, and
                                                 its cache goes back (heap_emptied, heap.c), only after at
                                                 least this many allocations per idle segment since the
                                                 stream last held nothing: a release and a reservation
                                                 again per segment, at most one driver call per 1,000
                                                 allocations */
#endif
#ifndef TIDE_MAP_UNIT_PAGES
#define TIDE_MAP_UNIT_PAGES 2                 /* expandable: pages mapped in one call when growing back
                                                 to the mark (expandable.c) */
#endif

/* ---- Sizes: do not modify (the segment map and the free index depend on them) ------------------ */
#define TIDE_SEGMENT_GRANULE_SHIFT 21         /* segments are multiples of 2 MiB */
#define TIDE_SEGMENT_GRANULE ((size_t)1 << TIDE_SEGMENT_GRANULE_SHIFT)
#define TIDE_MAX_HEAPS TIDE_MAX_STREAMS       /* a heap per stream, and per stream a private pool uses */
#define TIDE_POOL_MAX_STREAMS 16              /* streams one private pool serves (its heaps) */
/* The most device memory tidepool counts (4 EiB): a device that reports more is taken to hold this.
 * Every request is at most this, so no size computation can wrap: rounding to a unit, the guard's
 * canaries, a segment's 2 MiB granules or a page, and a limit as a fraction of the device. */
#define TIDE_MAX_DEVICE_BYTES ((size_t)1 << 62)

#endif /* TIDE_TUNE_H */

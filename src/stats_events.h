/*
 * The statistics' events, inline: they run on every tide_malloc and tide_free, under the heap's lock.
 * Sizes are the block's; idle_segment is the size of the wholly free segment the block came from (take)
 * or that became wholly free once it was merged (to_free), else 0. stats.c sums the heaps' counters
 * when they are read.
 */
#ifndef TIDE_STATS_EVENTS_H
#define TIDE_STATS_EVENTS_H

#include "internal.h"

/* Bytes of ACTIVE and PENDING blocks; of FREE blocks (the cache); of FREE blocks outside wholly free
 * segments (the split cache, which releasing segments cannot give back). */
static inline int64_t pool_active(const struct pool_stats *p) { return p->allocated.cur + p->pending.cur; }
static inline int64_t pool_cached(const struct pool_stats *p)
{
    return p->reserved.cur - p->allocated.cur - p->pending.cur;
}
static inline int64_t pool_inactive_split(const struct pool_stats *p) { return pool_cached(p) - p->idle; }
static inline int public_pool(enum pool_kind pool) { return pool == POOL_SMALL ? TIDE_POOL_SMALL : TIDE_POOL_LARGE; }

/* A new peak is rare: hinted so, GCC moves its store out of line, where without the hint it laid it out
 * as a jump over the store taken at nearly every event, and taken jumps on the hot path cost time; a
 * conditional move instead stored every peak every time, and was slower. */
static inline void rise(struct counter *c, int64_t d)
{
    c->cur += d;
    if (TIDE_UNLIKELY(c->cur > c->peak))
        c->peak = c->cur;
}

static inline void fall(struct counter *c, int64_t d) { c->cur -= d; }

static inline void peak_at_least(int64_t *peak, int64_t value)
{
    if (TIDE_UNLIKELY(value > *peak))
        *peak = value;
}

/* body for the event's pool, then for all pools. The empty asm makes the event's pool_stats pointer
 * opaque to the compiler, so that it is computed once and kept: GCC otherwise recomputes it from the
 * pool index before every counter. A branch on the pool instead of the index saves as much but
 * mispredicts where pools alternate at random. */
#define BOTH(s, pool, p, body) BOTH_AND_OWN(s, pool, p, body, )
/* The same, and own for the event's pool alone, between the two (struct stat_gains). */
#define BOTH_AND_OWN(s, pool, p, body, own)                                                        \
    do {                                                                                           \
        struct pool_stats *p = &(s)->pool[public_pool(pool)];                                      \
        __asm__("" : "+r"(p));                                                                     \
        body;                                                                                      \
        own;                                                                                       \
        p = &(s)->pool[TIDE_POOL_ALL];                                                             \
        body;                                                                                      \
    } while (0)

/* The values of the statistics that are accumulated (struct stat_gains), of one pool of one heap. */
static inline struct stat_values stats_values(const struct pool_stats *p)
{
    return (struct stat_values){
        .allocation = p->allocation.cur,
        .active = p->allocation.cur + p->pending_blocks.cur,
        .allocated = p->allocated.cur,
        .active_bytes = pool_active(p),
        .requested = p->requested.cur,
        .reserved = p->reserved.cur - p->asleep.cur, /* asleep pages are not reserved (sleep.c) */
        .segment = p->segment.cur,
        .split = pool_inactive_split(p),
        .split_blocks = p->split_blocks.cur,
    };
}

/* The event's own pool, for what is kept there only (struct stat_gains). */
static inline struct pool_stats *event_pool(struct heap_stats *s, enum pool_kind pool)
{
    return &s->pool[public_pool(pool)];
}

/* size FREE bytes were added to the cache by a free (a drained block's peaks wait for stats_settle), in
 * a segment that is now wholly free (idle_segment bytes) or not (0). The split cache rises by them,
 * unless the segment became wholly free: then its FREE bytes become releasable cache, and the split
 * cache falls. The test is made once for both pools. */
static inline void cache_gained(struct heap_stats *s, enum pool_kind pool, int64_t size, int64_t idle_segment)
{
    if (TIDE_UNLIKELY(idle_segment != 0)) {
        BOTH(s, pool, p, {
            peak_at_least(&p->cached_peak, pool_cached(p));
            p->idle += idle_segment;
        });
    } else {
        BOTH_AND_OWN(s, pool, p, {
            peak_at_least(&p->cached_peak, pool_cached(p));
            peak_at_least(&p->inactive_split_peak, pool_inactive_split(p));
        }, p->gained.split += size);
    }
}

/* A free moved the count of FREE blocks outside wholly free segments by d: 1 - m for a block merged
 * with m FREE neighbours, less one more if its segment became wholly free. Without a branch: whether
 * it merged is a coin toss on the random paths. Its peak is checked by the callers that need it
 * (heap_settle; stats_settle after a drain). */
static inline void split_blocks_moved(struct heap_stats *s, enum pool_kind pool, int64_t d)
{
    BOTH_AND_OWN(s, pool, p, p->split_blocks.cur += d, p->gained.split_blocks += d > 0);
}

/* n FREE blocks more outside wholly free segments, once a call is done with them (heap_take_at). */
static inline void split_blocks_added(struct heap_stats *s, enum pool_kind pool, int64_t n)
{
    BOTH_AND_OWN(s, pool, p, rise(&p->split_blocks, n), p->gained.split_blocks += n);
}

/* The count's peak, once a free is done with it (heap_settle; lifecycle_free without parking). */
static inline void split_blocks_peak(struct heap_stats *s, enum pool_kind pool)
{
    BOTH(s, pool, p, peak_at_least(&p->split_blocks.peak, p->split_blocks.cur));
}

/* A parked block taken back: the merge the parking put off and the take would have moved the count by
 * one and back, up first (rose: the merge added a FREE block) or down first (its segment became wholly
 * free and the take split it again). Counted as they would have been without the parking. */
static inline void split_blocks_passed(struct heap_stats *s, enum pool_kind pool, bool rose)
{
    event_pool(s, pool)->gained.split_blocks++;
    if (rose)
        BOTH(s, pool, p, peak_at_least(&p->split_blocks.peak, p->split_blocks.cur + 1));
}

/* A block of max_split_size or more taken or let go (oversize_stats): rare by design, and never with
 * the key unset (oversize_min is SIZE_MAX). */
static inline void oversize_taken(struct heap_stats *s, int64_t size)
{
    if (TIDE_UNLIKELY((uint64_t)size >= s->oversize_min)) {
        rise(&s->oversize.blocks, 1);
        s->oversize.blocks_gained++;
    }
}

static inline void oversize_let_go(struct heap_stats *s, int64_t size)
{
    if (TIDE_UNLIKELY((uint64_t)size >= s->oversize_min))
        fall(&s->oversize.blocks, 1);
}

/* split_blocks: how the take moved the count of FREE blocks outside wholly free segments: -1 for the
 * block taken, unless it came from a wholly free segment, and +1 for a rest split off. Inlined by
 * force: two callers (heap_take_block, heap_reuse_parked), and a call costs the allocation more than
 * the copy does. */
static inline __attribute__((always_inline)) void stats_take(struct heap_stats *s, enum pool_kind pool, int64_t size,
                                                             int64_t requested, int64_t idle_segment,
                                                             int64_t split_blocks)
{
    BOTH_AND_OWN(s, pool, p, {
        rise(&p->allocated, size);
        rise(&p->requested, requested);
        rise(&p->allocation, 1);
        peak_at_least(&p->active_peak, pool_active(p));
    }, {
        p->gained.blocks++;
        p->gained.bytes += size;
        p->gained.requested += requested;
    });
    oversize_taken(s, size);
    if (TIDE_UNLIKELY(idle_segment != 0)) { /* a wholly free segment is split: what stays FREE is split cache now */
        BOTH_AND_OWN(s, pool, p, {
            p->idle -= idle_segment;
            p->split_blocks.cur += split_blocks;
            peak_at_least(&p->inactive_split_peak, pool_inactive_split(p));
            peak_at_least(&p->split_blocks.peak, p->split_blocks.cur);
        }, {
            p->gained.split += idle_segment - size;
            p->gained.split_blocks += split_blocks;
        });
    } else { /* a FREE block outside wholly free segments taken: the count cannot rise */
        BOTH(s, pool, p, p->split_blocks.cur += split_blocks);
    }
}

static inline void stats_active_to_free(struct heap_stats *s, enum pool_kind pool, int64_t size, int64_t requested,
                          int64_t idle_segment)
{
    BOTH(s, pool, p, {
        fall(&p->allocated, size);
        fall(&p->requested, requested);
        fall(&p->allocation, 1);
    });
    oversize_let_go(s, size);
    cache_gained(s, pool, size, idle_segment);
}

static inline void stats_active_to_pending(struct heap_stats *s, enum pool_kind pool, int64_t size, int64_t requested)
{
    BOTH(s, pool, p, {
        fall(&p->allocated, size);
        fall(&p->requested, requested);
        fall(&p->allocation, 1);
        rise(&p->pending, size);
        rise(&p->pending_blocks, 1);
    });
    oversize_let_go(s, size);
}

/* The cache's peaks: stats_settle, by the call that drains. The split cache gains the block's bytes
 * unless its segment became wholly free (idle_segment, never less than the block). */
static inline void stats_pending_to_free(struct heap_stats *s, enum pool_kind pool, int64_t size, int64_t idle_segment)
{
    BOTH(s, pool, p, {
        fall(&p->pending, size);
        fall(&p->pending_blocks, 1);
    });
    if (TIDE_UNLIKELY(idle_segment != 0))
        BOTH(s, pool, p, p->idle += idle_segment);
    else
        event_pool(s, pool)->gained.split += size;
}

/* A segment (or a new run of pages) joins the heap, wholly free: reserved, or back after the device
 * refused to take it (which counts as released and reserved again); oversize: a reservation of
 * max_split_size or more. */
static inline void stats_segment_added(struct heap_stats *s, enum pool_kind pool, int64_t size, bool oversize)
{
    BOTH_AND_OWN(s, pool, p, {
        rise(&p->reserved, size);
        p->segment.cur++;
        p->idle += size;
    }, {
        p->gained.reserved += size;
        p->gained.segments++;
    });
    if (oversize) {
        rise(&s->oversize.segments, 1);
        s->oversize.segments_gained++;
    }
}

/* Some changes raise the cache or the segment count only for a moment inside one call: memory added
 * for a request is wholly cached until the block is taken from it, a new run is a segment of its own
 * until it joins its neighbour, blocks drained at an allocation are cached until the fit takes one,
 * and the emptying of the cache drains blocks to release them. So those changes (stats_segment_added,
 * stats_pending_to_free, and the runs' changes in heap.c) leave the cache's two peaks and the segment
 * count's alone, and every call that makes them checks the peaks here once it is done: the pressure
 * entry points (for every heap), tide_malloc after a drain, tide_release. Each peak then stays a value
 * the statistic had between two calls (test_peaks_are_exact_with_one_stream). */
static inline void stats_settle(struct heap_stats *s)
{
    for (int k = 0; k < TIDE_POOL_COUNT; k++) {
        struct pool_stats *p = &s->pool[k];
        peak_at_least(&p->cached_peak, pool_cached(p));
        peak_at_least(&p->inactive_split_peak, pool_inactive_split(p));
        peak_at_least(&p->split_blocks.peak, p->split_blocks.cur);
        peak_at_least(&p->segment.peak, p->segment.cur);
    }
    s->drained_unsettled = false;
}

static inline void stats_segment_removed(struct heap_stats *s, enum pool_kind pool, int64_t size, bool oversize)
{
    BOTH(s, pool, p, {
        fall(&p->reserved, size);
        fall(&p->segment, 1);
        p->idle -= size;
    });
    if (oversize)
        fall(&s->oversize.segments, 1);
}

#endif /* TIDE_STATS_EVENTS_H */

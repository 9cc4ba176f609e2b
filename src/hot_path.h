/*
 * The inline code that the hot path of tide_malloc and tide_free shares between files: rounding, the
 * fork check, the size's pool, the heap's lock, the fit by the allocator's rules, the debug check.
 * The statistics' events are in stats_events.h, the history's in history_events.h.
 */
#ifndef TIDE_HOT_PATH_H
#define TIDE_HOT_PATH_H

#include "internal.h"

static inline size_t round_up(size_t v, size_t to) { return (v + to - 1) / to * to; }
static inline uint32_t forks_now(void) { return atomic_load_explicit(&process_forks, memory_order_relaxed); }
static inline bool allocator_forked(const tide_allocator *t) { return TIDE_UNLIKELY(t->forks != forks_now()); }
/* Every public call's first check: not NULL, and made in this process. tide_malloc and tide_free check
 * only for NULL: the fork check sits on their slow paths, where a child's first call always goes (the
 * fork forgets the thread's cached heap), so that their fast paths pay nothing for it. */
#define CHECK_ALLOCATOR_NOT_NULL(t)                                                                \
    do {                                                                                           \
        if (!(t))                                                                                  \
            return tide__fail(TIDE_EINVAL, "%s: the allocator is NULL", __func__);                 \
    } while (0)
#define CHECK_ALLOCATOR(t)                                                                         \
    do {                                                                                           \
        CHECK_ALLOCATOR_NOT_NULL(t);                                                               \
        if (allocator_forked(t))                                                                   \
            return allocator_refuse_forked((t), __func__);                                         \
    } while (0)

/* Size class rules. With expandable segments every request shares one pool (counted as the large
 * pool): a small block pins only the page it lies in, and pages one pool leaves free can serve the
 * other without being unmapped and mapped again (measured on the shipped traces: less memory
 * and far fewer driver calls than two pools). */
static inline enum pool_kind pool_for_size(const tide_allocator *t, size_t rounded)
{
    if (t->conf.expandable_segments)
        return POOL_LARGE;
    return rounded <= TIDE_SMALL_MAX ? POOL_SMALL : POOL_LARGE;
}

/* Runs tide_check if the debug level (enum debug_level) asks for it; aborts on corruption. */
static inline void allocator_debug_check(tide_allocator *t, enum debug_level level_needed, const char *after)
{
    if (TIDE_UNLIKELY(t->conf.debug >= (int)level_needed))
        allocator_debug_check_now(t, after);
}
/* Under h's lock, before a call on a block lets it go: under debug:2 (DEBUG_EVERY_CALL), the validator
 * over h; aborts on corruption. */
static inline void heap_debug_check(tide_allocator *t, struct heap *h, const char *after)
{
    if (TIDE_UNLIKELY(t->conf.debug >= DEBUG_EVERY_CALL))
        allocator_heap_check_now(t, h, after);
}


/* Every path but tide_malloc's takes a heap's lock with heap_lock_and_settle, which merges the parked
 * block first: no other code sees one. tide_malloc takes it with heap_lock alone, to reuse the block,
 * and so do the calls that only settle the statistics' peaks (pressure.c's and sleep.c's
 * settle_and_unlock, tide_pool_restore), which leave a parked block parked. */
static inline void heap_lock(struct heap *h) { spin_lock_acquire(&h->lock); }
static inline void heap_lock_and_settle(struct heap *h)
{
    heap_lock(h);
    if (h->parked)
        heap_settle(h);
}
static inline void heap_unlock(struct heap *h) { spin_lock_release(&h->lock); }

/* heap_take_fit_by by the allocator's own rules. */
static inline struct block *heap_take_fit(struct heap *h, enum pool_kind pool, size_t rounded,
                                          size_t requested, tide_status *status)
{
    return heap_take_fit_by(h, pool, rounded, requested, &h->owner->fit, status);
}

/* h's free index for pool, as an opaque pointer (see BOTH, stats_events.h): computed once, then each of its fields is
 * one fixed offset away, where GCC would otherwise multiply the pool index again for each. */
static inline struct free_index *heap_free_index(struct heap *h, enum pool_kind pool)
{
    struct free_index *fi = &h->free[pool];
    __asm__("" : "+r"(fi));
    return fi;
}

/* Under the pressure lock, after a backend call that reserved, released, mapped or unmapped device
 * memory, begun at now_ns() == started: its time joins tide_stats.device_call_ns. */
static inline void note_device_call(tide_allocator *t, uint64_t started)
{
    t->device_call_ns += now_ns() - started;
}

#endif /* TIDE_HOT_PATH_H */

/*
 * The history's recording on the hot path, inline (history.c does the rest): the events of a heap's
 * stream go into the heap's own ring under its lock; rarer events, the observer and the stacks are
 * calls into history.c behind one test each.
 */
#ifndef TIDE_HISTORY_EVENTS_H
#define TIDE_HISTORY_EVENTS_H

#include "internal.h"

/* One event of a heap's stream in its ring: the block's address (a multiple of TIDE_UNIT) with the kind
 * and flags in its low bits, and the size. */
struct history_entry {
    uint64_t addr_kind;
    uint64_t size;
};
#define HISTORY_KIND_MASK 0x7u
#define HISTORY_COMPLETED_AT_ONCE 0x8u /* with FREE_REQUESTED: the free completed in the same call */
_Static_assert(TIDE_EVENT_KIND_COUNT <= 8 && TIDE_UNIT >= 64, "kind and flags fit below a block's address");

/* With an observer (tide_observe), it hears the event too: every HISTORY_EVENT is made under the
 * pressure lock, the observer's lock. */
#define HISTORY_EVENT(t, kind, stream, addr, size)                                                  \
    do {                                                                                           \
        if (TIDE_UNLIKELY(atomic_load_explicit(&(t)->history, memory_order_relaxed) != NULL ||     \
                          atomic_load_explicit(&(t)->observer, memory_order_relaxed) != NULL))     \
            history_record((t), (kind), (stream), (addr), (size));                                 \
    } while (0)

/* The observer (tide_observe) of a free that leaves its block PENDING and of a PENDING block that
 * becomes FREE, under the heap's lock: rare paths, never a free completed at once. */
#define OBSERVE_PENDING(h, kind, b)                                                                  \
    do {                                                                                           \
        if (TIDE_UNLIKELY(atomic_load_explicit(&(h)->owner->observer, memory_order_relaxed) != NULL)) \
            history_observe((h)->owner, (kind), (h)->stream, (b)->addr + (h)->owner->guard, (b)->size); \
    } while (0)

/* Events of a heap's stream, under the heap's lock: into the heap's own ring, so the common event is two
 * stores and touches nothing another heap writes. h->history_next is NULL while no history is on (one
 * test); below h->history_limit the event takes the fast path; the rest (a new chunk of the ring and
 * its time, the chunk's last event and its time, a tag, a stack) is history_heap_slow.
 * The test for a history carries no "unlikely" hint: with one, GCC moved the recording out of line,
 * two taken jumps away (there and back) at every event; without, it is straight-line code that the
 * path with no history jumps over, and the recording costs less while the path with no history does
 * not slow down. */
/* The event into the heap's ring at e, its next entry (not NULL: a history is on). */
static inline void history_heap_put(struct heap *h, struct history_entry *e, uint32_t kind, uint64_t addr,
                                    uint64_t size, const void *site)
{
    if (TIDE_LIKELY(e < h->history_limit)) {
        /* The ring's line four lines ahead, fetched now: in a ring larger than the first-level cache
         * every fourth event would otherwise wait for its line. A prefetch past the ring's end is
         * harmless. */
        __builtin_prefetch(e + 16, 1);
        e->addr_kind = addr | kind;
        e->size = size;
        h->history_next = e + 1;
    } else {
        history_heap_slow(h, kind, addr, size, NULL, site);
    }
}
/* site: where the tidepool call that records was called from, for a stack (TIDE_HISTORY_STACKS), or NULL. */
static inline void history_heap_event(struct heap *h, uint32_t kind, uint64_t addr, uint64_t size,
                                      const void *site)
{
    struct history_entry *e = h->history_next;
    if (e != NULL) /* no hint: see above */
        history_heap_put(h, e, kind, addr, size, site);
}
/* A new ACTIVE block, under h's lock: its call site and tag (kept while a history is on, for the
 * snapshot and the leak report) and its alloc event. The ring's next entry is tested for NULL once and
 * read again after the store to b (through history_heap_event the compiler would test it again, since
 * the store might have changed it; keeping the first read in a register instead costs the path with
 * no history an instruction). */
static inline void history_heap_alloc(struct heap *h, struct block *b, size_t size, void *site)
{
    if (h->history_next != NULL) { /* no hint: see above */
        b->site = site;
        if (TIDE_UNLIKELY(atomic_load_explicit(&history_tags_in_use, memory_order_relaxed)))
            history_heap_alloc_tagged(h, b, size, site);
        else
            history_heap_put(h, h->history_next, TIDE_EVENT_ALLOC, b->addr, size, site);
    }
}
static inline bool history_wants_stacks(const tide_allocator *t)
{
    return TIDE_UNLIKELY(atomic_load_explicit(&t->history_stacks, memory_order_relaxed));
}
static inline bool history_stack_begin(const tide_allocator *t, const void *site)
{
    return history_wants_stacks(t) && history_stack_take(site);
}
static inline void history_stack_end(bool begun)
{
    if (begun)
        history_stack_drop();
}

#endif /* TIDE_HISTORY_EVENTS_H */

/*
 * The segment map: device address -> segment, for finding which heap owns a pointer without taking a
 * lock. A three-level radix table over 2 MiB granules (15 + 14 + 14 bits of the address above bit 21),
 * filled in lazily.
 *
 * Segments are multiples of 2 MiB but need not start on a 2 MiB boundary (the driver decides), so a
 * granule can meet two segments: the one covering the granule's first byte, and one starting inside
 * it. Each granule keeps both. Writers hold the pressure lock; readers take no lock and must confirm the
 * answer under the owning heap's lock, because a segment may be released while they look.
 */
#include "internal.h"

#include <stdlib.h>

#define LEVEL_BITS 14
#define LEVEL_SIZE (1u << LEVEL_BITS)
#define TOP_BITS (64 - TIDE_SEGMENT_GRANULE_SHIFT - 2 * LEVEL_BITS)
#define TOP_SIZE (1u << TOP_BITS)

struct granule {
    _Atomic(struct segment *) covers_start;
    _Atomic(struct segment *) starts_inside;
};
struct segment_map_leaf {
    struct granule g[LEVEL_SIZE];
};
struct segment_map_mid {
    _Atomic(struct segment_map_leaf *) leaves[LEVEL_SIZE];
};

static inline uint64_t top_of(uint64_t g) { return g >> (2 * LEVEL_BITS); }
static inline uint64_t mid_of(uint64_t g) { return (g >> LEVEL_BITS) & (LEVEL_SIZE - 1); }
static inline uint64_t leaf_of(uint64_t g) { return g & (LEVEL_SIZE - 1); }

tide_status segment_map_init(struct segment_map *sm)
{
    sm->top = calloc(TOP_SIZE, sizeof *sm->top);
    if (!sm->top)
        return tide__fail(TIDE_EHOSTMEM, "out of host memory for the segment map");
    return TIDE_OK;
}

void segment_map_free(struct segment_map *sm)
{
    if (!sm->top)
        return;
    for (size_t i = 0; i < TOP_SIZE; i++) {
        struct segment_map_mid *mid = atomic_load_explicit(&sm->top[i], memory_order_relaxed);
        if (!mid)
            continue;
        for (size_t j = 0; j < LEVEL_SIZE; j++)
            free(atomic_load_explicit(&mid->leaves[j], memory_order_relaxed));
        free(mid);
    }
    free(sm->top);
    sm->top = NULL;
}

/* The granule entry for g, created if asked. */
static struct granule *granule_at(struct segment_map *sm, uint64_t g, bool create)
{
    _Atomic(struct segment_map_mid *) *mslot = &sm->top[top_of(g)];
    struct segment_map_mid *mid = atomic_load_explicit(mslot, memory_order_acquire);
    if (!mid) {
        if (!create || !(mid = calloc(1, sizeof *mid)))
            return NULL;
        atomic_store_explicit(mslot, mid, memory_order_release);
    }
    _Atomic(struct segment_map_leaf *) *lslot = &mid->leaves[mid_of(g)];
    struct segment_map_leaf *leaf = atomic_load_explicit(lslot, memory_order_acquire);
    if (!leaf) {
        if (!create || !(leaf = calloc(1, sizeof *leaf)))
            return NULL;
        atomic_store_explicit(lslot, leaf, memory_order_release);
    }
    return &leaf->g[leaf_of(g)];
}

tide_status segment_map_add(struct segment_map *sm, struct segment *seg)
{
    /* Every table first, so that a failure leaves nothing half-entered. */
    tide_status s = segment_map_prepare(sm, seg->base, seg->base + seg->size);
    if (s == TIDE_OK)
        segment_map_enter(sm, seg, seg->base + seg->size);
    return s;
}

tide_status segment_map_prepare(struct segment_map *sm, uintptr_t lo, uintptr_t hi)
{
    uint64_t last = (hi - 1) >> TIDE_SEGMENT_GRANULE_SHIFT;
    for (uint64_t g = lo >> TIDE_SEGMENT_GRANULE_SHIFT; g <= last; g++)
        if (!granule_at(sm, g, true))
            return tide__fail(TIDE_EHOSTMEM, "out of host memory for the segment map");
    return TIDE_OK;
}

void segment_map_enter(struct segment_map *sm, struct segment *seg, uintptr_t end)
{
    uint64_t first = seg->base >> TIDE_SEGMENT_GRANULE_SHIFT;
    uint64_t last = (end - 1) >> TIDE_SEGMENT_GRANULE_SHIFT;
    /* The range first, then the granules: a reader that finds seg in a granule sees a range that
     * holds it. */
    atomic_store_explicit(&seg->map_base, seg->base, memory_order_release);
    atomic_store_explicit(&seg->map_end, end, memory_order_release);
    for (uint64_t g = first; g <= last; g++) {
        struct granule *e = granule_at(sm, g, false);
        TIDE_ASSERT(e != NULL); /* segment_map_prepare made every table */
        uintptr_t granule_start = (uintptr_t)(g << TIDE_SEGMENT_GRANULE_SHIFT);
        if (granule_start >= seg->base)
            atomic_store_explicit(&e->covers_start, seg, memory_order_release);
        else
            atomic_store_explicit(&e->starts_inside, seg, memory_order_release);
    }
    TIDE_ASSERT(segment_map_find(sm, seg->base) == seg && segment_map_find(sm, end - 1) == seg);
}

/* Granules first..last stop naming seg, where they still do (another segment may have taken one over). */
static void forget_granules(struct segment_map *sm, struct segment *seg, uint64_t first, uint64_t last)
{
    for (uint64_t g = first; g <= last; g++) {
        struct granule *e = granule_at(sm, g, false);
        if (!e)
            continue;
        struct segment *expected = seg;
        atomic_compare_exchange_strong(&e->covers_start, &expected, NULL);
        expected = seg;
        atomic_compare_exchange_strong(&e->starts_inside, &expected, NULL);
    }
}

void segment_map_shrink(struct segment_map *sm, struct segment *seg, uintptr_t new_end)
{
    uintptr_t old_end = atomic_load_explicit(&seg->map_end, memory_order_relaxed);
    if (new_end >= old_end)
        return;
    /* The range first: a reader that still finds seg in a granule past new_end sees it does not hold
     * the address, and looks again (locate), finding the granule's new owner. */
    atomic_store_explicit(&seg->map_end, new_end, memory_order_release);
    forget_granules(sm, seg, (new_end + TIDE_SEGMENT_GRANULE - 1) >> TIDE_SEGMENT_GRANULE_SHIFT,
                    (old_end - 1) >> TIDE_SEGMENT_GRANULE_SHIFT);
    TIDE_ASSERT(segment_map_find(sm, old_end - 1) != seg);
    TIDE_ASSERT(new_end <= seg->base || segment_map_find(sm, new_end - 1) == seg);
}

void segment_map_remove(struct segment_map *sm, struct segment *seg)
{
    forget_granules(sm, seg, seg->base >> TIDE_SEGMENT_GRANULE_SHIFT,
                    (seg->base + seg->size - 1) >> TIDE_SEGMENT_GRANULE_SHIFT);
    atomic_store_explicit(&seg->map_base, 0, memory_order_release);
    atomic_store_explicit(&seg->map_end, 0, memory_order_release);
    TIDE_ASSERT(segment_map_find(sm, seg->base) != seg);
}

static bool holds(struct segment *seg, uintptr_t addr)
{
    return seg && addr >= atomic_load_explicit(&seg->map_base, memory_order_acquire) &&
           addr < atomic_load_explicit(&seg->map_end, memory_order_acquire);
}

struct segment *segment_map_find(const struct segment_map *sm, uintptr_t addr)
{
    uint64_t g = addr >> TIDE_SEGMENT_GRANULE_SHIFT;
    struct segment_map_mid *mid = atomic_load_explicit(&sm->top[top_of(g)], memory_order_acquire);
    if (!mid)
        return NULL;
    struct segment_map_leaf *leaf = atomic_load_explicit(&mid->leaves[mid_of(g)], memory_order_acquire);
    if (!leaf)
        return NULL;
    struct granule *e = &leaf->g[leaf_of(g)];
    struct segment *inside = atomic_load_explicit(&e->starts_inside, memory_order_acquire);
    if (holds(inside, addr))
        return inside;
    struct segment *covers = atomic_load_explicit(&e->covers_start, memory_order_acquire);
    return holds(covers, addr) ? covers : NULL;
}

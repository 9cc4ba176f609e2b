/*
 * Segments in and out: the segment structs, reserving one from the backend, and the bookkeeping of
 * reserved memory that pressure.c and expandable.c share: the totals, the high-water mark, and the
 * releases made to stay under it (docs/design.md, Holding memory). All of it under the pressure lock.
 */
#include "internal.h"
#include "hot_path.h"
#include "stats_events.h"
#include "history_events.h"

#include <stdlib.h>
#include <string.h>

struct segment *segment_struct(tide_allocator *t)
{
    struct segment *seg = t->spare_segments;
    if (seg)
        t->spare_segments = seg->next;
    else if (!(seg = calloc(1, sizeof *seg)))
        return NULL;
    /* A lock-free reader of the segment map may still hold a recycled struct and read its atomics
     * (it will find they no longer hold its address, or hold it for the same heap): write them as
     * atomics, and the rest field by field. */
    atomic_store_explicit(&seg->heap, NULL, memory_order_relaxed);
    atomic_store_explicit(&seg->map_base, 0, memory_order_relaxed);
    atomic_store_explicit(&seg->map_end, 0, memory_order_relaxed);
    seg->base = 0;
    seg->size = 0;
    seg->pool = 0;
    seg->backend = NULL;
    seg->serves_from = 0;
    seg->asked_back = false;
    seg->harbours_small = false;
    seg->first = NULL;
    seg->prev = seg->next = NULL;
    seg->idle_prev = seg->idle_next = NULL;
    seg->idle = false;
    seg->idle_since = 0;
    seg->arena = NULL;
    seg->run_prev = seg->run_next = NULL;
    seg->asleep = false;
    seg->copy = NULL;
    seg->oversize = false;
    return seg;
}

void segment_struct_recycle(tide_allocator *t, struct segment *seg)
{
    seg->next = t->spare_segments;
    t->spare_segments = seg;
}

void segment_released(tide_allocator *t, struct heap *h, struct segment *seg)
{
    heap_lock_and_settle(h);
    heap_released(h, seg);
    heap_unlock(h);
    segment_struct_recycle(t, seg);
}

void segment_reattach(tide_allocator *t, struct heap *h, struct segment *seg)
{
    /* Its heap first, so that a reader of the segment map never finds it without one. */
    atomic_store_explicit(&seg->heap, h, memory_order_release);
    segment_map_enter(&t->segmap, seg, seg->base + seg->size); /* its tables are there still */
    heap_lock_and_settle(h);
    heap_reattach_idle(h, seg);
    heap_unlock(h);
}

tide_status segment_reserve(tide_allocator *t, const tide_backend *from, enum pool_kind pool, size_t size,
                            struct segment **out)
{
    if (size > t->limit || t->reserved > t->limit - size)
        return TIDE_ENOMEM;
    struct segment *seg = segment_struct(t);
    if (!seg)
        return tide__fail(TIDE_EHOSTMEM, "out of host memory for a segment");
    const tide_backend *be = from ? from : &t->backend;
    uintptr_t addr = 0;
    tide__clear_backend_message();
    uint64_t started = now_ns();
    tide_status s = be->reserve(be->ctx, size, &addr);
    note_device_call(t, started);
    if (s != TIDE_OK) {
        segment_struct_recycle(t, seg);
        if (s == TIDE_ENOMEM)
            return TIDE_ENOMEM;
        char sz[32];
        return tide__fail_with_context(s, "reserving a segment of %s from the %s backend",
                                       format_bytes(size, sz), be->name);
    }
    if (addr == 0 || addr % TIDE_UNIT) {
        be->release(be->ctx, addr, size);
        segment_struct_recycle(t, seg);
        return tide__fail(TIDE_EDEVICE, "the %s backend returned address 0x%llx for a segment: not "
                          "aligned to %d bytes", be->name, (unsigned long long)addr, TIDE_UNIT);
    }
    seg->base = addr;
    seg->size = size;
    seg->pool = (uint8_t)pool;
    seg->backend = from;
    seg->oversize = size >= t->fit.oversize_min;
    if (seg->oversize && size > t->largest_oversize)
        t->largest_oversize = size;
    s = segment_map_add(&t->segmap, seg);
    if (s != TIDE_OK) {
        be->release(be->ctx, addr, size);
        segment_struct_recycle(t, seg);
        return s;
    }
    note_reserved(t, size);
    HISTORY_EVENT(t, TIDE_EVENT_SEGMENT_RESERVED, 0, addr, size);
    *out = seg;
    return TIDE_OK;
}

/* reserved or high_water changed: room_under_mark follows (types.h). */
static void mark_moved(tide_allocator *t)
{
    atomic_store_explicit(&t->room_under_mark, t->high_water > t->reserved ? t->high_water - t->reserved : 0,
                          memory_order_relaxed);
}

void high_water_set(tide_allocator *t, size_t value)
{
    t->high_water = value;
    mark_moved(t);
}

void high_water_restart(tide_allocator *t)
{
    high_water_set(t, t->reserved);
    /* What the program held before the restart would let the next phase keep idle memory it may never
     * need again, where a new allocator gives it back first. */
    t->held_peak = 0;
}

struct where where_is_memory(tide_allocator *t)
{
    struct where w = {0, 0, 0, 0};
    for (uint32_t i = 0; i < atomic_load(&t->nheaps); i++) {
        struct heap *h = t->heaps[i];
        heap_lock_and_settle(h);
        const struct pool_stats *p = &h->stats.pool[TIDE_POOL_ALL];
        w.allocated += p->allocated.cur;
        w.pending += p->pending.cur;
        w.cached += pool_cached(p);
        w.idle += p->idle;
        heap_unlock(h);
    }
    return w;
}

bool may_pass_mark(tide_allocator *t, size_t rounded, size_t bytes)
{
    struct where w = where_is_memory(t);
    size_t held = (size_t)(w.allocated + w.pending) + rounded;
    if (held > t->held_peak)
        t->held_peak = held;
    return t->reserved + bytes <= t->held_peak + t->held_peak / 1024 * TIDE_HOLD_SLACK_PER_1024;
}

void note_reserved(tide_allocator *t, size_t bytes)
{
    t->reserved += bytes;
    if (t->reserved > t->reserved_peak)
        t->reserved_peak = t->reserved;
    high_water_set(t, t->reserved > t->high_water ? t->reserved : t->high_water);
    t->num_device_alloc++;
}

void note_released(tide_allocator *t, size_t bytes, tide_release_report *r)
{
    t->reserved -= bytes;
    mark_moved(t);
    t->num_device_free++;
    if (r) {
        r->released_bytes += bytes;
        r->released_segments++;
    }
}


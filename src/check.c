/*
 * The validator: walks every heap, segment and block and checks every invariant of the design. It
 * counts every problem and reports the first, so a broken structure is described where it broke.
 */
#include "internal.h"
#include "stats_events.h"

#include <string.h>

struct checker {
    unsigned problems;
    char first[512];
    bool one_heap;                    /* check_heap_locked: h's lock only, another call may be under way */
    uint32_t asked_back_idle;         /* idle segments asked back, over the heaps walked */
};

__attribute__((format(printf, 2, 3))) static void problem(struct checker *c, const char *fmt, ...)
{
    if (c->problems++ == 0) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(c->first, sizeof c->first, fmt, ap);
        va_end(ap);
    }
}

/* What a walk of the blocks finds, per pool, to compare with the counters. */
struct tally {
    int64_t reserved, allocated, requested, pending, idle, cached, inactive_split;
    int64_t allocation, segment, pending_blocks, split_blocks;
    int64_t asleep, offloaded;        /* sleeping pools' runs: bytes unmapped, bytes in host copies */
    int64_t oversize_blocks, oversize_segments; /* of max_split_size or more: ACTIVE, reservations */
    size_t free_blocks;
};

/* By TIDE_POOL_ALL / _SMALL / _LARGE, as the statistics' JSON names them. */
static const char *const pools[TIDE_POOL_COUNT] = {"all", "small_pool", "large_pool"};

static void check_counter(struct checker *c, const struct heap *h, int pool, const char *name,
                          int64_t counted, int64_t walked)
{
    if (counted != walked)
        problem(c, "stream 0x%llx: %s.%s is %lld but the blocks add up to %lld",
                (unsigned long long)h->stream, name, pools[pool], (long long)counted, (long long)walked);
}

/* A call checks the peaks its changes raised once it is done (stats_settle), so between two calls no
 * peak is below its statistic's value. */
static void check_peak(struct checker *c, const struct heap *h, int pool, const char *name, int64_t value,
                       int64_t peak)
{
    if (peak < value)
        problem(c, "stream 0x%llx: %s.%s.peak is %lld, below its current value %lld",
                (unsigned long long)h->stream, name, pools[pool], (long long)peak, (long long)value);
}

static void check_peaks(struct checker *c, const struct heap *h, int pool, const struct pool_stats *s)
{
    check_peak(c, h, pool, "reserved_bytes", s->reserved.cur, s->reserved.peak);
    check_peak(c, h, pool, "allocated_bytes", s->allocated.cur, s->allocated.peak);
    check_peak(c, h, pool, "requested_bytes", s->requested.cur, s->requested.peak);
    check_peak(c, h, pool, "active_bytes", pool_active(s), s->active_peak);
    check_peak(c, h, pool, "pending_free_bytes", s->pending.cur, s->pending.peak);
    /* Left to the end of a call under the pressure lock, which one_heap may be in the middle of. */
    bool settled = !c->one_heap;
    if (!h->stats.drained_unsettled && settled) { /* else pressure_malloc, on its way, settles them */
        check_peak(c, h, pool, "cached_bytes", pool_cached(s), s->cached_peak);
        check_peak(c, h, pool, "inactive_split_bytes", pool_inactive_split(s), s->inactive_split_peak);
    }
    check_peak(c, h, pool, "allocation", s->allocation.cur, s->allocation.peak);
    if (settled) {
        check_peak(c, h, pool, "segment", s->segment.cur, s->segment.peak);
        if (!h->stats.drained_unsettled)
            check_peak(c, h, pool, "inactive_split", s->split_blocks.cur, s->split_blocks.peak);
    }
    check_peak(c, h, pool, "pending_free_blocks", s->pending_blocks.cur, s->pending_blocks.peak);
}

static void check_block(struct checker *c, size_t guard, struct heap *h, struct segment *seg, struct block *b,
                        struct tally *tl)
{
    unsigned long long a = b->addr;
    if (b->seg != seg)
        problem(c, "block 0x%llx does not point back to its segment 0x%llx", a,
                (unsigned long long)seg->base);
    if (b->addr % TIDE_UNIT)
        problem(c, "block 0x%llx does not start on a %d-byte boundary", a, TIDE_UNIT);
    if (b->size == 0 || b->size % TIDE_UNIT)
        problem(c, "block 0x%llx has size %zu, not a positive multiple of %d", a, b->size, TIDE_UNIT);
    /* Blocks that tile their segment modulo 2^64 could still wrap around it, one past its end and the
     * next below its start: each must lie inside it. */
    if (b->addr < seg->base || b->size > seg->base + seg->size - b->addr) {
        problem(c, "block 0x%llx of %zu bytes does not lie inside its segment 0x%llx of %zu bytes", a,
                b->size, (unsigned long long)seg->base, seg->size);
        return; /* its size, added up with the others, could overflow the walk's sums */
    }
    /* An allocated block holds its two guards and at least one byte between them (a unit, rounded). */
    if (b->state != BLOCK_FREE && b->size < TIDE_UNIT + 2 * guard)
        problem(c, "%s block 0x%llx of %zu bytes is smaller than its two guards of %zu bytes and a unit",
                b->state == BLOCK_ACTIVE ? "ACTIVE" : "PENDING", a, b->size, guard);
    if (b->next && b->next->prev != b)
        problem(c, "block 0x%llx: its next neighbour does not link back to it", a);
    struct block *mapped = ptr_map_get(&h->map, b->addr);
    switch (b->state) {
    case BLOCK_FREE:
        tl->free_blocks++;
        tl->cached += (int64_t)b->size;
        if (!free_index_contains(&h->free[seg->pool], b))
            problem(c, "FREE block 0x%llx is not in its pool's free index", a);
        if (mapped == b)
            problem(c, "FREE block 0x%llx is still in the pointer map", a);
        if (b->refs || b->fences || b->needs_sync)
            problem(c, "FREE block 0x%llx still has %u references, %u fences or a synchronize owed",
                    a, b->refs, b->fences);
        /* A FREE block's second line is left as it is when it is split, merged or recycled. */
        if (b->nuses || b->uses_cap || b->requested)
            problem(c, "FREE block 0x%llx still records %u stream uses or a request of %zu bytes", a,
                    b->nuses, b->requested);
        if (b->next && b->next->state == BLOCK_FREE)
            problem(c, "FREE blocks 0x%llx and 0x%llx are neighbours and were not merged", a,
                    (unsigned long long)b->next->addr);
        break;
    case BLOCK_ACTIVE:
        tl->allocated += (int64_t)b->size;
        tl->requested += (int64_t)b->requested;
        tl->allocation++;
        tl->oversize_blocks += b->size >= h->stats.oversize_min;
        if (mapped != b)
            problem(c, "ACTIVE block 0x%llx is not in the pointer map", a);
        else if (b->map_slot >= h->map.cap || h->map.slots[b->map_slot] != b)
            problem(c, "ACTIVE block 0x%llx does not know its slot in the pointer map", a);
        if (b->fences || b->needs_sync)
            problem(c, "ACTIVE block 0x%llx has fences or a synchronize owed", a);
        if (b->requested == 0 || b->size < 2 * guard || b->requested > b->size - 2 * guard)
            problem(c, "ACTIVE block 0x%llx of %zu bytes records a request of %zu", a, b->size,
                    b->requested);
        break;
    case BLOCK_PENDING:
        tl->pending += (int64_t)b->size;
        tl->pending_blocks++;
        if (mapped != b)
            problem(c, "PENDING block 0x%llx is not in the pointer map", a);
        else if (b->map_slot >= h->map.cap || h->map.slots[b->map_slot] != b)
            problem(c, "PENDING block 0x%llx does not know its slot in the pointer map", a);
        if (!b->refs && !b->fences && !b->needs_sync)
            problem(c, "PENDING block 0x%llx has no reference, fence or synchronize holding it", a);
        break;
    default:
        problem(c, "block 0x%llx is in no known state (%u)", a, b->state);
    }
}

static void check_segment(struct checker *c, tide_allocator *t, struct heap *h, struct segment *seg,
                          struct tally *tl)
{
    unsigned long long base = seg->base;
    if (atomic_load(&seg->heap) != h)
        problem(c, "segment 0x%llx is on the list of a heap it does not name", base);
    if (seg->size == 0 || seg->size % TIDE_SEGMENT_GRANULE)
        problem(c, "segment 0x%llx has size %zu, not a multiple of 2 MiB", base, seg->size);
    /* The segment map is the pressure lock's: a call under it may be between its update and the heap's. */
    if (!c->one_heap && (segment_map_find(&t->segmap, seg->base) != seg ||
                         segment_map_find(&t->segmap, seg->base + seg->size - 1) != seg))
        problem(c, "segment 0x%llx is not found by the segment map", base);
    tl->reserved += (int64_t)seg->size;
    tl->segment++;
    if (seg->oversize != (!seg->arena && seg->size >= h->stats.oversize_min))
        problem(c, "segment 0x%llx is %scounted as oversize", base, seg->oversize ? "" : "not ");
    tl->oversize_segments += seg->oversize;

    if (!seg->first || seg->first->addr != seg->base || seg->first->prev)
        problem(c, "segment 0x%llx: its first block does not start at its base", base);
    uintptr_t expect = seg->base;
    size_t blocks = 0, busy = 0;
    for (struct block *b = seg->first; b; b = b->next) {
        busy += b->state != BLOCK_FREE;
        if (b->addr != expect) {
            problem(c, "segment 0x%llx: a %s at 0x%llx where the next block should start at 0x%llx",
                    base, b->addr > expect ? "gap" : "overlap", (unsigned long long)b->addr,
                    (unsigned long long)expect);
            break;
        }
        check_block(c, t->guard, h, seg, b, tl);
        if (b->state == BLOCK_FREE && !seg->idle) { /* FREE bytes outside wholly free segments */
            tl->inactive_split += (int64_t)b->size;
            tl->split_blocks++;
        }
        expect = b->addr + b->size;
        if (++blocks > seg->size / TIDE_UNIT) {
            problem(c, "segment 0x%llx: its block list loops", base);
            break;
        }
    }
    if (expect != seg->base + seg->size)
        problem(c, "segment 0x%llx: its blocks end at 0x%llx, not at its end 0x%llx", base,
                (unsigned long long)expect, (unsigned long long)(seg->base + seg->size));
    if (busy != seg->busy)
        problem(c, "segment 0x%llx counts %u blocks that are not FREE, but holds %zu", base, seg->busy, busy);
    bool wholly_free = seg->first && seg->first->state == BLOCK_FREE && seg->first->size == seg->size;
    if (wholly_free != seg->idle)
        problem(c, "segment 0x%llx is %swholly free but %son the idle list", base,
                wholly_free ? "" : "not ", seg->idle ? "" : "not ");
    if (seg->idle)
        tl->idle += (int64_t)seg->size;
    if (seg->asleep && (!seg->arena || !h->sleeping))
        problem(c, "segment 0x%llx is asleep but is %s", base, seg->arena ? "in a heap that does not sleep"
                                                                           : "no run of pages");
    else if (seg->asleep)
        tl->asleep += (int64_t)(seg->size - expandable_mapped_bytes(seg, t->backend.page_size));
    if (seg->copy && !seg->asleep)
        problem(c, "segment 0x%llx keeps a host copy of its contents but is awake", base);
    tl->offloaded += (int64_t)sleep_copy_bytes(seg);
}

/* The pages of run r are whole units (expandable.c): each page in a unit, every unit starting inside
 * the run, and the page after it (if mapped) starting a unit of its own. So unmapping the run never
 * unmaps part of what one map call mapped. */
static void check_units(struct checker *c, const struct arena *a, const struct segment *r, size_t page)
{
    size_t first = (r->base - a->base) / page, end = first + r->size / page, pages = a->size / page;
    for (size_t pg = first; pg < end; pg++) {
        uint32_t u = a->unit_first[pg];
        if (u == 0 && r->asleep) /* a sleeping pool's page, given back */
            continue;
        bool continues = pg > first && u == a->unit_first[pg - 1], starts = u == pg + 1;
        if (u == 0 || u - 1 < first || !(continues || starts)) {
            problem(c, "run 0x%llx: its page at 0x%llx is not in a unit that starts inside the run",
                    (unsigned long long)r->base, (unsigned long long)(a->base + pg * page));
            return;
        }
    }
    if (end < pages && a->unit_first[end] != 0 && a->unit_first[end] != end + 1)
        problem(c, "run 0x%llx ends inside a unit: the page after it belongs to one that started in it",
                (unsigned long long)r->base);
}

/* Expandable segments: each arena's runs lie inside it, in whole pages, by address, without overlap
 * (so no page is mapped twice), in whole units, each naming the arena, the heap and the pool; and every
 * run of the heap is in an arena. Returns the number of runs found. */
static size_t check_arenas(struct checker *c, tide_allocator *t, struct heap *h, size_t segments)
{
    size_t runs = 0, page = t->backend.page_size;
    for (int pool = 0; pool < POOL_KINDS; pool++)
        for (struct arena *a = h->arenas[pool]; a; a = a->next) {
            uintptr_t last_end = a->base;
            for (struct segment *r = a->runs; r; r = r->run_next) {
                unsigned long long base = r->base;
                if (r->arena != a || r->pool != a->pool || atomic_load(&r->heap) != h)
                    problem(c, "run 0x%llx is in an arena of stream 0x%llx but names another arena, "
                            "pool or heap", base, (unsigned long long)h->stream);
                if (!page || r->base % page || r->size % page)
                    problem(c, "run 0x%llx of %zu bytes is not made of whole pages", base, r->size);
                if (r->base < last_end)
                    problem(c, "run 0x%llx overlaps the run before it, or is out of address order", base);
                if (r->base + r->size > a->base + a->size)
                    problem(c, "run 0x%llx reaches past the end of its arena", base);
                else if (page && r->base % page == 0 && r->size % page == 0 && r->base >= a->base)
                    check_units(c, a, r, page);
                last_end = r->base + r->size;
                if (r->run_next && r->run_next->run_prev != r)
                    problem(c, "the runs after 0x%llx are not linked both ways", base);
                if (++runs > segments) { /* every run is one of the heap's segments */
                    problem(c, "stream 0x%llx: its arenas hold more runs than its %zu segments (a loop?)",
                            (unsigned long long)h->stream, segments);
                    return runs;
                }
            }
        }
    return runs;
}

/* Walks h's segments into tl (per pool), and its arenas; returns how many segments, and how many of
 * them are idle. */
static size_t check_heap_segments(struct checker *c, tide_allocator *t, struct heap *h, struct tally *tl,
                                  size_t *idle_out)
{
    size_t segments = 0, runs = 0, idle_segments = 0;
    /* A list that loops would walk forever: no more segments than the statistics count (if those are
     * wrong, that is reported below), and one more to see that the list goes on. */
    size_t counted = (size_t)h->stats.pool[TIDE_POOL_ALL].segment.cur;
    for (struct segment *seg = h->segments; seg; seg = seg->next) {
        if (segments++ == counted + 1) {
            problem(c, "stream 0x%llx: its segment list holds more than the %zu segments counted (a loop?)",
                    (unsigned long long)h->stream, counted);
            break;
        }
        if (seg->pool >= POOL_KINDS) {
            problem(c, "segment 0x%llx is in no pool", (unsigned long long)seg->base);
            continue;
        }
        runs += seg->arena != NULL;
        check_segment(c, t, h, seg, &tl[seg->pool]);
        idle_segments += seg->idle;
    }
    /* The arenas' lists of runs are the pressure lock's: not under h's lock alone. */
    size_t in_arenas = c->one_heap ? runs : check_arenas(c, t, h, segments);
    if (in_arenas != runs)
        problem(c, "stream 0x%llx has %zu runs of pages, and its arenas list %zu",
                (unsigned long long)h->stream, runs, in_arenas);
    *idle_out = idle_segments;
    return segments;
}

/* The free index, the pointer map, the pending list and the fence queues hold exactly what the walk
 * found. */
static void check_heap_block_lists(struct checker *c, struct heap *h, const struct tally *tl)
{
    for (int p = 0; p < POOL_KINDS; p++) {
        const char *pool = p == POOL_SMALL ? "small" : "large";
        bool bitmaps_agree;
        size_t filed = free_index_count(&h->free[p], tl[p].free_blocks, &bitmaps_agree);
        if (filed != tl[p].free_blocks)
            problem(c, "stream 0x%llx: the %s pool's free index holds %s%zu blocks, the walk found %zu "
                    "FREE", (unsigned long long)h->stream, pool, filed > tl[p].free_blocks ? "more than " : "",
                    filed > tl[p].free_blocks ? tl[p].free_blocks : filed, tl[p].free_blocks);
        if (!bitmaps_agree)
            problem(c, "stream 0x%llx: the %s pool's free index has a class whose bitmap bit disagrees "
                    "with whether its list is empty", (unsigned long long)h->stream, pool);
    }
    size_t mapped = (size_t)(tl[0].allocation + tl[0].pending_blocks + tl[1].allocation +
                             tl[1].pending_blocks);
    if (h->map.count != mapped)
        problem(c, "stream 0x%llx: the pointer map holds %zu blocks, the walk found %zu ACTIVE or "
                "PENDING", (unsigned long long)h->stream, h->map.count, mapped);
    size_t pending_listed = 0;
    for (struct block *b = h->pending_head; b; b = b->link_next) {
        if (b->state != BLOCK_PENDING)
            problem(c, "block 0x%llx is on the pending list but not PENDING",
                    (unsigned long long)b->addr);
        if (++pending_listed > mapped)
            break;
    }
    if (pending_listed != (size_t)(tl[0].pending_blocks + tl[1].pending_blocks))
        problem(c, "stream 0x%llx: %zu blocks on the pending list, the walk found %lld PENDING",
                (unsigned long long)h->stream, pending_listed,
                (long long)(tl[0].pending_blocks + tl[1].pending_blocks));
    int64_t fences_queued = 0, fences_held = 0;
    for (uint32_t i = 0; i < h->nqueues; i++) {
        const struct fence_queue *q = &h->queues[i];
        for (uint32_t k = 0; k < q->count; k++) {
            const struct block *b = q->ring[(q->head + k) % q->cap].block;
            if (b->state != BLOCK_PENDING)
                problem(c, "a fence waits for block 0x%llx, which is not PENDING",
                        (unsigned long long)b->addr);
            fences_queued++;
        }
    }
    for (struct block *b = h->pending_head; b; b = b->link_next)
        fences_held += b->fences;
    if (fences_queued != fences_held)
        problem(c, "stream 0x%llx: %lld fences queued but PENDING blocks count %lld",
                (unsigned long long)h->stream, (long long)fences_queued, (long long)fences_held);
}

/* The idle list holds exactly the wholly free segments, oldest first. */
static void check_heap_idle_list(struct checker *c, struct heap *h, size_t segments, size_t idle_segments)
{
    uint64_t last_idle = 0;
    size_t idle_listed = 0;
    for (struct segment *seg = h->idle_head; seg; seg = seg->idle_next) {
        if (!seg->idle)
            problem(c, "segment 0x%llx is on the idle list but not marked idle",
                    (unsigned long long)seg->base);
        if (seg->idle_since < last_idle)
            problem(c, "the idle list of stream 0x%llx is not oldest first",
                    (unsigned long long)h->stream);
        last_idle = seg->idle_since;
        if (seg->asked_back && seg->serves_from != SIZE_MAX)
            problem(c, "segment 0x%llx is asked back and idle, but serves requests of %zu bytes or more",
                    (unsigned long long)seg->base, seg->serves_from);
        if (seg->harbours_small)
            problem(c, "segment 0x%llx is wholly free, but marked as holding a small block",
                    (unsigned long long)seg->base);
        c->asked_back_idle += seg->asked_back;
        if (++idle_listed > segments) /* more than there are: it loops, or holds strangers */
            break;
    }
    if (idle_listed != idle_segments)
        problem(c, "stream 0x%llx: %s%zu segments on the idle list, the walk found %zu wholly free",
                (unsigned long long)h->stream, idle_listed > segments ? "more than " : "",
                idle_listed > segments ? segments : idle_listed, idle_segments);
    /* The counts heap_emptied compares to tell that the stream holds nothing. */
    uint32_t counted = atomic_load(&h->segment_count), counted_idle = atomic_load(&h->idle_count);
    if (counted != segments || counted_idle != idle_segments)
        problem(c, "stream 0x%llx counts %u segments, %u wholly free; the walk found %zu and %zu",
                (unsigned long long)h->stream, counted, counted_idle, segments, idle_segments);
}

/* What each accumulated statistic gained since the reset (struct stat_gains) covers the rise of its
 * value since then: each rise was counted as a gain, so what was lost, worked out from them, is never
 * negative. The gains are kept in the pools' own entries, never in TIDE_POOL_ALL's. */
static void check_gain(struct checker *c, const struct heap *h, int pool, const char *name, int64_t gained,
                       int64_t now, int64_t base)
{
    if (pool == TIDE_POOL_ALL ? gained != 0 : gained < 0 || gained < now - base)
        problem(c, "stream 0x%llx: %s.%s gained %lld since the reset, but rose by %lld", (unsigned long long)h->stream,
                name, pools[pool], (long long)gained, (long long)(now - base));
}

static void check_gains(struct checker *c, const struct heap *h, int pool, const struct pool_stats *s)
{
    const struct stat_gains *g = &s->gained;
    struct stat_values v = stats_values(s), b = h->stats.base[pool]; /* TIDE_POOL_ALL: only its gains are read */
    check_gain(c, h, pool, "allocation", g->blocks, v.allocation, b.allocation);
    check_gain(c, h, pool, "active", g->blocks, v.active, b.active);
    check_gain(c, h, pool, "allocated_bytes", g->bytes, v.allocated, b.allocated);
    check_gain(c, h, pool, "active_bytes", g->bytes, v.active_bytes, b.active_bytes);
    check_gain(c, h, pool, "requested_bytes", g->requested, v.requested, b.requested);
    check_gain(c, h, pool, "reserved_bytes", g->reserved, v.reserved, b.reserved);
    check_gain(c, h, pool, "segment", g->segments, v.segment, b.segment);
    check_gain(c, h, pool, "inactive_split_bytes", g->split, v.split, b.split);
    check_gain(c, h, pool, "inactive_split", g->split_blocks, v.split_blocks, b.split_blocks);
}

/* The counters agree with the walk, per pool and in total; returns the heap's reserved bytes. */
static int64_t check_heap_counters(struct checker *c, struct heap *h, const struct tally *tl)
{
    struct tally all;
    memset(&all, 0, sizeof all);
    for (int p = 0; p <= POOL_KINDS; p++) {
        const struct tally *w = p < POOL_KINDS ? &tl[p] : &all;
        int pub = p < POOL_KINDS ? public_pool((enum pool_kind)p) : TIDE_POOL_ALL;
        const struct pool_stats *s = &h->stats.pool[pub];
        /* Before the walk's sums, which wrap with the counters: what is allocated or pending lies in
         * reserved memory. */
        bool beyond = s->allocated.cur < 0 || s->pending.cur < 0 || s->reserved.cur < 0 ||
                      (uint64_t)s->allocated.cur + (uint64_t)s->pending.cur > (uint64_t)s->reserved.cur;
        if (beyond)
            problem(c, "stream 0x%llx: allocated_bytes.%s (%lld) and pending_free_bytes (%lld) exceed "
                    "reserved_bytes (%lld)", (unsigned long long)h->stream, pools[pub],
                    (long long)s->allocated.cur, (long long)s->pending.cur, (long long)s->reserved.cur);
        check_counter(c, h, pub, "reserved_bytes", s->reserved.cur, w->reserved);
        check_counter(c, h, pub, "allocated_bytes", s->allocated.cur, w->allocated);
        check_counter(c, h, pub, "requested_bytes", s->requested.cur, w->requested);
        check_counter(c, h, pub, "pending_free_bytes", s->pending.cur, w->pending);
        check_counter(c, h, pub, "idle bytes", s->idle, w->idle);
        check_counter(c, h, pub, "asleep_bytes", s->asleep.cur, w->asleep);
        check_counter(c, h, pub, "offloaded_bytes", s->offloaded.cur, w->offloaded);
        /* active, cached and inactive_split are computed from the counters above (stats.c), so they
         * agree with the walk whenever those do. */
        check_counter(c, h, pub, "allocation", s->allocation.cur, w->allocation);
        check_counter(c, h, pub, "segment", s->segment.cur, w->segment);
        check_counter(c, h, pub, "pending_free_blocks", s->pending_blocks.cur, w->pending_blocks);
        check_counter(c, h, pub, "inactive_split", s->split_blocks.cur, w->split_blocks);
        if (!beyond) { /* else active, cached and inactive_split, computed from them, could overflow */
            check_peaks(c, h, pub, s);
            check_gains(c, h, pub, s);
        }
        if (p < POOL_KINDS) {
            all.reserved += w->reserved;
            all.allocated += w->allocated;
            all.requested += w->requested;
            all.pending += w->pending;
            all.idle += w->idle;
            all.cached += w->cached;
            all.inactive_split += w->inactive_split;
            all.allocation += w->allocation;
            all.segment += w->segment;
            all.pending_blocks += w->pending_blocks;
            all.split_blocks += w->split_blocks;
            all.asleep += w->asleep;
            all.offloaded += w->offloaded;
            all.oversize_blocks += w->oversize_blocks;
            all.oversize_segments += w->oversize_segments;
        }
    }
    const struct oversize_stats *o = &h->stats.oversize;
    check_counter(c, h, TIDE_POOL_ALL, "oversize_allocations", o->blocks.cur, all.oversize_blocks);
    check_counter(c, h, TIDE_POOL_ALL, "oversize_segments", o->segments.cur, all.oversize_segments);
    check_peak(c, h, TIDE_POOL_ALL, "oversize_allocations", o->blocks.cur, o->blocks.peak);
    check_peak(c, h, TIDE_POOL_ALL, "oversize_segments", o->segments.cur, o->segments.peak);
    if (o->blocks_gained < o->blocks.cur - o->blocks_base || o->segments_gained < o->segments.cur - o->segments_base)
        problem(c, "stream 0x%llx: the oversize counts gained less since the reset than they rose",
                (unsigned long long)h->stream);
    return all.reserved - all.asleep; /* what the device holds: a sleeping pool's pages went back */
}

static void check_heap(struct checker *c, tide_allocator *t, struct heap *h, int64_t *reserved)
{
    struct tally tl[POOL_KINDS];
    memset(tl, 0, sizeof tl);
    size_t idle_segments;
    size_t segments = check_heap_segments(c, t, h, tl, &idle_segments);
    check_heap_block_lists(c, h, tl);
    check_heap_idle_list(c, h, segments, idle_segments);
    *reserved += check_heap_counters(c, h, tl);
}

tide_status check_locked(tide_allocator *t)
{
    struct checker c;
    memset(&c, 0, sizeof c);
    int64_t reserved = 0;
    uint32_t n = atomic_load(&t->nheaps);
    for (uint32_t i = 0; i < n; i++)
        check_heap(&c, t, t->heaps[i], &reserved);
    if ((int64_t)t->reserved != reserved)
        problem(&c, "reserved_bytes.all is %zu but the segments add up to %lld", t->reserved,
                (long long)reserved);
    if (atomic_load(&t->asked_back_idle) != c.asked_back_idle)
        problem(&c, "%u idle segments are counted as asked back by tide_empty_cache, and %u are",
                atomic_load(&t->asked_back_idle), c.asked_back_idle);
    if (c.problems == 0)
        return TIDE_OK;
    return tide__fail(TIDE_ECORRUPT, "tide_check: %u problem%s; the first: %s", c.problems,
                      c.problems == 1 ? "" : "s", c.first);
}

tide_status check_heap_locked(tide_allocator *t, struct heap *h)
{
    struct checker c;
    memset(&c, 0, sizeof c);
    c.one_heap = true;
    int64_t reserved = 0;
    check_heap(&c, t, h, &reserved);
    if (c.problems == 0)
        return TIDE_OK;
    return tide__fail(TIDE_ECORRUPT, "tide_check of stream 0x%llx's heap: %u problem%s; the first: %s",
                      (unsigned long long)h->stream, c.problems, c.problems == 1 ? "" : "s", c.first);
}

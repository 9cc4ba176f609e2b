/*
 * Segments that grow (expandable_segments:True): virtual memory instead of one reservation per
 * segment.
 *
 * Each heap reserves, per pool, an arena: an address range as large as the device, with nothing behind
 * it. Pages of device memory (the backend's page_size, 2 MiB on today's GPUs) are mapped into it as
 * needed, each on its own so any one can be unmapped later. A segment is then a run of mapped pages;
 * the heap's blocks tile its runs exactly as they tile reserved segments, so the fast paths, the
 * lifecycle and the validator do not know the difference.
 *
 * Growing: when nothing cached fits, the run whose FREE tail needs the fewest new pages to hold the
 * request (a run without a FREE tail counts as needing all of them) is extended by just those pages,
 * and the block is taken from its tail. A run that grows into the next one merges with it, so a block
 * can span the pages of both.
 *
 * Units: the pages of one map call are one unit, which the backend may back with one piece of device
 * memory (CUDA: one handle), and are unmapped together. A map costs the driver about the same for one
 * page as for ten (57 us on the H200: bench/vm_cost.c), and a program that calls
 * tide_empty_cache maps all its memory again afterwards. So a growth that stays at or below the most
 * ever reserved (memory the program has needed before) maps its pages in units of TIDE_MAP_UNIT_PAGES:
 * half the calls. Larger units would save more calls, but a unit goes back only when all its pages are
 * free, and one long-lived block keeps the whole unit: with units as large as each request, memory left
 * after tide_empty_cache crept up cycle after cycle; with pairs it stays flat, 1-4% above pages alone.
 * A growth past the mark, where the footprint is new and may have to be trimmed back, maps page by
 * page.
 *
 * Shrinking: a unit whose pages lie wholly inside FREE blocks can be unmapped whatever its neighbours
 * hold. The run then splits around it (heap_carve_pages): what lies below stays in the run, what lies
 * above becomes a run of its own. ACTIVE and PENDING blocks never move, and each heap's arenas are its
 * own, so a page never holds blocks of two streams.
 *
 * Everything here runs under the pressure lock; block surgery happens under the heap's lock too, and
 * the segment map is updated so that every address of an ACTIVE or PENDING block stays findable by
 * lock-free readers throughout (they confirm under the heap's lock, and look again on a miss).
 */
#include "internal.h"
#include "hot_path.h"
#include "history_events.h"

#include <stdlib.h>
#include <string.h>

/* ---- arenas and their runs ----------------------------------------------------------------------------- */

static void run_insert(struct arena *a, struct segment *seg)
{
    struct segment *prev = NULL, *at = a->runs;
    while (at && at->base < seg->base) {
        prev = at;
        at = at->run_next;
    }
    seg->arena = a;
    seg->run_prev = prev;
    seg->run_next = at;
    if (at)
        at->run_prev = seg;
    if (prev)
        prev->run_next = seg;
    else
        a->runs = seg;
}

static bool in_arena_list(const struct segment *seg)
{
    return seg->run_prev || seg->run_next || seg->arena->runs == seg;
}

static void run_remove(struct segment *seg)
{
    struct arena *a = seg->arena;
    if (seg->run_prev)
        seg->run_prev->run_next = seg->run_next;
    else
        a->runs = seg->run_next;
    if (seg->run_next)
        seg->run_next->run_prev = seg->run_prev;
    seg->run_prev = seg->run_next = NULL;
}

/* ---- units: the pages one map call mapped, unmapped together ------------------------------------------- */

static size_t page_index(const struct arena *a, uintptr_t addr, size_t page)
{
    return (addr - a->base) / page;
}

/* [lo, hi) becomes one unit (mapped), or its pages no unit (unmapped). */
static void units_mark(struct arena *a, uintptr_t lo, uintptr_t hi, size_t page, bool mapped)
{
    size_t first = page_index(a, lo, page), end = page_index(a, hi, page);
    for (size_t pg = first; pg < end; pg++)
        a->unit_first[pg] = mapped ? (uint32_t)first + 1 : 0;
}

/* The unit that holds the mapped page at addr: [*lo, *hi). */
static void unit_around(const struct arena *a, uintptr_t addr, size_t page, uintptr_t *lo, uintptr_t *hi)
{
    size_t pg = page_index(a, addr, page), pages = a->size / page, end = pg + 1;
    uint32_t id = a->unit_first[pg];
    while (id && end < pages && a->unit_first[end] == id)
        end++;
    *lo = id ? a->base + (size_t)(id - 1) * page : addr; /* not mapped: the page alone */
    *hi = a->base + end * page;
}

/* [lo, hi), whole mapped pages, narrowed to the units that lie wholly inside it (perhaps none). */
static void units_inside(const struct arena *a, size_t page, uintptr_t *lo, uintptr_t *hi)
{
    uintptr_t ulo, uhi;
    if (*hi <= *lo)
        return;
    unit_around(a, *lo, page, &ulo, &uhi);
    if (ulo < *lo)
        *lo = uhi;
    if (*hi <= *lo)
        return;
    unit_around(a, *hi - page, page, &ulo, &uhi);
    if (uhi > *hi)
        *hi = ulo;
}

/* Unmaps the units that hold [addr, addr + size), whole units of arena a, one by one from addr;
 * *unmapped: the bytes gone, from addr. */
static tide_status unmap_units(tide_allocator *t, struct arena *a, uintptr_t addr, size_t size,
                               size_t *unmapped)
{
    const tide_backend *be = &t->backend;
    size_t page = be->page_size;
    *unmapped = 0;
    while (*unmapped < size) {
        uintptr_t lo, hi;
        unit_around(a, addr + *unmapped, page, &lo, &hi);
        tide__clear_backend_message();
        uint64_t started = now_ns();
        tide_status s = be->unmap(be->ctx, lo, hi - lo);
        note_device_call(t, started);
        if (s != TIDE_OK)
            return s;
        units_mark(a, lo, hi, page, false);
        *unmapped += hi - lo;
    }
    return TIDE_OK;
}

/* Maps [addr, addr + size), free pages of arena a: in units of TIDE_MAP_UNIT_PAGES pages, or page by
 * page. On a failure what was mapped is unmapped again, and the status says why. Should that unmap be
 * refused too, [*stranded_at, *stranded_at + *stranded) stays mapped (else *stranded is 0): the caller
 * keeps those pages (keep_stranded_pages), or a later plan would map over them. */
static tide_status map_units(tide_allocator *t, struct arena *a, uintptr_t addr, size_t size, bool paired,
                             uintptr_t *stranded_at, size_t *stranded)
{
    const tide_backend *be = &t->backend;
    size_t page = be->page_size, unit = (paired ? TIDE_MAP_UNIT_PAGES : 1) * page, done = 0, step = 0;
    tide_status s = TIDE_OK;
    for (; done < size; done += step) {
        step = size - done < unit ? size - done : unit;
        tide__clear_backend_message();
        uint64_t started = now_ns();
        s = be->map(be->ctx, addr + done, step);
        note_device_call(t, started);
        if (s != TIDE_OK)
            break;
        units_mark(a, addr + done, addr + done + step, page, true);
    }
    *stranded = 0;
    if (s == TIDE_OK)
        return TIDE_OK;
    if (s != TIDE_ENOMEM) { /* the words first: unmapping clears the backend's */
        char sz[32];
        s = tide__fail_with_context(s, "mapping %s of device memory at 0x%llx from the %s backend",
                                    format_bytes(step, sz), (unsigned long long)(addr + done), be->name);
    }
    size_t undone = 0;
    if (!done)
        return s;
    char why[512] = ""; /* a refused unmap would overwrite the words of the map that failed */
    if (s != TIDE_ENOMEM) /* (an out-of-memory failure gets its report from the ladder) */
        snprintf(why, sizeof why, "%s", tide_last_error());
    if (unmap_units(t, a, addr, done, &undone) != TIDE_OK) {
        *stranded_at = addr + undone;
        *stranded = done - undone;
        if (s != TIDE_ENOMEM) {
            char sz[32], refused[512];
            snprintf(refused, sizeof refused, "%s", tide_last_error());
            tide__fail(s, "%s (and unmapping the %s mapped before it was refused: %s)", why,
                       format_bytes(*stranded, sz), refused);
        }
    }
    return s;
}

static tide_status arena_create(tide_allocator *t, struct heap *h, enum pool_kind pool, size_t at_least,
                                struct arena **out)
{
    const tide_backend *be = &t->backend;
    struct arena *a = calloc(1, sizeof *a);
    if (!a)
        return tide__fail(TIDE_EHOSTMEM, "out of host memory for an address range");
    /* As large as the device, so one arena holds whatever the stream needs. Where the address space
     * is short (valgrind, a small VA limit), smaller ones serve too: a stream can have several. */
    size_t want = round_up(at_least > t->device_total ? at_least : t->device_total, be->page_size);
    size_t least = round_up(at_least, be->page_size), size = want;
    tide_status s;
    for (;;) {
        tide__clear_backend_message();
        s = be->va_reserve(be->ctx, size, &a->base);
        if (s != TIDE_ENOMEM || size / 2 < least)
            break;
        size = round_up(size / 2, be->page_size);
    }
    if (s != TIDE_OK) {
        free(a);
        char sz[32];
        /* Not TIDE_ENOMEM: releasing device memory cannot help, and the out-of-memory report would
         * hide why. */
        return tide__fail_with_context(s == TIDE_ENOMEM ? TIDE_EDEVICE : s,
                                       "expandable segments: reserving an address range of %s from the "
                                       "%s backend", format_bytes(least, sz), be->name);
    }
    if (a->base % be->page_size) {
        be->va_release(be->ctx, a->base, size);
        free(a);
        return tide__fail(TIDE_EDEVICE, "the %s backend reserved an address range not aligned to its "
                          "page size", be->name);
    }
    a->unit_first = calloc(size / be->page_size, sizeof *a->unit_first);
    if (!a->unit_first) {
        be->va_release(be->ctx, a->base, size);
        free(a);
        return tide__fail(TIDE_EHOSTMEM, "out of host memory for the page table of an address range");
    }
    a->size = size;
    a->pool = (uint8_t)pool;
    a->next = h->arenas[pool];
    h->arenas[pool] = a;
    *out = a;
    return TIDE_OK;
}

uint64_t expandable_release_arenas(tide_allocator *t, struct heap *h)
{
    const tide_backend *be = &t->backend;
    uint64_t refused = 0;
    for (int pool = 0; pool < POOL_KINDS; pool++) {
        while (h->arenas[pool]) {
            struct arena *a = h->arenas[pool];
            h->arenas[pool] = a->next;
            if (be->va_release(be->ctx, a->base, a->size) != TIDE_OK)
                refused += a->size; /* the address range stays taken in the process: said by tide_destroy */
            free(a->unit_first);
            free(a);
        }
    }
    return refused;
}

/* ---- growing ------------------------------------------------------------------------------------------- */

static tide_status release_pages(tide_allocator *t, size_t want, uintptr_t except_lo, uintptr_t except_hi, tide_release_report *r, size_t *released);


/* Where the pages for a request go: `need` bytes mapped at `addr`, growing run `left` upwards (NULL: a
 * new run), and joining the run above where they reach it (join_pages). The request is then served from
 * the FREE block that holds addr, which takes in the FREE bytes on both sides. */
struct placement {
    struct arena *arena;
    struct segment *left;
    uintptr_t addr;
    size_t need;
    uintptr_t keep_lo, keep_hi; /* the FREE bytes the request will use: not to be unmapped meanwhile */
};

static void consider(struct placement *best, bool *found, struct placement cand)
{
    if (!*found || cand.need < best->need) {
        *best = cand;
        *found = true;
    }
}

/* Under h->lock. Each gap between runs (and before the first and after the last) offers three ways:
 * grow the run below it upwards, grow the run above it downwards, or fill the gap, joining both; the
 * one that maps the fewest pages wins. False if no arena has room. */
static bool plan_growth(struct heap *h, enum pool_kind pool, size_t rounded, size_t page,
                        struct placement *best)
{
    bool found = false;
    for (struct arena *a = h->arenas[pool]; a; a = a->next) {
        struct segment *left = NULL, *right = a->runs;
        for (;;) {
            uintptr_t lo = left ? left->base + left->size : a->base;
            uintptr_t hi = right ? right->base : a->base + a->size;
            size_t gap = hi - lo, tail_free = 0, head_free = 0;
            if (left) {
                struct block *tail = segment_last_block(left);
                tail_free = tail->state == BLOCK_FREE ? tail->size : 0;
            }
            if (right && right->first->state == BLOCK_FREE)
                head_free = right->first->size;
            size_t up = rounded > tail_free ? round_up(rounded - tail_free, page) : 0;
            if (up <= gap && (left || up))
                consider(best, &found, (struct placement){a, left, lo, up, lo - tail_free, lo + up});
            size_t down = rounded > head_free ? round_up(rounded - head_free, page) : 0;
            if (right && down <= gap && down)
                consider(best, &found, (struct placement){a, down == gap ? left : NULL, hi - down, down,
                                                          hi - down, hi + head_free});
            if (left && right && gap && tail_free + gap + head_free >= rounded)
                consider(best, &found, (struct placement){a, left, lo, gap, lo - tail_free, hi + head_free});
            if (!right)
                break;
            left = right;
            right = right->run_next;
        }
    }
    return found;
}

/* What joining pages to the runs (join_pages) takes from the host, got before the pages are mapped.
 * Once the device has mapped them they must join a run: the unmap that would undo them can be refused
 * too, and pages mapped in no run would be counted nowhere, and mapped over by a later plan. */
struct join_needs {
    struct segment *run;    /* for a new run */
    struct block *block;    /* a new run's FREE block, or the FREE block a run grows by */
};

/* Under the pressure lock: the segment map's tables for p's pages, a segment struct and a block. */
static tide_status join_needs_get(tide_allocator *t, struct heap *h, const struct placement *p,
                                  struct join_needs *n)
{
    *n = (struct join_needs){NULL, NULL};
    tide_status s = segment_map_prepare(&t->segmap, p->addr, p->addr + p->need);
    if (s != TIDE_OK)
        return s;
    if (!(n->run = segment_struct(t)))
        return tide__fail(TIDE_EHOSTMEM, "out of host memory for a segment");
    heap_lock_and_settle(h);
    n->block = block_new(h);
    heap_unlock(h);
    if (!n->block) {
        segment_struct_recycle(t, n->run);
        n->run = NULL;
        return tide__fail(TIDE_EHOSTMEM, "out of host memory for a block");
    }
    return TIDE_OK;
}

/* Under the pressure lock and h->lock: what join_pages did not use goes back. */
static void join_needs_put(tide_allocator *t, struct heap *h, struct join_needs *n)
{
    if (n->run)
        segment_struct_recycle(t, n->run);
    if (n->block)
        block_recycle(h, n->block);
    *n = (struct join_needs){NULL, NULL};
}

/* Under h->lock, after the pages are mapped: they join the runs they touch (or form a new one), taking
 * what they need from n, which cannot fail. Returns the run that holds them. */
static struct segment *join_pages(tide_allocator *t, struct heap *h, const struct placement *p,
                                  struct join_needs *n)
{
    struct segment *run = p->left;
    if (run) {
        segment_map_enter(&t->segmap, run, run->base + run->size + p->need);
        heap_extend_run(h, run, p->need, &n->block);
    } else {
        run = n->run;
        n->run = NULL;
        run->base = p->addr;
        run->size = p->need;
        run->pool = p->arena->pool;
        atomic_store_explicit(&run->heap, h, memory_order_release);
        segment_map_enter(&t->segmap, run, run->base + run->size);
        heap_adopt_free(h, run, n->block);
        n->block = NULL;
        run_insert(p->arena, run);
    }
    /* A run that now reaches the next one takes it in (a block may then span both; the map's tables
     * for the next run's granules are there since it was entered). */
    struct segment *next = run->run_next;
    if (next && run->base + run->size == next->base) {
        segment_map_enter(&t->segmap, run, next->base + next->size);
        heap_merge_runs(h, run, next);
        run_remove(next);
        segment_map_remove(&t->segmap, next);
        next->arena = NULL;
        segment_struct_recycle(t, next);
    }
    return run;
}

/* Under the pressure lock: pages that a failed map left mapped (map_units) join the runs as FREE
 * memory, reserved like any other, so that no later plan maps over them and a trim or empty_cache can
 * unmap them. They extend the planned run where they start at its end. */
static void keep_stranded_pages(tide_allocator *t, struct heap *h, const struct placement *p, uintptr_t addr,
                                size_t size, struct join_needs *n)
{
    struct placement kept = {p->arena, addr == p->addr ? p->left : NULL, addr, size, addr, addr + size};
    heap_lock_and_settle(h);
    (void)join_pages(t, h, &kept, n);
    heap_unlock(h);
    note_reserved(t, size);
    HISTORY_EVENT(t, TIDE_EVENT_SEGMENT_RESERVED, h->stream, addr, size);
}

/* Before a growth of p->need bytes for a request of `rounded`: stay under the high-water mark by
 * unmapping free pages elsewhere first, as for reserved segments (see grow in pressure.c), unless
 * reserved stays within a slack of the most the program has held (may_pass_mark: then the mark rises
 * as the pages are mapped); and under the garbage-collection threshold. A trim takes the smallest
 * stretch of free pages that covers it, else the largest, and only the units it needs from its top
 * (stretch_for, top_units). Returns whether anything was released (then runs may have split: plan
 * again). */
static bool trim_before_growth(tide_allocator *t, const struct placement *p, size_t rounded)
{
    bool released = false;
    if (t->conf.trim_on_growth && t->reserved + p->need > t->high_water) {
        /* Within the slack the pages are simply mapped (the mark rises as they are counted: note_reserved),
         * one by one still, as past the mark. */
        if (!may_pass_mark(t, rounded, p->need)) {
            release_pages(t, t->reserved + p->need - t->high_water, p->keep_lo, p->keep_hi, NULL, NULL);
            released = true;
        }
    }
    if (t->gc_threshold && t->reserved + p->need > t->gc_threshold) {
        size_t got = 0;
        release_pages(t, t->reserved + p->need - t->gc_threshold, p->keep_lo, p->keep_hi,
                      NULL, &got);
        t->num_gc_released += got > 0;
        released = true;
    }
    return released;
}

/* Maps the p->need bytes the plan lacks, with the block structs that joining them to their run will
 * need (*needs, for join_pages). On a failure pages mapped before it are kept as FREE memory of the
 * heap, and *needs is given back. */
static tide_status map_planned_pages(tide_allocator *t, struct heap *h, struct placement *p,
                                     struct join_needs *needs)
{
    tide_status s = join_needs_get(t, h, p, needs);
    if (s != TIDE_OK)
        return s;
    /* At or below the mark the memory was needed before, and is mapped again in units of
     * TIDE_MAP_UNIT_PAGES (see Units above); past it, page by page, so that a trim can give back any
     * of them. */
    bool paired = t->reserved + p->need <= t->high_water;
    uintptr_t stranded_at = 0;
    size_t stranded = 0;
    s = map_units(t, p->arena, p->addr, p->need, paired, &stranded_at, &stranded);
    if (stranded)
        keep_stranded_pages(t, h, p, stranded_at, stranded, needs);
    if (s != TIDE_OK) {
        heap_lock_and_settle(h);
        join_needs_put(t, h, needs);
        heap_unlock(h);
        return s;
    }
    note_reserved(t, p->need);
    HISTORY_EVENT(t, TIDE_EVENT_SEGMENT_RESERVED, h->stream, p->addr, p->need);
    return TIDE_OK;
}

tide_status expandable_grow(tide_allocator *t, struct heap *h, enum pool_kind pool, size_t rounded,
                            size_t requested, struct block **out)
{
    size_t page = t->backend.page_size;
    /* A plan can go stale while memory is released for it, or while this stream's fast path takes the
     * FREE tail it counted on: plan again, a few times. */
    bool trimmed = false;
    for (int attempt = 0; attempt < 4; attempt++) {
        struct placement p = {0};
        heap_lock_and_settle(h);
        bool placed = plan_growth(h, pool, rounded, page, &p);
        heap_unlock(h);
        if (!placed) {
            struct arena *a;
            tide_status s = arena_create(t, h, pool, rounded, &a);
            if (s != TIDE_OK)
                return s;
            continue;
        }
        /* Trimmed once, then planned again, since runs may have split (even where an unmap failed). */
        if (!trimmed && p.need) {
            trimmed = true;
            if (trim_before_growth(t, &p, rounded))
                continue;
        }
        trimmed = true;
        if (p.need > t->limit || t->reserved > t->limit - p.need)
            return TIDE_ENOMEM;
        struct join_needs needs = {NULL, NULL};
        if (p.need) {
            tide_status s = map_planned_pages(t, h, &p, &needs);
            if (s != TIDE_OK)
                return s;
        }
        heap_lock_and_settle(h);
        struct segment *run = p.need ? join_pages(t, h, &p, &needs) : p.left;
        join_needs_put(t, h, &needs);
        /* The FREE block the plan counted on, unless this stream's fast path took part of it. */
        tide_status s = TIDE_OK;
        struct block *b = NULL;
        struct block *at = segment_block_at(run, p.need ? p.addr : p.keep_lo);
        if (at && at->state == BLOCK_FREE && at->size >= rounded)
            b = heap_take_block(h, at, rounded, requested, &s);
        else
            b = heap_take_fit(h, pool, rounded, requested, &s);
        heap_unlock(h);
        if (b) {
            *out = b;
            return TIDE_OK;
        }
        if (s != TIDE_OK)
            return s;
    }
    return TIDE_ENOMEM;
}

/* ---- shrinking ----------------------------------------------------------------------------------------- */

/* A stretch of whole pages inside a FREE block. */
struct free_pages {
    struct block *block;
    uintptr_t lo, hi;
};

/* Of the stretches not taken yet (taken[k] false), the one to give back `want` bytes from: the smallest
 * that holds them all, else the largest. A trim so gives back as little past what it needs as it can,
 * as release_for_high_water does with segments (pressure.c): given back whole, the largest stretch was
 * mapped again a few steps later, every period of a loop whose shapes take turns. */
static size_t stretch_for(const struct free_pages *v, const bool *taken, size_t n, size_t want)
{
    size_t best = n, largest = n;
    for (size_t k = 0; k < n; k++) {
        if (taken[k])
            continue;
        size_t size = v[k].hi - v[k].lo;
        if (size >= want && (best == n || size < v[best].hi - v[best].lo))
            best = k;
        if (largest == n || size > v[largest].hi - v[largest].lo)
            largest = k;
    }
    return best < n ? best : largest;
}

/* The top of a stretch of whole units that holds `want` bytes: its highest units, down to the first
 * that makes up the amount. The pages that stay are the low ones, where the stretch's FREE block
 * begins. */
static void top_units(const struct arena *a, size_t page, struct free_pages *fp, size_t want)
{
    uintptr_t lo = fp->hi;
    while (lo > fp->lo && fp->hi - lo < want) {
        uintptr_t ulo, uhi;
        unit_around(a, lo - page, page, &ulo, &uhi);
        lo = ulo;
    }
    fp->lo = lo;
}

/* Under h->lock: the heap's stretches of free pages, outside [except_lo, except_hi). */
static size_t collect_free_pages(struct heap *h, size_t page, uintptr_t except_lo, uintptr_t except_hi,
                                 struct free_pages **out)
{
    size_t n = 0, cap = 0;
    struct free_pages *v = NULL;
    for (int pool = 0; pool < POOL_KINDS; pool++)
        for (struct arena *a = h->arenas[pool]; a; a = a->next)
            for (struct segment *r = a->runs; r; r = r->run_next)
                for (struct block *b = r->first; b; b = b->next) {
                    if (b->state != BLOCK_FREE)
                        continue;
                    uintptr_t lo = round_up(b->addr, page), hi = (b->addr + b->size) / page * page;
                    if (except_hi > except_lo && lo < except_hi && hi > except_lo) {
                        /* keep the pages the request will use; what lies below them may go */
                        if (hi > except_lo / page * page)
                            hi = except_lo / page * page;
                    }
                    units_inside(a, page, &lo, &hi);
                    if (hi <= lo)
                        continue;
                    if (n == cap) {
                        struct free_pages *grown = grow_table(v, &cap, sizeof *grown, 16);
                        if (!grown)
                            goto done; /* without host memory, release what was found */
                        v = grown;
                    }
                    v[n++] = (struct free_pages){b, lo, hi};
                }
done:
    *out = v;
    return n;
}

/* Under h->lock: carves [lo, hi) out of b, keeping the segment map right. The carved pages come back
 * as a segment struct on *carved_list. Everything that can fail comes first. */
static tide_status carve(tide_allocator *t, struct heap *h, const struct free_pages *fp,
                         struct segment **carved_list)
{
    struct segment *seg = fp->block->seg;
    struct segment *upper = segment_struct(t), *carved = segment_struct(t);
    struct carve_blocks cb = {0}; /* set by heap_carve_blocks; zeroed for LTO links under -Wall */
    tide_status s = upper && carved ? heap_carve_blocks(h, fp->block, fp->lo, fp->hi, &cb)
                                    : tide__fail(TIDE_EHOSTMEM, "out of host memory for a segment");
    if (s != TIDE_OK) {
        if (upper)
            segment_struct_recycle(t, upper);
        if (carved)
            segment_struct_recycle(t, carved);
        return s;
    }
    uintptr_t end = seg->base + seg->size;
    /* The upper run is findable before any block moves to it (its heap is this one, whose lock the
     * reader needs, so it sees the blocks only once they are there). Its granules are seg's, whose
     * tables exist. */
    if (fp->hi < end) {
        upper->base = fp->hi;
        upper->size = end - fp->hi;
        atomic_store_explicit(&upper->heap, h, memory_order_release);
        segment_map_enter(&t->segmap, upper, end);
    }
    bool kept_lower = false, used_upper = false;
    heap_carve_pages(h, fp->block, fp->lo, fp->hi, upper, carved, &cb, &kept_lower, &used_upper);
    struct arena *a = seg->arena;
    if (used_upper)
        run_insert(a, upper);
    else
        segment_struct_recycle(t, upper);
    if (kept_lower) {
        segment_map_shrink(&t->segmap, seg, fp->lo);
    } else {
        segment_map_remove(&t->segmap, seg);
        run_remove(seg);
        atomic_store_explicit(&seg->heap, NULL, memory_order_release);
        seg->arena = NULL;
        segment_struct_recycle(t, seg);
    }
    carved->next = *carved_list;
    *carved_list = carved;
    return TIDE_OK;
}

/* Unmaps free pages (the largest stretches first) of every heap until want bytes are gone, leaving
 * [except_lo, except_hi) alone. */
static tide_status release_pages(tide_allocator *t, size_t want, uintptr_t except_lo, uintptr_t except_hi, tide_release_report *r, size_t *released)
{
    size_t done = 0, page = t->backend.page_size;
    tide_status first_error = TIDE_OK;
    uint32_t nheaps = atomic_load(&t->nheaps);
    for (uint32_t i = 0; i < nheaps && done < want; i++) {
        struct heap *h = t->heaps[i];
        struct segment *carved = NULL;
        struct free_pages *v = NULL;
        if (h->keeps_memory)
            continue; /* a private pool in use */
        heap_lock_and_settle(h);
        size_t n = collect_free_pages(h, page, except_lo, except_hi, &v);
        bool *taken = n && want != SIZE_MAX ? calloc(n, sizeof *taken) : NULL;
        size_t planned = done;
        for (size_t j = 0; j < n && planned < want; j++) {
            size_t k = j;
            if (taken) { /* a trim: as little past want as the units allow */
                k = stretch_for(v, taken, n, want - planned);
                taken[k] = true;
                top_units(v[k].block->seg->arena, page, &v[k], want - planned);
            }
            tide_status s = carve(t, h, &v[k], &carved);
            if (s != TIDE_OK) {
                if (first_error == TIDE_OK)
                    first_error = s;
                break;
            }
            planned += v[k].hi - v[k].lo;
        }
        heap_unlock(h);
        free(taken);
        free(v);
        /* Unmap without the heap's lock: the device may wait for work whose completion needs it. */
        for (struct segment *seg = carved, *next; seg; seg = next) {
            next = seg->next;
            size_t unmapped = 0;
            /* Heard before the pages go, and what a failure leaves mapped heard again (release_segments). */
            HISTORY_EVENT(t, TIDE_EVENT_SEGMENT_RELEASED, h->stream, seg->base, seg->size);
            tide_status s = expandable_unmap_run(t, seg, &unmapped);
            if (unmapped) {
                note_released(t, unmapped, r);
                done += unmapped;
            }
            if (s == TIDE_OK) {
                segment_released(t, h, seg);
                continue;
            }
            HISTORY_EVENT(t, TIDE_EVENT_SEGMENT_RESERVED, h->stream, seg->base, seg->size);
            if (first_error == TIDE_OK) {
                char sz[32];
                first_error = tide__fail_with_context(s, "unmapping %s at 0x%llx from the %s backend",
                                                      format_bytes(seg->size, sz),
                                                      (unsigned long long)seg->base, t->backend.name);
            }
            expandable_reattach_run(t, h, seg);
        }
    }
    if (released)
        *released = done;
    return first_error;
}

tide_status expandable_release_pages(tide_allocator *t, size_t want,
                                     tide_release_report *r, size_t *released)
{
    return release_pages(t, want, 0, 0, r, released);
}

/* ---- sleeping pools (sleep.c) -------------------------------------------------------------------------- */

bool expandable_next_mapped(const struct segment *run, size_t page, uintptr_t from, uintptr_t *lo,
                            uintptr_t *hi)
{
    const struct arena *a = run->arena;
    for (uintptr_t at = from; at < run->base + run->size; at += page)
        if (a->unit_first[page_index(a, at, page)]) {
            unit_around(a, at, page, lo, hi);
            return true;
        }
    return false;
}

bool expandable_next_unmapped(const struct segment *run, size_t page, uintptr_t from, uintptr_t *lo,
                              uintptr_t *hi)
{
    const struct arena *a = run->arena;
    uintptr_t end = run->base + run->size, at = from;
    while (at < end && a->unit_first[page_index(a, at, page)])
        at += page;
    if (at >= end)
        return false;
    *lo = at;
    while (at < end && !a->unit_first[page_index(a, at, page)])
        at += page;
    *hi = at;
    return true;
}

size_t expandable_mapped_bytes(const struct segment *run, size_t page)
{
    size_t bytes = 0;
    for (uintptr_t at = run->base; at < run->base + run->size; at += page)
        bytes += run->arena->unit_first[page_index(run->arena, at, page)] ? page : 0;
    return bytes;
}

tide_status expandable_unmap_unit(tide_allocator *t, struct segment *run, uintptr_t lo, uintptr_t hi)
{
    const tide_backend *be = &t->backend;
    tide__clear_backend_message();
    uint64_t started = now_ns();
    tide_status s = be->unmap(be->ctx, lo, hi - lo);
    note_device_call(t, started);
    if (s == TIDE_OK)
        units_mark(run->arena, lo, hi, be->page_size, false);
    return s;
}

tide_status expandable_map_unit(tide_allocator *t, struct segment *run, uintptr_t lo, uintptr_t hi)
{
    const tide_backend *be = &t->backend;
    tide__clear_backend_message();
    uint64_t started = now_ns();
    tide_status s = be->map(be->ctx, lo, hi - lo);
    note_device_call(t, started);
    if (s == TIDE_OK)
        units_mark(run->arena, lo, hi, be->page_size, true);
    return s;
}

tide_status expandable_unmap_run(tide_allocator *t, struct segment *seg, size_t *unmapped)
{
    if (seg->asleep) { /* tide_destroy: what is still mapped goes, and the host copy */
        size_t page = t->backend.page_size;
        uintptr_t lo, hi;
        tide_status s = TIDE_OK;
        *unmapped = 0;
        sleep_copy_free(t, seg);
        for (uintptr_t at = seg->base; s == TIDE_OK && expandable_next_mapped(seg, page, at, &lo, &hi); at = hi)
            if ((s = expandable_unmap_unit(t, seg, lo, hi)) == TIDE_OK)
                *unmapped += hi - lo;
        if (s == TIDE_OK && in_arena_list(seg)) {
            run_remove(seg);
            seg->arena = NULL;
        }
        return s;
    }
    tide_status s = unmap_units(t, seg->arena, seg->base, seg->size, unmapped);
    if (s != TIDE_OK) { /* what is left is still mapped, and goes back to the heap */
        seg->base += *unmapped;
        seg->size -= *unmapped;
        return s;
    }
    if (in_arena_list(seg)) {
        run_remove(seg);
        seg->arena = NULL;
    }
    return TIDE_OK;
}

void expandable_reattach_run(tide_allocator *t, struct heap *h, struct segment *seg)
{
    segment_reattach(t, h, seg);
    if (!in_arena_list(seg))
        run_insert(seg->arena, seg);
}

/*
 * A heap: the blocks of one stream. It carves ACTIVE blocks out of FREE ones (splitting when the rest
 * is worth keeping), merges FREE neighbours, keeps its wholly free segments in age order for the
 * garbage collector, and keeps the pool statistics. Everything here runs under the heap's lock.
 */
#include "internal.h"
#include "hot_path.h"
#include "stats_events.h"

#include <stdlib.h>
#include <string.h>

#define BLOCKS_PER_CHUNK 128

struct block_chunk {
    struct block_chunk *next;
    struct block blocks[BLOCKS_PER_CHUNK];
};

/* A stream's small pool grows by a power of two of at least an eighth of what it holds, from
 * TIDE_SMALL_SEGMENT to TIDE_SMALL_SEGMENT_MAX. Small blocks are many and each is small: a program
 * whose small tensors keep adding up (a server's per-request state, KV-cache pieces of 1 MiB or less
 * while its load grows) reserved 2 MiB at a time, a driver call each, a thousand in an LLM serving
 * run that held 1.6 GiB of small blocks at its peak (bench/workloads/llm_serving.py: 12.9 driver calls
 * per 100 steps after the warm-up, 3.5 with growing segments). An eighth bounds what the last segment
 * adds to what the pool holds, and a pool of 16 MiB or less, as most training loops keep, still grows
 * 2 MiB at a time. Under the heap's lock. */
static size_t small_segment_size(const struct heap *h)
{
    size_t eighth = (size_t)h->stats.pool[TIDE_POOL_SMALL].reserved.cur / 8, size = TIDE_SMALL_SEGMENT;
    while (size < eighth && size < TIDE_SMALL_SEGMENT_MAX)
        size *= 2;
    return size;
}

size_t segment_size_for(struct heap *h, enum pool_kind pool, size_t rounded)
{
    if (pool == POOL_SMALL) {
        heap_lock_and_settle(h);
        size_t size = small_segment_size(h);
        heap_unlock(h);
        return size;
    }
    /* A segment for a mid-size request holds a whole number of requests of that size, rather than 20
     * MiB with a tail that only smaller requests can use: a training loop asks for the same sizes
     * again and again, and such tails add up (8 MiB requests: 16 MiB segments, not 20 with 4 left). */
    if (rounded < TIDE_LARGE_DIRECT_MIN)
        return round_up(TIDE_LARGE_SEGMENT / rounded * rounded, TIDE_SEGMENT_GRANULE);
    return round_up(rounded, TIDE_SEGMENT_GRANULE);
}

/* ---- block structs: carved from chunks, recycled, freed with the heap ----------------------------- */

struct block *block_new(struct heap *h)
{
    if (!h->spare_blocks) {
        struct block_chunk *c = aligned_alloc(_Alignof(struct block_chunk), sizeof *c);
        if (!c)
            return NULL;
        memset(c, 0, sizeof *c);
        c->next = h->chunks;
        h->chunks = c;
        for (size_t i = 0; i < BLOCKS_PER_CHUNK; i++) {
            c->blocks[i].next = h->spare_blocks;
            h->spare_blocks = &c->blocks[i];
        }
    }
    /* A spare struct holds nothing but stale links (see struct block): clear those only. */
    struct block *b = h->spare_blocks;
    h->spare_blocks = b->next;
    b->next = b->prev = b->link_next = NULL;
    b->link_pprev = NULL;
    return b;
}

/* b is FREE, so holds no uses, refs or fences, and no request. */
/* Forgets the streams other than its own that used b (tide_record_stream). */
void block_uses_clear(struct block *b)
{
    if (b->uses_cap) {
        free(b->uses.more);
        b->uses_cap = 0;
    }
    b->nuses = 0;
}

void block_recycle(struct heap *h, struct block *b)
{
    b->state = BLOCK_FREE;
    b->seg = NULL;
    b->next = h->spare_blocks;
    h->spare_blocks = b;
}

/* ---- creation -------------------------------------------------------------------------------------- */

tide_status heap_create(tide_allocator *t, tide_stream stream, uint32_t index, struct heap **out)
{
    struct heap *h = aligned_alloc(_Alignof(struct heap), sizeof *h);
    if (!h)
        return tide__fail(TIDE_EHOSTMEM, "out of host memory creating the heap of stream 0x%llx",
                          (unsigned long long)stream);
    memset(h, 0, sizeof *h);
    h->owner = t;
    h->stream = stream;
    h->index = index;
    h->stats.oversize_min = t->fit.oversize_min;
    h->pending_end = &h->pending_head;
    for (int pool = 0; pool < POOL_KINDS; pool++) {
        struct block *end = block_new(h);
        if (!end) {
            heap_destroy(h);
            return tide__fail(TIDE_EHOSTMEM, "out of host memory creating the heap of stream 0x%llx",
                              (unsigned long long)stream);
        }
        free_index_init(&h->free[pool], end);
    }
    *out = h;
    return TIDE_OK;
}

void heap_destroy(struct heap *h)
{
    if (!h)
        return;
    for (uint32_t i = 0; i < h->nqueues; i++)
        free(h->queues[i].ring);
    free(h->queues);
    free(h->fence_pool);
    ptr_map_free(&h->map);
    while (h->chunks) {
        struct block_chunk *c = h->chunks;
        h->chunks = c->next;
        for (size_t i = 0; i < BLOCKS_PER_CHUNK; i++)
            if (c->blocks[i].uses_cap)
                free(c->blocks[i].uses.more);
        free(c);
    }
    free(h);
}

/* ---- wholly free segments ------------------------------------------------------------------------- */

static bool covers_segment(const struct block *b) { return b->size == b->seg->size; }

/* The time a segment became idle orders idle segments across heaps (release_oldest). While the
 * allocator has one heap its idle list's order is that order, so no clock is read (a pair of
 * tide_malloc and tide_free that empties a segment each time read it at every free: 10 ns of 60 on
 * the H200 machine). Those segments are stamped 0, and they are indeed older than any segment idled
 * after a second heap appeared; the list stays oldest first, as tide_check requires. */
static uint64_t idle_stamp(const struct heap *h)
{
    bool several_heaps = atomic_load_explicit(&h->owner->nheaps, memory_order_relaxed) > 1;
    return several_heaps ? idle_clock() : 0;
}

/* The heap's counts, written under its lock and read by other heaps' threads without it. */
static void count_move(_Atomic(uint32_t) *count, int by)
{
    atomic_store_explicit(count, atomic_load_explicit(count, memory_order_relaxed) + (uint32_t)by,
                          memory_order_relaxed);
}

/* An idle segment asked back: not to be carved by the next allocations before it goes back (pressure.c,
 * release_asked_back): only a request of its free block's exact size takes it, and keeps it. */
static void idle_asked_back(struct heap *h, struct segment *seg)
{
    seg->serves_from_kept = seg->serves_from;
    seg->serves_from = SIZE_MAX;
    atomic_fetch_add_explicit(&h->owner->asked_back_idle, 1, memory_order_relaxed);
}

static void idle_append_at(struct heap *h, struct segment *seg, uint64_t since)
{
    seg->idle = true;
    seg->harbours_small = false; /* nothing in use pins it now */
    count_move(&h->idle_count, 1);
    if (TIDE_UNLIKELY(seg->asked_back))
        idle_asked_back(h, seg);
    seg->idle_since = since;
    seg->idle_next = NULL;
    seg->idle_prev = h->idle_tail;
    if (h->idle_tail)
        h->idle_tail->idle_next = seg;
    else
        h->idle_head = seg;
    h->idle_tail = seg;
}

static void idle_append(struct heap *h, struct segment *seg) { idle_append_at(h, seg, idle_stamp(h)); }

static void idle_unlink(struct heap *h, struct segment *seg)
{
    if (seg->idle_prev)
        seg->idle_prev->idle_next = seg->idle_next;
    else
        h->idle_head = seg->idle_next;
    if (seg->idle_next)
        seg->idle_next->idle_prev = seg->idle_prev;
    else
        h->idle_tail = seg->idle_prev;
    seg->idle_prev = seg->idle_next = NULL;
    seg->idle = false;
    count_move(&h->idle_count, -1);
    if (TIDE_UNLIKELY(seg->asked_back)) {
        seg->asked_back = false;
        seg->serves_from = seg->serves_from_kept;
        atomic_fetch_sub_explicit(&h->owner->asked_back_idle, 1, memory_order_relaxed);
    }
}

static void segment_link(struct heap *h, struct segment *seg)
{
    count_move(&h->segment_count, 1);
    seg->prev = NULL;
    seg->next = h->segments;
    if (h->segments)
        h->segments->prev = seg;
    h->segments = seg;
}

static void segment_unlink(struct heap *h, struct segment *seg)
{
    count_move(&h->segment_count, -1);
    if (seg->prev)
        seg->prev->next = seg->next;
    else
        h->segments = seg->next;
    if (seg->next)
        seg->next->prev = seg->prev;
    seg->prev = seg->next = NULL;
}

/* ---- taking and returning blocks ------------------------------------------------------------------ */

/* Whether a FREE block of size bytes in seg, taken for rounded bytes, is split. */
static bool worth_splitting(const struct segment *seg, size_t size, size_t rounded)
{
    size_t rest = size - rounded;
    if (seg->pool == POOL_SMALL)
        return rest >= TIDE_UNIT;
    /* In a run of pages every size shares the pool (pool_for_size), so any rest can serve a later
     * request, and its whole pages can be unmapped; in a reserved segment a small rest would only
     * fragment the large pool. */
    size_t least = seg->arena ? TIDE_UNIT : TIDE_LARGE_SPLIT_MIN_REST + 1;
    return rest >= least;
}

/* n->prev = prev, unless n is NULL (the end of the segment). Whether a block is its segment's last is a
 * coin toss on the random paths, so the store goes to a scratch word instead of being branched around.
 * The word is the heap's, not a local, whose address would give most of the hot path a stack canary
 * (see TIDE_NO_CANARY in types.h). */
static inline void link_prev(struct heap *h, struct block *n, struct block *prev)
{
    *(n ? &n->prev : &h->link_scratch) = prev;
}

/* Makes the FREE block b ACTIVE for rounded bytes, splitting off the rest if worth it. */
struct block *heap_take_block(struct heap *h, struct block *b, size_t rounded, size_t requested,
                                tide_status *status)
{
    TIDE_ASSERT(b->state == BLOCK_FREE); /* a block taken is FREE */
    struct free_index *fi = heap_free_index(h, b->seg->pool);
    /* The only step that can fail comes first, so a failure changes nothing. */
    tide_status s = ptr_map_insert(&h->map, b);
    if (s != TIDE_OK) {
        *status = s;
        return NULL;
    }
    free_index_remove(fi, b);
    int64_t idle_segment = 0;
    if (TIDE_UNLIKELY(b->seg->idle)) {
        idle_segment = (int64_t)b->seg->size;
        idle_unlink(h, b->seg);
    }

    int64_t split_off = 0;
    if (TIDE_LIKELY(worth_splitting(b->seg, b->size, rounded))) {
        struct block *rest = block_new(h);
        /* without host memory for a block struct, hand out the whole block instead */
        if (TIDE_LIKELY(rest != NULL)) {
            split_off = 1;
            rest->seg = b->seg;
            rest->addr = b->addr + rounded;
            rest->size = b->size - rounded;
            rest->prev = b;
            rest->next = b->next;
            link_prev(h, b->next, rest);
            b->next = rest;
            b->size = rounded;
            rest->state = BLOCK_FREE;
            free_index_insert(fi, rest);
        }
    }
    b->state = BLOCK_ACTIVE;
    b->seg->busy++;
    b->tag = NULL; /* set by the history, if one is on */
    b->site = NULL;
    b->requested = requested; /* refs, fences and uses are 0 already: it was FREE */

    stats_take(&h->stats, b->seg->pool, (int64_t)b->size, (int64_t)requested, idle_segment,
               split_off - (idle_segment == 0));
    return b;
}

struct block *heap_take_fit_by(struct heap *h, enum pool_kind pool, size_t rounded, size_t requested,
                               const struct fit_rules *rules, tide_status *status)
{
    struct block *b = free_index_find(heap_free_index(h, pool), rounded, rules);
    if (!b)
        return NULL;
    return heap_take_block(h, b, rounded, requested, status);
}

/* Past the high-water mark the fit rules are lifted: a cached block serves rather than the program's
 * peak rising (pressure.c). A small request placed in a large segment's free block then keeps that
 * whole segment reserved while it lives, and a long-lived one for good: a training loop's momentum
 * buffers, made while its activations fill the large segments, each landed in whichever segment best
 * fitted it, so that neither segment reserved for a 2 GiB convolution workspace was ever wholly free
 * again, and every evaluation batch reserved a third (ResNet-18 with variable image sizes,
 * bench/workloads/vision.py: 28 driver calls per 100 steps, 0.2 with this rule). So
 * a request that would pin a large segment no small block pins yet goes to one that a small block pins
 * already, if any of its free blocks holds it: the small blocks gather in few segments, and the others
 * stay free for the large requests they were made for. */
struct block *heap_take_past_mark(struct heap *h, enum pool_kind pool, size_t rounded, size_t requested,
                                  const struct fit_rules *rules, tide_status *status)
{
    struct free_index *fi = heap_free_index(h, pool);
    struct block *b = free_index_find(fi, rounded, &fit_any);
    if (!b)
        return NULL;
    /* Small by the share rule alone: a block below max_split_size_mb's bound but above the share
     * pins nothing the share rule would keep free. */
    bool pins = b->size != rounded && fit_below_share(rules, b->seg, rounded);
    if (pins && !b->seg->harbours_small) {
        struct fit_rules harbours = *rules;
        harbours.lifted_in_harbours = true;
        struct block *harboured = free_index_find(fi, rounded, &harbours);
        if (harboured)
            b = harboured;
    }
    if (pins)
        b->seg->harbours_small = true;
    return heap_take_block(h, b, rounded, requested, status);
}

struct block *heap_take_at(struct heap *h, struct block *b, uintptr_t addr, size_t size, size_t requested,
                          tide_status *status)
{
    struct free_index *fi = heap_free_index(h, b->seg->pool);
    uintptr_t end = b->addr + b->size;
    bool below = addr > b->addr, above = addr + size < end;
    /* Block structs first, the only step besides the pointer map's that can fail. */
    struct block *taken = below ? block_new(h) : b;
    struct block *rest = above ? block_new(h) : NULL;
    if (!taken || (above && !rest)) {
        if (taken && taken != b)
            block_recycle(h, taken);
        if (rest)
            block_recycle(h, rest);
        *status = tide__fail(TIDE_EHOSTMEM, "out of host memory for a block");
        return NULL;
    }
    if (below) { /* b keeps what lies below addr, FREE */
        free_index_remove(fi, b);
        taken->seg = b->seg;
        taken->addr = addr;
        taken->size = end - addr;
        taken->state = BLOCK_FREE;
        taken->prev = b;
        taken->next = b->next;
        link_prev(h, b->next, taken);
        b->next = taken;
        b->size = addr - b->addr;
        free_index_insert(fi, b);
        free_index_insert(fi, taken);
    }
    if (above) { /* split here, whatever worth_splitting would say: the next restored block may lie there */
        free_index_remove(fi, taken);
        rest->seg = taken->seg;
        rest->addr = addr + size;
        rest->size = end - rest->addr;
        rest->state = BLOCK_FREE;
        rest->prev = taken;
        rest->next = taken->next;
        link_prev(h, taken->next, rest);
        taken->next = rest;
        taken->size = size;
        free_index_insert(fi, taken);
        free_index_insert(fi, rest);
    }
    struct block *got = heap_take_block(h, taken, size, requested, status);
    if (got) { /* heap_take_block counted taken's own block: the pieces around it are FREE blocks too */
        split_blocks_added(&h->stats, got->seg->pool, (int64_t)below + (int64_t)above);
        return got;
    }
    /* The pointer map could not grow: merge the pieces back, as they were. */
    free_index_remove(fi, taken);
    if (rest) {
        free_index_remove(fi, rest);
        taken->size += rest->size;
        taken->next = rest->next;
        link_prev(h, rest->next, taken);
        block_recycle(h, rest);
    }
    if (below) {
        free_index_remove(fi, b);
        b->size += taken->size;
        b->next = taken->next;
        link_prev(h, taken->next, b);
        block_recycle(h, taken);
    }
    free_index_insert(fi, b);
    return NULL;
}

void heap_adopt_free(struct heap *h, struct segment *seg, struct block *b)
{
    b->seg = seg;
    b->addr = seg->base;
    b->size = seg->size;
    b->state = BLOCK_FREE;
    seg->first = b;
    seg->busy = 0;
    atomic_store_explicit(&seg->heap, h, memory_order_release);
    segment_link(h, seg);

    stats_segment_added(&h->stats, seg->pool, (int64_t)seg->size, seg->oversize);
    free_index_insert(heap_free_index(h, seg->pool), b);
    idle_append(h, seg);
}

/* ---- the end of a phase -------------------------------------------------------------------------- */

bool heap_holds_nothing(const struct heap *h)
{
    return atomic_load_explicit(&h->idle_count, memory_order_relaxed) ==
           atomic_load_explicit(&h->segment_count, memory_order_relaxed);
}

/* A heap of private pool 0 keeps no memory for a pool's use count; its pool, backend and vm are written
 * under its lock. trim_on_growth:False keeps everything until the program asks (PyTorch's way). */
bool heap_ends_phases(const struct heap *h)
{
    const struct tide_config *c = &h->owner->conf;
    return h->pool_id == 0 && !h->backend && !h->vm && !c->expandable_segments && c->trim_on_growth;
}

size_t heap_ask_back_idle(struct heap *h, bool count_only)
{
    size_t n = 0;
    for (struct segment *seg = h->idle_head; seg; seg = seg->idle_next) {
        if (seg->pool != POOL_LARGE || seg->asked_back)
            continue;
        n++;
        if (!count_only) {
            seg->asked_back = true;
            idle_asked_back(h, seg);
        }
    }
    return n;
}

/* The program has let go of every block, after a phase of many allocations: a training run ended and
 * its model was deleted, an epoch's loop freed all it held, a benchmark's repetition ended. Its cache
 * holds segments shaped for that phase, all wholly free. Kept, they are carved by the next phase's first
 * requests, which a new allocator would have given segments of their own, and the phase then peaks
 * higher: instance segmentation's loop replayed twice peaked 6.6% above its first pass in the second,
 * its 244 MiB request finding every segment made for it carved by earlier, smaller ones. So its idle
 * large-pool segments are asked back, as tide_empty_cache asks back a segment it had to keep
 * (pressure.c): each goes back at the next allocation that leaves the fast path, the other heaps'
 * with them, and the high-water mark restarts, as a new allocator's would. Only where no other heap
 * holds anything (their counts read as a hint), and only after TIDE_PHASE_ALLOCS_PER_SEGMENT
 * allocations per such segment since this stream last held nothing: a loop that lets go of
 * everything at each step keeps its cache. */
static __attribute__((noinline, cold)) void heap_emptied(struct heap *h)
{
    /* Counted by the statistics (what tide_reset_accumulated_stats restarts: the phase then reads as
     * short, and ends nothing). */
    int64_t allocs = h->stats.pool[TIDE_POOL_SMALL].gained.blocks + h->stats.pool[TIDE_POOL_LARGE].gained.blocks;
    int64_t phase = allocs - h->allocs_when_emptied;
    h->allocs_when_emptied = allocs;
    /* The cheap test first: most emptyings end a short phase (a loop's step), and the count walks the
     * idle list. A stream with no idle large segment ends nothing: a side stream that lets go of its few
     * small blocks at every step would otherwise end the other streams' phases each time. */
    if (!heap_ends_phases(h) || phase < TIDE_PHASE_ALLOCS_PER_SEGMENT)
        return;
    size_t idle_large = heap_ask_back_idle(h, true);
    if (idle_large == 0 || phase < TIDE_PHASE_ALLOCS_PER_SEGMENT * (int64_t)idle_large)
        return;
    tide_allocator *t = h->owner;
    for (uint32_t i = 0; i < atomic_load(&t->nheaps); i++)
        if (t->heaps[i] != h && !heap_holds_nothing(t->heaps[i]))
            return;
    heap_ask_back_idle(h, false);
    atomic_store(&t->phase_ended, true);
}

/* heap_make_free, with the time the segment goes idle at (if it does) given or read now. */
static inline __attribute__((always_inline)) size_t make_free(struct heap *h, struct block *b, bool stamp_given,
                                                              uint64_t since)
{
    /* a block freed was in use: by the program, by the device's work, or parked */
    TIDE_ASSERT(b->state == BLOCK_ACTIVE || b->state == BLOCK_PENDING || b->state == BLOCK_PARKED);
    TIDE_ASSERT(b->seg->busy > 0);
    struct free_index *fi = heap_free_index(h, b->seg->pool);
    b->state = BLOCK_FREE;
    b->seg->busy--;
    b->requested = 0;
    block_uses_clear(b);
    /* Merge with FREE neighbours. A PENDING or ACTIVE neighbour is left alone. */
    int64_t merged = 0;
    struct block *prev = b->prev;
    if (prev && prev->state == BLOCK_FREE) {
        merged++;
        free_index_remove(fi, prev);
        prev->size += b->size;
        prev->next = b->next;
        link_prev(h, b->next, prev);
        block_recycle(h, b);
        b = prev;
    }
    struct block *next = b->next;
    if (next && next->state == BLOCK_FREE) {
        merged++;
        free_index_remove(fi, next);
        b->size += next->size;
        b->next = next->next;
        link_prev(h, next->next, b);
        block_recycle(h, next);
    }
    free_index_insert(fi, b);
    bool covers = covers_segment(b);
    split_blocks_moved(&h->stats, b->seg->pool, 1 - merged - (int64_t)covers);
    if (stamp_given) /* the parked block's merge (heap_settle): its free is done; a drain's peaks wait */
        split_blocks_peak(&h->stats, b->seg->pool);
    if (TIDE_LIKELY(!covers))
        return 0;
    idle_append_at(h, b->seg, stamp_given ? since : idle_stamp(h));
    if (TIDE_UNLIKELY(heap_holds_nothing(h)))
        heap_emptied(h);
    return b->seg->size;
}

size_t heap_make_free(struct heap *h, struct block *b) { return make_free(h, b, false, 0); }

/* ---- the parked block ------------------------------------------------------------------------------ */

/* The size of b's segment if merging b with its FREE neighbours would leave the segment wholly free,
 * else 0: when b is its only block that is not FREE, since FREE neighbours are always merged. (A count,
 * not a look at the neighbours: whether they are FREE is a coin toss a branch predictor loses.) */
static size_t merge_would_cover(const struct block *b)
{
    return b->seg->busy == 1 ? b->seg->size : 0;
}

size_t heap_park(struct heap *h, struct block *b)
{
    TIDE_ASSERT(b->state == BLOCK_ACTIVE && b != h->parked);
    if (h->parked)
        heap_settle(h);
    b->state = BLOCK_PARKED;
    b->requested = 0;
    block_uses_clear(b);
    h->parked = b;
    h->parked_covers = merge_would_cover(b);
    /* read now, as the merge would have: the idle list's order across heaps is by this time */
    h->parked_since = h->parked_covers ? idle_stamp(h) : 0;
    return h->parked_covers;
}

void heap_settle(struct heap *h)
{
    struct block *b = h->parked;
    TIDE_ASSERT(b->state == BLOCK_PARKED);
    h->parked = NULL;
    /* It stayed in the pointer map while parked, so that taking it back costs no insertion. */
    ptr_map_remove(&h->map, b);
    make_free(h, b, true, h->parked_since);
}

struct block *heap_reuse_parked(struct heap *h, enum pool_kind pool, size_t rounded, size_t requested)
{
    struct block *b = h->parked, *prev = b->prev, *next = b->next;
    TIDE_ASSERT(b->state == BLOCK_PARKED);
    /* The merge would start at a FREE block before it, and the split there: another address. A block
     * larger than the request would be split, and the rest left elsewhere. */
    if (b->size != rounded || b->seg->pool != pool || (prev && prev->state == BLOCK_FREE))
        return NULL;
    bool absorbs_next = next && next->state == BLOCK_FREE;
    size_t merged = rounded + (absorbs_next ? next->size : 0);
    /* With a FREE block after it, the merged block would be split again at rounded bytes: unless it
     * would not be (a rest too small to keep), the layout comes back as it is. */
    if (absorbs_next && !worth_splitting(b->seg, merged, rounded))
        return NULL;
    /* A segment asked back (pressure.c) that the merge would leave wholly free serves only its free
     * block's exact size, and taken so, is asked back no more. */
    bool asked_back_idle = h->parked_covers && TIDE_UNLIKELY(b->seg->asked_back);
    if (asked_back_idle && absorbs_next)
        return NULL;
    struct free_index *fi = heap_free_index(h, pool);
    if (!free_index_would_find(fi, rounded, &h->owner->fit, b->seg, merged, absorbs_next ? next : NULL))
        return NULL;
    if (asked_back_idle)
        b->seg->asked_back = false;
    /* What the merge, the search and the split would have changed besides: the split's rest, the
     * FREE block after b again, filed at the front of its class (in the very struct, which the merge
     * recycles and the split takes back); the segment put on the idle list and taken off it. */
    if (absorbs_next)
        free_index_to_front(fi, next);
    /* The merge would have added a FREE block (no FREE neighbour, its segment not wholly free after), or
     * made the segment wholly free out of the block after it, which the take splits off again. */
    if ((h->parked_covers != 0) == absorbs_next)
        split_blocks_passed(&h->stats, pool, h->parked_covers == 0);
    h->parked = NULL;
    b->state = BLOCK_ACTIVE;
    b->tag = NULL;
    b->site = NULL;
    b->requested = requested;
    stats_take(&h->stats, pool, (int64_t)b->size, (int64_t)requested, (int64_t)h->parked_covers, 0);
    return b;
}

/* ---- releasing and re-adopting whole segments -------------------------------------------------------- */

size_t heap_detach_idle_segment(struct heap *h, struct segment *seg, struct segment **out)
{
    idle_unlink(h, seg);
    free_index_remove(heap_free_index(h, seg->pool), seg->first); /* it keeps seg->first */
    segment_unlink(h, seg);
    atomic_store_explicit(&seg->heap, NULL, memory_order_release);

    stats_segment_removed(&h->stats, seg->pool, (int64_t)seg->size, seg->oversize);

    seg->next = *out;
    *out = seg;
    return seg->size;
}

size_t heap_detach_idle(struct heap *h, uint64_t before, size_t want, struct segment **out)
{
    size_t detached = 0;
    while (detached < want && h->idle_head && h->idle_head->idle_since <= before)
        detached += heap_detach_idle_segment(h, h->idle_head, out);
    return detached;
}

size_t heap_detach_asked_back(struct heap *h, struct segment **out)
{
    size_t detached = 0;
    for (struct segment *seg = h->idle_head, *next; seg; seg = next) {
        next = seg->idle_next;
        if (seg->asked_back)
            detached += heap_detach_idle_segment(h, seg, out);
    }
    return detached;
}

void heap_reattach_idle(struct heap *h, struct segment *seg)
{
    heap_adopt_free(h, seg, seg->first);
}

void heap_released(struct heap *h, struct segment *seg)
{
    block_recycle(h, seg->first);
    seg->first = NULL;
}

struct block *segment_block_at(struct segment *seg, uintptr_t addr)
{
    for (struct block *b = seg->first; b; b = b->next)
        if (addr >= b->addr && addr < b->addr + b->size)
            return b;
    return NULL;
}

/* ---- runs of mapped pages (expandable segments) ---------------------------------------------------- */
/*
 * Runs grow, shrink, split and merge only by FREE bytes, so ACTIVE and PENDING blocks (and the
 * allocated, pending and active statistics) never move. What does move is how a run's bytes count:
 * reserved, segments, cached, and whether its FREE bytes are releasable (a wholly free run) or split
 * cache. Each operation takes a run's whole contribution out before and puts it back after, from a walk
 * of its blocks; these are slow paths beside a driver call.
 */

struct block *segment_last_block(const struct segment *seg)
{
    struct block *b = seg->first;
    while (b && b->next)
        b = b->next;
    return b;
}

static bool wholly_free(const struct segment *seg)
{
    return seg->first && seg->first->state == BLOCK_FREE && seg->first->size == seg->size;
}

/* A run's pages enter or leave the pool's statistics (around a change of the run). Its blocks stay
 * counted as they are (ACTIVE, PENDING), so between the two calls the derived statistics are off by
 * the run. The cache's peaks and the segment count's are checked by the call that changed the run,
 * once it is done (stats_settle). */
static void run_stats(struct heap *h, struct segment *seg, bool adding)
{
    int64_t size = (int64_t)seg->size;
    bool whole = wholly_free(seg);
    int64_t split_blocks = 0; /* FREE blocks in a run that is not wholly free */
    for (const struct block *b = seg->first; b && !whole; b = b->next)
        split_blocks += b->state == BLOCK_FREE;
    enum pool_kind pool = (enum pool_kind)seg->pool; /* BOTH's argument must be called pool */
    BOTH(&h->stats, pool, p, {
        if (adding) {
            rise(&p->reserved, size);
            p->segment.cur++; /* its peak and split_blocks': stats_settle */
            p->split_blocks.cur += split_blocks;
            if (whole)
                p->idle += size;
        } else {
            fall(&p->reserved, size);
            fall(&p->segment, 1);
            p->split_blocks.cur -= split_blocks;
            if (whole)
                p->idle -= size;
        }
    });
}

/* A change of runs goes through run_stats twice for each run it touches (out, then in again), so its
 * gains (struct stat_gains) are counted once, as the net rise of each statistic over the change: pages
 * mapped onto a run gain reserved bytes, a run split in two gains a segment, a free tail that grew in
 * a run that is not wholly free gains split cache. */
static struct stat_values run_change_begin(struct heap *h, const struct segment *seg)
{
    return stats_values(event_pool(&h->stats, (enum pool_kind)seg->pool));
}

static int64_t rise_over(int64_t after, int64_t before) { return after > before ? after - before : 0; }

static void run_change_end(struct heap *h, const struct segment *seg, const struct stat_values *before)
{
    struct pool_stats *p = event_pool(&h->stats, (enum pool_kind)seg->pool);
    struct stat_values after = stats_values(p);
    p->gained.reserved += rise_over(after.reserved, before->reserved);
    p->gained.segments += rise_over(after.segment, before->segment);
    p->gained.split += rise_over(after.split, before->split);
    p->gained.split_blocks += rise_over(after.split_blocks, before->split_blocks);
}

/* A run is on the idle list exactly when it is wholly free. */
static void run_refresh_idle(struct heap *h, struct segment *seg)
{
    bool whole = wholly_free(seg);
    if (whole && !seg->idle)
        idle_append(h, seg);
    else if (!whole && seg->idle)
        idle_unlink(h, seg);
}

void heap_extend_run(struct heap *h, struct segment *seg, size_t extra, struct block **spare)
{
    struct block *tail = segment_last_block(seg);
    struct block *added = NULL;
    if (tail->state != BLOCK_FREE) {
        added = *spare;
        *spare = NULL;
    }
    struct free_index *fi = heap_free_index(h, seg->pool);
    struct stat_values before = run_change_begin(h, seg);
    run_stats(h, seg, false);
    if (added) {
        added->seg = seg;
        added->addr = seg->base + seg->size;
        added->size = extra;
        added->state = BLOCK_FREE;
        added->prev = tail;
        tail->next = added;
        free_index_insert(fi, added);
    } else {
        free_index_remove(fi, tail);
        tail->size += extra;
        free_index_insert(fi, tail);
    }
    seg->size += extra;
    run_stats(h, seg, true);
    run_refresh_idle(h, seg);
    run_change_end(h, seg, &before);
}

void heap_merge_runs(struct heap *h, struct segment *lo, struct segment *hi)
{
    struct free_index *fi = heap_free_index(h, lo->pool);
    struct stat_values before = run_change_begin(h, lo);
    run_stats(h, lo, false);
    run_stats(h, hi, false);
    if (hi->idle)
        idle_unlink(h, hi);
    struct block *tail = segment_last_block(lo), *head = hi->first;
    for (struct block *b = head; b; b = b->next)
        b->seg = lo;
    lo->busy += hi->busy;
    hi->busy = 0;
    tail->next = head;
    head->prev = tail;
    lo->size += hi->size;
    if (tail->state == BLOCK_FREE && head->state == BLOCK_FREE) {
        free_index_remove(fi, tail);
        free_index_remove(fi, head);
        tail->size += head->size;
        tail->next = head->next;
        if (head->next)
            head->next->prev = tail;
        block_recycle(h, head);
        free_index_insert(fi, tail);
    }
    hi->first = NULL;
    segment_unlink(h, hi);
    atomic_store_explicit(&hi->heap, NULL, memory_order_release);
    run_stats(h, lo, true);
    run_refresh_idle(h, lo);
    run_change_end(h, lo, &before);
}

tide_status heap_carve_blocks(struct heap *h, struct block *b, uintptr_t lo, uintptr_t hi,
                              struct carve_blocks *cb)
{
    /* What is left of b below lo stays b; what is left above hi is b too if nothing is left below; the
     * carved pages take b where nothing of it is left, else a block struct of their own. */
    bool left_below = b->addr < lo, left_above = b->addr + b->size > hi;
    cb->rest_high = left_above ? (left_below ? block_new(h) : b) : NULL;
    cb->carved = left_below || left_above ? block_new(h) : b;
    if ((!left_above || cb->rest_high) && cb->carved)
        return TIDE_OK;
    if (cb->rest_high && cb->rest_high != b)
        block_recycle(h, cb->rest_high);
    if (cb->carved && cb->carved != b)
        block_recycle(h, cb->carved);
    return tide__fail(TIDE_EHOSTMEM, "out of host memory for a block");
}

void heap_carve_pages(struct heap *h, struct block *b, uintptr_t lo, uintptr_t hi, struct segment *upper,
                      struct segment *carved, const struct carve_blocks *cb, bool *kept_lower,
                      bool *used_upper)
{
    struct segment *seg = b->seg;
    struct free_index *fi = heap_free_index(h, seg->pool);
    uintptr_t end = seg->base + seg->size, b_end = b->addr + b->size;
    bool has_lower = lo > seg->base, has_upper = hi < end;
    struct block *below = b->prev, *above = b->next, *rest_high = cb->rest_high, *carved_block = cb->carved;
    bool b_left_below = b->addr < lo;
    struct stat_values before = run_change_begin(h, seg);
    run_stats(h, seg, false);
    if (seg->idle)
        idle_unlink(h, seg);
    free_index_remove(fi, b);

    if (b_left_below) {
        b->size = lo - b->addr;
        free_index_insert(fi, b);
        below = b;
    }
    if (rest_high) {
        rest_high->seg = upper;
        rest_high->addr = hi;
        rest_high->size = b_end - hi;
        rest_high->state = BLOCK_FREE;
        rest_high->next = above;
        if (above)
            above->prev = rest_high;
        above = rest_high;
        free_index_insert(fi, rest_high);
    }
    if (below)
        below->next = NULL;
    if (above)
        above->prev = NULL;

    carved->base = lo;
    carved->size = hi - lo;
    carved->pool = seg->pool;
    carved->arena = seg->arena;
    carved->first = carved_block;
    carved->busy = 0;
    carved_block->seg = carved;
    carved_block->addr = lo;
    carved_block->size = hi - lo;
    carved_block->state = BLOCK_FREE;
    carved_block->prev = carved_block->next = NULL;
    atomic_store_explicit(&carved->heap, NULL, memory_order_relaxed);

    if (has_upper) {
        upper->base = hi;
        upper->size = end - hi;
        upper->pool = seg->pool;
        upper->arena = seg->arena;
        upper->first = above;
        upper->busy = 0;
        for (struct block *x = above; x; x = x->next) {
            x->seg = upper;
            upper->busy += x->state != BLOCK_FREE;
        }
        seg->busy -= upper->busy;
        atomic_store_explicit(&upper->heap, h, memory_order_release);
        segment_link(h, upper);
        run_stats(h, upper, true);
        run_refresh_idle(h, upper);
    }
    if (has_lower) {
        seg->size = lo - seg->base;
        run_stats(h, seg, true);
        run_refresh_idle(h, seg);
    } else {
        seg->first = NULL;
        segment_unlink(h, seg);
    }
    run_change_end(h, carved, &before); /* carved: seg's pool, whatever became of seg */
    *kept_lower = has_lower;
    *used_upper = has_upper;
}

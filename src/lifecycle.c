/*
 * The lifecycle of a block after tide_malloc: ACTIVE, then at tide_free either FREE at once or PENDING
 * until the device is done with it, then FREE.
 *
 * A freed block stays PENDING while any of three things holds:
 *   - references: in-flight work retained it and has not released it yet (Metal's model);
 *   - fences: other streams used it (tide_record_stream), and the fence recorded on each of them at
 *     free has not signalled yet (CUDA's model);
 *   - an owed synchronize: a fence could not be created or recorded, so only a device synchronize that
 *     starts after the free can prove the other streams are done.
 *
 * Fences are kept in one queue per stream, oldest first: a stream reaches its fences in order, so a
 * poll stops at the first unsignalled fence of each stream and never queries the ones behind it.
 * Everything here runs under the heap's lock.
 */
#include "internal.h"
#include "stats_events.h"
#include "history_events.h"

#include <stdlib.h>
#include <string.h>

/* ---- the streams that used a block ----------------------------------------------------------------- */

static tide_stream *uses_of(struct block *b) { return b->uses_cap ? b->uses.more : b->uses.inline_; }

static tide_status uses_add(struct block *b, tide_stream stream)
{
    tide_stream *uses = uses_of(b);
    for (uint16_t i = 0; i < b->nuses; i++)
        if (uses[i] == stream)
            return TIDE_OK;
    size_t cap = b->uses_cap ? b->uses_cap : 2;
    if (b->nuses == cap) {
        if (cap >= UINT16_MAX / 2)
            return tide__fail(TIDE_EINVAL, "a block cannot be used by more than %zu streams", cap);
        tide_stream *more = realloc(b->uses_cap ? b->uses.more : NULL, 2 * cap * sizeof *more);
        if (!more)
            return tide__fail(TIDE_EHOSTMEM, "out of host memory recording a stream use");
        if (!b->uses_cap)
            memcpy(more, b->uses.inline_, sizeof b->uses.inline_);
        b->uses.more = more;
        b->uses_cap = (uint16_t)(2 * cap);
        uses = more;
    }
    uses[b->nuses++] = stream;
    return TIDE_OK;
}

tide_status lifecycle_record_stream(struct heap *h, struct block *b, tide_stream stream)
{
    if (stream == h->stream)
        return TIDE_OK; /* the block's own stream orders its uses already */
    return uses_add(b, stream);
}

/* ---- fences ---------------------------------------------------------------------------------------- */

static void fence_put(struct heap *h, void *fence)
{
    const tide_backend *be = &h->owner->backend;
    if (h->nfence_pool == h->fence_pool_cap) {
        uint32_t cap = h->fence_pool_cap ? 2 * h->fence_pool_cap : 16;
        void **pool = realloc(h->fence_pool, cap * sizeof *pool);
        if (!pool) {
            be->fence_destroy(be->ctx, fence);
            return;
        }
        h->fence_pool = pool;
        h->fence_pool_cap = cap;
    }
    h->fence_pool[h->nfence_pool++] = fence;
}

static struct fence_queue *queue_for(struct heap *h, tide_stream stream)
{
    for (uint32_t i = 0; i < h->nqueues; i++)
        if (h->queues[i].stream == stream)
            return &h->queues[i];
    if (h->nqueues == h->queues_cap) {
        uint32_t cap = h->queues_cap ? 2 * h->queues_cap : 4;
        struct fence_queue *q = realloc(h->queues, cap * sizeof *q);
        if (!q)
            return NULL;
        h->queues = q;
        h->queues_cap = cap;
    }
    struct fence_queue *q = &h->queues[h->nqueues++];
    memset(q, 0, sizeof *q);
    q->stream = stream;
    return q;
}

static bool queue_reserve_one(struct fence_queue *q)
{
    if (q->count < q->cap)
        return true;
    uint32_t cap = q->cap ? 2 * q->cap : 16;
    struct fence_entry *ring = malloc(cap * sizeof *ring);
    if (!ring)
        return false;
    for (uint32_t i = 0; i < q->count; i++)
        ring[i] = q->ring[(q->head + i) % q->cap];
    free(q->ring);
    q->ring = ring;
    q->head = 0;
    q->cap = cap;
    return true;
}

/* Records a fence on stream for b. false if that could not be done (the caller owes a synchronize). */
static bool record_fence(struct heap *h, struct block *b, tide_stream stream, uint64_t seq)
{
    const tide_backend *be = &h->owner->backend;
    struct fence_queue *q = queue_for(h, stream);
    if (!q || !queue_reserve_one(q))
        return false;
    void *fence;
    if (h->nfence_pool) {
        fence = h->fence_pool[--h->nfence_pool];
    } else if (be->fence_create(be->ctx, &fence) != TIDE_OK) {
        return false;
    }
    if (be->fence_record(be->ctx, fence, stream) != TIDE_OK) {
        fence_put(h, fence);
        return false;
    }
    q->ring[(q->head + q->count) % q->cap] = (struct fence_entry){fence, b, seq};
    q->count++;
    b->fences++;
    return true;
}

/* ---- the pending list ------------------------------------------------------------------------------- */

static void pending_append(struct heap *h, struct block *b)
{
    b->link_next = NULL;
    b->link_pprev = h->pending_end;
    *h->pending_end = b;
    h->pending_end = &b->link_next;
}

static void pending_unlink(struct heap *h, struct block *b)
{
    *b->link_pprev = b->link_next;
    if (b->link_next)
        b->link_next->link_pprev = b->link_pprev;
    else /* it was the last: the link that pointed to it is where the next one goes */
        h->pending_end = b->link_pprev;
    b->link_next = NULL;
    b->link_pprev = NULL;
}

/* A PENDING block with nothing left holding it becomes FREE. */
static bool finish_if_done(struct heap *h, struct block *b)
{
    if (b->state != BLOCK_PENDING || b->refs || b->fences || b->needs_sync)
        return false;
    pending_unlink(h, b);
    h->stats.num_pending_drained++;
    history_heap_event(h, TIDE_EVENT_FREE_COMPLETED, b->addr, b->size, NULL);
    OBSERVE_PENDING(h, TIDE_EVENT_FREE_COMPLETED, b);
    ptr_map_remove(&h->map, b);
    enum pool_kind pool = b->seg->pool;
    int64_t size = (int64_t)b->size;
    stats_pending_to_free(&h->stats, pool, size, (int64_t)heap_make_free(h, b));
    return true;
}

/* ---- transitions ------------------------------------------------------------------------------------ */

/* A fence on each stream b was used on, for lifecycle_free. Out of line: record_fence takes the address
 * of a local, which inlined would give lifecycle_free (every tide_free) a stack canary (see
 * TIDE_NO_CANARY in types.h). */
__attribute__((noinline)) static void record_uses(struct heap *h, struct block *b)
{
    /* Stamped before the fences are recorded: a synchronize that reads a later sequence number started
     * after this free began, so after the uses this free protects were submitted. */
    uint64_t seq = atomic_fetch_add(&h->owner->pending_seq, 1);
    tide_stream *uses = uses_of(b);
    for (uint16_t i = 0; i < b->nuses; i++) {
        if (!record_fence(h, b, uses[i], seq)) {
            h->stats.num_fence_errors++;
            b->needs_sync |= BLOCK_OWES_SYNC;
            b->sync_seq = seq;
        }
    }
    block_uses_clear(b);
}

tide_status lifecycle_free(struct heap *h, struct block *b, const void *site)
{
    TIDE_ASSERT(b->state == BLOCK_ACTIVE); /* a block freed is ACTIVE: callers refuse the rest */
    enum pool_kind pool = b->seg->pool;
    int64_t size = (int64_t)b->size, requested = (int64_t)b->requested;
#ifdef TIDE_BREAK_PENDING
    /* Sabotage, built only into a test that must fail: forget every device use of the block, so it
     * is reused at once. See tests/CMakeLists.txt. */
    block_uses_clear(b);
    b->refs = 0;
#endif
    if (b->nuses) {
        /* During a graph capture no fence may be recorded or queried: the uses stay with the block
         * until the capture ends (lifecycle_end_capture). */
        if (TIDE_UNLIKELY(atomic_load_explicit(&h->owner->captures, memory_order_relaxed)))
            b->needs_sync |= BLOCK_FENCES_DEFERRED;
        else
            record_uses(h, b);
    }
    if (b->refs || b->fences || b->needs_sync) {
        history_heap_event(h, TIDE_EVENT_FREE_REQUESTED, b->addr, b->size, site);
        OBSERVE_PENDING(h, TIDE_EVENT_FREE_REQUESTED, b);
        b->state = BLOCK_PENDING;
        b->requested = 0;
        pending_append(h, b);
        stats_active_to_pending(&h->stats, pool, size, requested);
        return TIDE_OK;
    }
    /* one slot for both: requested, and completed at once */
    history_heap_event(h, TIDE_EVENT_FREE_REQUESTED | HISTORY_COMPLETED_AT_ONCE, b->addr, b->size, site);
#ifdef TIDE_NO_PARKING
    /* Built only into a test's second library, which must behave exactly as this one: see
     * tests/CMakeLists.txt (parking_is_invisible). */
    ptr_map_remove(&h->map, b);
    stats_active_to_free(&h->stats, pool, size, requested, (int64_t)heap_make_free(h, b));
    split_blocks_peak(&h->stats, pool); /* as heap_settle checks it after the parked block's merge */
#else
    stats_active_to_free(&h->stats, pool, size, requested, (int64_t)heap_park(h, b));
#endif
    return TIDE_OK;
}

tide_status lifecycle_retain(struct block *b, const void *ptr)
{
    if (b->state != BLOCK_ACTIVE)
        return tide__fail(TIDE_EINVAL, "tide_retain of %p: the block was freed already", ptr);
    if (b->refs == UINT32_MAX)
        return tide__fail(TIDE_EINVAL, "tide_retain of %p: too many references", ptr);
    b->refs++;
    return TIDE_OK;
}

tide_status lifecycle_release(struct heap *h, struct block *b, const void *ptr)
{
    if (b->refs == 0)
        return tide__fail(TIDE_EINVAL, "tide_release of %p without a matching tide_retain", ptr);
    b->refs--;
    if (finish_if_done(h, b))
        stats_settle(&h->stats);
    return TIDE_OK;
}

/* Pops the oldest entry of q and lets its block go if nothing else holds it. */
static bool pop_fence(struct heap *h, struct fence_queue *q)
{
    struct fence_entry e = q->ring[q->head];
    q->head = (q->head + 1) % q->cap;
    q->count--;
    fence_put(h, e.fence);
    e.block->fences--;
    return finish_if_done(h, e.block);
}

size_t lifecycle_poll(struct heap *h)
{
    if (!h->pending_head)
        return 0;
    /* A capturing stream's fences are not queried; other streams' are (pool.c, graph capture). */
    if (TIDE_UNLIKELY(atomic_load_explicit(&h->owner->captures, memory_order_relaxed)) &&
        capture_holds_poll(h->owner, h->stream))
        return 0;
    const tide_backend *be = &h->owner->backend;
    size_t drained = 0;
    for (uint32_t i = 0; i < h->nqueues; i++) {
        struct fence_queue *q = &h->queues[i];
        while (q->count) {
            tide_status s = be->fence_query(be->ctx, q->ring[q->head].fence);
            if (s == TIDE_ENOTREADY)
                break;
            if (s != TIDE_OK) {
                /* The fence cannot tell: leave it; a device synchronize will settle it. */
                h->stats.num_fence_errors++;
                break;
            }
            drained += pop_fence(h, q);
        }
    }
    return drained;
}

size_t lifecycle_after_sync(struct heap *h, uint64_t sync_seq)
{
    size_t drained = 0;
    for (uint32_t i = 0; i < h->nqueues; i++) {
        struct fence_queue *q = &h->queues[i];
        while (q->count && q->ring[q->head].seq < sync_seq)
            drained += pop_fence(h, q);
    }
    for (struct block *b = h->pending_head, *next; b; b = next) {
        next = b->link_next;
        if ((b->needs_sync & BLOCK_OWES_SYNC) && b->sync_seq < sync_seq) {
            b->needs_sync &= (uint8_t)~BLOCK_OWES_SYNC;
            drained += finish_if_done(h, b);
        }
    }
    return drained;
}

size_t lifecycle_end_capture(struct heap *h)
{
    size_t drained = 0;
    for (struct block *b = h->pending_head, *next; b; b = next) {
        next = b->link_next;
        if (!(b->needs_sync & BLOCK_FENCES_DEFERRED))
            continue;
        b->needs_sync &= (uint8_t)~BLOCK_FENCES_DEFERRED;
        record_uses(h, b);
        drained += finish_if_done(h, b);
    }
    return drained;
}

void lifecycle_defer_to_sync(struct heap *h)
{
    for (struct block *b = h->pending_head; b; b = b->link_next)
        if (b->needs_sync & BLOCK_FENCES_DEFERRED) {
            b->needs_sync = BLOCK_OWES_SYNC;
            b->sync_seq = 0;
            block_uses_clear(b);
        }
}

void lifecycle_destroy_fences(struct heap *h)
{
    const tide_backend *be = &h->owner->backend;
    for (uint32_t i = 0; i < h->nqueues; i++) {
        struct fence_queue *q = &h->queues[i];
        for (; q->count; q->count--, q->head = (q->head + 1) % q->cap) {
            struct fence_entry *e = &q->ring[q->head];
            e->block->fences--;
            be->fence_destroy(be->ctx, e->fence);
        }
    }
    for (uint32_t i = 0; i < h->nfence_pool; i++)
        be->fence_destroy(be->ctx, h->fence_pool[i]);
    h->nfence_pool = 0;
}

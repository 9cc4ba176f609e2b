/*
 * Memory pressure: everything that reserves segments from the backend or gives them back. All of it
 * runs under the pressure lock, one heap lock at a time inside it, and never holds a heap lock while
 * waiting for the device.
 *
 * When tide_malloc finds no FREE block that fits, it comes here:
 *   0. reserve a new segment (releasing the oldest idle segments first if the garbage-collection
 *      threshold would be crossed); if the usual segment size does not fit, try the request's own size;
 *   1. drain the PENDING blocks of every heap whose fences have signalled, retry the fit, then grow;
 *   2. release every wholly free segment of every heap, then grow;
 *   3. synchronize the device, drain, release, retry the fit, then grow;
 *   4. fail with TIDE_ENOMEM and a report of where the memory is.
 */
#include "internal.h"
#include "hot_path.h"
#include "stats_events.h"
#include "history_events.h"

#include <stdlib.h>
#include <string.h>

/* Gives segments detached from heap h back to the backend. A segment the backend refuses to take goes
 * back to h as idle, so nothing is lost; the first such error is returned. (Detaching cleared each
 * segment's heap pointer, so h must come from the caller.) */
static tide_status release_segments(tide_allocator *t, struct heap *h, struct segment *list,
                                    tide_release_report *r)
{
    const tide_backend *be = &t->backend;
    tide_status first_error = TIDE_OK;
    for (struct segment *seg = list, *next; seg; seg = next) {
        next = seg->next;
        segment_map_remove(&t->segmap, seg);
        tide__clear_backend_message();
        uintptr_t base = seg->base;
        size_t gone = 0;
        tide_status s;
        /* Heard before the device lets go, as PyTorch's allocator tells its trace trackers before
         * cudaFree: a communication library deregisters memory that is still there. A sleeping run's
         * mapped pages are no one stretch, and are heard as they go (tide_destroy only). */
        bool heard_first = !seg->asleep;
        if (heard_first)
            HISTORY_EVENT(t, TIDE_EVENT_SEGMENT_RELEASED, h->stream, base, seg->size);
        if (seg->arena) {
            s = expandable_unmap_run(t, seg, &gone); /* on a failure, seg is what is still mapped */
        } else {
            uint64_t started = now_ns();
            const tide_backend *from = seg->backend ? seg->backend : be; /* a pool's own, or the allocator's */
            s = from->release(from->ctx, seg->base, seg->size);
            note_device_call(t, started);
            gone = s == TIDE_OK ? seg->size : 0;
        }
        if (gone) {
            if (!heard_first)
                HISTORY_EVENT(t, TIDE_EVENT_SEGMENT_RELEASED, h->stream, base, gone);
            note_released(t, gone, r);
        }
        if (s == TIDE_OK) {
            segment_released(t, h, seg);
            continue;
        }
        if (heard_first) /* what the failure left reserved, heard as reserved again */
            HISTORY_EVENT(t, TIDE_EVENT_SEGMENT_RESERVED, h->stream, seg->base, seg->size);
        if (first_error == TIDE_OK) {
            char sz[32];
            first_error = tide__fail_with_context(s, "%s a segment of %s at 0x%llx to the %s backend",
                                                  seg->arena ? "unmapping" : "releasing",
                                                  format_bytes(seg->size, sz),
                                                  (unsigned long long)seg->base, be->name);
        }
        if (seg->arena)
            expandable_reattach_run(t, h, seg);
        else
            segment_reattach(t, h, seg);
    }
    return first_error;
}

static uint32_t heap_count(tide_allocator *t) { return atomic_load(&t->nheaps); }

/* Releases idle segments of every heap, oldest first across heaps, until `want` bytes are released. */
static tide_status release_oldest(tide_allocator *t, size_t want,
                                  tide_release_report *r, size_t *released)
{
    size_t done = 0;
    tide_status first_error = TIDE_OK;
    while (done < want) {
        struct heap *oldest = NULL;
        uint64_t oldest_tick = UINT64_MAX;
        for (uint32_t i = 0; i < heap_count(t); i++) {
            struct heap *h = t->heaps[i];
            if (h->keeps_memory)
                continue; /* a private pool in use */
            heap_lock_and_settle(h);
            if (h->idle_head && h->idle_head->idle_since <= oldest_tick) {
                oldest = h;
                oldest_tick = h->idle_head->idle_since;
            }
            heap_unlock(h);
        }
        if (!oldest)
            break;
        struct segment *list = NULL;
        heap_lock_and_settle(oldest);
        size_t got = heap_detach_idle(oldest, oldest_tick, 1, &list);
        heap_unlock(oldest);
        if (!got)
            continue; /* it was reused meanwhile */
        tide_status s = release_segments(t, oldest, list, r);
        if (s != TIDE_OK) {
            if (first_error == TIDE_OK)
                first_error = s;
            break; /* the backend is refusing: do not spin on it */
        }
        done += got;
    }
    if (released)
        *released = done;
    return first_error;
}

/* The idle large-pool segment a trim for `want` bytes, made for a request on the heap `growing`, gives
 * back first: the smallest one that covers it, else the oldest; NULL if none. The growing heap's own
 * segments come first either way, then other heaps': each stream pays for its growth with what its
 * own loop left idle. Taking first from whichever stream had the fitting segment made two streams
 * trade segments: in vision training the loader's growth gave back the compute stream's idle 2 GiB
 * workspace, whose next growth gave back the loader's batch buffers, each step (607 driver calls over
 * the run, 199 with the streams' own first; bench/fragmentation.py). */
static bool picked_before(bool own, uint64_t key, bool other_own, uint64_t other_key)
{
    return own != other_own ? own : key < other_key;
}

static struct segment *trim_pick(tide_allocator *t, size_t want, struct heap *growing, struct heap **owner)
{
    struct segment *best = NULL, *oldest = NULL;
    struct heap *best_owner = NULL, *oldest_owner = NULL;
    uint64_t oldest_since = 0; /* read under its heap's lock: another heap's thread may idle it again */
    for (uint32_t i = 0; i < heap_count(t); i++) {
        struct heap *h = t->heaps[i];
        if (h->keeps_memory)
            continue;
        heap_lock_and_settle(h);
        for (struct segment *seg = h->idle_head; seg; seg = seg->idle_next) {
            if (seg->pool == POOL_SMALL)
                continue;
            bool own = h == growing;
            if (!oldest || picked_before(own, seg->idle_since, oldest_owner == growing, oldest_since)) {
                oldest = seg;
                oldest_owner = h;
                oldest_since = seg->idle_since;
            }
            if (seg->size >= want &&
                (!best || picked_before(own, seg->size, best_owner == growing, best->size))) {
                best_owner = h;
                best = seg;
            }
        }
        heap_unlock(h);
    }
    *owner = best ? best_owner : oldest_owner;
    return best ? best : oldest;
}

/* To stay under the high-water mark: `want` bytes of idle large-pool segments given back, as few bytes
 * past it as possible. The smallest idle segment that covers what is left goes, where one does; else
 * the one idle longest, until one does. Oldest first alone gave back whatever segment had idled
 * longest: a 64 MiB one to make room for a 2 MiB small-pool segment in seed_transformer's first step,
 * which the step then needed again. Smallest-that-covers takes its peak from 1.032 of peak live to
 * 1.012 (1.014 with small-pool segments kept, below), seed_loop_250's from 1.043 to 1.038
 * (docs/design.md, Holding memory).
 *
 * Small-pool segments stay: 2 MiB each, they pay for little, and a loop whose shapes take turns needs
 * them again whenever its short shapes come back. Given back to pay for GPT-2's first large growths,
 * eleven of them were reserved again when its shortest sequence came round, in every recorded run
 * (bench/train.py --record; bench/calls_by_step.py). */
static void release_for_high_water(tide_allocator *t, size_t want, struct heap *growing)
{
    size_t done = 0;
    while (done < want) {
        struct heap *owner = NULL;
        struct segment *best = trim_pick(t, want - done, growing, &owner);
        if (!best)
            return;
        /* Segments are released only under the pressure lock, held here, so best is still a segment;
         * but its heap's thread may have taken a block from it meanwhile: then look again. */
        struct segment *list = NULL;
        size_t got = 0;
        heap_lock_and_settle(owner);
        if (best->idle && atomic_load_explicit(&best->heap, memory_order_relaxed) == owner)
            got = heap_detach_idle_segment(owner, best, &list);
        heap_unlock(owner);
        if (got && release_segments(t, owner, list, NULL) != TIDE_OK)
            return; /* the backend is refusing: do not spin on it */
        done += got;
    }
}

/* ---- idle segments that change streams ------------------------------------------------------------- */

/* A heap of the allocator's own memory, one stream's, whose idle segments may go back to the driver. */
static bool lends_segments(const struct heap *h)
{
    return h->pool_id == 0 && !h->backend && !h->vm && !h->keeps_memory;
}

/* Waits until the work queued on stream so far is done. A block freed on a stream is reused on that
 * stream at once, behind the work that used it; on another stream it must wait for that work. */
static bool wait_for_stream(tide_allocator *t, tide_stream stream)
{
    const tide_backend *be = &t->backend;
    void *fence;
    if (be->fence_create(be->ctx, &fence) != TIDE_OK)
        return false;
    tide_status s = be->fence_record(be->ctx, fence, stream);
    if (s == TIDE_OK) {
        s = be->fence_query(be->ctx, fence);
        if (s == TIDE_ENOTREADY && be->fence_wait)
            s = be->fence_wait(be->ctx, fence);
        while (s == TIDE_ENOTREADY)
            s = be->fence_query(be->ctx, fence);
    }
    be->fence_destroy(be->ctx, fence);
    return s == TIDE_OK;
}

/* Past the high-water mark a growth gives idle segments back to reserve one for its request. When the
 * segment the trim would give back first lies in another stream's heap and holds the request, it moves
 * to the request's heap instead: the other stream loses what the trim would have taken from it, and
 * nothing is given back and reserved again (two driver calls fewer). A program whose side stream
 * works now and then (a checkpoint's copies, a prefetch) otherwise trades segments with its main
 * stream each time. Any other segment stays where it is: a large one moved for a small request is
 * pinned on the side stream by the next long-lived block there, and its own stream reserves it anew.
 * The move waits for the other stream's work so far, as giving the segment back would have (a
 * driver's free waits for the whole device). NULL if no segment moves. */
static struct block *take_idle_of_another_stream(tide_allocator *t, struct heap *to, size_t want, size_t rounded,
                                                 size_t requested, tide_status *status)
{
    if (!lends_segments(to))
        return NULL;
    struct heap *owner = NULL;
    struct segment *seg = trim_pick(t, want, to, &owner);
    /* A segment whose rest would outweigh the request stays: see above. */
    if (!seg || owner == to || !lends_segments(owner) || seg->asked_back || seg->size < rounded ||
        seg->size - rounded > rounded)
        return NULL;
    heap_lock_and_settle(to);
    struct block *first = block_new(to);
    heap_unlock(to);
    if (!first)
        return NULL;
    /* As in release_for_high_water: its heap's thread may have taken a block from it meanwhile. */
    struct segment *list = NULL;
    heap_lock_and_settle(owner);
    if (seg->idle && atomic_load_explicit(&seg->heap, memory_order_relaxed) == owner)
        heap_detach_idle_segment(owner, seg, &list);
    heap_unlock(owner);
    if (list && !wait_for_stream(t, owner->stream)) {
        (void)release_segments(t, owner, list, NULL); /* as the trim would have */
        list = NULL;
    }
    if (!list) {
        heap_lock_and_settle(to);
        block_recycle(to, first);
        heap_unlock(to);
        return NULL;
    }
    heap_lock_and_settle(owner);
    heap_released(owner, seg); /* its block struct is the owner's */
    heap_unlock(owner);
    heap_lock_and_settle(to);
    heap_adopt_free(to, seg, first);
    struct block *b = heap_take_block(to, first, rounded, requested, status);
    heap_unlock(to);
    return b;
}

/* Releases every heap's idle segments, or only those tide_empty_cache asked back; adds the bytes
 * released to *released. */
static tide_status release_idle_of_every_heap(tide_allocator *t, bool asked_back_only, tide_release_report *r,
                                              size_t *released)
{
    tide_status first_error = TIDE_OK;
    for (uint32_t i = 0; i < heap_count(t); i++) {
        struct heap *h = t->heaps[i];
        struct segment *list = NULL;
        if (h->keeps_memory)
            continue;
        heap_lock_and_settle(h);
        if (asked_back_only)
            heap_detach_asked_back(h, &list);
        else
            heap_detach_idle(h, UINT64_MAX, SIZE_MAX, &list);
        heap_unlock(h);
        size_t before = t->reserved;
        tide_status s = release_segments(t, h, list, r);
        *released += before - t->reserved;
        if (s != TIDE_OK && first_error == TIDE_OK)
            first_error = s;
    }
    return first_error;
}

static tide_status release_all_idle(tide_allocator *t, tide_release_report *r)
{
    size_t released = 0;
    return release_idle_of_every_heap(t, false, r, &released);
}

/* Releases cached memory until `want` bytes are released: wholly free segments oldest first, then,
 * with expandable segments, free pages inside runs still in use. */
static tide_status release_cached(tide_allocator *t, size_t want,
                                  tide_release_report *r, size_t *released)
{
    size_t done = 0, more = 0;
    tide_status s = release_oldest(t, want, r, &done);
    if (s == TIDE_OK && done < want && t->conf.expandable_segments)
        s = expandable_release_pages(t, want - done, r, &more);
    if (released)
        *released = done + more;
    return s;
}

/* Releases all the cached memory that can be released. */
static tide_status release_all_cached(tide_allocator *t, tide_release_report *r)
{
    tide_status s = release_all_idle(t, r);
    if (t->conf.expandable_segments) {
        tide_status s2 = expandable_release_pages(t, SIZE_MAX, r, NULL);
        if (s == TIDE_OK)
            s = s2;
    }
    return s;
}

/* ---- the peaks a call left to check ---------------------------------------------------------------- */

/* The end of every call under the pressure lock: the peaks its changes left to check (stats_settle),
 * in every heap, then the lock let go. With heap_lock alone: a parked block is counted FREE already,
 * and settling it here would change what the next tide_malloc on that stream finds. Out of line:
 * pressure_malloc is inlined into tide_malloc, and a call more there changed the fast path's code (6
 * instructions more on the same size pattern under callgrind). */
__attribute__((noinline)) static void settle_and_unlock(tide_allocator *t)
{
    for (uint32_t i = 0; i < heap_count(t); i++) {
        struct heap *h = t->heaps[i];
        heap_lock(h);
        stats_settle(&h->stats);
        heap_unlock(h);
    }
    pthread_mutex_unlock(&t->pressure);
}

/* ---- draining -------------------------------------------------------------------------------------- */

static size_t poll_all(tide_allocator *t)
{
    size_t drained = 0;
    for (uint32_t i = 0; i < heap_count(t); i++) {
        struct heap *h = t->heaps[i];
        heap_lock_and_settle(h);
        drained += lifecycle_poll(h);
        heap_unlock(h);
    }
    return drained;
}

tide_status device_synchronize(tide_allocator *t, uint64_t *seq)
{
    const tide_backend *be = &t->backend;
    *seq = atomic_load(&t->pending_seq);
    tide__clear_backend_message();
    tide_status s = be->synchronize(be->ctx);
    if (s != TIDE_OK)
        return tide__fail_with_context(s, "synchronizing the %s device", be->name);
    return TIDE_OK;
}

size_t drain_after_synchronize(tide_allocator *t, uint64_t seq, tide_status synced)
{
    if (synced != TIDE_OK)
        return poll_all(t);
    t->num_sync_all_streams++;
    size_t n = 0;
    for (uint32_t i = 0; i < heap_count(t); i++) {
        struct heap *h = t->heaps[i];
        heap_lock_and_settle(h);
        n += lifecycle_after_sync(h, seq);
        n += lifecycle_poll(h);
        heap_unlock(h);
    }
    return n;
}

/* ---- growing --------------------------------------------------------------------------------------- */

/* Under pressure any cached block that fits serves, whatever segment it lies in (fit_any): a block the
 * fit rules keep for larger requests (free_index.c) is better used than memory given back or out of
 * memory. */
static struct block *retry_fit(struct heap *h, enum pool_kind pool, size_t rounded, size_t requested,
                               const struct fit_rules *rules, tide_status *status)
{
    heap_lock_and_settle(h);
    struct block *b = heap_take_fit_by(h, pool, rounded, requested, rules, status);
    heap_unlock(h);
    return b;
}

/* Reserves a segment for the request and takes the block from it. */
static tide_status grow(tide_allocator *t, struct heap *h, enum pool_kind pool, size_t rounded,
                        size_t requested, struct block **out)
{
    if (t->conf.expandable_segments || h->vm) /* h->vm: a sleepable pool's heap maps pages */
        return expandable_grow(t, h, pool, rounded, requested, out);
    size_t sizes[2] = {segment_size_for(h, pool, rounded), round_up(rounded, TIDE_SEGMENT_GRANULE)};
    int nsizes = sizes[1] < sizes[0] ? 2 : 1;
    if (pool == POOL_LARGE && t->conf.trim_on_growth && !atomic_load(&t->captures) &&
        t->reserved + sizes[0] > t->high_water && !may_pass_mark(t, rounded, sizes[0])) {
        tide_status s = TIDE_OK;
        struct block *b = take_idle_of_another_stream(t, h, t->reserved + sizes[0] - t->high_water, rounded,
                                                      requested, &s);
        if (b || s != TIDE_OK) {
            *out = b;
            return s;
        }
    }
    /* The new segment's block struct, got before the device reserves anything: a segment the heap
     * could not take in would stay reserved and counted, in no heap. */
    heap_lock_and_settle(h);
    struct block *first = block_new(h);
    heap_unlock(h);
    if (!first)
        return tide__fail(TIDE_EHOSTMEM, "out of host memory for a block");
    tide_status s = TIDE_ENOMEM;
    for (int i = 0; i < nsizes; i++) {
        size_t size = sizes[i];
        /* Idle segments could not serve this request (the fit would have used them). Rather than
         * hold them and a new segment too, raising the most ever reserved, give them back first,
         * unless reserved stays close to the most the program has held: then the mark rises, and a
         * loop whose shapes take turns finds those segments again without a driver call. */
        bool capturing = atomic_load(&t->captures) != 0; /* nothing goes back during a capture */
        if (t->conf.trim_on_growth && !capturing && t->reserved + size > t->high_water) {
            /* A small-pool segment raises the mark too: the idle segments a trim could give back for it
             * are large ones, each more than it, and the loop that left them idle comes back for them. */
            if (pool == POOL_SMALL || may_pass_mark(t, rounded, size))
                high_water_set(t, t->reserved + size);
            else
                release_for_high_water(t, t->reserved + size - t->high_water, h);
        }
        if (t->gc_threshold && !capturing && t->reserved + size > t->gc_threshold) {
            tide_release_report gc = {0};
            release_oldest(t, t->reserved + size - t->gc_threshold, &gc, NULL);
            t->num_gc_released += gc.released_segments;
        }
        struct segment *seg = NULL;
        s = segment_reserve(t, h->backend, pool, size, &seg);
        if (s == TIDE_ENOMEM)
            continue;
        if (s != TIDE_OK)
            break;
        seg->serves_from = pool == POOL_LARGE ? fit_serves_from(&t->fit, rounded) : 0;
        heap_lock_and_settle(h);
        heap_adopt_free(h, seg, first);
        struct block *b = heap_take_block(h, first, rounded, requested, &s);
        heap_unlock(h);
        if (!b)
            return s; /* the segment is the heap's, as cache */
        *out = b;
        return TIDE_OK;
    }
    heap_lock_and_settle(h);
    block_recycle(h, first);
    heap_unlock(h);
    return s;
}

/* What would let the request succeed, as far as the allocator can tell. */
static const char *oom_hint(const tide_allocator *t, size_t smallest_segment, bool known, size_t dev_free,
                            const struct where *w)
{
    if (smallest_segment > t->limit)
        return "the smallest segment that holds it is larger than the limit: raise limit";
    if (known && dev_free >= smallest_segment && t->reserved + smallest_segment > t->limit)
        return "the device has room for it but the limit does not: raise limit, or free memory";
    if (w->cached > w->idle)
        return "the cache is in partly used segments; max_split_size_mb or a lower "
               "garbage_collection_threshold may help";
    return "the memory is allocated or still used by the device: free memory, or use a smaller request";
}

static tide_status out_of_memory(tide_allocator *t, struct heap *h, size_t rounded, size_t requested)
{
    const tide_backend *be = &t->backend;
    size_t dev_free = 0, dev_total = 0;
    bool known = be->mem_info(be->ctx, &dev_free, &dev_total) == TIDE_OK;
    struct where w = where_is_memory(t);
    size_t smallest_segment = round_up(rounded, TIDE_SEGMENT_GRANULE);
    char asked[32], fr[32], tot[32], res[32], lim[32], al[32], pe[32], ca[32], rel[32], seg[32];
    t->num_ooms++;
    HISTORY_EVENT(t, TIDE_EVENT_OOM, h->stream, 0, requested);
    return tide__fail(
        TIDE_ENOMEM,
        "device out of memory. Asked %s (a segment of at least %s) on stream 0x%llx; %s%s free on the device "
        "of %s; reserved %s (limit %s): %s allocated, %s pending free (still used by the device), %s "
        "cached of which %s releasable; %s",
        format_bytes(requested, asked), format_bytes(smallest_segment, seg), (unsigned long long)h->stream,
        known ? "" : "unknown, ", known ? format_bytes(dev_free, fr) : "",
        format_bytes(known ? dev_total : t->device_total, tot), format_bytes(t->reserved, res),
        format_bytes(t->limit, lim), format_bytes((uint64_t)w.allocated, al),
        format_bytes((uint64_t)w.pending, pe), format_bytes((uint64_t)w.cached, ca),
        format_bytes((uint64_t)w.idle, rel), oom_hint(t, smallest_segment, known, dev_free, &w));
}

/* Steps 1 to 3 of the ladder, under the pressure lock (let go and taken again around the wait). */
static tide_status climb_ladder(tide_allocator *t, struct heap *h, enum pool_kind pool, size_t rounded,
                                size_t requested, struct block **b)
{
    /* 1: drain what the device has finished with */
    poll_all(t);
    tide_status s = TIDE_OK;
    *b = retry_fit(h, pool, rounded, requested, &fit_any, &s);
    if (!*b && s == TIDE_OK)
        s = grow(t, h, pool, rounded, requested, b);
    /* 2: give back every wholly free segment (and, expandable, every free page) */
    if (!*b && s == TIDE_ENOMEM) {
        release_all_cached(t, NULL);
        s = grow(t, h, pool, rounded, requested, b);
    }
    /* 3: wait for the device, then drain and give back again. The wait is made with no lock held: a
     * completion callback it waits for may need the pressure lock (docs/design.md). A capture may
     * begin meanwhile: then nothing is given back. */
    if (!*b && s == TIDE_ENOMEM) {
        settle_and_unlock(t);
        uint64_t seq;
        tide_status synced = device_synchronize(t, &seq);
        pthread_mutex_lock(&t->pressure);
        drain_after_synchronize(t, seq, synced);
        if (!atomic_load(&t->captures))
            release_all_cached(t, NULL);
        s = TIDE_OK;
        *b = retry_fit(h, pool, rounded, requested, &fit_any, &s);
        if (!*b && s == TIDE_OK)
            s = grow(t, h, pool, rounded, requested, b);
    }
    return s;
}

/* tide_empty_cache asks for every cached byte back, but a segment with a block in use cannot go. The
 * program often frees those blocks right after (the model and optimizer of a finished run, then the
 * next run begins): had the cache been emptied then, the next phase would be placed as in a new
 * allocator; kept, its idle segments are carved by the next phase's first requests, which a new
 * allocator would have given segments of their own, and the phase peaks higher (a recorded LSTM
 * training run replayed twice: 1.195x of peak live in the second pass, 1.084x in the first). So each
 * segment the empty_cache kept is asked back: once wholly free it serves no request the fit rules
 * weigh (heap.c, idle_append_at), and the next allocation that leaves the fast path gives it back, and
 * lowers the high-water mark by it, as the restart would have counted it out. Not with expandable
 * segments, whose mark outlives tide_empty_cache, nor in private pools, which keep their memory. */
static void ask_back_segments_in_use(tide_allocator *t)
{
    for (uint32_t i = 0; i < heap_count(t); i++) {
        struct heap *h = t->heaps[i];
        if (h->keeps_memory || h->vm)
            continue;
        heap_lock_and_settle(h);
        for (struct segment *seg = h->segments; seg; seg = seg->next)
            if (!seg->idle) /* an idle one went back already, unless the backend refused */
                seg->asked_back = true;
        heap_unlock(h);
    }
}

/* After a phase's end (heap_emptied, heap.c): the other heaps that still hold nothing have their idle
 * segments asked back too, and the mark restarts once they are gone. */
static bool ask_back_at_phase_end(tide_allocator *t)
{
    if (!atomic_exchange(&t->phase_ended, false))
        return false;
    for (uint32_t i = 0; i < heap_count(t); i++) {
        struct heap *h = t->heaps[i];
        heap_lock_and_settle(h);
        if (heap_ends_phases(h) && heap_holds_nothing(h))
            heap_ask_back_idle(h, false);
        heap_unlock(h);
    }
    return true;
}

static void release_asked_back(tide_allocator *t)
{
    if (atomic_load(&t->captures))
        return;
    bool phase_ended = ask_back_at_phase_end(t);
    if (atomic_load_explicit(&t->asked_back_idle, memory_order_relaxed) == 0)
        return;
    /* A segment the backend refuses to take is cached again, asked back no more. */
    size_t gone = 0;
    (void)release_idle_of_every_heap(t, true, NULL, &gone);
    high_water_set(t, t->high_water - gone > t->reserved ? t->high_water - gone : t->reserved);
    if (phase_ended)
        high_water_restart(t);
}

/* Under max_split_size_mb a request below the size keeps off the segments reserved for requests of the
 * size or more while a segment of its own fits under the most ever reserved, so that those segments stay
 * whole for the requests they were made for. That protection is worth the new segment only while a
 * large request that then found none of them free could still grow under the mark. Once the room left
 * is less than the largest such segment, a large request that misses raises the peak whatever this
 * request does, and the small segments reserved meanwhile only add to it: graph training with
 * variable-size batches reserved eight for its 10 and 20 MiB tensors, past the mark one of them took an
 * idle 204 MiB segment all the same, and the next 204 MiB tensor reserved a ninth (2,078 MiB against
 * 1,918 without the key). So the request takes a cached block under the share rule alone, but not from
 * the last wholly free segment of its size or more: a large request still finds that one. */
static struct block *take_below_max_split(tide_allocator *t, struct heap *h, enum pool_kind pool, size_t rounded,
                                          size_t requested, tide_status *status)
{
    if (pool != POOL_LARGE || rounded >= t->fit.oversize_min || !t->largest_oversize ||
        t->reserved + segment_size_for(h, pool, rounded) + t->largest_oversize <= t->high_water)
        return NULL;
    heap_lock_and_settle(h);
    /* The best fit whatever the rules, kept only where the share rule allows it: a search under the share
     * rule alone would add a term to the fast path's search, for a case where the best fit is a block of
     * a large segment anyway. A segment asked back serves no such request. */
    struct block *b = free_index_find(heap_free_index(h, pool), rounded, &fit_any);
    if (b && (fit_below_share(&t->fit, b->seg, rounded) || b->seg->serves_from == SIZE_MAX))
        b = NULL;
    if (b && b->seg->idle && b->seg->oversize) {
        int wholly_free = 0; /* of its size or more, this one included: two are enough */
        for (struct segment *seg = h->idle_head; seg && wholly_free < 2; seg = seg->idle_next)
            wholly_free += seg->oversize && seg->size >= b->seg->size;
        if (wholly_free < 2)
            b = NULL;
    }
    if (b)
        b = heap_take_block(h, b, rounded, requested, status);
    heap_unlock(h);
    return b;
}

/* Whether a segment for the request would pass the high-water mark. */
static bool growth_passes_mark(tide_allocator *t, struct heap *h, enum pool_kind pool, size_t rounded)
{
    return segment_size_for(h, pool, rounded) > atomic_load_explicit(&t->room_under_mark, memory_order_relaxed);
}

/* A program at its high-water mark takes, at every step, cached blocks that the fit rules keep for larger
 * requests: past the mark they serve (heap_take_past_mark) rather than the peak rising. Through
 * pressure_malloc each such allocation took the pressure lock, searched the free index twice or three
 * times and settled every heap: RL rollout and training (bench/workloads) did so for 17% of its
 * allocations, and its replay ran 16% slower than before the rules. Here the fast path takes the block
 * itself, under the heap's lock alone, where pressure_malloc would have done the same: nothing to give
 * back first (no phase ended, no segment asked back), no max_split_size_mb (its own step comes first),
 * default segments (expandable ones map pages rather), a large request, and the mark passed by the
 * segment a growth would reserve. Its second fit by the same rules would find what the fast path did
 * not unless another thread freed a block since; then the block taken here is one that rule allows
 * past the mark anyway. room_under_mark is the mark as of its last change; read without the pressure
 * lock, it may be a step behind another thread's growth, which changes which cached block serves,
 * never whether one may. */
struct block *pressure_take_past_mark_at_once(tide_allocator *t, struct heap *h, enum pool_kind pool,
                                              size_t rounded, size_t requested, tide_status *status)
{
    if (pool != POOL_LARGE || t->conf.expandable_segments || h->vm || t->fit.oversize_min != SIZE_MAX ||
        atomic_load_explicit(&t->phase_ended, memory_order_relaxed) ||
        atomic_load_explicit(&t->asked_back_idle, memory_order_relaxed) != 0 ||
        !growth_passes_mark(t, h, pool, rounded))
        return NULL;
    struct block *b = heap_take_past_mark(h, pool, rounded, requested, &t->fit, status);
    if (b && h->stats.drained_unsettled) /* its fit drained blocks: their peaks, as take_after_draining */
        stats_settle(&h->stats);
    return b;
}

tide_status pressure_malloc(tide_allocator *t, struct heap *h, enum pool_kind pool, size_t rounded,
                            size_t requested, struct block **out)
{
    tide_status s = TIDE_OK;
    pthread_mutex_lock(&t->pressure);
    release_asked_back(t);
    /* Another thread may have freed memory on this stream since the fast path looked. */
    struct block *b = retry_fit(h, pool, rounded, requested, &t->fit, &s);
    if (!b && s == TIDE_OK)
        b = take_below_max_split(t, h, pool, rounded, requested, &s);
    /* The fit rules keep cached blocks for larger requests while a new segment for this one fits under
     * the most ever reserved; past it, a kept block serves rather than the program's peak rising, in a
     * segment a small block pins already where one has room (heap_take_past_mark). */
    if (!b && s == TIDE_OK && growth_passes_mark(t, h, pool, rounded)) {
        heap_lock_and_settle(h);
        b = heap_take_past_mark(h, pool, rounded, requested, &t->fit, &s);
        heap_unlock(h);
    }
    if (!b && s == TIDE_OK)
        s = grow(t, h, pool, rounded, requested, &b);
    /* No room for a new segment: a cached block the rules kept for larger requests, before anything
     * is given back (and during a capture, where nothing can be). */
    if (!b && s == TIDE_ENOMEM) {
        s = TIDE_OK;
        b = retry_fit(h, pool, rounded, requested, &fit_any, &s);
        if (!b && s == TIDE_OK)
            s = TIDE_ENOMEM;
    }
    if (!b && s == TIDE_ENOMEM) {
        t->num_alloc_retries++;
        /* During a graph capture the ladder's steps (fence queries, releases, a synchronize) are not
         * allowed: what grow could not find is out of memory. */
        if (!atomic_load(&t->captures))
            s = climb_ladder(t, h, pool, rounded, requested, &b);
        if (!b && s == TIDE_ENOMEM)
            s = out_of_memory(t, h, rounded, requested);
    }
    settle_and_unlock(t);
    *out = b;
    return b ? TIDE_OK : s;
}

/* ---- emptying, trimming, limits -------------------------------------------------------------------- */

static void fill_report(tide_allocator *t, tide_release_report *r)
{
    uint64_t pending_blocks = 0, pending_bytes = 0;
    for (uint32_t i = 0; i < heap_count(t); i++) {
        struct heap *h = t->heaps[i];
        heap_lock_and_settle(h);
        pending_blocks += (uint64_t)h->stats.pool[TIDE_POOL_ALL].pending_blocks.cur;
        pending_bytes += (uint64_t)h->stats.pool[TIDE_POOL_ALL].pending.cur;
        heap_unlock(h);
    }
    r->pending_blocks = pending_blocks;
    r->pending_bytes = pending_bytes;
    r->reserved_bytes = t->reserved;
}

static tide_status refuse_during_capture(tide_allocator *t, const char *what)
{
    return tide__fail(TIDE_EBUSY, "%s during a graph capture (%u underway): the capture forbids "
                      "synchronizing and releasing memory; call it after tide_capture_end",
                      what, atomic_load(&t->captures));
}

tide_status pressure_empty_cache(tide_allocator *t, tide_release_report *report)
{
    tide_release_report r;
    memset(&r, 0, sizeof r);
    if (atomic_load(&t->captures))
        return refuse_during_capture(t, "tide_empty_cache");
    uint64_t seq;
    tide_status s = device_synchronize(t, &seq); /* with no lock held: see pressure_malloc, step 3 */
    pthread_mutex_lock(&t->pressure);
    r.drained_blocks = drain_after_synchronize(t, seq, s);
    tide_status s2 = release_all_cached(t, &r);
    /* The program asked for its memory back: what it needs from now on sets the mark anew. Not with
     * expandable segments: there, growing past the mark unmaps free pages elsewhere, and each unmap
     * waits for the device; a loop that empties its cache every few steps would pay that all the way
     * back up to where it was (measured: 2.7 times the unmaps on the seed trace, no lower peak). */
    if (!t->conf.expandable_segments) {
        high_water_restart(t);
        ask_back_segments_in_use(t);
    }
    fill_report(t, &r);
    HISTORY_EVENT(t, TIDE_EVENT_EMPTY_CACHE, 0, 0, r.released_bytes);
    settle_and_unlock(t);
    if (report)
        *report = r;
    return s != TIDE_OK ? s : s2;
}

/* tide_pool_empty_cache: as pressure_empty_cache, but only the pool's own wholly free segments go, in
 * use or not (the program asked for exactly that pool's memory back). */
tide_status pressure_empty_pool(tide_allocator *t, tide_pool_id pool, tide_release_report *report)
{
    tide_release_report r;
    memset(&r, 0, sizeof r);
    if (atomic_load(&t->captures))
        return refuse_during_capture(t, "tide_pool_empty_cache");
    uint64_t seq;
    tide_status s = device_synchronize(t, &seq);
    pthread_mutex_lock(&t->pressure); /* no heap changes pools meanwhile */
    r.drained_blocks = drain_after_synchronize(t, seq, s);
    sleep_host_cache_drop(t, pool);
    for (uint32_t i = 0; i < heap_count(t); i++) {
        struct heap *h = t->heaps[i];
        if (h->pool_id != pool || h->sleeping) /* a sleeping pool's pages are gone already */
            continue;
        struct segment *list = NULL;
        heap_lock_and_settle(h);
        heap_detach_idle(h, UINT64_MAX, SIZE_MAX, &list);
        heap_unlock(h);
        tide_status s2 = release_segments(t, h, list, &r);
        if (s == TIDE_OK)
            s = s2;
    }
    fill_report(t, &r);
    HISTORY_EVENT(t, TIDE_EVENT_EMPTY_CACHE, 0, 0, r.released_bytes);
    settle_and_unlock(t);
    if (report)
        *report = r;
    return s;
}

tide_status pressure_make_room(tide_allocator *t, size_t want)
{
    poll_all(t);
    return release_cached(t, want, NULL, NULL);
}

tide_status pressure_trim(tide_allocator *t, size_t target, tide_release_report *report)
{
    tide_release_report r;
    memset(&r, 0, sizeof r);
    if (atomic_load(&t->captures))
        return refuse_during_capture(t, "tide_trim");
    pthread_mutex_lock(&t->pressure);
    r.drained_blocks = poll_all(t);
    tide_status s = TIDE_OK;
    if (t->reserved > target)
        s = release_cached(t, t->reserved - target, &r, NULL);
    fill_report(t, &r);
    if (s == TIDE_OK && t->reserved > target) {
        struct where w = where_is_memory(t);
        char res[32], tg[32], al[32], pe[32], ca[32];
        s = tide__fail(TIDE_EBUSY, "trim: reserved %s is still above the target %s: %s allocated, %s "
                       "pending free, %s cached in partly used segments",
                       format_bytes(t->reserved, res), format_bytes(target, tg),
                       format_bytes((uint64_t)w.allocated, al), format_bytes((uint64_t)w.pending, pe),
                       format_bytes((uint64_t)w.cached, ca));
    }
    settle_and_unlock(t);
    if (report)
        *report = r;
    return s;
}

tide_status pressure_set_limit(tide_allocator *t, size_t bytes)
{
    pthread_mutex_lock(&t->pressure);
    t->limit = bytes;
    t->gc_threshold = t->conf.gc_threshold > 0 ? (size_t)((double)bytes * t->conf.gc_threshold) : 0;
    tide_status s = TIDE_OK;
    if (t->reserved > bytes && !atomic_load(&t->captures)) { /* the capture's end does not redo it */
        poll_all(t);
        s = release_cached(t, t->reserved - bytes, NULL, NULL);
    }
    settle_and_unlock(t);
    return s;
}

uint64_t pressure_release_everything(tide_allocator *t, uint64_t *refused_ranges)
{
    const tide_backend *be = &t->backend;
    uint64_t refused = 0;
    *refused_ranges = 0;
    for (uint32_t i = 0; i < heap_count(t); i++) {
        struct heap *h = t->heaps[i];
        lifecycle_destroy_fences(h);
        for (struct segment *seg = h->segments, *next; seg; seg = next) {
            next = seg->next;
            segment_map_remove(&t->segmap, seg);
            size_t size = seg->size, gone = 0;
            const tide_backend *from = seg->backend ? seg->backend : be;
            tide_status s = seg->arena ? expandable_unmap_run(t, seg, &gone)
                                       : from->release(from->ctx, seg->base, seg->size);
            if (s == TIDE_OK)
                t->num_device_free++;
            else
                refused += size - gone;
            t->reserved -= size;
            free(seg);
        }
        h->segments = NULL;
        *refused_ranges += expandable_release_arenas(t, h);
    }
    while (t->spare_segments) {
        struct segment *seg = t->spare_segments;
        t->spare_segments = seg->next;
        free(seg);
    }
    return refused;
}

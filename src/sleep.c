/*
 * Sleep and wake: a pool gives its device memory back while its blocks keep their addresses.
 *
 * A sleepable pool's heaps map pages into address ranges (expandable.c), whatever the allocator's
 * expandable_segments says. Sleeping unmaps every page of every run of the pool; the runs, their
 * blocks, the segment map and the pointer maps stay as they are, so every block keeps its address and
 * a tide_free of one still finds it. Waking maps pages at the same addresses again. Nothing moves but
 * physical memory, so a CUDA graph that captured the pool's addresses replays after the wake.
 *
 * Each run sleeps on its own, in steps that each leave the bookkeeping whole, so that a device error
 * at any step leaves a state tide_check accepts and the same call can finish the work:
 *   1. offload only: the contents of its ACTIVE and PENDING blocks are copied to host memory (one
 *      copy per stretch of them; stretches closer than SLEEP_COPY_GAP are copied as one, the cached
 *      bytes between them with them);
 *   2. the run is marked asleep (with its copy);
 *   3. its units are unmapped one by one, each counted as it goes: out of the allocator's reserved
 *      total, into the heap's asleep bytes. The arena's unit table says which pages are mapped.
 * Waking maps each stretch of unmapped pages of each asleep run in one call, so a run comes back as
 * one unit (few driver calls; its pages then go back to the device together once it is wholly
 * free). Only once every page of the pool is mapped are the copies written back and the runs marked
 * awake: a wake that runs out of memory unmaps what it mapped, and the pool is as it was.
 *
 * Statistics: the heap's reserved counter stays the blocks' bookkeeping (reserved = allocated +
 * pending + cached, per heap, as the validator walks it); what a run gave back is its asleep bytes,
 * out of the allocator's reserved total and out of the reserved bytes tide_get_stats reports.
 *
 * Everything here runs under the pressure lock, which every path that maps, unmaps, grows or carves
 * runs under; run flags and statistics change under the heap's lock too, which tide_free and the
 * validator read them under. No heap lock is held while the device works.
 */
#include "internal.h"
#include "hot_path.h"
#include "stats_events.h"
#include "history_events.h"

#include <sched.h>
#include <stdlib.h>
#include <string.h>

/* Offload: two stretches of blocks whose contents are kept, closer than this, are copied as one. A copy
 * call costs the driver some microseconds whatever its size; 1 MiB of cached bytes copied with them
 * costs about as much at host-link speed, and keeps a pool of many small blocks at few calls. */
#define SLEEP_COPY_GAP (1 * MiB)

struct sleep_extent {
    uintptr_t addr;
    size_t size;
    size_t offset;                    /* in the host buffer */
};

struct sleep_copy {
    void *host;                       /* from the backend's host_alloc, or kept from an earlier sleep */
    size_t host_bytes;                /* the host buffer's size */
    size_t bytes;                     /* what the copy uses of it: the extents' sum */
    size_t n;
    struct sleep_extent extents[];
};

/* A pinned host buffer kept for the pool's next sleep. Pinning host memory costs far more than copying
 * into it (the driver locks and maps every page: measured 0.4 s per GiB against 0.02 s for the copy),
 * and unpinning costs most of a wake's time too; a pool that sleeps and wakes every phase of a loop
 * would pay both each cycle. So a wake keeps the buffers its copies were in, tagged with the pool, and
 * the pool's next sleep copies into them. They go back at the end of that sleep if it did not use
 * them (so a pool keeps at most what its last sleep needed), when a sleep cannot get host memory (every
 * pool's, before it asks again), with tide_pool_empty_cache of the pool, with the pool's last release,
 * and with tide_destroy. Not with tide_empty_cache: that gives device memory back, and programs call it
 * between phases, exactly where the next sleep would need the buffers again (PyTorch's empty_cache
 * leaves its pinned host cache alone too). */
struct host_buffer {
    struct host_buffer *next;
    void *ptr;
    size_t bytes;
    tide_pool_id pool;
};

/* ---- statistics ------------------------------------------------------------------------------------------ */

/* Under h->lock. Pages that wake are reserved again: reserved_bytes gains them. */
static void count_asleep(struct heap *h, const struct segment *run, int64_t bytes)
{
    enum pool_kind pool = (enum pool_kind)run->pool; /* BOTH's argument must be called pool */
    BOTH(&h->stats, pool, p, {
        if (bytes >= 0)
            rise(&p->asleep, bytes);
        else
            fall(&p->asleep, -bytes);
    });
    if (bytes < 0)
        event_pool(&h->stats, pool)->gained.reserved -= bytes;
}

static void count_offloaded(struct heap *h, const struct segment *run, int64_t bytes)
{
    enum pool_kind pool = (enum pool_kind)run->pool;
    BOTH(&h->stats, pool, p, {
        if (bytes >= 0)
            rise(&p->offloaded, bytes);
        else
            fall(&p->offloaded, -bytes);
    });
}

/* ---- the host copy of a run ------------------------------------------------------------------------------ */

/* Under h->lock: the stretches of run whose contents are kept (ACTIVE and PENDING blocks), joined
 * across gaps below SLEEP_COPY_GAP. NULL with *none set if there are none; NULL without it if host
 * memory ran out. */
static struct sleep_copy *copy_plan(const struct segment *run, bool *none)
{
    size_t n = 0;
    uintptr_t end = 0;
    for (const struct block *b = run->first; b; b = b->next)
        if (b->state != BLOCK_FREE) {
            if (!n || b->addr - end >= SLEEP_COPY_GAP)
                n++;
            end = b->addr + b->size;
        }
    *none = n == 0;
    if (!n)
        return NULL;
    struct sleep_copy *c = calloc(1, sizeof *c + n * sizeof c->extents[0]);
    if (!c)
        return NULL;
    for (const struct block *b = run->first; b; b = b->next) {
        if (b->state == BLOCK_FREE)
            continue;
        struct sleep_extent *last = c->n ? &c->extents[c->n - 1] : NULL;
        if (last && b->addr - (last->addr + last->size) < SLEEP_COPY_GAP) {
            last->size = b->addr + b->size - last->addr;
        } else {
            c->extents[c->n++] = (struct sleep_extent){b->addr, b->size, 0};
        }
    }
    for (size_t i = 0; i < c->n; i++) {
        c->extents[i].offset = c->bytes;
        c->bytes += c->extents[i].size;
    }
    return c;
}

/* ---- pinned host buffers kept between sleeps, under the pressure lock ------------------------------- */

/* The smallest buffer kept for pool that holds bytes, taken off the list; false if none. */
static bool host_cache_take(tide_allocator *t, tide_pool_id pool, size_t bytes, void **ptr, size_t *size)
{
    struct host_buffer **best = NULL;
    for (struct host_buffer **at = &t->sleep_host_cache; *at; at = &(*at)->next)
        if ((*at)->pool == pool && (*at)->bytes >= bytes && (!best || (*at)->bytes < (*best)->bytes))
            best = at;
    if (!best)
        return false;
    struct host_buffer *b = *best;
    *best = b->next;
    *ptr = b->ptr;
    *size = b->bytes;
    t->sleep_host_cached -= b->bytes;
    free(b);
    return true;
}

/* Keeps a copy's buffer for pool's next sleep; gives it back if even the list's entry cannot be had. */
static void host_cache_keep(tide_allocator *t, tide_pool_id pool, void *ptr, size_t bytes)
{
    struct host_buffer *b = malloc(sizeof *b);
    if (!b) {
        t->backend.host_free(t->backend.ctx, ptr, bytes);
        return;
    }
    *b = (struct host_buffer){t->sleep_host_cache, ptr, bytes, pool};
    t->sleep_host_cache = b;
    t->sleep_host_cached += bytes;
}

void sleep_host_cache_drop(tide_allocator *t, tide_pool_id pool)
{
    for (struct host_buffer **at = &t->sleep_host_cache; *at;) {
        struct host_buffer *b = *at;
        if (pool != TIDE_POOL_ALL_HOST_BUFFERS && b->pool != pool) {
            at = &b->next;
            continue;
        }
        *at = b->next;
        t->sleep_host_cached -= b->bytes;
        t->backend.host_free(t->backend.ctx, b->ptr, b->bytes);
        free(b);
    }
}

/* A copy done with, its buffer given back (a failed sleep, tide_destroy). */
static void copy_release(tide_allocator *t, struct sleep_copy *c)
{
    if (!c)
        return;
    if (c->host)
        t->backend.host_free(t->backend.ctx, c->host, c->host_bytes);
    free(c);
}

/* A copy a wake wrote back: its buffer kept for pool's next sleep. */
static void copy_keep_buffer(tide_allocator *t, struct sleep_copy *c, tide_pool_id pool)
{
    if (!c)
        return;
    if (c->host)
        host_cache_keep(t, pool, c->host, c->host_bytes);
    free(c);
}

void sleep_copy_free(tide_allocator *t, struct segment *run)
{
    copy_release(t, run->copy);
    run->copy = NULL;
}

size_t sleep_copy_bytes(const struct segment *run) { return run->copy ? run->copy->bytes : 0; }

/* The run's kept contents into host memory: *out, or NULL if it keeps none. */
static tide_status copy_out(tide_allocator *t, struct heap *h, struct segment *run, struct sleep_copy **out)
{
    const tide_backend *be = &t->backend;
    bool none = false;
    heap_lock_and_settle(h);
    struct sleep_copy *c = copy_plan(run, &none);
    heap_unlock(h);
    *out = NULL;
    if (none)
        return TIDE_OK;
    if (!c)
        return tide__fail(TIDE_EHOSTMEM, "tide_pool_sleep: out of host memory for the plan of a copy");
    char sz[32];
    tide_status s = TIDE_OK;
    if (!host_cache_take(t, h->pool_id, c->bytes, &c->host, &c->host_bytes)) {
        tide__clear_backend_message();
        c->host_bytes = c->bytes;
        s = be->host_alloc(be->ctx, c->bytes, &c->host);
        if (s == TIDE_ENOMEM && t->sleep_host_cached) { /* other pools' kept buffers first */
            sleep_host_cache_drop(t, TIDE_POOL_ALL_HOST_BUFFERS);
            tide__clear_backend_message();
            s = be->host_alloc(be->ctx, c->bytes, &c->host);
        }
    }
    if (s != TIDE_OK) {
        format_bytes(c->bytes, sz);
        c->host = NULL;
        copy_release(t, c);
        return tide__fail_with_context(s == TIDE_ENOMEM ? TIDE_EHOSTMEM : s, "tide_pool_sleep: taking %s of "
                                       "host memory from the %s backend for the pool's contents", sz,
                                       be->name);
    }
    for (size_t i = 0; i < c->n; i++) {
        const struct sleep_extent e = c->extents[i];
        tide__clear_backend_message();
        s = be->copy_to_host(be->ctx, (char *)c->host + e.offset, e.addr, e.size);
        if (s != TIDE_OK) {
            copy_release(t, c);
            return tide__fail_with_context(s, "tide_pool_sleep: copying %s at 0x%llx to host memory",
                                           format_bytes(e.size, sz), (unsigned long long)e.addr);
        }
    }
    *out = c;
    return TIDE_OK;
}

static tide_status copy_in(tide_allocator *t, const struct sleep_copy *c)
{
    const tide_backend *be = &t->backend;
    for (size_t i = 0; i < c->n; i++) {
        const struct sleep_extent *e = &c->extents[i];
        tide__clear_backend_message();
        tide_status s = be->copy_to_device(be->ctx, e->addr, (const char *)c->host + e->offset, e->size);
        if (s != TIDE_OK) {
            char sz[32];
            return tide__fail_with_context(s, "tide_pool_wake: copying %s back to 0x%llx",
                                           format_bytes(e->size, sz), (unsigned long long)e->addr);
        }
    }
    return TIDE_OK;
}

/* ---- sleeping ---------------------------------------------------------------------------------------------- */

/* One unit of run unmapped, and counted. */
static tide_status unmap_counted(tide_allocator *t, struct heap *h, struct segment *run, uintptr_t lo,
                                 uintptr_t hi)
{
    /* Heard before the pages go (release_segments), and again as reserved if they stay. */
    HISTORY_EVENT(t, TIDE_EVENT_SEGMENT_RELEASED, h->stream, lo, hi - lo);
    tide_status s = expandable_unmap_unit(t, run, lo, hi);
    if (s != TIDE_OK) {
        HISTORY_EVENT(t, TIDE_EVENT_SEGMENT_RESERVED, h->stream, lo, hi - lo);
        char sz[32];
        return tide__fail_with_context(s, "unmapping %s at 0x%llx from the %s backend",
                                       format_bytes(hi - lo, sz), (unsigned long long)lo, t->backend.name);
    }
    note_released(t, hi - lo, NULL);
    heap_lock_and_settle(h);
    count_asleep(h, run, (int64_t)(hi - lo));
    heap_unlock(h);
    return TIDE_OK;
}

static tide_status sleep_run(tide_allocator *t, struct heap *h, struct segment *run, bool offload)
{
    if (!run->asleep) {
        struct sleep_copy *c = NULL;
        if (offload) {
            tide_status s = copy_out(t, h, run, &c);
            if (s != TIDE_OK)
                return s;
        }
        heap_lock_and_settle(h);
        run->asleep = true;
        run->copy = c;
        if (c)
            count_offloaded(h, run, (int64_t)c->bytes);
        heap_unlock(h);
    }
    size_t page = t->backend.page_size;
    uintptr_t lo, hi;
    for (uintptr_t at = run->base; expandable_next_mapped(run, page, at, &lo, &hi); at = hi) {
        tide_status s = unmap_counted(t, h, run, lo, hi);
        if (s != TIDE_OK)
            return s;
    }
    return TIDE_OK;
}

static bool has_offload_calls(const tide_backend *be)
{
    return be->host_alloc && be->host_free && be->copy_to_host && be->copy_to_device;
}

static tide_status refuse_capture(tide_allocator *t, const char *verb)
{
    return tide__fail(TIDE_EBUSY, "%s during a graph capture (%u underway): the capture forbids "
                      "synchronizing, copying and mapping memory; call it after tide_capture_end", verb,
                      atomic_load(&t->captures));
}

/* The end of a call under the pressure lock that drained or released (as pressure.c's entry points
 * end): the cache's peaks that the drain left to check (stats_settle), in every heap, then the lock
 * let go. heap_lock alone: a parked block is counted FREE already, and settling it would change what
 * the next tide_malloc on its stream finds. */
static void settle_and_unlock(tide_allocator *t)
{
    for (uint32_t i = 0; i < atomic_load(&t->nheaps); i++) {
        struct heap *h = t->heaps[i];
        heap_lock(h);
        stats_settle(&h->stats);
        heap_unlock(h);
    }
    pthread_mutex_unlock(&t->pressure);
}

/* tide_malloc_pool calls that chose one of the heaps before the pool was marked asleep finish first:
 * none of them may take a block from a run being put to sleep. They do not wait for the pressure
 * lock long (they take it only to grow), and it is not held here. */
static void wait_for_pool_mallocs(struct heap *const *heaps, uint32_t n)
{
    for (uint32_t i = 0; i < n; i++)
        while (atomic_load_explicit(&heaps[i]->pool_mallocs, memory_order_acquire))
            sched_yield();
}

tide_status tide_pool_sleep(tide_allocator *t, tide_pool_id pool, unsigned flags)
{
    CHECK_ALLOCATOR(t);
    if (flags & ~(unsigned)TIDE_SLEEP_OFFLOAD)
        return tide__fail(TIDE_EINVAL, "tide_pool_sleep: unknown flags 0x%x (TIDE_SLEEP_DISCARD or "
                          "TIDE_SLEEP_OFFLOAD)", flags);
    bool offload = flags & TIDE_SLEEP_OFFLOAD;
    if (offload && !has_offload_calls(&t->backend))
        return tide__fail(TIDE_EUNSUPPORTED, "tide_pool_sleep: TIDE_SLEEP_OFFLOAD needs the %s backend's "
                          "host_alloc, host_free, copy_to_host and copy_to_device, which it does not have",
                          t->backend.name);
    if (atomic_load(&t->captures))
        return refuse_capture(t, "tide_pool_sleep");
    struct heap *heaps[TIDE_POOL_MAX_STREAMS];
    uint32_t n = 0;
    bool was_asleep = false;
    tide_status s = pool_sleep_mark(t, pool, "tide_pool_sleep", 1, heaps, &n, &was_asleep);
    if (s != TIDE_OK)
        return s;
    wait_for_pool_mallocs(heaps, n);
    /* The pool's pending frees are drained first: work still queued on its blocks is done, and what
     * it freed is cached (its contents need no copy). */
    uint64_t seq;
    tide_status synced = device_synchronize(t, &seq);
    pthread_mutex_lock(&t->pressure);
    drain_after_synchronize(t, seq, synced);
    if (synced != TIDE_OK || atomic_load(&t->captures)) {
        if (!was_asleep) /* nothing was done: the pool is awake as it was */
            pool_sleep_mark(t, pool, "tide_pool_sleep", -1, NULL, NULL, NULL);
        settle_and_unlock(t);
        return synced != TIDE_OK ? synced : refuse_capture(t, "tide_pool_sleep");
    }
    for (uint32_t i = 0; i < n; i++) {
        heap_lock_and_settle(heaps[i]);
        heaps[i]->sleeping = true;
        heaps[i]->keeps_memory = true; /* no release path touches it until it wakes */
        heap_unlock(heaps[i]);
    }
    /* The segment lists change only under the pressure lock, held here. */
    for (uint32_t i = 0; i < n && s == TIDE_OK; i++)
        for (struct segment *run = heaps[i]->segments; run && s == TIDE_OK; run = run->next)
            if (run->arena)
                s = sleep_run(t, heaps[i], run, offload);
    sleep_host_cache_drop(t, pool); /* what this sleep did not need */
    settle_and_unlock(t);
    allocator_debug_check(t, DEBUG_RESERVE_RELEASE, "tide_pool_sleep");
    return s;
}

/* ---- waking ------------------------------------------------------------------------------------------------ */

/* Under guard:True, a run whose contents were discarded gets its ACTIVE blocks' canaries written
 * again (on the heap's stream, as tide_malloc writes them), so that their frees check what the
 * program wrote since, not what the new pages held. The blocks are listed under the heap's lock and
 * filled without it (a fill may wait for room in the stream's queue). */
static tide_status restamp_guards(tide_allocator *t, struct heap *h, struct segment *run)
{
    const tide_backend *be = &t->backend;
    size_t n = 0, k = 0;
    heap_lock_and_settle(h);
    for (struct block *b = run->first; b; b = b->next)
        n += b->state == BLOCK_ACTIVE;
    struct guarded {
        uintptr_t addr;
        size_t size, requested;
    } *v = n ? malloc(n * sizeof *v) : NULL;
    for (struct block *b = run->first; v && b; b = b->next)
        if (b->state == BLOCK_ACTIVE)
            v[k++] = (struct guarded){b->addr, b->size, b->requested};
    heap_unlock(h);
    if (n && !v)
        return tide__fail(TIDE_EHOSTMEM, "tide_pool_wake: out of host memory for the guards' list");
    tide_status s = TIDE_OK;
    for (size_t i = 0; i < k && s == TIDE_OK; i++) {
        uintptr_t user = v[i].addr + t->guard, end = v[i].addr + v[i].size;
        size_t requested = v[i].requested;
        tide__clear_backend_message();
        s = be->fill(be->ctx, v[i].addr, t->guard, TIDE_GUARD_BYTE, h->stream);
        if (s == TIDE_OK)
            s = be->fill(be->ctx, user + requested, end - user - requested, TIDE_GUARD_BYTE, h->stream);
    }
    free(v);
    if (s != TIDE_OK)
        return tide__fail_with_context(s, "tide_pool_wake: writing the guards of the pool's blocks on the %s "
                                       "device", be->name);
    return TIDE_OK;
}

struct mapped_stretch {
    struct heap *h;
    struct segment *run;
    uintptr_t lo, hi;
};

struct wake {
    struct mapped_stretch *v;
    size_t n, cap;
};

static tide_status map_counted(tide_allocator *t, struct wake *w, struct heap *h, struct segment *run,
                               uintptr_t lo, uintptr_t hi)
{
    if (w->n == w->cap) {
        struct mapped_stretch *grown = grow_table(w->v, &w->cap, sizeof *grown, 16);
        if (!grown)
            return tide__fail(TIDE_EHOSTMEM, "tide_pool_wake: out of host memory");
        w->v = grown;
    }
    tide_status s = expandable_map_unit(t, run, lo, hi);
    if (s != TIDE_OK)
        return s;
    w->v[w->n++] = (struct mapped_stretch){h, run, lo, hi};
    note_reserved(t, hi - lo);
    heap_lock_and_settle(h);
    count_asleep(h, run, -(int64_t)(hi - lo));
    heap_unlock(h);
    HISTORY_EVENT(t, TIDE_EVENT_SEGMENT_RESERVED, h->stream, lo, hi - lo);
    return TIDE_OK;
}

/* Out of memory: what this call mapped is unmapped again, so the pool is as it was. A refused unmap
 * leaves its pages mapped and counted (the pool is still whole, and a later wake maps the rest). */
static void unmap_this_wake(tide_allocator *t, const struct wake *w)
{
    for (size_t i = w->n; i-- > 0;) {
        const struct mapped_stretch *m = &w->v[i];
        (void)unmap_counted(t, m->h, m->run, m->lo, m->hi); /* the out-of-memory report follows */
    }
}

static size_t unmapped_bytes(tide_allocator *t, struct heap *const *heaps, uint32_t n)
{
    size_t page = t->backend.page_size, need = 0;
    for (uint32_t i = 0; i < n; i++)
        for (struct segment *run = heaps[i]->segments; run; run = run->next)
            if (run->asleep)
                need += run->size - expandable_mapped_bytes(run, page);
    return need;
}

static tide_status refuse_wake(tide_allocator *t, tide_pool_id pool, size_t need, const char *why)
{
    const tide_backend *be = &t->backend;
    size_t free_b = 0, total = 0;
    char nb[32], fb[32], rb[32], lb[32];
    bool known = be->mem_info(be->ctx, &free_b, &total) == TIDE_OK;
    return tide__fail(TIDE_ENOMEM, "tide_pool_wake: out of memory: pool %llu needs %s to wake (%s); %s free on "
                      "the device, %s reserved by this allocator, limit %s. The pool stays asleep, whole",
                      (unsigned long long)pool, format_bytes(need, nb), why,
                      known ? format_bytes(free_b, fb) : "unknown", format_bytes(t->reserved, rb),
                      format_bytes(t->limit, lb));
}

/* Every unmapped page of the pool's asleep runs mapped, one call per stretch; on running out of
 * memory, cached memory elsewhere is released once and the map tried again. */
static tide_status map_pool(tide_allocator *t, tide_pool_id pool, struct heap *const *heaps, uint32_t n,
                            struct wake *w)
{
    size_t page = t->backend.page_size, need = unmapped_bytes(t, heaps, n);
    if (need > t->limit)
        return refuse_wake(t, pool, need, "more than the limit");
    if (t->reserved > t->limit - need) {
        pressure_make_room(t, t->reserved - (t->limit - need));
        if (t->reserved > t->limit - need)
            return refuse_wake(t, pool, need, "the limit leaves too little room");
    }
    bool made_room = false;
    for (uint32_t i = 0; i < n; i++)
        for (struct segment *run = heaps[i]->segments; run; run = run->next) {
            if (!run->asleep)
                continue;
            uintptr_t lo, hi;
            for (uintptr_t at = run->base; expandable_next_unmapped(run, page, at, &lo, &hi); at = hi) {
                tide_status s = map_counted(t, w, heaps[i], run, lo, hi);
                if (s == TIDE_ENOMEM && !made_room) {
                    made_room = true;
                    pressure_make_room(t, SIZE_MAX);
                    s = map_counted(t, w, heaps[i], run, lo, hi);
                }
                if (s == TIDE_ENOMEM) {
                    unmap_this_wake(t, w);
                    return refuse_wake(t, pool, need, "the device ran out");
                }
                if (s != TIDE_OK) {
                    char sz[32];
                    return tide__fail_with_context(s, "tide_pool_wake: mapping %s at 0x%llx from the %s "
                                                   "backend", format_bytes(hi - lo, sz),
                                                   (unsigned long long)lo, t->backend.name);
                }
            }
        }
    return TIDE_OK;
}

tide_status tide_pool_wake(tide_allocator *t, tide_pool_id pool)
{
    CHECK_ALLOCATOR(t);
    struct heap *heaps[TIDE_POOL_MAX_STREAMS];
    uint32_t n = 0;
    bool asleep = false;
    tide_status s = pool_sleep_mark(t, pool, "tide_pool_wake", 0, heaps, &n, &asleep);
    if (s != TIDE_OK || !asleep)
        return s;
    if (atomic_load(&t->captures))
        return refuse_capture(t, "tide_pool_wake");
    pthread_mutex_lock(&t->pressure);
    struct wake w = {NULL, 0, 0};
    s = map_pool(t, pool, heaps, n, &w);
    free(w.v);
    /* Every page is mapped: the contents come back, run by run. */
    for (uint32_t i = 0; i < n && s == TIDE_OK; i++)
        for (struct segment *run = heaps[i]->segments; run && s == TIDE_OK; run = run->next) {
            if (!run->asleep)
                continue;
            if (run->copy && (s = copy_in(t, run->copy)) != TIDE_OK)
                break;
            if (!run->copy && t->guard && (s = restamp_guards(t, heaps[i], run)) != TIDE_OK)
                break;
            struct sleep_copy *c = run->copy;
            heap_lock_and_settle(heaps[i]);
            if (c)
                count_offloaded(heaps[i], run, -(int64_t)c->bytes);
            run->asleep = false;
            run->copy = NULL;
            heap_unlock(heaps[i]);
            copy_keep_buffer(t, c, pool);
        }
    if (s == TIDE_OK) /* awake: allocations come again, and the pool's use count decides what it keeps */
        pool_sleep_mark(t, pool, "tide_pool_wake", -1, NULL, NULL, NULL);
    settle_and_unlock(t); /* (making room drains and releases) */
    allocator_debug_check(t, DEBUG_RESERVE_RELEASE, "tide_pool_wake");
    return s;
}

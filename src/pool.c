/*
 * Private pools and graph capture. A pool is a set of heaps, one per stream it serves, kept out of the
 * stream table: allocations name the pool, so its blocks come from its own segments and go back to
 * them, and nothing outside the pool can reuse them. While its use count is above 0 the release paths
 * of pressure.c skip its heaps (keeps_memory); at 0 they release its idle segments like any others.
 *
 * Lock order: the pressure lock, then heaps_lock (the pool table), then heap locks.
 */
#include "internal.h"
#include "hot_path.h"
#include "stats_events.h"
#include "history_events.h"

#include <inttypes.h>
#include <stdlib.h>
#include <string.h>
#ifdef TIDE_POOL_MALLOC_PAUSE_US
#include <unistd.h>
#endif

/* A pool's own backend table (tide_pool_create_with_backend), copied; kept until tide_destroy, so
 * that a segment reserved through it can always be given back through it. */
struct pool_backend {
    tide_backend table;
    struct pool_backend *next;
};

struct private_pool {
    const tide_backend *backend;       /* NULL: the allocator's */
    tide_pool_id id;
    uint32_t use_count;
    uint32_t nheaps;
    bool sleepable;                    /* tide_pool_make_sleepable: its heaps map pages (heap's vm) */
    bool asleep;                       /* from tide_pool_sleep until a tide_pool_wake finishes (sleep.c) */
    struct heap *heaps[TIDE_POOL_MAX_STREAMS];
};

/* Under heaps_lock. */
static struct private_pool *find_pool(tide_allocator *t, tide_pool_id id)
{
    for (uint32_t i = 0; i < t->npools; i++)
        if (t->pools[i].id == id)
            return &t->pools[i];
    return NULL;
}

/* A released pool whose heaps all went to other pools is dropped from the table; its id stays
 * released. Under heaps_lock. */
static bool forgotten(const tide_allocator *t, tide_pool_id id) { return id != 0 && id <= t->next_pool_id; }

static tide_status unknown_pool(const char *verb, tide_pool_id id)
{
    return tide__fail(TIDE_EINVAL, "%s: pool %llu was never created by tide_pool_create on this allocator",
                      verb, (unsigned long long)id);
}

/* The pool id names, if it is still in use (use count above 0). Under heaps_lock. */
static tide_status live_pool(tide_allocator *t, tide_pool_id id, const char *verb, struct private_pool **out)
{
    struct private_pool *p = find_pool(t, id);
    if (!p && !forgotten(t, id))
        return unknown_pool(verb, id);
    if (!p || p->use_count == 0)
        return tide__fail(TIDE_EINVAL, "%s: pool %llu was released (its use count reached 0)", verb,
                          (unsigned long long)id);
    *out = p;
    return TIDE_OK;
}

static tide_status asleep_pool(const char *verb, tide_pool_id id)
{
    return tide__fail(TIDE_EINVAL, "%s: pool %llu is asleep (tide_pool_sleep): its memory was given back; "
                      "wake it with tide_pool_wake first", verb, (unsigned long long)id);
}

/* Drops the released pool p from the table once it has no heap left. Under heaps_lock. */
static void forget_if_empty(tide_allocator *t, struct private_pool *p)
{
    if (p->use_count == 0 && p->nheaps == 0)
        *p = t->pools[--t->npools];
}

static tide_status pool_create(tide_allocator *t, const tide_backend *backend, tide_pool_id *out)
{
    pthread_mutex_lock(&t->heaps_lock);
    if (t->npools == t->pools_cap) {
        uint32_t cap = t->pools_cap ? 2 * t->pools_cap : 8;
        struct private_pool *pools = realloc(t->pools, cap * sizeof *pools);
        if (!pools) {
            pthread_mutex_unlock(&t->heaps_lock);
            return tide__fail(TIDE_EHOSTMEM, "tide_pool_create: out of host memory");
        }
        t->pools = pools;
        t->pools_cap = cap;
    }
    struct pool_backend *own = NULL;
    if (backend) {
        if (!(own = calloc(1, sizeof *own))) {
            pthread_mutex_unlock(&t->heaps_lock);
            return tide__fail(TIDE_EHOSTMEM, "tide_pool_create_with_backend: out of host memory");
        }
        memcpy(&own->table, backend, backend->struct_size < sizeof own->table ? backend->struct_size
                                                                               : sizeof own->table);
        own->table.struct_size = sizeof own->table;
        own->next = t->pool_backends;
        t->pool_backends = own;
    }
    struct private_pool *p = &t->pools[t->npools++];
    memset(p, 0, sizeof *p);
    p->backend = own ? &own->table : NULL;
    p->id = ++t->next_pool_id;
    p->use_count = 1;
    *out = p->id;
    pthread_mutex_unlock(&t->heaps_lock);
    return TIDE_OK;
}

tide_status tide_pool_create(tide_allocator *t, tide_pool_id *out)
{
    CHECK_ALLOCATOR(t);
    if (!out)
        return tide__fail(TIDE_EINVAL, "tide_pool_create: out is NULL");
    *out = 0;
    return pool_create(t, NULL, out);
}

tide_status tide_pool_create_with_backend(tide_allocator *t, const tide_backend *backend, tide_pool_id *out)
{
    CHECK_ALLOCATOR(t);
    if (!out || !backend)
        return tide__fail(TIDE_EINVAL, "tide_pool_create_with_backend: %s is NULL", out ? "backend" : "out");
    *out = 0;
    if (backend->struct_size < offsetof(tide_backend, release) + sizeof backend->release || !backend->reserve ||
        !backend->release)
        return tide__fail(TIDE_EINVAL, "tide_pool_create_with_backend: the backend table needs struct_size, "
                          "reserve and release");
    if (t->conf.expandable_segments)
        return tide__fail(TIDE_EUNSUPPORTED, "tide_pool_create_with_backend: a pool with its own backend "
                          "reserves whole segments, which expandable_segments:True does not use; create the "
                          "allocator with expandable_segments:False");
    return pool_create(t, backend, out);
}

tide_status tide_pool_retain(tide_allocator *t, tide_pool_id id)
{
    CHECK_ALLOCATOR(t);
    pthread_mutex_lock(&t->heaps_lock);
    struct private_pool *p = NULL;
    tide_status s = live_pool(t, id, "tide_pool_retain", &p);
    if (s == TIDE_OK && p->use_count == UINT32_MAX)
        s = tide__fail(TIDE_EINVAL, "tide_pool_retain: pool %llu has too many uses", (unsigned long long)id);
    else if (s == TIDE_OK)
        p->use_count++;
    pthread_mutex_unlock(&t->heaps_lock);
    return s;
}

tide_status tide_pool_release(tide_allocator *t, tide_pool_id id)
{
    CHECK_ALLOCATOR(t);
    pthread_mutex_lock(&t->pressure); /* keeps_memory is read by the release paths under it */
    pthread_mutex_lock(&t->heaps_lock);
    struct private_pool *p = NULL;
    tide_status s = live_pool(t, id, "tide_pool_release", &p);
    if (s == TIDE_OK && --p->use_count == 0) {
        for (uint32_t i = 0; i < p->nheaps; i++) /* a sleeping heap keeps it until it wakes */
            p->heaps[i]->keeps_memory = p->heaps[i]->sleeping;
        sleep_host_cache_drop(t, id); /* no sleep of it is to come */
        forget_if_empty(t, p);
    }
    pthread_mutex_unlock(&t->heaps_lock);
    pthread_mutex_unlock(&t->pressure);
    return s;
}

tide_status tide_pool_use_count(tide_allocator *t, tide_pool_id id, uint32_t *out)
{
    CHECK_ALLOCATOR(t);
    if (!out)
        return tide__fail(TIDE_EINVAL, "tide_pool_use_count: out is NULL");
    pthread_mutex_lock(&t->heaps_lock);
    struct private_pool *p = find_pool(t, id);
    bool known = p || forgotten(t, id);
    if (known)
        *out = p ? p->use_count : 0;
    pthread_mutex_unlock(&t->heaps_lock);
    return known ? TIDE_OK : unknown_pool("tide_pool_use_count", id);
}

tide_status tide_pool_memory(tide_allocator *t, tide_pool_id id, size_t *reserved, size_t *allocated)
{
    CHECK_ALLOCATOR(t);
    size_t r = 0, a = 0;
    pthread_mutex_lock(&t->heaps_lock);
    struct private_pool *p = find_pool(t, id);
    for (uint32_t i = 0; p && i < p->nheaps; i++) {
        struct heap *h = p->heaps[i];
        heap_lock_and_settle(h);
        r += (size_t)(h->stats.pool[TIDE_POOL_ALL].reserved.cur - h->stats.pool[TIDE_POOL_ALL].asleep.cur);
        a += (size_t)h->stats.pool[TIDE_POOL_ALL].allocated.cur;
        heap_unlock(h);
    }
    bool known = p || forgotten(t, id);
    pthread_mutex_unlock(&t->heaps_lock);
    if (!known)
        return unknown_pool("tide_pool_memory", id);
    if (reserved)
        *reserved = r;
    if (allocated)
        *allocated = a;
    return TIDE_OK;
}

/* The pool's heap for stream, if it has one. Under heaps_lock. */
static struct heap *heap_of_pool(const struct private_pool *p, tide_stream stream)
{
    for (uint32_t i = 0; i < p->nheaps; i++)
        if (p->heaps[i]->stream == stream)
            return p->heaps[i];
    return NULL;
}

/* A heap of a released pool that serves stream and holds nothing (no segment, no block), taken from
 * that pool for p: pools made and released over a long run (a graph captured again and again, a
 * MemPool per phase) then do not use up the allocator's heaps. Under the pressure lock (keeps_memory
 * is read under it) and heaps_lock. */
static struct heap *recycle_heap(tide_allocator *t, struct private_pool *p, tide_stream stream,
                                 uint32_t *from)
{
    for (uint32_t i = 0; i < t->npools; i++) {
        struct private_pool *old = &t->pools[i];
        if (old->use_count || old == p)
            continue;
        for (uint32_t k = 0; k < old->nheaps; k++) {
            struct heap *h = old->heaps[k];
            /* A tide_malloc_pool that chose h before old was released may still be on its way into
             * it, with nothing allocated yet: h would take that block to p. */
            if (h->stream != stream || atomic_load_explicit(&h->pool_mallocs, memory_order_acquire))
                continue;
            heap_lock_and_settle(h);
            bool empty = !h->segments && !h->pending_head && !h->parked && h->map.count == 0;
            if (empty) {
                h->pool_id = p->id;
                h->backend = p->backend;
                h->keeps_memory = true;
                h->vm = p->sleepable;
            }
            heap_unlock(h);
            if (!empty)
                continue;
            old->heaps[k] = old->heaps[--old->nheaps];
            *from = i;
            return h;
        }
    }
    return NULL;
}

/* The pool's heap for stream: its own, a released pool's empty one, or a new one. Under the
 * pressure lock and heaps_lock. */
static tide_status pool_heap(tide_allocator *t, struct private_pool *p, tide_stream stream, struct heap **out)
{
    if ((*out = heap_of_pool(p, stream)))
        return TIDE_OK;
    if (p->nheaps == TIDE_POOL_MAX_STREAMS)
        return tide__fail(TIDE_EINVAL, "tide_malloc_pool: pool %llu is used on more than %d streams",
                          (unsigned long long)p->id, TIDE_POOL_MAX_STREAMS);
    uint32_t from;
    struct heap *recycled = recycle_heap(t, p, stream, &from);
    if (recycled) {
        p->heaps[p->nheaps++] = recycled;
        *out = recycled;
        forget_if_empty(t, &t->pools[from]); /* last: it may move the table's entries, p's too */
        return TIDE_OK;
    }
    uint32_t n = atomic_load(&t->nheaps);
    if (n == TIDE_MAX_HEAPS)
        return tide__fail(TIDE_EINVAL, "tide_malloc_pool: the allocator has %d heaps (streams, and the "
                          "streams of private pools), the most it serves", TIDE_MAX_HEAPS);
    struct heap *h;
    tide_status s = heap_create(t, stream, n, &h);
    if (s != TIDE_OK)
        return s;
    h->pool_id = p->id;
    h->backend = p->backend;
    h->keeps_memory = true; /* the use count is above 0: a released pool takes no allocation */
    h->vm = p->sleepable;
    history_heap_created(t, h);
    t->heaps[n] = h;
    atomic_store_explicit(&t->nheaps, n + 1, memory_order_release);
    p->heaps[p->nheaps++] = h;
    *out = h;
    return TIDE_OK;
}

/* The heap is chosen under heaps_lock and used after it is let go. Meanwhile another thread may release
 * the pool and a new pool on the same stream ask for a heap (recycle_heap): the chosen heap is counted
 * in pool_mallocs, under heaps_lock, until the allocation is in it, and a counted heap is not handed on.
 * A heap lock or heaps_lock held throughout would not do: the first allocation in an empty heap goes
 * on to pressure_malloc, which takes the pressure lock, ahead of heaps_lock in the lock order. */
tide_status tide_malloc_pool(tide_allocator *t, size_t size, tide_stream stream, tide_pool_id id, void **out)
{
    if (id == 0)
        return allocator_malloc(t, size, stream, out, __builtin_return_address(0));
    CHECK_ALLOCATOR(t);
    if (!out)
        return tide__fail(TIDE_EINVAL, "tide_malloc_pool: out is NULL");
    *out = NULL;
    pthread_mutex_lock(&t->heaps_lock);
    struct private_pool *p = NULL;
    struct heap *h = NULL;
    tide_status s = live_pool(t, id, "tide_malloc_pool", &p); /* a released pool takes no allocation */
    if (s == TIDE_OK && p->asleep) /* nor does a sleeping one; sleep.c waits for those counted below */
        s = asleep_pool("tide_malloc_pool", id);
    if (s == TIDE_OK && (h = heap_of_pool(p, stream)))
        atomic_fetch_add_explicit(&h->pool_mallocs, 1, memory_order_relaxed);
    pthread_mutex_unlock(&t->heaps_lock);
    if (s == TIDE_OK && !h) { /* the pool's first use of stream: a heap, under both locks */
        pthread_mutex_lock(&t->pressure);
        pthread_mutex_lock(&t->heaps_lock);
        s = live_pool(t, id, "tide_malloc_pool", &p);
        if (s == TIDE_OK && p->asleep)
            s = asleep_pool("tide_malloc_pool", id);
        if (s == TIDE_OK && (s = pool_heap(t, p, stream, &h)) == TIDE_OK)
            atomic_fetch_add_explicit(&h->pool_mallocs, 1, memory_order_relaxed);
        pthread_mutex_unlock(&t->heaps_lock);
        pthread_mutex_unlock(&t->pressure);
    }
    if (s != TIDE_OK)
        return s;
#ifdef TIDE_POOL_MALLOC_PAUSE_US /* a test's build: the moment between choosing the heap and using it, widened */
    usleep(TIDE_POOL_MALLOC_PAUSE_US);
#endif
    s = allocator_malloc_in_heap(t, h, size, out, __builtin_return_address(0));
    /* The block, if any, is in h's pointer map now: h is not empty, so not handed on, until it is freed. */
    atomic_fetch_sub_explicit(&h->pool_mallocs, 1, memory_order_release);
    return s;
}

tide_status tide_pool_of(tide_allocator *t, void *ptr, tide_pool_id *out)
{
    CHECK_ALLOCATOR(t);
    if (!out)
        return tide__fail(TIDE_EINVAL, "tide_pool_of: out is NULL");
    struct heap *h;
    struct block *b;
    tide_status s = allocator_locate(t, ptr, "tide_pool_of", &h, &b);
    if (s != TIDE_OK)
        return s;
    *out = h->pool_id;
    heap_unlock(h);
    return TIDE_OK;
}

tide_status tide_segment_of(tide_allocator *t, void *ptr, uintptr_t *base, size_t *size)
{
    CHECK_ALLOCATOR(t);
    struct heap *h;
    struct block *b;
    tide_status s = allocator_locate(t, ptr, "tide_segment_of", &h, &b);
    if (s != TIDE_OK)
        return s;
    if (base)
        *base = b->seg->base;
    if (size)
        *size = b->seg->size;
    heap_unlock(h);
    return TIDE_OK;
}

/* ---- sleep and wake: the pool's side (sleep.c does the rest) -------------------------------------------- */

tide_status tide_pool_make_sleepable(tide_allocator *t, tide_pool_id id)
{
    CHECK_ALLOCATOR(t);
    const tide_backend *be = &t->backend;
    if (!be->va_reserve || !be->va_release || !be->map || !be->unmap || !be->page_size ||
        be->page_size % TIDE_SEGMENT_GRANULE)
        return tide__fail(TIDE_EUNSUPPORTED, "tide_pool_make_sleepable: the %s backend has no virtual memory "
                          "(va_reserve, map, unmap and a page size that is a multiple of 2 MiB), which "
                          "keeping addresses while the memory is away needs", be->name);
    pthread_mutex_lock(&t->pressure); /* a heap's vm is read by grow, under it */
    pthread_mutex_lock(&t->heaps_lock);
    struct private_pool *p = NULL;
    tide_status s = live_pool(t, id, "tide_pool_make_sleepable", &p);
    if (s == TIDE_OK && p->backend)
        s = tide__fail(TIDE_EUNSUPPORTED, "tide_pool_make_sleepable: pool %llu has its own backend, which "
                       "reserves whole segments; a sleepable pool maps pages", (unsigned long long)id);
    for (uint32_t i = 0; s == TIDE_OK && i < p->nheaps; i++)
        if (p->heaps[i]->segments && !p->heaps[i]->vm)
            s = tide__fail(TIDE_EINVAL, "tide_pool_make_sleepable: pool %llu holds memory already; make it "
                           "sleepable right after tide_pool_create", (unsigned long long)id);
    if (s == TIDE_OK) {
        p->sleepable = true;
        for (uint32_t i = 0; i < p->nheaps; i++)
            p->heaps[i]->vm = true;
    }
    pthread_mutex_unlock(&t->heaps_lock);
    pthread_mutex_unlock(&t->pressure);
    return s;
}

tide_status tide_pool_sleeping(tide_allocator *t, tide_pool_id id, uint32_t *out)
{
    CHECK_ALLOCATOR(t);
    if (!out)
        return tide__fail(TIDE_EINVAL, "tide_pool_sleeping: out is NULL");
    pthread_mutex_lock(&t->heaps_lock);
    struct private_pool *p = find_pool(t, id);
    bool known = p || forgotten(t, id);
    if (known)
        *out = p && p->asleep;
    pthread_mutex_unlock(&t->heaps_lock);
    return known ? TIDE_OK : unknown_pool("tide_pool_sleeping", id);
}

/* sleep.c's view of a sleepable pool: its heaps (into heaps[TIDE_POOL_MAX_STREAMS]), whether it was
 * asleep, and its mark set (mark > 0), cleared (< 0) or left (0). Fails, saying so, for pool 0, a pool
 * never made, one released whose memory is all gone, or one that is not sleepable. */
tide_status pool_sleep_mark(tide_allocator *t, tide_pool_id id, const char *verb, int mark, struct heap **heaps,
                            uint32_t *nheaps, bool *was_asleep)
{
    pthread_mutex_lock(&t->heaps_lock);
    struct private_pool *p = find_pool(t, id);
    tide_status s = TIDE_OK;
    if (id == 0)
        s = tide__fail(TIDE_EINVAL, "%s: pool 0 is the memory outside pools, which cannot sleep", verb);
    else if (!p)
        s = forgotten(t, id) ? tide__fail(TIDE_EINVAL, "%s: pool %llu was released and holds no memory",
                                          verb, (unsigned long long)id)
                             : unknown_pool(verb, id);
    else if (!p->sleepable)
        s = tide__fail(TIDE_EINVAL, "%s: pool %llu is not sleepable: call tide_pool_make_sleepable right "
                       "after tide_pool_create", verb, (unsigned long long)id);
    if (s == TIDE_OK) {
        if (was_asleep)
            *was_asleep = p->asleep;
        if (mark > 0) {
            p->asleep = true;
        } else if (mark < 0) { /* awake (under the pressure lock, which keeps_memory is read under) */
            p->asleep = false;
            for (uint32_t i = 0; i < p->nheaps; i++) {
                heap_lock_and_settle(p->heaps[i]);
                p->heaps[i]->sleeping = false;
                p->heaps[i]->keeps_memory = p->use_count > 0;
                heap_unlock(p->heaps[i]);
            }
        }
        if (heaps) {
            *nheaps = p->nheaps;
            memcpy(heaps, p->heaps, p->nheaps * sizeof *p->heaps);
        }
    }
    pthread_mutex_unlock(&t->heaps_lock);
    return s;
}

/* ---- checkpoints --------------------------------------------------------------------------------------- */

/* A copy of the pool's heaps, so that the table's lock need not be held while waiting for the device
 * (heaps live as long as the allocator, and change pools only under the pressure lock, which the
 * copy's users hold). */
struct pool_heaps {
    uint32_t n;
    struct heap *heaps[TIDE_POOL_MAX_STREAMS];
};

static tide_status heaps_of_pool(tide_allocator *t, tide_pool_id id, const char *verb, bool must_be_live,
                                 struct pool_heaps *out)
{
    pthread_mutex_lock(&t->heaps_lock);
    struct private_pool *p = NULL;
    tide_status s = TIDE_OK;
    if (must_be_live && (s = live_pool(t, id, verb, &p)) == TIDE_OK && p->asleep)
        s = asleep_pool(verb, id);
    else if (!(p = find_pool(t, id)) && !forgotten(t, id))
        s = unknown_pool(verb, id);
    out->n = 0;
    if (s == TIDE_OK && p) {
        out->n = p->nheaps;
        memcpy(out->heaps, p->heaps, p->nheaps * sizeof *p->heaps);
    }
    pthread_mutex_unlock(&t->heaps_lock);
    return s;
}

/* Appends the heap's ACTIVE blocks to blocks[] while there is room; counts all of them. Under h's lock. */
static void list_active(tide_allocator *t, struct heap *h, tide_pool_block *blocks, size_t cap, size_t *count)
{
    for (struct segment *seg = h->segments; seg; seg = seg->next)
        for (struct block *b = seg->first; b; b = b->next) {
            if (b->state != BLOCK_ACTIVE)
                continue;
            if (*count < cap)
                blocks[*count] = (tide_pool_block){.ptr = b->addr + t->guard, .size = b->size,
                                                   .requested = b->requested, .stream = h->stream};
            ++*count;
        }
}

static int by_address(const void *a, const void *b)
{
    uintptr_t x = ((const tide_pool_block *)a)->ptr, y = ((const tide_pool_block *)b)->ptr;
    return x < y ? -1 : x > y;
}

/* Every ACTIVE block of the pool, by address (n of them, in *out, malloc'd). Under the pressure lock,
 * so the pool's segments do not change meanwhile. */
static tide_status collect_active(tide_allocator *t, const struct pool_heaps *ph, tide_pool_block **out,
                                  size_t *n)
{
    size_t cap = 0, count;
    tide_pool_block *all = NULL;
    for (;;) {
        count = 0;
        for (uint32_t i = 0; i < ph->n; i++) {
            heap_lock_and_settle(ph->heaps[i]);
            list_active(t, ph->heaps[i], all, cap, &count);
            heap_unlock(ph->heaps[i]);
        }
        if (count <= cap)
            break;
        free(all);
        cap = count;
        if (!(all = malloc(cap * sizeof *all)))
            return tide__fail(TIDE_EHOSTMEM, "out of host memory listing a pool's blocks");
    }
    if (count > 1)
        qsort(all, count, sizeof *all, by_address);
    *out = all;
    *n = count;
    return TIDE_OK;
}

tide_status tide_pool_blocks(tide_allocator *t, tide_pool_id id, tide_pool_block *blocks, size_t cap,
                             size_t *count)
{
    CHECK_ALLOCATOR(t);
    if (!count || (cap && !blocks))
        return tide__fail(TIDE_EINVAL, "tide_pool_blocks: %s is NULL", count ? "blocks" : "count");
    /* The pressure lock first: a released pool's heaps go to other pools under it (recycle_heap). */
    pthread_mutex_lock(&t->pressure);
    struct pool_heaps ph;
    tide_pool_block *all = NULL;
    size_t n = 0;
    tide_status s = heaps_of_pool(t, id, "tide_pool_blocks", false, &ph);
    if (s == TIDE_OK)
        s = collect_active(t, &ph, &all, &n);
    pthread_mutex_unlock(&t->pressure);
    if (s != TIDE_OK)
        return s;
    if (n && cap)
        memcpy(blocks, all, (n < cap ? n : cap) * sizeof *all);
    free(all);
    *count = n;
    return TIDE_OK;
}

/* The pool's heap that owns addr, serving stream, if any; with its lock held. */
static struct heap *owning_heap(tide_allocator *t, const struct pool_heaps *ph, uintptr_t addr,
                                tide_stream stream, struct segment **seg_out)
{
    struct segment *seg = segment_map_find(&t->segmap, addr);
    if (!seg)
        return NULL;
    struct heap *h = atomic_load_explicit(&seg->heap, memory_order_acquire);
    for (uint32_t i = 0; i < ph->n; i++)
        if (ph->heaps[i] == h && h->stream == stream) {
            heap_lock_and_settle(h);
            /* Confirmed under the lock (the map's answer is a hint). */
            if (atomic_load_explicit(&seg->heap, memory_order_relaxed) == h && addr >= seg->base &&
                addr < seg->base + seg->size) {
                *seg_out = seg;
                return h;
            }
            heap_unlock(h);
            return NULL;
        }
    return NULL;
}

/* What is wrong with block c of a checkpoint on its own, or NULL: each field is one tide_pool_blocks
 * could have reported on this allocator. A checkpoint is input (a program may build one, or hand on one
 * from another allocator), and each test here keeps a later computation from wrapping or a split from
 * leaving a piece that is not whole units. */
static const char *malformed_block(const tide_allocator *t, const tide_pool_block *c)
{
    if (c->ptr < t->guard || (c->ptr - t->guard) % TIDE_UNIT)
        return t->guard ? "its address is not 512 bytes past a 512-byte boundary, as tide_malloc_pool's are "
                          "under guard:True"
                        : "its address is not on a 512-byte boundary, as tide_malloc_pool's are";
    if (c->size % TIDE_UNIT || c->size < TIDE_UNIT + 2 * t->guard)
        return t->guard ? "its size is not a multiple of 512 bytes that holds its two guards and a unit "
                          "(1536 bytes at least)"
                        : "its size is not a positive multiple of 512 bytes";
    if (c->size > UINTPTR_MAX - (c->ptr - t->guard))
        return "it would reach past the end of the address space";
    if (c->requested == 0 || c->requested > c->size - 2 * t->guard)
        return "its requested bytes are 0 or more than its size holds";
    return NULL;
}

/* The most blocks the pool's memory could hold: a checkpoint with more is not its own, and is refused
 * before any of its blocks is read. Under the pressure lock. */
static size_t most_blocks(const tide_allocator *t, const struct pool_heaps *ph)
{
    size_t reserved = 0;
    for (uint32_t i = 0; i < ph->n; i++) {
        heap_lock_and_settle(ph->heaps[i]);
        reserved += (size_t)ph->heaps[i]->stats.pool[TIDE_POOL_ALL].reserved.cur;
        heap_unlock(ph->heaps[i]);
    }
    return reserved / (TIDE_UNIT + 2 * t->guard);
}

static bool serves_stream(const struct pool_heaps *ph, tide_stream stream)
{
    for (uint32_t i = 0; i < ph->n; i++)
        if (ph->heaps[i]->stream == stream)
            return true;
    return false;
}

/* Refuses, before anything changes, a checkpoint that is not one of this pool's: a block malformed on
 * its own, on a stream the pool has no memory on, out of order or overlapping the one before it, or not
 * wholly inside one segment of the pool's heap for its stream; or more blocks than the pool could hold.
 * Under the pressure lock. */
static tide_status check_checkpoint(tide_allocator *t, tide_pool_id id, const struct pool_heaps *ph,
                                    const tide_pool_block *blocks, size_t n)
{
    size_t most = most_blocks(t, ph);
    if (n > most)
        return tide__fail(TIDE_EINVAL, "tide_pool_restore: %zu blocks, more blocks than pool %llu's memory "
                          "could hold (%zu): not a checkpoint of this pool", n, (unsigned long long)id, most);
    for (size_t i = 0; i < n; i++) {
        const tide_pool_block *c = &blocks[i];
        const char *why = malformed_block(t, c);
        if (why)
            return tide__fail(TIDE_EINVAL, "tide_pool_restore: block %zu (0x%" PRIxPTR ", %zu bytes for %zu "
                              "requested) is not one tide_pool_blocks reports: %s", i, c->ptr, c->size,
                              c->requested, why);
        if (!serves_stream(ph, c->stream))
            return tide__fail(TIDE_EINVAL, "tide_pool_restore: block %zu (0x%" PRIxPTR ") names stream 0x%llx, "
                              "on which pool %llu has no memory", i, c->ptr, (unsigned long long)c->stream,
                              (unsigned long long)id);
        uintptr_t start = c->ptr - t->guard;
        /* The block before passed every test here, so its end does not wrap. */
        if (i && blocks[i - 1].ptr - t->guard + blocks[i - 1].size > start)
            return tide__fail(TIDE_EINVAL, "tide_pool_restore: block %zu (0x%" PRIxPTR ") is out of order "
                              "or overlaps the one before it", i, c->ptr);
        struct segment *seg;
        struct heap *h = owning_heap(t, ph, start, c->stream, &seg);
        bool inside = h && c->size <= seg->base + seg->size - start;
        if (h)
            heap_unlock(h);
        if (!inside)
            return tide__fail(TIDE_EINVAL, "tide_pool_restore: block %zu (0x%" PRIxPTR ", %zu bytes) does "
                              "not lie in pool %llu's memory for its stream", i, c->ptr, c->size,
                              (unsigned long long)id);
    }
    return TIDE_OK;
}

/* Allocates the checkpoint's block c again, exactly where it was. Under the pressure lock. */
static tide_status restore_block(tide_allocator *t, const struct pool_heaps *ph, const tide_pool_block *c,
                                 size_t i)
{
    uintptr_t start = c->ptr - t->guard;
    struct segment *seg;
    struct heap *h = owning_heap(t, ph, start, c->stream, &seg);
    if (!h) /* checked before anything was freed, and segments of a pool in use are never released */
        return tide__fail(TIDE_EINVAL, "tide_pool_restore: block %zu left the pool's memory", i);
    struct block *b = segment_block_at(seg, start);
    if (!b || b->state != BLOCK_FREE || start + c->size > b->addr + b->size) {
        heap_unlock(h);
        return tide__fail(TIDE_EBUSY, "tide_pool_restore: the memory of block %zu (0x%" PRIxPTR ", %zu "
                          "bytes) is still held after the pool's blocks were freed (a reference taken "
                          "with tide_retain?)", i, c->ptr, c->size);
    }
    tide_status s = TIDE_OK;
    b = heap_take_at(h, b, start, c->size, c->requested, &s);
    if (b)
        history_heap_alloc(h, b, c->requested, NULL);
    heap_unlock(h);
    if (!b)
        return s;
    return t->guard ? allocator_write_guards(t, h, b) : TIDE_OK;
}

static tide_status pool_restore(tide_allocator *t, tide_pool_id id, const tide_pool_block *blocks, size_t n);

tide_status tide_pool_restore(tide_allocator *t, tide_pool_id id, const tide_pool_block *blocks, size_t n)
{
    CHECK_ALLOCATOR(t);
    if (n && !blocks)
        return tide__fail(TIDE_EINVAL, "tide_pool_restore: blocks is NULL");
    bool begun = history_stack_begin(t, __builtin_return_address(0)); /* its frees' and allocations' */
    tide_status s = pool_restore(t, id, blocks, n);
    history_stack_end(begun);
    return s;
}

static tide_status pool_restore(tide_allocator *t, tide_pool_id id, const tide_pool_block *blocks, size_t n)
{
    /* The pressure lock: no capture begins, nothing is released and no heap changes pools until the
     * pool is back. */
    pthread_mutex_lock(&t->pressure);
    struct pool_heaps ph;
    tide_status s = heaps_of_pool(t, id, "tide_pool_restore", true, &ph);
    if (s == TIDE_OK && atomic_load(&t->captures))
        s = tide__fail(TIDE_EBUSY, "tide_pool_restore during a graph capture: it may have to wait for the "
                       "device");
    if (s != TIDE_OK) {
        pthread_mutex_unlock(&t->pressure);
        return s;
    }
    tide_pool_block *live = NULL;
    size_t nlive = 0;
    if ((s = check_checkpoint(t, id, &ph, blocks, n)) != TIDE_OK ||
        (s = collect_active(t, &ph, &live, &nlive)) != TIDE_OK) {
        pthread_mutex_unlock(&t->pressure);
        return s;
    }
    /* Every block is freed even if one free reports a failure: under guard:True a broken canary or a
     * device error in checking it is reported, and the block freed all the same. */
    tide_status freed = TIDE_OK;
    char freed_message[512] = "";
    for (size_t i = 0; i < nlive; i++) {
        tide_status f = tide_free(t, (void *)live[i].ptr);
        if (f != TIDE_OK && freed == TIDE_OK) {
            freed = f;
            snprintf(freed_message, sizeof freed_message, "%s", tide_last_error());
        }
    }
    free(live);
    /* Blocks used on other streams wait for their fences: the device finishes what it was given. */
    bool waiting = false;
    for (uint32_t i = 0; i < ph.n; i++) {
        heap_lock_and_settle(ph.heaps[i]);
        waiting |= ph.heaps[i]->pending_head != NULL;
        heap_unlock(ph.heaps[i]);
    }
    if (waiting) {
        uint64_t seq;
        tide_status synced = device_synchronize(t, &seq);
        drain_after_synchronize(t, seq, synced);
    }
    for (size_t i = 0; i < n && s == TIDE_OK; i++)
        s = restore_block(t, &ph, &blocks[i], i);
    /* Every heap, not only the pool's: the synchronize drained PENDING blocks everywhere. With
     * heap_lock (no settling), as pressure.c settles: a parked block elsewhere stays parked. */
    for (uint32_t i = 0; i < atomic_load(&t->nheaps); i++) {
        heap_lock(t->heaps[i]);
        stats_settle(&t->heaps[i]->stats);
        heap_unlock(t->heaps[i]);
    }
    pthread_mutex_unlock(&t->pressure);
    allocator_debug_check(t, DEBUG_RESERVE_RELEASE, "tide_pool_restore");
    if (s == TIDE_OK && freed != TIDE_OK)
        return tide__fail(freed, "tide_pool_restore: freeing the pool's blocks: %s", freed_message);
    return s;
}

tide_status tide_pool_empty_cache(tide_allocator *t, tide_pool_id pool, tide_release_report *report)
{
    CHECK_ALLOCATOR(t);
    if (pool == 0)
        return tide_empty_cache(t, report);
    pthread_mutex_lock(&t->heaps_lock);
    bool known = find_pool(t, pool) || forgotten(t, pool);
    pthread_mutex_unlock(&t->heaps_lock);
    if (!known)
        return unknown_pool("tide_pool_empty_cache", pool);
    tide_status s = pressure_empty_pool(t, pool, report);
    allocator_debug_check(t, DEBUG_RESERVE_RELEASE, "tide_pool_empty_cache");
    return s;
}

/* ---- graph capture ----------------------------------------------------------------------------------- */
/*
 * Capture is a property of a stream. A stream that captures a graph may not have its fences queried
 * (they would be nodes of the graph), so lifecycle_poll leaves its heaps alone, and only its heaps:
 * the rest of the device drains its pending frees as usual. What acts on the whole device waits for
 * every capture, since a capture in CUDA's global mode forbids it from any thread: synchronizing,
 * releasing memory (a release waits for the device), recording fences at free (a use stream may be
 * joined to the capture). tide_capture_begin names no stream and so holds back every heap's polls.
 */

bool capture_holds_poll(tide_allocator *t, tide_stream stream)
{
    if (atomic_load_explicit(&t->device_captures, memory_order_relaxed))
        return true;
    for (uint32_t i = 0; i < TIDE_MAX_CAPTURING_STREAMS; i++)
        if (atomic_load_explicit(&t->capturing[i].depth, memory_order_relaxed) &&
            atomic_load_explicit(&t->capturing[i].stream, memory_order_relaxed) == stream)
            return true;
    return false;
}

tide_status tide_capture_begin(tide_allocator *t)
{
    CHECK_ALLOCATOR(t);
    /* Under the pressure lock: a capture cannot begin while the last one's end is recording fences. */
    pthread_mutex_lock(&t->pressure);
    atomic_fetch_add(&t->device_captures, 1);
    atomic_fetch_add(&t->captures, 1);
    pthread_mutex_unlock(&t->pressure);
    return TIDE_OK;
}

tide_status tide_capture_begin_stream(tide_allocator *t, tide_stream stream)
{
    CHECK_ALLOCATOR(t);
    pthread_mutex_lock(&t->pressure);
    struct capturing_stream *slot = NULL;
    for (uint32_t i = 0; i < TIDE_MAX_CAPTURING_STREAMS; i++) {
        struct capturing_stream *c = &t->capturing[i];
        uint32_t depth = atomic_load(&c->depth);
        if (depth && atomic_load(&c->stream) == stream) {
            slot = c;
            break;
        }
        if (!depth && !slot)
            slot = c;
    }
    if (!slot) {
        pthread_mutex_unlock(&t->pressure);
        return tide__fail(TIDE_EINVAL, "tide_capture_begin_stream: %d streams are capturing already, the "
                          "most at once", TIDE_MAX_CAPTURING_STREAMS);
    }
    atomic_store(&slot->stream, stream); /* before the depth: a reader that sees the depth sees it */
    atomic_fetch_add(&slot->depth, 1);
    atomic_fetch_add(&t->captures, 1);
    pthread_mutex_unlock(&t->pressure);
    return TIDE_OK;
}

/* Under the pressure lock: one capture fewer. The last one's end records the fences held back. */
static void capture_ended(tide_allocator *t)
{
    uint32_t n = atomic_load(&t->captures);
    atomic_store(&t->captures, n - 1);
    if (n != 1)
        return;
    for (uint32_t i = 0; i < atomic_load(&t->nheaps); i++) {
        struct heap *h = t->heaps[i];
        heap_lock_and_settle(h);
        if (lifecycle_end_capture(h))
            stats_settle(&h->stats);
        heap_unlock(h);
    }
}

tide_status tide_capture_end(tide_allocator *t)
{
    CHECK_ALLOCATOR(t);
    bool begun = history_stack_begin(t, __builtin_return_address(0)); /* frees completed at the end */
    pthread_mutex_lock(&t->pressure);
    uint32_t n = atomic_load(&t->device_captures);
    if (n == 0) {
        pthread_mutex_unlock(&t->pressure);
        history_stack_end(begun);
        return tide__fail(TIDE_EINVAL, "tide_capture_end without a matching tide_capture_begin");
    }
    atomic_store(&t->device_captures, n - 1);
    capture_ended(t);
    pthread_mutex_unlock(&t->pressure);
    history_stack_end(begun);
    return TIDE_OK;
}

tide_status tide_capture_end_stream(tide_allocator *t, tide_stream stream)
{
    CHECK_ALLOCATOR(t);
    bool begun = history_stack_begin(t, __builtin_return_address(0));
    pthread_mutex_lock(&t->pressure);
    struct capturing_stream *slot = NULL;
    for (uint32_t i = 0; i < TIDE_MAX_CAPTURING_STREAMS && !slot; i++)
        if (atomic_load(&t->capturing[i].depth) && atomic_load(&t->capturing[i].stream) == stream)
            slot = &t->capturing[i];
    if (!slot) {
        pthread_mutex_unlock(&t->pressure);
        history_stack_end(begun);
        return tide__fail(TIDE_EINVAL, "tide_capture_end_stream: stream 0x%llx is not capturing (no matching "
                          "tide_capture_begin_stream)", (unsigned long long)stream);
    }
    atomic_fetch_sub(&slot->depth, 1);
    capture_ended(t);
    pthread_mutex_unlock(&t->pressure);
    history_stack_end(begun);
    return TIDE_OK;
}

tide_status tide_capturing(tide_allocator *t, tide_stream stream, uint32_t *out)
{
    CHECK_ALLOCATOR(t);
    if (!out)
        return tide__fail(TIDE_EINVAL, "tide_capturing: out is NULL");
    pthread_mutex_lock(&t->pressure);
    uint32_t n = atomic_load(&t->device_captures);
    for (uint32_t i = 0; i < TIDE_MAX_CAPTURING_STREAMS; i++)
        if (atomic_load(&t->capturing[i].depth) && atomic_load(&t->capturing[i].stream) == stream)
            n += atomic_load(&t->capturing[i].depth);
    pthread_mutex_unlock(&t->pressure);
    *out = n;
    return TIDE_OK;
}

void pools_destroy(tide_allocator *t)
{
    while (t->pool_backends) {
        struct pool_backend *next = t->pool_backends->next;
        free(t->pool_backends);
        t->pool_backends = next;
    }
    free(t->pools);
    t->pools = NULL;
    t->npools = t->pools_cap = 0;
}

/*
 * Private pools and graph capture. A pool is a set of heaps, one per stream it serves, kept out of the
 * stream table: allocations name the pool, so its blocks come from its own segments and go back to
 * them, and nothing outside the pool can reuse them. While its use count is above 0 the release paths
 * of pressure.c skip its heaps (keeps_memory); at 0 they release its idle segments like any others.
 *
 * Lock order: the pressure lock, then heaps_lock (the pool table), then heap locks.
 */
#include "internal.h"

#include <stdlib.h>
#include <string.h>

struct private_pool {
    tide_pool_id id;
    uint32_t use_count;
    uint32_t nheaps;
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

static tide_status unknown_pool(const char *verb, tide_pool_id id)
{
    return tide__fail(TIDE_EINVAL, "%s: pool %llu was never created by tide_pool_create on this allocator",
                      verb, (unsigned long long)id);
}

/* The pool id names, if it is still in use (use count above 0). Under heaps_lock. */
static tide_status live_pool(tide_allocator *t, tide_pool_id id, const char *verb, struct private_pool **out)
{
    struct private_pool *p = find_pool(t, id);
    if (!p)
        return unknown_pool(verb, id);
    if (p->use_count == 0)
        return tide__fail(TIDE_EINVAL, "%s: pool %llu was released (its use count reached 0)", verb,
                          (unsigned long long)id);
    *out = p;
    return TIDE_OK;
}

tide_status tide_pool_create(tide_allocator *t, tide_pool_id *out)
{
    CHECK_ALLOCATOR(t);
    if (!out)
        return tide__fail(TIDE_EINVAL, "tide_pool_create: out is NULL");
    *out = 0;
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
    struct private_pool *p = &t->pools[t->npools++];
    memset(p, 0, sizeof *p);
    p->id = ++t->next_pool_id;
    p->use_count = 1;
    *out = p->id;
    pthread_mutex_unlock(&t->heaps_lock);
    return TIDE_OK;
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
    if (s == TIDE_OK && --p->use_count == 0)
        for (uint32_t i = 0; i < p->nheaps; i++)
            p->heaps[i]->keeps_memory = false;
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
    if (p)
        *out = p->use_count;
    pthread_mutex_unlock(&t->heaps_lock);
    return p ? TIDE_OK : unknown_pool("tide_pool_use_count", id);
}

tide_status tide_pool_memory(tide_allocator *t, tide_pool_id id, size_t *reserved, size_t *allocated)
{
    CHECK_ALLOCATOR(t);
    size_t r = 0, a = 0;
    pthread_mutex_lock(&t->heaps_lock);
    struct private_pool *p = find_pool(t, id);
    for (uint32_t i = 0; p && i < p->nheaps; i++) {
        struct heap *h = p->heaps[i];
        heap_lock(h);
        r += (size_t)h->stats.pool[TIDE_POOL_ALL].reserved.cur;
        a += (size_t)h->stats.pool[TIDE_POOL_ALL].allocated.cur;
        heap_unlock(h);
    }
    pthread_mutex_unlock(&t->heaps_lock);
    if (!p)
        return unknown_pool("tide_pool_memory", id);
    if (reserved)
        *reserved = r;
    if (allocated)
        *allocated = a;
    return TIDE_OK;
}

/* The pool's heap for stream, made on first use. Under heaps_lock. */
static tide_status pool_heap(tide_allocator *t, struct private_pool *p, tide_stream stream, struct heap **out)
{
    for (uint32_t i = 0; i < p->nheaps; i++)
        if (p->heaps[i]->stream == stream) {
            *out = p->heaps[i];
            return TIDE_OK;
        }
    if (p->nheaps == TIDE_POOL_MAX_STREAMS)
        return tide__fail(TIDE_EINVAL, "tide_malloc_pool: pool %llu is used on more than %d streams",
                          (unsigned long long)p->id, TIDE_POOL_MAX_STREAMS);
    uint32_t n = atomic_load(&t->nheaps);
    if (n == TIDE_MAX_HEAPS)
        return tide__fail(TIDE_EINVAL, "tide_malloc_pool: the allocator has %d heaps (streams, and the "
                          "streams of private pools), the most it serves", TIDE_MAX_HEAPS);
    struct heap *h;
    tide_status s = heap_create(t, stream, n, &h);
    if (s != TIDE_OK)
        return s;
    h->pool_id = p->id;
    h->keeps_memory = true; /* the use count is above 0: a released pool takes no allocation */
    history_heap_created(t, h);
    t->heaps[n] = h;
    atomic_store_explicit(&t->nheaps, n + 1, memory_order_release);
    p->heaps[p->nheaps++] = h;
    *out = h;
    return TIDE_OK;
}

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
    if (s == TIDE_OK)
        s = pool_heap(t, p, stream, &h);
    pthread_mutex_unlock(&t->heaps_lock);
    if (s != TIDE_OK)
        return s;
    return allocator_malloc_in_heap(t, h, size, out, __builtin_return_address(0));
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

/* ---- graph capture ----------------------------------------------------------------------------------- */

tide_status tide_capture_begin(tide_allocator *t)
{
    CHECK_ALLOCATOR(t);
    /* Under the pressure lock: a capture cannot begin while the last one's end is recording fences. */
    pthread_mutex_lock(&t->pressure);
    atomic_fetch_add(&t->captures, 1);
    pthread_mutex_unlock(&t->pressure);
    return TIDE_OK;
}

tide_status tide_capture_end(tide_allocator *t)
{
    CHECK_ALLOCATOR(t);
    pthread_mutex_lock(&t->pressure);
    uint32_t n = atomic_load(&t->captures);
    if (n == 0) {
        pthread_mutex_unlock(&t->pressure);
        return tide__fail(TIDE_EINVAL, "tide_capture_end without a matching tide_capture_begin");
    }
    atomic_store(&t->captures, n - 1);
    if (n == 1) {
        for (uint32_t i = 0; i < atomic_load(&t->nheaps); i++) {
            struct heap *h = t->heaps[i];
            heap_lock(h);
            if (lifecycle_end_capture(h))
                stats_settle(&h->stats);
            heap_unlock(h);
        }
    }
    pthread_mutex_unlock(&t->pressure);
    return TIDE_OK;
}

void pools_destroy(tide_allocator *t)
{
    free(t->pools);
    t->pools = NULL;
    t->npools = t->pools_cap = 0;
}

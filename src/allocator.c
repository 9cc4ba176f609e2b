/*
 * The public calls: creating and destroying an allocator, finding a stream's heap, and the fast paths
 * of tide_malloc, tide_free, tide_retain, tide_release and tide_record_stream. Slow paths live in
 * pressure.c, the block lifecycle in lifecycle.c.
 */
#include "internal.h"
#include "hot_path.h"
#include "stats_events.h"
#include "history_events.h"

#include <inttypes.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static _Atomic(uint64_t) next_allocator_id = 1;

/* The heap this thread used last, so that a loop on one stream skips the table. Allocator ids are never
 * reused, so an entry for a destroyed allocator can never match. Read on every call: with
 * TIDE_TLS_INITIAL_EXEC (CMakeLists.txt) at a fixed offset from the thread pointer. */
#if TIDE_TLS_INITIAL_EXEC
#define HOT_THREAD_LOCAL _Thread_local __attribute__((tls_model("initial-exec")))
#else
#define HOT_THREAD_LOCAL _Thread_local
#endif
static HOT_THREAD_LOCAL struct {
    uint64_t allocator_id;
    tide_stream stream;
    struct heap *heap;
} last_heap;

/* The child of a fork has only the thread that forked: its cached heap, if it was the parent's
 * allocator's, would let tide_malloc and tide_free into that allocator by their fast paths, which do
 * not check for a fork. Forgotten, their first call in the child takes the slow path, which does. */
static void forget_last_heap_in_child(void) { last_heap.allocator_id = 0; }
__attribute__((constructor)) static void watch_forks(void) { pthread_atfork(NULL, NULL, forget_last_heap_in_child); }

tide_status allocator_refuse_forked(const tide_allocator *t, const char *call)
{
    return tide__fail(TIDE_EINVAL, "%s: this allocator was made in process %d, and this process (%d) is "
                      "a child forked from it: a child cannot use its parent's device memory (a GPU "
                      "context does not survive a fork), and the allocator's locks may have been held "
                      "by threads that do not exist here. Create a new allocator in the child; "
                      "tide_destroy of this one frees nothing and returns", call, t->pid, (int)getpid());
}

/* ---- debug checking ------------------------------------------------------------------------------- */

void allocator_lock_all(tide_allocator *t)
{
    pthread_mutex_lock(&t->pressure);
    uint32_t n = atomic_load(&t->nheaps);
    for (uint32_t i = 0; i < n; i++)
        heap_lock_and_settle(t->heaps[i]);
}

void allocator_unlock_all(tide_allocator *t)
{
    uint32_t n = atomic_load(&t->nheaps);
    for (uint32_t i = n; i-- > 0;)
        heap_unlock(t->heaps[i]);
    pthread_mutex_unlock(&t->pressure);
}

void allocator_debug_check_now(tide_allocator *t, const char *after)
{
    /* A completion callback may call in while another thread holds the pressure lock and waits for
     * that very callback's stream; checking then would deadlock, so skip this one check. */
    if (pthread_mutex_trylock(&t->pressure) != 0)
        return;
    uint32_t n = atomic_load(&t->nheaps);
    for (uint32_t i = 0; i < n; i++)
        heap_lock_and_settle(t->heaps[i]);
    char saved[1024];
    snprintf(saved, sizeof saved, "%s", tide_last_error());
    tide_status s = check_locked(t);
    if (s != TIDE_OK) {
        fprintf(stderr, "tidepool: debug check failed after %s: %s\n", after, tide_last_error());
        abort();
    }
    tide__restore_message(saved); /* the check must not change the caller's last message */
    allocator_unlock_all(t);
}

void allocator_heap_check_now(tide_allocator *t, struct heap *h, const char *after)
{
    if (h->parked) /* the validator knows no parked block: merged, as every other check's lock does */
        heap_settle(h);
    char saved[1024];
    snprintf(saved, sizeof saved, "%s", tide_last_error());
    if (check_heap_locked(t, h) != TIDE_OK) {
        fprintf(stderr, "tidepool: debug check failed after %s: %s\n", after, tide_last_error());
        abort();
    }
    tide__restore_message(saved);
}

/* ---- heaps by stream ---------------------------------------------------------------------------------- */

static size_t table_slot(tide_stream stream)
{
    uint64_t h = (uint64_t)stream * 0x9E3779B97F4A7C15ull;
    return (size_t)(h >> 32) & (2 * TIDE_MAX_HEAPS - 1);
}

static struct heap *heap_lookup(tide_allocator *t, tide_stream stream)
{
    for (size_t i = table_slot(stream);; i = (i + 1) & (2 * TIDE_MAX_HEAPS - 1)) {
        struct heap *h = atomic_load_explicit(&t->heap_table[i], memory_order_acquire);
        if (!h || h->stream == stream)
            return h;
    }
}

void allocator_forget_cached_heaps(tide_allocator *t)
{
    atomic_store_explicit(&t->id, atomic_fetch_add(&next_allocator_id, 1), memory_order_release);
}

/* The table lookup, and the heap's creation on a stream's first use: out of line, so that the fast
 * path below stays small. While the allocator records stacks, the heap is not cached: each tide_malloc
 * comes here, and takes its caller's stack before it takes the heap's lock (history_stack_keep). */
__attribute__((noinline)) static tide_status heap_for_stream_slow(tide_allocator *t, tide_stream stream,
                                                                  struct heap **out, const void *site)
{
    if (allocator_forked(t))
        return allocator_refuse_forked(t, "tide_malloc");
    /* The id before the test for stacks: a history with stacks sets the flag, then a new id, so a heap
     * cached under the id read here without stacks is forgotten once they start. */
    uint64_t id = atomic_load_explicit(&t->id, memory_order_acquire);
    struct heap *h = heap_lookup(t, stream);
    if (!h) {
        pthread_mutex_lock(&t->heaps_lock);
        h = heap_lookup(t, stream);
        if (!h) {
            uint32_t n = atomic_load(&t->nheaps);
            tide_status s;
            if (n == TIDE_MAX_HEAPS)
                s = tide__fail(TIDE_EINVAL, "too many streams: one allocator serves at most %d",
                               TIDE_MAX_HEAPS);
            else
                s = heap_create(t, stream, n, &h);
            if (s != TIDE_OK) {
                pthread_mutex_unlock(&t->heaps_lock);
                return s;
            }
            history_heap_created(t, h);
            t->heaps[n] = h;
            size_t i = table_slot(stream);
            while (atomic_load_explicit(&t->heap_table[i], memory_order_relaxed))
                i = (i + 1) & (2 * TIDE_MAX_HEAPS - 1);
            atomic_store_explicit(&t->heap_table[i], h, memory_order_release);
            atomic_store_explicit(&t->nheaps, n + 1, memory_order_release);
        }
        pthread_mutex_unlock(&t->heaps_lock);
    }
    *out = h;
    if (history_wants_stacks(t)) {
        history_stack_keep(id, site);
        return TIDE_OK;
    }
    last_heap.allocator_id = id;
    last_heap.stream = stream;
    last_heap.heap = h;
    return TIDE_OK;
}

static inline tide_status heap_for_stream(tide_allocator *t, tide_stream stream, struct heap **out,
                                          const void *site)
{
    if (TIDE_LIKELY(last_heap.allocator_id == atomic_load_explicit(&t->id, memory_order_relaxed) &&
                    last_heap.stream == stream)) {
        *out = last_heap.heap;
        return TIDE_OK;
    }
    return heap_for_stream_slow(t, stream, out, site);
}

/* ---- creation --------------------------------------------------------------------------------------- */

static tide_status check_backend(const tide_backend *be)
{
    if (!be)
        return tide__fail(TIDE_EINVAL, "tide_create: the backend is NULL");
    /* Fields were only ever added at the end; what an older caller left out stays empty. */
    if (be->struct_size < offsetof(tide_backend, close))
        return tide__fail(TIDE_EINVAL, "tide_create: backend struct_size is %u, expected %zu (set "
                          "it to sizeof(tide_backend))", be->struct_size, sizeof *be);
    const char *missing = !be->reserve ? "reserve"
                          : !be->release ? "release"
                          : !be->fence_create ? "fence_create"
                          : !be->fence_record ? "fence_record"
                          : !be->fence_query ? "fence_query"
                          : !be->fence_destroy ? "fence_destroy"
                          : !be->synchronize ? "synchronize"
                          : !be->mem_info ? "mem_info"
                          : NULL;
    if (missing)
        return tide__fail(TIDE_EINVAL, "tide_create: the backend '%s' has no %s function",
                          be->name ? be->name : "(unnamed)", missing);
    return TIDE_OK;
}

static size_t limit_from_config(const struct tide_config *c, size_t device_total)
{
    if (!c->limit_set)
        return device_total;
    if (c->limit_fraction > 0)
        return (size_t)((double)device_total * c->limit_fraction);
    return c->limit_bytes;
}

tide_status tide_config_check_backend(const tide_backend *backend, const char *config, const char *origin)
{
    tide_status s = check_backend(backend);
    return s == TIDE_OK ? config_check_with(backend, config, origin) : s;
}

tide_status tide_create(const tide_backend *backend, const char *config, tide_allocator **out)
{
    if (!out)
        return tide__fail(TIDE_EINVAL, "tide_create: out is NULL");
    *out = NULL;
    tide_status s = check_backend(backend);
    if (s != TIDE_OK)
        return s;
    const char *name = backend->name ? backend->name : "(unnamed)"; /* a backend need not name itself */
    struct tide_config conf;
    if ((s = config_load(&conf, config, "tide_create config")) != TIDE_OK ||
        (s = config_accept(&conf, backend, "tide_create")) != TIDE_OK)
        return s;

    size_t dev_free = 0, dev_total = 0;
    tide__clear_backend_message();
    s = backend->mem_info(backend->ctx, &dev_free, &dev_total);
    if (s != TIDE_OK)
        return tide__fail_with_context(s, "tide_create: asking the %s device for its memory", name);
    if (dev_total == 0)
        return tide__fail(TIDE_EDEVICE, "tide_create: the %s device reports no memory", name);

    tide_allocator *t = calloc(1, sizeof *t);
    if (!t)
        return tide__fail(TIDE_EHOSTMEM, "tide_create: out of host memory");
    memcpy(&t->backend, backend, backend->struct_size < sizeof t->backend ? backend->struct_size
                                                                           : sizeof t->backend);
    if (!t->backend.name)
        t->backend.name = "(unnamed)";
    t->conf = conf;
    t->device_total = dev_total < TIDE_MAX_DEVICE_BYTES ? dev_total : TIDE_MAX_DEVICE_BYTES;
    t->guard = conf.guard ? TIDE_GUARD_BYTES : 0;
    /* The rules keep a big reserved segment from being carved up for good (free_index.c). A run of
     * pages is carved and given back page by page, and its free stretches, which grow as pages are
     * mapped beside them, may serve any request: the rules are lifted, and the fit reads no segment. */
    t->fit = (struct fit_rules){conf.max_split_size, TIDE_SEGMENT_SHARE_SHIFT, conf.expandable_segments};
    t->limit = limit_from_config(&conf, t->device_total);
    t->gc_threshold = conf.gc_threshold > 0 ? (size_t)((double)t->limit * conf.gc_threshold) : 0;
    t->id = atomic_fetch_add(&next_allocator_id, 1);
    t->forks = forks_now();
    t->pid = (int)getpid();
    if ((s = segment_map_init(&t->segmap)) != TIDE_OK) {
        free(t);
        return s;
    }
    pthread_mutex_init(&t->pressure, NULL);
    pthread_mutex_init(&t->heaps_lock, NULL);
    pthread_mutex_init(&t->history_lock, NULL);
    pthread_mutex_init(&t->history_write_lock, NULL);
    pthread_mutex_init(&t->ipc_lock, NULL);
    *out = t;
    return TIDE_OK;
}

tide_status tide_destroy(tide_allocator *t)
{
    if (!t)
        return TIDE_OK;
    /* A child's copy of its parent's allocator: the memory is the parent's, the device's threads and
     * the threads that held its locks are not here. Its host bookkeeping is left as it is, for the
     * child's exit to reclaim. */
    if (allocator_forked(t))
        return TIDE_OK;
    if (t->conf.leak_report) {
        char *report = NULL;
        uint64_t live = 0;
        if (tide_leak_report(t, &report, &live) == TIDE_OK && live)
            fputs(report, stderr);
        tide_string_free(report);
    }
    /* Finish every device use first: nothing may still touch memory about to be released. With no
     * lock held: a completion callback still queued may call tide_release, which takes a heap lock. */
    const tide_backend *be = &t->backend;
    bool synced = be->synchronize(be->ctx) == TIDE_OK;
    allocator_lock_all(t);
    int64_t live = 0, live_bytes = 0, held = 0, held_bytes = 0;
    uint32_t n = atomic_load(&t->nheaps);
    for (uint32_t i = 0; i < n; i++) {
        struct heap *h = t->heaps[i];
        lifecycle_defer_to_sync(h);
        lifecycle_after_sync(h, UINT64_MAX);
        const struct pool_stats *p = &h->stats.pool[TIDE_POOL_ALL];
        live += p->allocation.cur;
        live_bytes += p->allocated.cur;
        held += p->pending_blocks.cur;
        held_bytes += p->pending.cur;
    }
    uint64_t refused_ranges;
    uint64_t refused = pressure_release_everything(t, &refused_ranges);
    sleep_host_cache_drop(t, TIDE_POOL_ALL_HOST_BUFFERS);
    allocator_unlock_all(t);
    for (uint32_t i = 0; i < n; i++)
        heap_destroy(t->heaps[i]);
    segment_map_free(&t->segmap);
    pthread_mutex_destroy(&t->pressure);
    pthread_mutex_destroy(&t->heaps_lock);
    history_destroy_all(t);
    pools_destroy(t);
    pthread_mutex_destroy(&t->history_lock);
    pthread_mutex_destroy(&t->history_write_lock);
    /* Other processes' memory this one opened: closed while the backend is still there. */
    size_t ipc_refused;
    size_t ipc_left = ipc_close_all(t, &ipc_refused);
    pthread_mutex_destroy(&t->ipc_lock);
    tide_backend_close(&t->backend);
    free(t);

    char lb[32], hb[32], rb[32], ipc[192] = "";
    if (ipc_left)
        snprintf(ipc, sizeof ipc, "%zu opening%s of another process's memory (tide_ipc_open) still open, "
                 "closed now", ipc_left, ipc_left == 1 ? "" : "s");
    if (ipc_refused)
        snprintf(ipc + strlen(ipc), sizeof ipc - strlen(ipc), " (the device refused to close %zu)", ipc_refused);
    if (live || held)
        return tide__fail(TIDE_EBUSY, "tide_destroy: %lld allocation%s (%s) still live and %lld freed "
                          "block%s (%s) still referenced; their memory was returned to the device "
                          "anyway%s%s", (long long)live, live == 1 ? "" : "s",
                          format_bytes((uint64_t)live_bytes, lb), (long long)held,
                          held == 1 ? "" : "s", format_bytes((uint64_t)held_bytes, hb), ipc_left ? "; " : "",
                          ipc);
    if (ipc_left)
        return tide__fail(TIDE_EBUSY, "tide_destroy: %s", ipc);
    if (refused || refused_ranges)
        return tide__fail_with_context(TIDE_EDEVICE, "tide_destroy: the device refused to take back %s of "
                                       "memory and %s of address ranges", format_bytes(refused, lb),
                                       format_bytes(refused_ranges, rb));
    if (!synced)
        return tide__fail_with_context(TIDE_EDEVICE, "tide_destroy: synchronizing the device");
    return TIDE_OK;
}

void tide_backend_close(tide_backend *backend)
{
    if (backend && backend->struct_size > offsetof(tide_backend, close) && backend->close) {
        backend->close(backend->ctx);
        backend->close = NULL;
    }
}

/* ---- finding a user's block ------------------------------------------------------------------------ */

/* Explains why addr is not a block users hold in h. NULL if no segment of h contains addr. */
static const char *diagnose(struct heap *h, uintptr_t addr, const char *verb, char *msg, size_t cap)
{
    for (struct segment *seg = h->segments; seg; seg = seg->next) {
        if (addr < seg->base || addr >= seg->base + seg->size)
            continue;
        struct block *b = segment_block_at(seg, addr);
        if (!b)
            break;
        char sz[32];
        if (b->state == BLOCK_FREE)
            snprintf(msg, cap, "%s of 0x%" PRIxPTR ": no block is allocated there; it lies in cached "
                     "free memory (a double free, or a pointer never returned by tide_malloc)", verb,
                     addr);
        else
            snprintf(msg, cap, "%s of 0x%" PRIxPTR ", an interior pointer: it is %zu bytes into the "
                     "block at 0x%" PRIxPTR " (%s); pass the address tide_malloc returned", verb, addr,
                     (size_t)(addr - b->addr), b->addr, format_bytes(b->size, sz));
        return msg;
    }
    return NULL;
}

/* Finds the ACTIVE or PENDING block at addr and returns with its heap locked, or fails with a message
 * and no lock held. */
__attribute__((noinline)) static tide_status locate(tide_allocator *t, uintptr_t user, const char *verb,
                                                    struct heap **oh, struct block **ob)
{
    if (allocator_forked(t)) /* tide_free's first call in a child comes here (forget_last_heap_in_child) */
        return allocator_refuse_forked(t, verb);
    char msg[512];
    uintptr_t addr = user - t->guard; /* the block starts before the user's pointer under guard */
    /* The segment map answers without a lock, so a segment released meanwhile can mislead it once;
     * the answer is confirmed under the heap's lock, and looked up again if it was stale. */
    for (int attempt = 0; attempt < 2; attempt++) {
        struct segment *seg = segment_map_find(&t->segmap, addr);
        if (!seg)
            continue; /* a run of pages may be changing hands (expandable.c): look once more */
        struct heap *h = atomic_load_explicit(&seg->heap, memory_order_acquire);
        if (!h)
            continue;
        heap_lock_and_settle(h);
        struct block *b = ptr_map_get(&h->map, addr);
        if (b) {
            *oh = h;
            *ob = b;
            return TIDE_OK;
        }
        const char *why = diagnose(h, addr, verb, msg, sizeof msg);
        heap_unlock(h);
        if (why)
            return tide__fail(TIDE_EINVAL, "%s", why);
    }
    return tide__fail(TIDE_EINVAL, "%s of 0x%" PRIxPTR ", which tidepool did not allocate (or whose "
                      "memory was freed and already returned to the device)", verb, user);
}

/* ---- scrub and guard -------------------------------------------------------------------------------- */

/* What the device does to a block before its new owner gets it, in order on the block's stream:
 * zeroes it (scrub), then writes the canaries before and after the requested bytes (guard). If the
 * device fails, the block goes back to the cache and the allocation fails. */
__attribute__((noinline)) static tide_status prepare_block(tide_allocator *t, struct heap *h,
                                                           struct block *b, bool scrub,
                                                           const char *verb)
{
    const tide_backend *be = &t->backend;
    uintptr_t user = b->addr + t->guard, end = b->addr + b->size;
    tide_status s = TIDE_OK;
    tide__clear_backend_message();
    if (scrub)
        s = be->fill(be->ctx, user, end - user, 0, h->stream);
    if (s == TIDE_OK && t->guard)
        s = be->fill(be->ctx, b->addr, t->guard, TIDE_GUARD_BYTE, h->stream);
    if (s == TIDE_OK && t->guard)
        s = be->fill(be->ctx, user + b->requested, end - user - b->requested, TIDE_GUARD_BYTE, h->stream);
    if (s == TIDE_OK)
        return TIDE_OK;
    tide_status failed = tide__fail_with_context(s, "%s: %s the block on the %s device", verb,
                                                 scrub ? "scrubbing" : "writing the guard of",
                                                 be->name);
    heap_lock_and_settle(h);
    lifecycle_free(h, b, NULL);
    heap_unlock(h);
    return failed;
}

tide_status allocator_write_guards(tide_allocator *t, struct heap *h, struct block *b)
{
    return prepare_block(t, h, b, false, "tide_pool_restore");
}

/* Checks a block's canaries (guard), waiting for its stream. TIDE_ECORRUPT says where it was broken. */
__attribute__((noinline)) static tide_status verify_guards(tide_allocator *t, void *ptr, uintptr_t addr,
                                                           size_t size, size_t requested, tide_stream stream)
{
    const tide_backend *be = &t->backend;
    uintptr_t user = addr + t->guard;
    size_t after = addr + size - user - requested, bad = 0;
    tide__clear_backend_message();
    tide_status s = be->verify(be->ctx, user + requested, after, TIDE_GUARD_BYTE, stream, &bad);
    if (s == TIDE_ECORRUPT)
        return tide__fail(TIDE_ECORRUPT, "tide_free of %p: out-of-bounds write: bytes after the end of "
                          "the block were overwritten, the first at offset %zu (the block has %zu "
                          "requested bytes); the block was freed", ptr, requested + bad, requested);
    if (s == TIDE_OK)
        s = be->verify(be->ctx, addr, t->guard, TIDE_GUARD_BYTE, stream, &bad);
    if (s == TIDE_ECORRUPT)
        return tide__fail(TIDE_ECORRUPT, "tide_free of %p: out-of-bounds write: bytes before the start of "
                          "the block were overwritten, the first at offset -%zu; the block was freed",
                          ptr, t->guard - bad);
    if (s != TIDE_OK)
        return tide__fail_with_context(s, "tide_free of %p: checking the block's guard on the %s device",
                                       ptr, be->name);
    return TIDE_OK;
}

/* ---- the public calls ------------------------------------------------------------------------------- */

__attribute__((noinline, cold)) static tide_status refuse_size(const tide_allocator *t, size_t size)
{
    char a[32], b[32];
    if (size == 0)
        return tide__fail(TIDE_EINVAL, "tide_malloc: size 0; ask for at least 1 byte");
    /* Out of memory, as the driver and the frameworks say, but no ladder can help: say so. */
    return tide__fail(TIDE_ENOMEM, "device out of memory. Asked %s, more than the device's total memory (%s)",
                      format_bytes(size, a), format_bytes(t->device_total, b));
}

/* The fit of tide_malloc after PENDING blocks were drained (made FREE): the cache's peaks are checked
 * once the fit has taken its block (stats_settle), or by pressure_malloc if it found none (meanwhile
 * drained_unsettled says so). Out of line: the fast path's code stays as it was for the allocations
 * that drain nothing. */
__attribute__((noinline)) static struct block *take_after_draining(struct heap *h, enum pool_kind pool,
                                                                   size_t rounded, size_t requested,
                                                                   tide_status *status)
{
    struct block *b = heap_take_fit(h, pool, rounded, requested, status);
    if (b || *status != TIDE_OK)
        stats_settle(&h->stats);
    else
        h->stats.drained_unsettled = true;
    return b;
}

tide_status tide_malloc(tide_allocator *t, size_t size, tide_stream stream, void **out)
{
    return allocator_malloc(t, size, stream, out, __builtin_return_address(0));
}

/* tide_malloc once its heap is known (a stream's, or a private pool's on that stream). */
static inline __attribute__((always_inline)) tide_status malloc_on_heap(tide_allocator *t, struct heap *h,
                                                                        size_t size, size_t rounded,
                                                                        enum pool_kind pool, void **out,
                                                                        void *site)
{
    tide_status s = TIDE_OK;
    heap_lock(h);
    struct block *b = NULL;
    if (h->parked) { /* pending blocks drain first, and their merges follow the parked block's */
        if (h->parked->size == rounded && !h->pending_head)
            b = heap_reuse_parked(h, pool, rounded, size);
        if (!b)
            heap_settle(h);
    }
    if (!b) {
        if (h->pending_head && lifecycle_poll(h))
            b = take_after_draining(h, pool, rounded, size, &s);
        else
            b = heap_take_fit(h, pool, rounded, size, &s);
        if (TIDE_UNLIKELY(!b) && s == TIDE_OK)
            b = pressure_take_past_mark_at_once(t, h, pool, rounded, size, &s);
    }
    /* The alloc event is recorded under the lock, before anyone can free the block. */
    if (TIDE_LIKELY(b != NULL))
        history_heap_alloc(h, b, size, site);
    heap_debug_check(t, h, "tide_malloc");
    heap_unlock(h);
    if (TIDE_UNLIKELY(!b) && s == TIDE_OK) {
        s = pressure_malloc(t, h, pool, rounded, size, &b);
        allocator_debug_check(t, DEBUG_RESERVE_RELEASE, "tide_malloc (slow path)");
        /* The lock only for a history's sake (its ring is written under it): a start that races
         * with this test begins just after this allocation. */
        if (b && atomic_load_explicit(&t->history, memory_order_relaxed)) {
            heap_lock_and_settle(h);
            history_heap_alloc(h, b, size, site);
            heap_unlock(h);
        }
    }
    /* A block that fails here is freed again: its free event follows its alloc event. */
    if (b && TIDE_UNLIKELY(t->conf.scrub || t->guard) && (s = prepare_block(t, h, b, t->conf.scrub, "tide_malloc")) != TIDE_OK)
        b = NULL;
    if (b)
        *out = (void *)(b->addr + t->guard);
    return b ? TIDE_OK : s;
}

/* malloc_on_heap's one copy besides tide_malloc's own: a private pool's allocations and those that take
 * a stack first. */
__attribute__((noinline)) static tide_status malloc_on_heap_apart(tide_allocator *t, struct heap *h, size_t size,
                                                                  size_t rounded, enum pool_kind pool, void **out,
                                                                  void *site)
{
    return malloc_on_heap(t, h, size, rounded, pool, out, site);
}

/* An allocation in a private pool's heap while a history records stacks: the stack is taken before the
 * heap's lock. */
__attribute__((noinline)) static tide_status malloc_with_stack(tide_allocator *t, struct heap *h, size_t size,
                                                               size_t rounded, enum pool_kind pool, void **out,
                                                               void *site)
{
    bool begun = history_stack_begin(t, site);
    tide_status s = malloc_on_heap_apart(t, h, size, rounded, pool, out, site);
    history_stack_end(begun);
    return s;
}

/* TIDE_NO_CANARY: the addresses it takes of its locals are of a heap pointer, a block pointer and a
 * status, each handed to one of this library's own functions that writes that one object; there is no
 * array on its frame for a canary to guard. */
TIDE_NO_CANARY tide_status allocator_malloc(tide_allocator *t, size_t size, tide_stream stream, void **out,
                                            void *site)
{
    CHECK_ALLOCATOR_NOT_NULL(t); /* forks: heap_for_stream_slow */
    if (!out)
        return tide__fail(TIDE_EINVAL, "tide_malloc: out is NULL");
    *out = NULL;
    if (size - 1 >= t->device_total) /* 0, or more than the device has: one test for both */
        return refuse_size(t, size);
    size_t rounded = round_up(size, TIDE_UNIT) + 2 * t->guard;
    enum pool_kind pool = pool_for_size(t, rounded);
    struct heap *h;
    tide_status s = heap_for_stream(t, stream, &h, site);
    if (s != TIDE_OK)
        return s;
    return malloc_on_heap(t, h, size, rounded, pool, out, site);
}

tide_status allocator_malloc_in_heap(tide_allocator *t, struct heap *h, size_t size, void **out, void *site)
{
    if (size - 1 >= t->device_total)
        return refuse_size(t, size);
    size_t rounded = round_up(size, TIDE_UNIT) + 2 * t->guard;
    if (history_wants_stacks(t))
        return malloc_with_stack(t, h, size, rounded, pool_for_size(t, rounded), out, site);
    return malloc_on_heap_apart(t, h, size, rounded, pool_for_size(t, rounded), out, site);
}

tide_status allocator_locate(tide_allocator *t, void *ptr, const char *verb, struct heap **h,
                             struct block **b)
{
    return locate(t, (uintptr_t)ptr, verb, h, b);
}

/* tide_free under guard:True: the canaries are checked first, which waits for the device, so not under
 * the heap's lock (held on entry, released here). The block is looked up again after the check, as
 * the program may (wrongly) free it from two threads at once. */
__attribute__((noinline)) static tide_status free_with_guard(tide_allocator *t, void *ptr, struct heap *h,
                                                             struct block *b, const void *site)
{
    uintptr_t addr = b->addr;
    size_t size = b->size, requested = b->requested;
    tide_stream stream = h->stream;
    bool asleep = b->seg->asleep; /* its pages are unmapped: the canaries went with them (sleep.c) */
    heap_unlock(h);
    char guard_message[512];
    guard_message[0] = '\0';
    tide_status guard = asleep ? TIDE_OK : verify_guards(t, ptr, addr, size, requested, stream);
    if (guard != TIDE_OK) /* kept: the free below may meet device errors it absorbs, which leave words */
        snprintf(guard_message, sizeof guard_message, "%s", tide_last_error());
    tide_status s = locate(t, (uintptr_t)ptr, "tide_free", &h, &b);
    if (s != TIDE_OK)
        return s;
    if (b->state == BLOCK_PENDING) {
        heap_unlock(h);
        return tide__fail(TIDE_EINVAL, "tide_free of %p: freed twice at once", ptr);
    }
    s = lifecycle_free(h, b, site);
    heap_debug_check(t, h, "tide_free");
    heap_unlock(h);
    if (s == TIDE_OK && guard != TIDE_OK)
        return tide__fail(guard, "%s", guard_message);
    return s;
}

__attribute__((noinline, cold)) static tide_status refuse_pending_free(struct heap *h, void *ptr)
{
    heap_unlock(h);
    return tide__fail(TIDE_EINVAL, "tide_free of %p: a double free; it was freed already and is waiting "
                      "for the device (pending free)", ptr);
}

/* tide_free once the block is found, with its heap's lock held. */
static inline tide_status free_found(tide_allocator *t, void *ptr, struct heap *h, struct block *b,
                                     const void *site)
{
    if (b->state == BLOCK_PENDING)
        return refuse_pending_free(h, ptr);
    if (TIDE_UNLIKELY(t->guard != 0))
        return free_with_guard(t, ptr, h, b, site);
    tide_status s = lifecycle_free(h, b, site);
    heap_debug_check(t, h, "tide_free");
    heap_unlock(h);
    return s;
}

/* tide_free of a block that is not in this thread's last heap. Out of line, so that the addresses it
 * takes of its locals (locate's results) leave tide_free itself without a stack canary (see
 * TIDE_NO_CANARY in types.h). */
static inline tide_status free_at(tide_allocator *t, void *ptr, const void *site)
{
    struct heap *h;
    struct block *b;
    tide_status s = locate(t, (uintptr_t)ptr, "tide_free", &h, &b);
    if (s != TIDE_OK)
        return s;
    return free_found(t, ptr, h, b, site);
}

/* tide_free while a history records stacks: the stack is taken before any lock. (No thread has a cached
 * heap of the allocator then, so every tide_free comes by free_located.) */
__attribute__((noinline)) static tide_status free_with_stack(tide_allocator *t, void *ptr, const void *site)
{
    bool begun = history_stack_begin(t, site);
    tide_status s = free_at(t, ptr, site);
    history_stack_end(begun);
    return s;
}

__attribute__((noinline)) static tide_status free_located(tide_allocator *t, void *ptr, const void *site)
{
    if (history_wants_stacks(t))
        return free_with_stack(t, ptr, site);
    return free_at(t, ptr, site);
}

tide_status tide_free(tide_allocator *t, void *ptr)
{
    CHECK_ALLOCATOR_NOT_NULL(t); /* forks: locate */
    if (!ptr)
        return TIDE_OK;
    /* Most frees come from the thread that allocated, on the same stream: try that heap first. */
    if (TIDE_LIKELY(last_heap.allocator_id == atomic_load_explicit(&t->id, memory_order_relaxed))) {
        struct heap *h = last_heap.heap;
        heap_lock_and_settle(h);
        struct block *b = ptr_map_get(&h->map, (uintptr_t)ptr - t->guard);
        if (TIDE_LIKELY(b != NULL))
            return free_found(t, ptr, h, b, __builtin_return_address(0));
        heap_unlock(h);
    }
    return free_located(t, ptr, __builtin_return_address(0));
}

tide_status tide_record_stream(tide_allocator *t, void *ptr, tide_stream stream)
{
    CHECK_ALLOCATOR(t);
    struct heap *h;
    struct block *b;
    tide_status s = locate(t, (uintptr_t)ptr, "tide_record_stream", &h, &b);
    if (s != TIDE_OK)
        return s;
    if (b->state != BLOCK_ACTIVE)
        s = tide__fail(TIDE_EINVAL, "tide_record_stream of %p: the block was freed already", ptr);
    else
        s = lifecycle_record_stream(h, b, stream);
    heap_debug_check(t, h, "tide_record_stream");
    heap_unlock(h);
    return s;
}

tide_status tide_retain(tide_allocator *t, void *ptr)
{
    CHECK_ALLOCATOR(t);
    struct heap *h;
    struct block *b;
    tide_status s = locate(t, (uintptr_t)ptr, "tide_retain", &h, &b);
    if (s != TIDE_OK)
        return s;
    s = lifecycle_retain(b, ptr);
    heap_debug_check(t, h, "tide_retain");
    heap_unlock(h);
    return s;
}

tide_status tide_release(tide_allocator *t, void *ptr)
{
    CHECK_ALLOCATOR(t);
    struct heap *h;
    struct block *b;
    bool begun = history_stack_begin(t, __builtin_return_address(0)); /* the last release frees */
    tide_status s = locate(t, (uintptr_t)ptr, "tide_release", &h, &b);
    if (s == TIDE_OK) {
        s = lifecycle_release(h, b, ptr);
        heap_debug_check(t, h, "tide_release");
        heap_unlock(h);
    }
    history_stack_end(begun);
    return s;
}

tide_status tide_empty_cache(tide_allocator *t, tide_release_report *report)
{
    CHECK_ALLOCATOR(t);
    bool begun = history_stack_begin(t, __builtin_return_address(0));
    tide_status s = pressure_empty_cache(t, report);
    allocator_debug_check(t, DEBUG_RESERVE_RELEASE, "tide_empty_cache");
    history_stack_end(begun);
    return s;
}

tide_status tide_trim(tide_allocator *t, size_t target_bytes, tide_release_report *report)
{
    CHECK_ALLOCATOR(t);
    bool begun = history_stack_begin(t, __builtin_return_address(0));
    tide_status s = pressure_trim(t, target_bytes, report);
    allocator_debug_check(t, DEBUG_RESERVE_RELEASE, "tide_trim");
    history_stack_end(begun);
    return s;
}

tide_status tide_set_limit(tide_allocator *t, size_t bytes)
{
    CHECK_ALLOCATOR(t);
    if (bytes == 0)
        return tide__fail(TIDE_EINVAL, "tide_set_limit: a limit of 0 bytes would refuse every "
                          "allocation");
    bool begun = history_stack_begin(t, __builtin_return_address(0));
    tide_status s = pressure_set_limit(t, bytes);
    allocator_debug_check(t, DEBUG_RESERVE_RELEASE, "tide_set_limit");
    history_stack_end(begun);
    return s;
}

tide_status tide_set_limit_fraction(tide_allocator *t, double fraction)
{
    CHECK_ALLOCATOR(t);
    if (!(fraction > 0 && fraction <= 1))
        return tide__fail(TIDE_EINVAL, "tide_set_limit_fraction: %g is not a fraction in (0, 1]",
                          fraction);
    return tide_set_limit(t, (size_t)((double)t->device_total * fraction));
}

tide_status tide_get_stats(tide_allocator *t, tide_stats *out)
{
    CHECK_ALLOCATOR(t);
    if (!out || out->struct_size < 2 * sizeof(uint32_t))
        return tide__fail(TIDE_EINVAL, "tide_get_stats: set out->struct_size = sizeof(tide_stats) "
                          "first");
    allocator_lock_all(t);
    stats_collect_locked(t, out);
    allocator_unlock_all(t);
    return TIDE_OK;
}

tide_status tide_reset_peak_stats(tide_allocator *t)
{
    CHECK_ALLOCATOR(t);
    allocator_lock_all(t);
    uint32_t n = atomic_load(&t->nheaps);
    for (uint32_t i = 0; i < n; i++)
        heap_stats_reset_peaks(&t->heaps[i]->stats);
    t->reserved_peak = t->reserved;
    /* With expandable segments the high-water mark outlives tide_empty_cache (see there); a program
     * starting a new phase resets it here with the other peaks. */
    if (t->conf.expandable_segments)
        high_water_restart(t);
    allocator_unlock_all(t);
    return TIDE_OK;
}

tide_status tide_reset_accumulated_stats(tide_allocator *t)
{
    CHECK_ALLOCATOR(t);
    allocator_lock_all(t);
    stats_reset_accumulated_locked(t);
    allocator_unlock_all(t);
    return TIDE_OK;
}

tide_status tide_stats_json(tide_allocator *t, char *buf, size_t cap, size_t *len)
{
    CHECK_ALLOCATOR(t);
    if (!buf && cap)
        return tide__fail(TIDE_EINVAL, "tide_stats_json: buf is NULL but cap is %zu", cap);
    tide_stats s = {.struct_size = sizeof s};
    tide_get_stats(t, &s);
    size_t need = stats_to_json(&s, buf, cap);
    if (len)
        *len = need;
    if (need >= cap)
        return tide__fail(TIDE_EINVAL, "tide_stats_json: the text needs %zu bytes and a NUL; the "
                          "buffer holds %zu", need, cap);
    return TIDE_OK;
}

tide_status tide_snapshot_json(tide_allocator *t, char **out)
{
    if (!t || !out)
        return tide__fail(TIDE_EINVAL, "tide_snapshot_json: %s is NULL", t ? "out" : "the allocator");
    if (allocator_forked(t))
        return allocator_refuse_forked(t, "tide_snapshot_json");
    *out = NULL;
    struct text x = {0};
    allocator_lock_all(t);
    report_snapshot_locked(t, &x);
    allocator_unlock_all(t);
    return text_finish(&x, out, "tide_snapshot_json");
}

tide_status tide_snapshot_take(tide_allocator *t, tide_snapshot **out)
{
    if (!t || !out)
        return tide__fail(TIDE_EINVAL, "tide_snapshot_take: %s is NULL", t ? "out" : "the allocator");
    if (allocator_forked(t))
        return allocator_refuse_forked(t, "tide_snapshot_take");
    *out = NULL;
    allocator_lock_all(t);
    tide_status s = report_snapshot_take_locked(t, out);
    allocator_unlock_all(t);
    return s;
}

void tide_snapshot_free(tide_snapshot *snapshot) { free(snapshot); }

tide_status tide_leak_report(tide_allocator *t, char **out, uint64_t *live)
{
    if (!t || !out)
        return tide__fail(TIDE_EINVAL, "tide_leak_report: %s is NULL", t ? "out" : "the allocator");
    if (allocator_forked(t))
        return allocator_refuse_forked(t, "tide_leak_report");
    *out = NULL;
    struct leak_groups leaks = {0};
    allocator_lock_all(t);
    tide_status s = report_leaks_locked(t, &leaks);
    allocator_unlock_all(t);
    if (s != TIDE_OK)
        return s;
    return report_leak_text(&leaks, out, live);
}

tide_status tide_check(tide_allocator *t)
{
    CHECK_ALLOCATOR(t);
    allocator_lock_all(t);
    tide_status s = check_locked(t);
    allocator_unlock_all(t);
    return s;
}

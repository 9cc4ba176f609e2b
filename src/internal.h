/*
 * tidepool's internal header: each file's functions, grouped under the file that owns them, from the
 * lowest layer up. The data structures are in types.h, the sizes in tune.h; docs/design.md explains
 * the layers and their locks.
 */
#ifndef TIDE_INTERNAL_H
#define TIDE_INTERNAL_H

#include "types.h"

#include <stdarg.h>
#include <stdio.h>

/* ---- util.c: clocks, the spin lock's slow path, byte sizes, text ---------------------------------- */
uint64_t now_ns(void);
/* A coarse clock that orders idle segments by age (cheap; shares nothing between threads). */
uint64_t idle_clock(void);
/* "512 B", "1.5 MiB", "2.0 GiB". */
const char *format_bytes(uint64_t bytes, char buf[32]);
/* A growable text for JSON and reports. On host-memory failure it stops growing and says so. */
struct text {
    char *p;
    size_t len, cap;
    bool failed;
};
void text_printf(struct text *x, const char *fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 2, 3)))
#endif
    ;
void text_json_string(struct text *x, const char *s); /* a quoted, escaped JSON string, or null */
/* Hands the text to the caller (*out), or fails with TIDE_EHOSTMEM. */
tide_status text_finish(struct text *x, char **out, const char *what);
static inline size_t round_up(size_t v, size_t to) { return (v + to - 1) / to * to; }
/* Forks between the process that loaded the library and this one: 0 there, one more in each child (a
 * pthread_atfork handler counts them). An object whose count at its making differs was copied into
 * this process by a fork: its locks may be held by threads that do not exist here, and its device
 * memory is its maker's (tidepool.h, FORK). */
extern _Atomic(uint32_t) process_forks;
static inline uint32_t forks_now(void) { return atomic_load_explicit(&process_forks, memory_order_relaxed); }

/* ---- error.c ------------------------------------------------------------------------------------- */
tide_status tide__fail(tide_status status, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* Sets "<context>: <the backend's words>" (or the status's name if the backend gave none since the
 * last tide__clear_backend_message) and returns status. */
tide_status tide__fail_with_context(tide_status status, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));
/* Call before calling into a backend. */
void tide__clear_backend_message(void);
/* Puts back a message saved from tide_last_error() (a check that must leave the caller's alone). */
void tide__restore_message(const char *saved);

/* ---- free_index.c ---------------------------------------------------------------------------------- */
/* end: a block struct of the heap's that the index keeps for itself. */
void free_index_init(struct free_index *fi, struct block *end);
void free_index_insert(struct free_index *fi, struct block *b);
void free_index_remove(struct free_index *fi, struct block *b);
/* The best block found for size: in size's own class the smallest fitting among the first few, else the
 * first block of the next non-empty class; a block that does not fit exactly only if its segment may
 * serve the request (rules). */
struct block *free_index_find(const struct free_index *fi, size_t size, const struct fit_rules *rules);
size_t fit_serves_from(const struct fit_rules *r, size_t made_for);
bool free_index_contains(const struct free_index *fi, const struct block *b);
/* For tide_check: the blocks on the index's lists (counting stops past limit, so a list made circular
 * by corruption still ends), and whether each class's bits say truly whether its list holds any. Not
 * kept as a running count: that was two instructions per insert and removal on the fast path. */
size_t free_index_count(const struct free_index *fi, size_t limit, bool *bitmaps_agree);
/* Whether free_index_find(fi, size, rules) would return a block of merged_size bytes in merged_seg, were
 * it filed now (at the front of its class) and `absorbed` (a filed block, or NULL) removed: the index a
 * merge would leave, without making it. False where it cannot tell cheaply (the search would go on past
 * a class whose blocks the rules refuse). */
bool free_index_would_find(const struct free_index *fi, size_t size, const struct fit_rules *rules,
                           const struct segment *merged_seg, size_t merged_size, const struct block *absorbed);
/* Moves the filed block b to the front of its class, where filing it again would put it. */
void free_index_to_front(struct free_index *fi, struct block *b);

/* ---- ptr_map.c ------------------------------------------------------------------------------------- */
tide_status ptr_map_insert(struct ptr_map *m, struct block *b);
struct block *ptr_map_get(const struct ptr_map *m, uintptr_t addr);
/* b must be in the map. */
void ptr_map_remove(struct ptr_map *m, struct block *b);
void ptr_map_free(struct ptr_map *m);

/* ---- segment_map.c --------------------------------------------------------------------------------- */
tide_status segment_map_init(struct segment_map *sm);
void segment_map_free(struct segment_map *sm);
/* All under the pressure lock. */
tide_status segment_map_add(struct segment_map *sm, struct segment *seg);
void segment_map_remove(struct segment_map *sm, struct segment *seg);
/* For a caller that must not fail once it has begun (expandable runs), segment_map_add in two steps:
 * the tables for [lo, hi) made (the only step that can fail, for host memory; tables stay until the
 * map is freed), then seg entered: found for [seg->base, end) from now on (it is new, grew, or took
 * over a neighbour's granules), every granule there having its table by then. Or seg no longer found
 * past new_end (it shrank; a granule another segment took over is left to it). Both keep every address
 * that stays in seg findable throughout. */
tide_status segment_map_prepare(struct segment_map *sm, uintptr_t lo, uintptr_t hi);
void segment_map_enter(struct segment_map *sm, struct segment *seg, uintptr_t end);
void segment_map_shrink(struct segment_map *sm, struct segment *seg, uintptr_t new_end);
/* Any thread, no lock. The answer is a hint: confirm it under the owning heap's lock. */
struct segment *segment_map_find(const struct segment_map *sm, uintptr_t addr);

/* ---- config.c ------------------------------------------------------------------------------------ */
void config_defaults(struct tide_config *c);
/* The defaults, then TIDEPOOL_CONF, then text (which wins; origin names it in messages). */
tide_status config_load(struct tide_config *c, const char *text, const char *origin);
/* Applies "key:value,..." on top of *c. origin names the string in messages ("TIDEPOOL_CONF"). On
 * error, *c is unchanged. */
tide_status config_parse(struct tide_config *c, const char *text, const char *origin);
/* Whether tide_create takes a parsed configuration over backend be (checked already: check_backend),
 * before it asks the device anything: keys that need each other, then (be not NULL) keys that need
 * functions of the backend. The one place these are decided; origin begins the message. */
tide_status config_accept(const struct tide_config *c, const tide_backend *be, const char *origin);
/* text on the defaults (not TIDEPOOL_CONF), then config_accept: tide_config_check (be NULL) and
 * tide_config_check_backend. */
tide_status config_check_with(const tide_backend *be, const char *text, const char *origin);
/* Parses "8GiB", "512MB", "1.5MiB", "4096" exactly (tide_parse_size). False if it is not a whole number
 * of bytes below 2^64, with why (if not NULL) saying so in words; *out is then untouched. */
bool parse_size(const char *text, size_t len, uint64_t *out, char *why, size_t whycap);

/* ---- backend/cuda.c ---------------------------------------------------------------------------- */
/* The other CUDA devices that can access device's memory (at most cap), or -1 without a driver. */
int cuda_peers_of(int device, int *peers, int cap);

/* ---- stats.c ------------------------------------------------------------------------------------- */
/* Bytes of ACTIVE and PENDING blocks; of FREE blocks (the cache); of FREE blocks outside wholly free
 * segments (the split cache, which releasing segments cannot give back). */
static inline int64_t pool_active(const struct pool_stats *p) { return p->allocated.cur + p->pending.cur; }
static inline int64_t pool_cached(const struct pool_stats *p)
{
    return p->reserved.cur - p->allocated.cur - p->pending.cur;
}
static inline int64_t pool_inactive_split(const struct pool_stats *p) { return pool_cached(p) - p->idle; }
/* The events (below). Sizes are the block's; idle_segment is the size of the wholly free segment the
 * block came from (take) or that became wholly free once it was merged (to_free), else 0. They are
 * inline: they run on every tide_malloc and tide_free. */
void heap_stats_reset_peaks(struct heap_stats *s);
/* Under allocator_lock_all. */
void stats_collect_locked(tide_allocator *t, tide_stats *out);
/* snprintf-style: the length the whole text needs. */
size_t stats_to_json(const tide_stats *s, char *buf, size_t cap);
static inline int public_pool(enum pool_kind pool) { return pool == POOL_SMALL ? TIDE_POOL_SMALL : TIDE_POOL_LARGE; }

/* A new peak is rare: hinted so, GCC moves its store out of line, where without the hint it laid it out
 * as a jump over the store taken at nearly every event (twelve a pair on the random patterns). Taken
 * jumps on the hot path cost time on the H200 machine's host; a
 * conditional move instead stored every peak every time, and was slower. */
static inline void rise(struct counter *c, int64_t d)
{
    c->cur += d;
    if (TIDE_UNLIKELY(c->cur > c->peak))
        c->peak = c->cur;
}

static inline void fall(struct counter *c, int64_t d) { c->cur -= d; }

static inline void peak_at_least(int64_t *peak, int64_t value)
{
    if (TIDE_UNLIKELY(value > *peak))
        *peak = value;
}

/* body for the event's pool, then for all pools. The empty asm makes the event's pool_stats pointer
 * opaque to the compiler, so that it is computed once and kept: GCC otherwise recomputes it from the
 * pool index before every counter (three instructions each, about 26 per alloc+free pair under
 * callgrind). A branch on the pool instead of the index saves as
 * much but mispredicts where pools alternate at random. */
#define BOTH(s, pool, p, body)                                                                     \
    do {                                                                                           \
        struct pool_stats *p = &(s)->pool[public_pool(pool)];                                      \
        __asm__("" : "+r"(p));                                                                     \
        body;                                                                                      \
        p = &(s)->pool[TIDE_POOL_ALL];                                                             \
        body;                                                                                      \
    } while (0)

/* FREE bytes were added to the cache by a free (a drained block's peaks wait for stats_settle), in a
 * segment that is now wholly free (idle_segment bytes) or not (0). The split cache rises, unless the
 * segment became wholly free: then its FREE bytes become releasable cache, and the split cache falls.
 * The test is made once for both pools. */
static inline void cache_gained(struct heap_stats *s, enum pool_kind pool, int64_t idle_segment)
{
    if (TIDE_UNLIKELY(idle_segment != 0)) {
        BOTH(s, pool, p, {
            peak_at_least(&p->cached_peak, pool_cached(p));
            p->idle += idle_segment;
        });
    } else {
        BOTH(s, pool, p, {
            peak_at_least(&p->cached_peak, pool_cached(p));
            peak_at_least(&p->inactive_split_peak, pool_inactive_split(p));
        });
    }
}

static inline void stats_take(struct heap_stats *s, enum pool_kind pool, int64_t size, int64_t requested,
                int64_t idle_segment)
{
    BOTH(s, pool, p, {
        rise(&p->allocated, size);
        rise(&p->requested, requested);
        rise(&p->allocation, 1);
        peak_at_least(&p->active_peak, pool_active(p));
    });
    if (TIDE_UNLIKELY(idle_segment != 0)) { /* a wholly free segment is split: what stays FREE is split cache now */
        BOTH(s, pool, p, {
            p->idle -= idle_segment;
            peak_at_least(&p->inactive_split_peak, pool_inactive_split(p));
        });
    }
}

static inline void stats_active_to_free(struct heap_stats *s, enum pool_kind pool, int64_t size, int64_t requested,
                          int64_t idle_segment)
{
    BOTH(s, pool, p, {
        fall(&p->allocated, size);
        fall(&p->requested, requested);
        fall(&p->allocation, 1);
    });
    cache_gained(s, pool, idle_segment);
}

static inline void stats_active_to_pending(struct heap_stats *s, enum pool_kind pool, int64_t size, int64_t requested)
{
    BOTH(s, pool, p, {
        fall(&p->allocated, size);
        fall(&p->requested, requested);
        fall(&p->allocation, 1);
        rise(&p->pending, size);
        rise(&p->pending_blocks, 1);
    });
}

/* The cache's peaks: stats_settle, by the call that drains. */
static inline void stats_pending_to_free(struct heap_stats *s, enum pool_kind pool, int64_t size, int64_t idle_segment)
{
    BOTH(s, pool, p, {
        fall(&p->pending, size);
        fall(&p->pending_blocks, 1);
    });
    if (TIDE_UNLIKELY(idle_segment != 0))
        BOTH(s, pool, p, p->idle += idle_segment);
}

static inline void stats_segment_added(struct heap_stats *s, enum pool_kind pool, int64_t size)
{
    BOTH(s, pool, p, {
        rise(&p->reserved, size);
        p->segment.cur++;
        p->idle += size;
    });
}

/* Some changes raise the cache or the segment count only for a moment inside one call: memory added
 * for a request is wholly cached until the block is taken from it, a new run is a segment of its own
 * until it joins its neighbour, blocks drained at an allocation are cached until the fit takes one,
 * and the emptying of the cache drains blocks to release them. So those changes (stats_segment_added,
 * stats_pending_to_free, and the runs' changes in heap.c) leave the cache's two peaks and the segment
 * count's alone, and every call that makes them checks the peaks here once it is done: the pressure
 * entry points (for every heap), tide_malloc after a drain, tide_release. Each peak then stays a value
 * the statistic had between two calls (test_peaks_are_exact_with_one_stream). */
static inline void stats_settle(struct heap_stats *s)
{
    for (int k = 0; k < TIDE_POOL_COUNT; k++) {
        struct pool_stats *p = &s->pool[k];
        peak_at_least(&p->cached_peak, pool_cached(p));
        peak_at_least(&p->inactive_split_peak, pool_inactive_split(p));
        peak_at_least(&p->segment.peak, p->segment.cur);
    }
    s->drained_unsettled = false;
}

static inline void stats_segment_removed(struct heap_stats *s, enum pool_kind pool, int64_t size)
{
    BOTH(s, pool, p, {
        fall(&p->reserved, size);
        fall(&p->segment, 1);
        p->idle -= size;
    });
}

/* ---- heap.c: one stream's blocks ---------------------------------------------------------------------- */
tide_status heap_create(tide_allocator *t, tide_stream stream, uint32_t index, struct heap **out);
/* Frees the heap's bookkeeping; its segments must have been released. */
void heap_destroy(struct heap *h);
/* Size class rules. With expandable segments every request shares one pool (counted as the large
 * pool): a small block pins only the page it lies in, and pages one pool leaves free can serve the
 * other without being unmapped and mapped again (measured on the shipped traces: less memory
 * and far fewer driver calls than two pools). */
static inline enum pool_kind pool_for_size(const tide_allocator *t, size_t rounded);
size_t segment_size_for(enum pool_kind pool, size_t rounded);
/* Under h->lock: find a FREE block for rounded bytes that the rules let serve it, and make it ACTIVE.
 * NULL if none fits. heap_take_fit: by the allocator's own rules. */
struct block *heap_take_fit_by(struct heap *h, enum pool_kind pool, size_t rounded, size_t requested,
                               const struct fit_rules *rules, tide_status *status);
static inline struct block *heap_take_fit(struct heap *h, enum pool_kind pool, size_t rounded,
                                          size_t requested, tide_status *status)
{
    return heap_take_fit_by(h, pool, rounded, requested, &h->owner->fit, status);
}
/* Under h->lock: seg (freshly reserved, or back after a refused release) joins the heap as one FREE
 * block, b (a struct with no neighbours: from block_new, or the one seg kept while it was away). */
void heap_adopt_free(struct heap *h, struct segment *seg, struct block *b);
/* h's free index for pool, as an opaque pointer (see BOTH): computed once, then each of its fields is
 * one fixed offset away, where GCC would otherwise multiply the pool index again for each. */
static inline struct free_index *heap_free_index(struct heap *h, enum pool_kind pool)
{
    struct free_index *fi = &h->free[pool];
    __asm__("" : "+r"(fi));
    return fi;
}
/* Under h->lock: make a block FREE, merge it with its FREE neighbours, file it. Returns the size of its
 * segment if that became wholly free, else 0 (for the statistics, which the caller keeps). */
size_t heap_make_free(struct heap *h, struct block *b);
/* Under h->lock, instead of heap_make_free for a block whose free completes at once: parks b (the
 * previous parked block settled first) and returns what heap_make_free would (the statistics are
 * kept as for a merge). The merge happens when anything else takes the heap's lock; the next
 * tide_malloc on the heap takes b back instead, when that is exactly what the merge and the search
 * would have given it (heap_reuse_parked). A pair of tide_free and tide_malloc of one size, the most
 * common pattern of a training loop, then skips the merge, the search and the split, and leaves the
 * heap as they would have. */
size_t heap_park(struct heap *h, struct block *b);
/* Under h->lock, no pending blocks: the parked block as an ACTIVE block of rounded bytes, or NULL if
 * the merge and search would have placed the request elsewhere (then settle and search). */
struct block *heap_reuse_parked(struct heap *h, enum pool_kind pool, size_t rounded, size_t requested);
/* Under h->lock: detach wholly free segments (oldest first) idle since at or before `before` (by
 * idle_clock), until `want` bytes are detached; they go on *out (linked by next). Returns the bytes
 * detached. A segment away from its heap keeps its one block struct (seg->first), so that going back
 * to the heap when the device refuses it (heap_reattach_idle) needs no host memory; once the device
 * has it, heap_released gives the struct back. */
size_t heap_detach_idle(struct heap *h, uint64_t before, size_t want, struct segment **out);
/* The same for one idle segment of h, whatever its age. */
size_t heap_detach_idle_segment(struct heap *h, struct segment *seg, struct segment **out);
/* Under h->lock: merges the parked block into the cache, as tide_free would have at once. */
void heap_settle(struct heap *h);
/* Every path but tide_malloc's takes a heap's lock with heap_lock_and_settle, which merges the parked
 * block first: no other code sees one. tide_malloc takes it with heap_lock alone, to reuse the block,
 * and so do the calls that only settle the statistics' peaks (pressure.c's and sleep.c's
 * settle_and_unlock, tide_pool_restore), which leave a parked block parked. */
static inline void heap_lock(struct heap *h) { spin_lock_acquire(&h->lock); }
static inline void heap_lock_and_settle(struct heap *h)
{
    heap_lock(h);
    if (h->parked)
        heap_settle(h);
}
static inline void heap_unlock(struct heap *h) { spin_lock_release(&h->lock); }
/* Under h->lock: put back a segment whose release failed (what is still held of it: seg's base and
 * size), as one FREE block, the struct it kept. */
void heap_reattach_idle(struct heap *h, struct segment *seg);
/* Under h->lock: the device has taken seg back; the block struct it kept goes to h's spares. */
void heap_released(struct heap *h, struct segment *seg);
/* Under h->lock: makes the FREE block b ACTIVE for rounded bytes (heap_take_fit without the search). */
struct block *heap_take_block(struct heap *h, struct block *b, size_t rounded, size_t requested,
                              tide_status *status);
/* Runs of mapped pages (expandable segments), under h->lock and the pressure lock. */
struct block *segment_last_block(const struct segment *seg);
/* seg grows by extra bytes at its end (just mapped): its FREE tail grows, or *spare (then set to NULL)
 * becomes a FREE block there. */
void heap_extend_run(struct heap *h, struct segment *seg, size_t extra, struct block **spare);
/* lo and hi (which starts where lo ends) become one run, lo; hi is left empty, off every list. */
void heap_merge_runs(struct heap *h, struct segment *lo, struct segment *hi);
/* The block structs heap_carve_pages needs to carve [lo, hi) out of b: for what is left of b above hi
 * when something is left below it too, and for the carved pages unless they are all of b (each may be
 * b itself). Got first, so that the carve itself cannot fail. Fails, taking nothing, only without host
 * memory for a block. */
struct carve_blocks {
    struct block *rest_high, *carved;
};
tide_status heap_carve_blocks(struct heap *h, struct block *b, uintptr_t lo, uintptr_t hi,
                              struct carve_blocks *cb);
/* Takes the pages [lo, hi) out of the FREE block b, which spans them, into `carved` (off every list,
 * counted nowhere, with the block struct cb->carved, as a detached segment keeps one:
 * heap_detach_idle). What lies above hi moves to `upper` (linked to h) unless nothing does; what lies
 * below lo stays in b's segment, which is left empty and unlinked if nothing does. *used_upper and
 * *kept_lower say which. */
void heap_carve_pages(struct heap *h, struct block *b, uintptr_t lo, uintptr_t hi, struct segment *upper,
                      struct segment *carved, const struct carve_blocks *cb, bool *kept_lower,
                      bool *used_upper);
struct block *block_new(struct heap *h);
void block_recycle(struct heap *h, struct block *b);
void block_uses_clear(struct block *b);
/* Under h->lock: makes [addr, addr + size) of the FREE block b ACTIVE, exactly there: what lies below
 * and above stays FREE, as blocks of their own (tide_pool_restore). On failure nothing changes. */
struct block *heap_take_at(struct heap *h, struct block *b, uintptr_t addr, size_t size, size_t requested,
                          tide_status *status);
/* The block of h's segment seg that contains addr, by walking (slow: for messages and tide_pool_restore). */
struct block *segment_block_at(struct segment *seg, uintptr_t addr);

/* ---- lifecycle.c: ACTIVE -> PENDING -> FREE ------------------------------------------------------ */
tide_status lifecycle_free(struct heap *h, struct block *b, const void *site);
tide_status lifecycle_record_stream(struct heap *h, struct block *b, tide_stream stream);
/* References (tide_retain, tide_release), under h->lock; ptr is the user's, for messages. The last
 * release of a freed block makes it FREE. */
tide_status lifecycle_retain(struct block *b, const void *ptr);
tide_status lifecycle_release(struct heap *h, struct block *b, const void *ptr);
/* Under h->lock: drain PENDING blocks whose fences have signalled (oldest first, stopping at the first
 * unsignalled fence of each stream). Returns the number of blocks that became FREE. */
size_t lifecycle_poll(struct heap *h);
/* Under h->lock, after a device synchronize that began when the pending sequence was sync_seq: every
 * fence recorded and every synchronize owed before it is done. Returns blocks that became FREE. */
size_t lifecycle_after_sync(struct heap *h, uint64_t sync_seq);
/* The last graph capture ended: fences for the blocks freed during it with uses on other streams are
 * recorded now (PENDING until they signal). Returns the blocks that became FREE. Heap lock held. */
size_t lifecycle_end_capture(struct heap *h);
/* tide_destroy with a capture still underway: blocks waiting for its end wait for the synchronize
 * that follows instead. Heap lock held. */
void lifecycle_defer_to_sync(struct heap *h);
/* Destroys every fence the heap holds (idle pool and queues). Under h->lock, device synchronized. */
void lifecycle_destroy_fences(struct heap *h);

/* ---- segment.c: segment structs, reserving, and the bookkeeping of reserved memory ------------------ */
/* All under the pressure lock. */
struct segment *segment_struct(tide_allocator *t);
void segment_struct_recycle(tide_allocator *t, struct segment *seg);
/* Reserves a segment of size bytes for pool, within the limit, from backend `from` (NULL: the
 * allocator's; a private pool's own table otherwise, which the segment remembers for its release), and
 * enters it in the segment map. TIDE_ENOMEM without a message when the limit or the device says no;
 * other errors with a message. */
tide_status segment_reserve(tide_allocator *t, const tide_backend *from, enum pool_kind pool, size_t size,
                            struct segment **out);
/* After the backend took a detached wholly free segment (or run) back: its block struct goes to heap h,
 * the segment struct to the spares. Takes h's lock. */
void segment_released(tide_allocator *t, struct heap *h, struct segment *seg);
/* After the backend refused to take it: the segment goes back into the segment map and into heap h as
 * idle, so nothing is lost. Takes h's lock. */
void segment_reattach(tide_allocator *t, struct heap *h, struct segment *seg);
/* A new phase of the program (see HOLDING MEMORY in tidepool.h): the high-water mark starts again from
 * what is reserved now, and what the program held before is forgotten with it. Under the pressure
 * lock. */
void high_water_restart(tide_allocator *t);
/* Bytes per state over every heap (takes each heap's lock in turn). */
struct where {
    int64_t allocated, pending, cached, idle;
};
struct where where_is_memory(tide_allocator *t);
/* Under the pressure lock, before a growth of `bytes` for a request of `rounded` bytes passes the
 * high-water mark: whether the mark may simply rise (true), or cached memory must go first. It may
 * rise while reserved stays within a slack of the most the program has held (allocated and pending,
 * with the request) at any growth since the mark restarted: 1/32 of it (TIDE_HOLD_SLACK_SHIFT).
 * docs/design.md, Holding memory. */
bool may_pass_mark(tide_allocator *t, size_t rounded, size_t bytes);
/* Under the pressure lock, after a backend call that reserved, released, mapped or unmapped device
 * memory, begun at now_ns() == started: its time joins tide_stats.device_call_ns. */
static inline void note_device_call(tide_allocator *t, uint64_t started)
{
    t->device_call_ns += now_ns() - started;
}
void note_reserved(tide_allocator *t, size_t bytes);   /* reserved grew: peaks, marks, counters */
void note_released(tide_allocator *t, size_t bytes, tide_release_report *r);

/* ---- pool.c and sleep.c: sleeping pools --------------------------------------------------------------- */
tide_status pool_sleep_mark(tide_allocator *t, tide_pool_id id, const char *verb, int mark, struct heap **heaps,
                            uint32_t *nheaps, bool *was_asleep);
/* Gives an asleep run's host copy back (tide_destroy; the statistics are not kept). */
void sleep_copy_free(tide_allocator *t, struct segment *run);
/* The bytes of host memory an asleep run's copy holds (0: none). */
size_t sleep_copy_bytes(const struct segment *run);

/* ---- expandable.c: segments that grow (expandable_segments:True), under the pressure lock ------ */
/* Maps the pages a request lacks, growing a run (or starting one), and takes the block from it. */
tide_status expandable_grow(tide_allocator *t, struct heap *h, enum pool_kind pool, size_t rounded,
                            size_t requested, struct block **out);
/* Unmaps whole pages inside FREE blocks of partly used runs, the largest stretches first, until want
 * bytes are unmapped. */
tide_status expandable_release_pages(tide_allocator *t, size_t want,
                                     tide_release_report *r, size_t *released);
/* Gives a run's pages back (unmap), unit by unit, and takes it out of its arena if all went; *unmapped:
 * the bytes gone from its start. On a failure the run is what is left of it, still mapped. */
tide_status expandable_unmap_run(tide_allocator *t, struct segment *seg, size_t *unmapped);
/* Puts a run whose unmap failed back into its heap and arena, as an idle run. */
void expandable_reattach_run(tide_allocator *t, struct heap *h, struct segment *seg);
/* tide_destroy: gives back the address ranges of heap h (its runs are unmapped already); returns the
 * bytes of address range the device refused to take back. */
uint64_t expandable_release_arenas(tide_allocator *t, struct heap *h);
/* For sleep.c, under the pressure lock. The first unit of mapped pages of run at or above from, as
 * [*lo, *hi): false if none. The first stretch of unmapped pages of run at or above from: false if
 * none. The pages of the run that are mapped, in bytes. */
bool expandable_next_mapped(const struct segment *run, size_t page, uintptr_t from, uintptr_t *lo,
                            uintptr_t *hi);
bool expandable_next_unmapped(const struct segment *run, size_t page, uintptr_t from, uintptr_t *lo,
                              uintptr_t *hi);
size_t expandable_mapped_bytes(const struct segment *run, size_t page);
/* One unit, [lo, hi) of run's arena: unmapped (whole, as it was mapped), or mapped as one unit. */
tide_status expandable_unmap_unit(tide_allocator *t, struct segment *run, uintptr_t lo, uintptr_t hi);
tide_status expandable_map_unit(tide_allocator *t, struct segment *run, uintptr_t lo, uintptr_t hi);

/* ---- pressure.c: segments from the backend, limits, GC, the out-of-memory ladder, emptying -------- */
/* Allocates from a new segment or after freeing memory; called when the fast path found no fit.
 * No lock held. */
tide_status pressure_malloc(tide_allocator *t, struct heap *h, enum pool_kind pool, size_t rounded,
                            size_t requested, struct block **out);
tide_status pressure_empty_cache(tide_allocator *t, tide_release_report *report);
/* The same for one private pool's heaps only, in use or not (tide_pool_empty_cache). */
tide_status pressure_empty_pool(tide_allocator *t, tide_pool_id pool, tide_release_report *report);
tide_status pressure_trim(tide_allocator *t, size_t target, tide_release_report *report);
/* Under the pressure lock, outside a capture: drains what has completed and releases cached memory
 * (not of pools that keep theirs) until want bytes are released, or all it can (tide_pool_wake). */
tide_status pressure_make_room(tide_allocator *t, size_t want);
tide_status pressure_set_limit(tide_allocator *t, size_t bytes);
/* Waits for all the device's work, with no lock held (a completion callback it waits for may call
 * tidepool); *seq: the pending sequence before it began. Then, under the pressure lock, drains every
 * heap by it (or, if it failed, by polling). */
tide_status device_synchronize(tide_allocator *t, uint64_t *seq);
size_t drain_after_synchronize(tide_allocator *t, uint64_t seq, tide_status synced);
/* Releases every segment and address range regardless (tide_destroy), under the pressure lock.
 * Returns the bytes of memory the backend refused to take back; *refused_ranges, those of address
 * ranges. */
uint64_t pressure_release_everything(tide_allocator *t, uint64_t *refused_ranges);

/* ---- check.c ------------------------------------------------------------------------------------- */
/* Under the pressure lock and every heap lock. */
tide_status check_locked(tide_allocator *t);

/* ---- report.c: the snapshot and the leak report, under allocator_lock_all --------------------------- */
/* The snapshot's JSON (tide_snapshot_json) into x. */
void report_snapshot_locked(tide_allocator *t, struct text *x);
/* The same as structures (tide_snapshot_take), in one allocation. */
tide_status report_snapshot_take_locked(tide_allocator *t, tide_snapshot **out);
/* What is still live, grouped by tag and call site, largest first; report_leak_text writes it in words
 * (tide_leak_report) and frees it. Neither needs the locks for the second step. */
struct leak_group;
struct leak_groups {
    struct leak_group *group;
    size_t n;
};
tide_status report_leaks_locked(tide_allocator *t, struct leak_groups *out);
tide_status report_leak_text(struct leak_groups *leaks, char **out, uint64_t *live);

/* ---- allocator.c --------------------------------------------------------------------------------- */
/* TIDE_EINVAL for any call on an allocator that a fork copied into this process, saying why (call
 * names the call). It touches nothing of t but its pid: its locks may have been held at the fork. */
tide_status allocator_refuse_forked(const tide_allocator *t, const char *call);
static inline bool allocator_forked(const tide_allocator *t) { return TIDE_UNLIKELY(t->forks != forks_now()); }
/* Every public call's first check: not NULL, and made in this process. tide_malloc and tide_free check
 * only for NULL: the fork check sits on their slow paths, where a child's first call always goes (the
 * fork forgets the thread's cached heap), so that their fast paths pay nothing for it. */
#define CHECK_ALLOCATOR_NOT_NULL(t)                                                                \
    do {                                                                                           \
        if (!(t))                                                                                  \
            return tide__fail(TIDE_EINVAL, "%s: the allocator is NULL", __func__);                 \
    } while (0)
#define CHECK_ALLOCATOR(t)                                                                         \
    do {                                                                                           \
        CHECK_ALLOCATOR_NOT_NULL(t);                                                               \
        if (allocator_forked(t))                                                                   \
            return allocator_refuse_forked((t), __func__);                                         \
    } while (0)
/* tide_malloc, naming the call site the history records (the caller outside tidepool). */
tide_status allocator_malloc(tide_allocator *t, size_t size, tide_stream stream, void **out, void *site);
/* tide_malloc from a given heap (a private pool's, pool.c); out is not NULL, size not yet checked. */
tide_status allocator_malloc_in_heap(tide_allocator *t, struct heap *h, size_t size, void **out, void *site);
/* The canaries of a block given back by tide_pool_restore (its contents are kept: no scrub). On a
 * device failure the block is freed again. */
tide_status allocator_write_guards(tide_allocator *t, struct heap *h, struct block *b);
/* The heap and block of a user's pointer, the heap locked on TIDE_OK (verb names the caller). */
tide_status allocator_locate(tide_allocator *t, void *ptr, const char *verb, struct heap **h,
                             struct block **b);

/* ---- pool.c: private pools and graph capture ------------------------------------------------------- */
/* Frees the pool table (tide_destroy; the heaps are the allocator's). */
void pools_destroy(tide_allocator *t);
/* Whether the heaps of stream may not query their fences now: a capture on that stream, or one that
 * named no stream. Call only while t->captures is above 0. */
bool capture_holds_poll(tide_allocator *t, tide_stream stream);
/* Locks the pressure lock and every heap, in order (tide_check, tide_destroy, stats). */
void allocator_lock_all(tide_allocator *t);
void allocator_unlock_all(tide_allocator *t);
/* Runs tide_check if the debug level asks for it; aborts on corruption. */
void allocator_debug_check_now(tide_allocator *t, const char *after);
static inline void allocator_debug_check(tide_allocator *t, int level_needed, const char *after)
{
    if (TIDE_UNLIKELY(t->conf.debug >= level_needed))
        allocator_debug_check_now(t, after);
}

static inline enum pool_kind pool_for_size(const tide_allocator *t, size_t rounded)
{
    if (t->conf.expandable_segments)
        return POOL_LARGE;
    return rounded <= TIDE_SMALL_MAX ? POOL_SMALL : POOL_LARGE;
}
/* ---- history.c: the event rings, tags, call sites ---------------------------------------------------- */
struct history;
/* One event of a heap's stream in its ring: the block's address (a multiple of TIDE_UNIT) with the kind
 * and flags in its low bits, and the size. */
struct history_entry {
    uint64_t addr_kind;
    uint64_t size;
};
#define HISTORY_KIND_MASK 0x7u
#define HISTORY_COMPLETED_AT_ONCE 0x8u /* with FREE_REQUESTED: the free completed in the same call */
_Static_assert(TIDE_EVENT_KIND_COUNT <= 8 && TIDE_UNIT >= 64, "kind and flags fit below a block's address");

/* Events outside any heap's lock (segments, out of memory, empty_cache, annotations): rare, each
 * numbered and timed on its own in the history's shared ring. One branch when no history is on. */
void history_record(tide_allocator *t, uint32_t kind, tide_stream stream, uint64_t addr, uint64_t size);
/* With an observer (tide_observe), it hears the event too: every HISTORY_EVENT is made under the
 * pressure lock, the observer's lock. */
#define HISTORY_EVENT(t, kind, stream, addr, size)                                                  \
    do {                                                                                           \
        if (TIDE_UNLIKELY(atomic_load_explicit(&(t)->history, memory_order_relaxed) != NULL ||     \
                          atomic_load_explicit(&(t)->observer, memory_order_relaxed) != NULL))     \
            history_record((t), (kind), (stream), (addr), (size));                                 \
    } while (0)

/* The observer (tide_observe) of a free that leaves its block PENDING and of a PENDING block that
 * becomes FREE, under the heap's lock: rare paths, never a free completed at once. */
void history_observe(tide_allocator *t, uint32_t kind, tide_stream stream, uint64_t addr, uint64_t size);
#define OBSERVE_PENDING(h, kind, b)                                                                  \
    do {                                                                                           \
        if (TIDE_UNLIKELY(atomic_load_explicit(&(h)->owner->observer, memory_order_relaxed) != NULL)) \
            history_observe((h)->owner, (kind), (h)->stream, (b)->addr + (h)->owner->guard, (b)->size); \
    } while (0)

/* Events of a heap's stream, under the heap's lock: into the heap's own ring, so the common event is two
 * stores and touches nothing another heap writes. h->history_next is NULL while no history is on (one
 * test); below h->history_limit the event takes the fast path; the rest (a new chunk of the ring and
 * its time, the chunk's last event and its time, a tag, a stack) is history_heap_slow.
 * The test for a history carries no "unlikely" hint: with one, GCC moved the recording out of line,
 * two taken jumps away (there and back) at every event; without, it is straight-line code that the
 * path with no history jumps over. On the H200 machine the history's cost on the replays fell from
 * 3.4-5.6% to 3.1-4.4% (medians over the rounds, by trace and ring size), and the path with no
 * history did not slow down. */
void history_heap_slow(struct heap *h, uint32_t kind, uint64_t addr, uint64_t size, const char *tag,
                       const void *site);
/* The event into the heap's ring at e, its next entry (not NULL: a history is on). */
static inline void history_heap_put(struct heap *h, struct history_entry *e, uint32_t kind, uint64_t addr,
                                    uint64_t size, const void *site)
{
    if (TIDE_LIKELY(e < h->history_limit)) {
        /* The ring's line four lines ahead, fetched now: in a ring larger than the first-level cache
         * every fourth event would otherwise wait for its line (65,536 events: the history's cost fell
         * by 0.7-2.0 points on the four traces). A prefetch past
         * the ring's end is harmless. */
        __builtin_prefetch(e + 16, 1);
        e->addr_kind = addr | kind;
        e->size = size;
        h->history_next = e + 1;
    } else {
        history_heap_slow(h, kind, addr, size, NULL, site);
    }
}
/* site: where the tidepool call that records was called from, for a stack (TIDE_HISTORY_STACKS), or NULL. */
static inline void history_heap_event(struct heap *h, uint32_t kind, uint64_t addr, uint64_t size,
                                      const void *site)
{
    struct history_entry *e = h->history_next;
    if (e != NULL) /* no hint: see above */
        history_heap_put(h, e, kind, addr, size, site);
}
/* Whether any thread ever set a tag (tide_set_tag): until then an allocation looks up none. */
extern _Atomic(bool) history_tags_in_use;
void history_heap_alloc_tagged(struct heap *h, struct block *b, size_t size, void *site);
/* A new ACTIVE block, under h's lock: its call site and tag (kept while a history is on, for the
 * snapshot and the leak report) and its alloc event. The ring's next entry is tested for NULL once and
 * read again after the store to b (through history_heap_event the compiler would test it again, since
 * the store might have changed it; keeping the first read in a register instead costs the path with
 * no history an instruction). */
static inline void history_heap_alloc(struct heap *h, struct block *b, size_t size, void *site)
{
    if (h->history_next != NULL) { /* no hint: see above */
        b->site = site;
        if (TIDE_UNLIKELY(atomic_load_explicit(&history_tags_in_use, memory_order_relaxed)))
            history_heap_alloc_tagged(h, b, size, site);
        else
            history_heap_put(h, h->history_next, TIDE_EVENT_ALLOC, b->addr, size, site);
    }
}
/* With TIDE_HISTORY_STACKS, a public call takes its caller's stack before it takes any lock
 * (backtrace() takes microseconds; under a heap's spin lock it starved every other thread of the
 * lock), and every event the call records gets that stack. history_stack_begin takes it if t records
 * stacks and no call of this thread holds one already, and says whether it did; history_stack_end with
 * that answer lets it go. tide_malloc, whose fast path must not grow, keeps its stack instead
 * (history_stack_keep, on its slow path, with the allocator's id) until the thread's next call takes
 * one. An event recorded with no stack taken takes one where it is recorded. */
bool history_stack_take(const void *site);
void history_stack_drop(void);
void history_stack_keep(uint64_t id, const void *site);
static inline bool history_wants_stacks(const tide_allocator *t)
{
    return TIDE_UNLIKELY(atomic_load_explicit(&t->history_stacks, memory_order_relaxed));
}
static inline bool history_stack_begin(const tide_allocator *t, const void *site)
{
    return history_wants_stacks(t) && history_stack_take(site);
}
static inline void history_stack_end(bool begun)
{
    if (begun)
        history_stack_drop();
}
/* A new id for t: every thread's cached heap of t is forgotten, so that their tide_malloc and tide_free
 * take the slow paths, where the stack is taken before the lock (allocator.c). */
void allocator_forget_cached_heaps(tide_allocator *t);
/* Under t->heaps_lock, for a heap just created: it records into the history that is on, if any. */
void history_heap_created(tide_allocator *t, struct heap *h);
void history_destroy_all(tide_allocator *t);
/* "libfoo.so(function+0x1c)" or "0x7f..." for a code address. */
void describe_code_address(void *addr, char *buf, size_t cap);

#endif /* TIDE_INTERNAL_H */

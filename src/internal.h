/*
 * tidepool's internal header: the data structures every file shares, and each file's functions, grouped
 * under the file that owns them.
 *
 * The shape of the allocator:
 *
 *   tide_allocator ── one per device
 *     ├─ heaps: one per stream that has allocated. A heap owns its segments, its blocks, a free index per
 *     │  pool, a pointer map of the blocks users hold, its PENDING blocks and its fences, and its
 *     │  statistics, all under the heap's own lock. Threads on different streams never share a lock on
 *     │  the fast path.
 *     ├─ the segment map: device address -> segment, read without locks, for tide_free & co to find the
 *     │  heap that owns a pointer.
 *     └─ the pressure lock: every segment reservation and release, the out-of-memory ladder,
 *        tide_empty_cache, tide_trim and tide_check run under it. Lock order: pressure, then one heap at a
 *        time (all heaps in index order only for tide_check and tide_destroy). No heap lock is ever held
 *        while waiting for the device, because completion callbacks (tide_release) take heap locks.
 *
 * All bookkeeping is in host memory, addressed by device address; device memory is never touched.
 */
#ifndef TIDE_INTERNAL_H
#define TIDE_INTERNAL_H

#include "tidepool.h"

#include <pthread.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>

/* ---- Sizes: may be tuned ------------------------------------------------------------------------ */
/* Which side of a branch on the hot path is common. Unhinted, GCC laid out the common side of many out
 * of line, behind a jump taken at nearly every call: 41.6 taken jumps per alloc+free pair of random
 * sizes, and the H200 machine's host pays for each (16.8 with the hints, and pairs faster by the
 * medians in 11 of 12 comparisons, by about 1-3%). A hint marks a
 * side that is rare by design (a debug level, a guard, a new peak, a table's growth) or that
 * callgrind's jump counts showed to be the common one on the micro patterns and the replays alike; a
 * test that goes either way gets none. */
#define TIDE_LIKELY(x) __builtin_expect(!!(x), 1)
#define TIDE_UNLIKELY(x) __builtin_expect(!!(x), 0)

/* No stack canary for this function, and why the hot path has none. Ubuntu's GCC builds with
 * -fstack-protector-strong by default, which puts a canary (a load and a store at entry, a load, a
 * compare and a branch at exit) in every function with an array or a local whose address is taken, and
 * in everything inlined into it. On the H200 machine's Ubuntu that cost the hot path 1-5% of an
 * alloc+free pair. The hot path's functions take no local's
 * address, with one exception marked with this, and the test hot_path_has_no_canary keeps it so. */
#if defined(__has_attribute)
#if __has_attribute(no_stack_protector)
#define TIDE_NO_CANARY __attribute__((no_stack_protector))
#endif
#endif
#ifndef TIDE_NO_CANARY
#define TIDE_NO_CANARY
#endif

#define KiB ((size_t)1024)
#define MiB (1024 * KiB)
#define GiB (1024 * MiB)

#ifndef TIDE_UNIT
#define TIDE_UNIT 512                         /* every block size is a multiple of this */
#endif
#define TIDE_GUARD_BYTES TIDE_UNIT            /* guard: canary before a block, and at least this after */
#define TIDE_GUARD_BYTE 0xCB                  /* guard: the canary's value */
#ifndef TIDE_SMALL_MAX
#define TIDE_SMALL_MAX (1 * MiB)              /* requests up to this come from the small pool */
#endif
#ifndef TIDE_SMALL_SEGMENT
#define TIDE_SMALL_SEGMENT (2 * MiB)          /* segment size of the small pool */
#endif
#ifndef TIDE_LARGE_SEGMENT
#define TIDE_LARGE_SEGMENT (20 * MiB)         /* at most this for large requests below ... (heap.c) */
#endif
#ifndef TIDE_LARGE_DIRECT_MIN
#define TIDE_LARGE_DIRECT_MIN (10 * MiB)      /* ... this; larger ones get a segment of their own size */
#endif
#ifndef TIDE_LARGE_SPLIT_MIN_REST
#define TIDE_LARGE_SPLIT_MIN_REST (1 * MiB)   /* a large block is split only if more than this is left */
#endif
#ifndef TIDE_OVERSIZE_SLACK
#define TIDE_OVERSIZE_SLACK (20 * MiB)        /* an oversize block may be this much larger than asked */
#endif
#ifndef TIDE_FIT_SCAN
#define TIDE_FIT_SCAN 16                      /* blocks compared in the request's own size class */
#endif
#ifndef TIDE_MAP_UNIT_PAGES
#define TIDE_MAP_UNIT_PAGES 2                 /* expandable: pages mapped in one call when growing back
                                                 to the mark (expandable.c) */
#endif

/* ---- Sizes: do not modify (the segment map and the free index depend on them) ------------------ */
#define TIDE_SEGMENT_GRANULE_SHIFT 21         /* segments are multiples of 2 MiB */
#define TIDE_SEGMENT_GRANULE ((size_t)1 << TIDE_SEGMENT_GRANULE_SHIFT)
#define TIDE_MAX_HEAPS TIDE_MAX_STREAMS       /* a heap per stream */

enum pool_kind { POOL_SMALL = 0, POOL_LARGE = 1, POOL_KINDS = 2 };
/* PARKED: freed with nothing holding it, and not yet merged into the cache (heap_park): counted as
 * FREE by the statistics, still in the pointer map, and seen by no code but heap_park,
 * heap_reuse_parked and heap_settle (every other path settles it first: heap_lock). */
enum block_state { BLOCK_FREE = 0, BLOCK_ACTIVE = 1, BLOCK_PENDING = 2, BLOCK_PARKED = 3 };

struct heap;
struct segment;
struct arena;

/* A heap's lock. Its critical sections are short and never wait for the device, so a spin (then a
 * yield, should the holder have been preempted) costs less than a mutex's two atomic operations and
 * bookkeeping on the fast path. */
typedef struct {
    _Atomic(int) held;
} spin_lock;
void spin_lock_wait(spin_lock *l);
static inline void spin_lock_acquire(spin_lock *l)
{
    if (atomic_exchange_explicit(&l->held, 1, memory_order_acquire))
        spin_lock_wait(l);
}
static inline void spin_lock_release(spin_lock *l)
{
    atomic_store_explicit(&l->held, 0, memory_order_release);
}

/* A block: a run of bytes in one segment, in exactly one state.
 *
 * 128 bytes, aligned to 128: the first 64 hold all that merging and the free index read or write on a
 * neighbour, so a free touches one line of each neighbour; the second 64, the block's own use. The
 * pair is fetched together by CPUs that prefetch the adjacent line. A struct that is FREE, or spare,
 * holds no refs, fences, uses or requested bytes, so nothing that makes or recycles one needs to
 * touch its second line. */
struct block {
    _Alignas(128) uintptr_t addr;
    size_t size;                      /* a multiple of TIDE_UNIT */
    struct segment *seg;
    struct block *prev, *next;        /* physical neighbours in the segment, by address */
    struct block *link_next;          /* FREE: the free index's bucket; PENDING: the heap's pending list */
    struct block **link_pprev;        /* ... and the pointer that points to this block there, so that
                                         unlinking needs no test for being first */
    uint8_t state;                    /* enum block_state */
    uint8_t fl, sl;                   /* FREE: its class in the free index, as filed */
    uint8_t needs_sync;               /* PENDING: a fence could not be recorded; a device synchronize
                                         that starts after sync_seq frees it */
    uint32_t map_slot;                /* ACTIVE, PENDING or PARKED: its slot in the heap's pointer map */

    size_t requested;                 /* ACTIVE: what the user asked for */
    uint32_t refs;                    /* references held by in-flight work (tide_retain) */
    uint16_t fences;                  /* PENDING: fences recorded at free and not yet signalled */
    uint16_t nuses, uses_cap;         /* streams other than the heap's that used the block; uses_cap is
                                         0 while they fit inline, else the length of uses.more */
    uint64_t sync_seq;                /* PENDING with needs_sync: the allocator's pending sequence */
    union {
        tide_stream inline_[2];
        tide_stream *more;            /* when more than two streams used it */
    } uses;
    const char *tag;                  /* ACTIVE, while a history is on: the allocating thread's tag */
    void *site;                       /* ACTIVE, while a history is on: where tide_malloc was called */
};
_Static_assert(sizeof(struct block) == 128 && offsetof(struct block, requested) == 64,
               "struct block: two lines, the neighbour's fields in the first");

/* A segment: one reservation from the backend, owned by one heap and one pool for its whole life; or,
 * with expandable segments, a run of mapped pages in one of the heap's arenas, which grows, shrinks,
 * splits and merges as pages are mapped and unmapped (expandable.c). */
struct segment {
    uintptr_t base;
    size_t size;                      /* a multiple of TIDE_SEGMENT_GRANULE */
    uint8_t pool;                     /* enum pool_kind */
    _Atomic(struct heap *) heap;      /* written under that heap's lock; read by the segment map */
    _Atomic(uintptr_t) map_base, map_end; /* what segment-map readers compare, without locks */
    struct block *first;              /* the lowest-addressed block */
    struct segment *prev, *next;      /* the heap's list of segments */
    struct segment *idle_prev, *idle_next; /* the heap's list of wholly free segments, oldest first */
    bool idle;
    uint32_t busy;                    /* its blocks that are not FREE (ACTIVE, PENDING, PARKED): at 1,
                                         freeing that one leaves the segment wholly free */
    uint64_t idle_since;              /* idle_clock() when it became wholly free (0 while one heap) */
    struct arena *arena;              /* expandable: the arena it lies in; NULL for a reservation */
    struct segment *run_prev, *run_next; /* expandable: the arena's runs, by address (pressure lock) */
};

/* Expandable segments: an address range reserved for one pool of one heap, with pages mapped into it.
 * Created under the pressure lock, freed by tide_destroy. */
struct arena {
    uintptr_t base;
    size_t size;
    uint8_t pool;
    struct segment *runs;             /* its runs of mapped pages, by address */
    struct arena *next;               /* the heap's other arenas of this pool */
    /* Per page: 1 + the index of the first page of its unit (the pages one map call mapped, which are
     * unmapped together: expandable.c), or 0 if it is not mapped. */
    uint32_t *unit_first;
};

/* ---- free_index.c: two-level segregated fit over the FREE blocks of one pool of one heap --------- */
#define FI_SL_BITS 5
#define FI_SL_COUNT (1u << FI_SL_BITS)
/* Enough first levels for any size: a size in 512-byte units has at most 64 - 9 bits, its top bit's
 * position is at most 54, and its first level is that less FI_SL_BITS - 1. So class_of needs no bound
 * check. */
#define FI_FL_COUNT ((64 - 9) - (FI_SL_BITS - 1))
_Static_assert(TIDE_UNIT == 1u << 9, "FI_FL_COUNT assumes 512-byte units");
_Static_assert(FI_FL_COUNT <= 64, "the first-level bitmap is 64 bits");

struct free_index {
    uint64_t fl_bitmap;
    uint32_t sl_bitmap[FI_FL_COUNT];
    struct block *heads[FI_FL_COUNT][FI_SL_COUNT];
    struct block *end;                /* every class's list ends here, never at NULL: see free_index.c */
};
/* end: a block struct of the heap's that the index keeps for itself. */
void free_index_init(struct free_index *fi, struct block *end);
void free_index_insert(struct free_index *fi, struct block *b);
void free_index_remove(struct free_index *fi, struct block *b);
/* The best block found for size: in size's own class the smallest fitting among the first few, else the
 * first block of the next non-empty class. Blocks of oversize_min bytes or more are taken only by
 * requests of oversize_min or more, and only if no more than TIDE_OVERSIZE_SLACK larger. */
struct block *free_index_find(const struct free_index *fi, size_t size, size_t oversize_min);
bool free_index_contains(const struct free_index *fi, const struct block *b);
/* For tide_check: the blocks on the index's lists (counting stops past limit, so a list made circular
 * by corruption still ends), and whether each class's bits say truly whether its list holds any. Not
 * kept as a running count: that was two instructions per insert and removal on the fast path. */
size_t free_index_count(const struct free_index *fi, size_t limit, bool *bitmaps_agree);
/* Whether free_index_find(fi, size, oversize_min) would return a block of merged_size bytes, were it
 * filed now (at the front of its class) and `absorbed` (a filed block, or NULL) removed: the index a
 * merge would leave, without making it. */
bool free_index_would_find(const struct free_index *fi, size_t size, size_t oversize_min,
                           size_t merged_size, const struct block *absorbed);
/* Moves the filed block b to the front of its class, where filing it again would put it. */
void free_index_to_front(struct free_index *fi, struct block *b);

/* ---- ptr_map.c: address -> block for the blocks users hold (ACTIVE, PENDING; PARKED), per heap -- */
struct ptr_map {
    struct block **slots;
    size_t cap;                       /* a power of two, or 0 */
    size_t count;
    size_t grow_at;                   /* the count at which an insert first grows the table */
};
tide_status ptr_map_insert(struct ptr_map *m, struct block *b);
struct block *ptr_map_get(const struct ptr_map *m, uintptr_t addr);
/* b must be in the map. */
void ptr_map_remove(struct ptr_map *m, struct block *b);
void ptr_map_free(struct ptr_map *m);

/* ---- segment_map.c: device address -> segment, lock-free reads ----------------------------------- */
struct segment_map_leaf;
struct segment_map_mid;
struct segment_map {
    _Atomic(struct segment_map_mid *) *top;
};
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
struct tide_config {
    bool limit_set;
    size_t limit_bytes;               /* when limit_fraction is 0 */
    double limit_fraction;            /* 0 < f <= 1, or 0 */
    double gc_threshold;              /* 0 = off */
    size_t max_split_size;            /* SIZE_MAX = unlimited */
    int debug;
    bool expandable_segments;
    bool trim_on_growth;              /* give idle segments back before passing the high-water mark */
    bool leak_report;                 /* tide_destroy prints the leak report if anything is live */
    bool scrub;                       /* zero blocks before handing them out */
    bool guard;                       /* canaries around blocks, checked at free */
    bool peer_access;                 /* tide_devices: pages mapped for every peer device too */
};
void config_defaults(struct tide_config *c);
/* Applies "key:value,..." on top of *c. origin names the string in messages ("TIDEPOOL_CONF"). On
 * error, *c is unchanged. */
tide_status config_parse(struct tide_config *c, const char *text, const char *origin);
/* Parses "8GiB", "512MB", "4096"; false if malformed. */
bool parse_size(const char *text, size_t len, uint64_t *out);

/* ---- backend/cuda.c ---------------------------------------------------------------------------- */
/* The other CUDA devices that can access device's memory (at most cap), or -1 without a driver. */
int cuda_peers_of(int device, int *peers, int cap);

/* ---- error.c ------------------------------------------------------------------------------------- */
tide_status tide__fail(tide_status status, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* Sets "<context>: <the backend's words>" (or the status's name if the backend gave none since the
 * last tide__clear_backend_message) and returns status. */
tide_status tide__fail_with_context(tide_status status, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));
/* Call before calling into a backend. */
void tide__clear_backend_message(void);
/* "512 B", "1.5 MiB", "2.0 GiB". */
const char *format_bytes(uint64_t bytes, char buf[32]);

/* ---- stats.c: per-heap counters, summed on request ----------------------------------------------- */
struct counter {
    int64_t cur, peak;
};
/* Every statistic is exact, so that each peak is a value the statistic really had between two
 * operations. Seven are counted; three follow from them and are computed when read (pool_active and
 * the two below), which spares the fast path their updates: only their peaks are kept, checked
 * wherever they can rise. Each event updates every counter it moves once, and checks a peak only
 * where the value can rise. */
struct pool_stats {
    struct counter reserved, allocated, requested, pending;
    struct counter allocation, segment, pending_blocks;
    int64_t idle;                     /* bytes in wholly free segments (the releasable cache) */
    int64_t active_peak, cached_peak, inactive_split_peak;
};
struct heap_stats {
    struct pool_stats pool[TIDE_POOL_COUNT];   /* indexed by TIDE_POOL_ALL / _SMALL / _LARGE */
    uint64_t num_pending_drained;
    uint64_t num_fence_errors;
    /* A tide_malloc drained blocks, found no fit, and let the heap's lock go on its way to
     * pressure_malloc, which settles the peaks. Until then another thread can find the cache above its
     * peaks: tide_get_stats reports the higher of the two, and the validator lets it be. */
    bool drained_unsettled;
};
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


/* ---- heap.c: one stream's blocks -------------------------------------------------------------------- */
struct fence_entry {
    void *fence;
    struct block *block;
    uint64_t seq;                     /* the allocator's pending sequence when recorded */
};
struct fence_queue {                  /* fences recorded on one stream, oldest first */
    tide_stream stream;
    struct fence_entry *ring;
    uint32_t head, count, cap;
};
struct block_chunk;
struct history_entry;
struct heap_ring;

/* Aligned to 128 bytes and a whole number of them: each stream's heap is written by its own thread at
 * every operation (the lock, the statistics at its end), so no line, nor the pair of lines a CPU
 * fetches together, may hold parts of two heaps. */
struct heap {
    _Alignas(128) spin_lock lock;
    tide_allocator *owner;
    tide_stream stream;
    uint32_t index;
    struct free_index free[POOL_KINDS];
    struct ptr_map map;
    struct segment *segments;                 /* all segments, newest first */
    struct segment *idle_head, *idle_tail;    /* wholly free segments, oldest first */
    struct block *pending_head;               /* PENDING blocks, in order of free */
    struct block **pending_end;               /* the link the next one goes in: &pending_head, or the
                                                 last block's link_next */
    struct fence_queue *queues;
    uint32_t nqueues, queues_cap;
    void **fence_pool;                        /* created, unused fences */
    uint32_t nfence_pool, fence_pool_cap;
    struct arena *arenas[POOL_KINDS];         /* expandable segments: address ranges, per pool */
    struct block *parked;                     /* the last block freed, not merged yet (heap_park) */
    size_t parked_covers;                     /* its segment's size if merging it empties the segment */
    uint64_t parked_since;                    /* ... and then the idle time it was freed at */
    struct block *link_scratch;               /* where link_prev stores when there is no block after */
    struct block *spare_blocks;               /* recycled block structs */
    struct block_chunk *chunks;
    /* The history (history.c): where this stream's next event goes, in the ring of history_ring; NULL
     * while no history is on. */
    struct history_entry *history_next, *history_limit;
    struct heap_ring *history_ring;
    struct heap_stats stats;
};

tide_status heap_create(tide_allocator *t, tide_stream stream, uint32_t index, struct heap **out);
/* Frees the heap's bookkeeping; its segments must have been released. */
void heap_destroy(struct heap *h);
/* Size class rules. With expandable segments every request shares one pool (counted as the large
 * pool): a small block pins only the page it lies in, and pages one pool leaves free can serve the
 * other without being unmapped and mapped again (measured on the shipped traces: less memory
 * and far fewer driver calls than two pools). */
static inline enum pool_kind pool_for_size(const tide_allocator *t, size_t rounded);
size_t segment_size_for(enum pool_kind pool, size_t rounded);
/* Under h->lock: find a FREE block for rounded bytes and make it ACTIVE. NULL if none fits. */
struct block *heap_take_fit(struct heap *h, enum pool_kind pool, size_t rounded, size_t requested,
                            tide_status *status);
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
/* Every path but tide_malloc's takes a heap's lock with heap_lock, which settles the parked block
 * first: no other code sees one. tide_malloc takes it with heap_lock_fast, to reuse the block, and so
 * does pressure.c's settle_and_unlock, which reads only the statistics. */
static inline void heap_lock(struct heap *h)
{
    spin_lock_acquire(&h->lock);
    if (h->parked)
        heap_settle(h);
}
static inline void heap_lock_fast(struct heap *h) { spin_lock_acquire(&h->lock); }
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
/* The block of h's segment seg that contains addr, by walking (slow; for messages). */
struct block *segment_block_at(struct segment *seg, uintptr_t addr);
uint64_t now_ns(void);
uint64_t idle_clock(void);

/* ---- lifecycle.c: ACTIVE -> PENDING -> FREE ------------------------------------------------------ */
tide_status lifecycle_free(struct heap *h, struct block *b, const void *site);
tide_status lifecycle_record_stream(struct heap *h, struct block *b, tide_stream stream);
tide_status lifecycle_release(struct heap *h, struct block *b);
/* Under h->lock: drain PENDING blocks whose fences have signalled (oldest first, stopping at the first
 * unsignalled fence of each stream). Returns the number of blocks that became FREE. */
size_t lifecycle_poll(struct heap *h);
/* Under h->lock, after a device synchronize that began when the pending sequence was sync_seq: every
 * fence recorded and every synchronize owed before it is done. Returns blocks that became FREE. */
size_t lifecycle_after_sync(struct heap *h, uint64_t sync_seq);
void block_uses_clear(struct block *b);
/* Destroys every fence the heap holds (idle pool and queues). Under h->lock, device synchronized. */
void lifecycle_destroy_fences(struct heap *h);

/* ---- pressure.c: segments from the backend, limits, GC, the out-of-memory ladder, emptying -------- */
/* Allocates from a new segment or after freeing memory; called when the fast path found no fit.
 * No lock held. */
tide_status pressure_malloc(tide_allocator *t, struct heap *h, enum pool_kind pool, size_t rounded,
                            size_t requested, struct block **out);
tide_status pressure_empty_cache(tide_allocator *t, tide_release_report *report);
tide_status pressure_trim(tide_allocator *t, size_t target, tide_release_report *report);
tide_status pressure_set_limit(tide_allocator *t, size_t bytes);
/* Releases every segment regardless (tide_destroy). Under the pressure lock. */
/* Returns the bytes the backend refused to take back. */
uint64_t pressure_release_everything(tide_allocator *t);
/* Shared with expandable.c, under the pressure lock. */
struct segment *segment_struct(tide_allocator *t);
void segment_struct_recycle(tide_allocator *t, struct segment *seg);
/* After the backend took a detached wholly free segment (or run) back: its block struct goes to heap h,
 * the segment struct to the spares. Takes h's lock. */
void segment_released(tide_allocator *t, struct heap *h, struct segment *seg);
/* After the backend refused to take it: the segment goes back into the segment map and into heap h as
 * idle, so nothing is lost. Takes h's lock. */
void segment_reattach(tide_allocator *t, struct heap *h, struct segment *seg);
/* Why memory is released: only releases made to stay under the high-water mark are remembered. */
enum release_reason { RELEASE_ASKED, RELEASE_FOR_HIGH_WATER };
bool recently_released(tide_allocator *t, size_t size);
/* A new phase of the program (see HOLDING MEMORY in tidepool.h): the high-water mark starts again from
 * what is reserved now, and the releases and unmaps made to stay under the old mark are forgotten with
 * it. Under the pressure lock. */
void high_water_restart(tide_allocator *t);
void note_reserved(tide_allocator *t, size_t bytes);   /* reserved grew: peaks, marks, counters */
void note_released(tide_allocator *t, size_t bytes, enum release_reason why, tide_release_report *r);

/* ---- expandable.c: segments that grow (expandable_segments:True), under the pressure lock ------ */
/* Maps the pages a request lacks, growing a run (or starting one), and takes the block from it. */
tide_status expandable_grow(tide_allocator *t, struct heap *h, enum pool_kind pool, size_t rounded,
                            size_t requested, struct block **out);
/* Unmaps whole pages inside FREE blocks of partly used runs, the largest stretches first, until want
 * bytes are unmapped. */
tide_status expandable_release_pages(tide_allocator *t, size_t want, enum release_reason why,
                                     tide_release_report *r, size_t *released);
/* Gives a run's pages back (unmap), unit by unit, and takes it out of its arena if all went; *unmapped:
 * the bytes gone from its start. On a failure the run is what is left of it, still mapped. */
tide_status expandable_unmap_run(tide_allocator *t, struct segment *seg, size_t *unmapped);
/* Puts a run whose unmap failed back into its heap and arena, as an idle run. */
void expandable_reattach_run(tide_allocator *t, struct heap *h, struct segment *seg);
/* tide_destroy: gives back the address ranges of heap h (its runs are unmapped already). */
void expandable_release_arenas(tide_allocator *t, struct heap *h);

/* ---- check.c ------------------------------------------------------------------------------------- */
/* Under the pressure lock and every heap lock. */
tide_status check_locked(tide_allocator *t);

/* ---- allocator.c --------------------------------------------------------------------------------- */
struct tide_allocator {
    tide_backend backend;
    uint64_t id;                              /* unique in the process, for thread-local caches */
    struct tide_config conf;
    size_t device_total;
    size_t guard;                             /* bytes of canary before each block (0: guard off); the
                                                 user's pointer is the block's address plus this */

    pthread_mutex_t pressure;                 /* see the top of this file */
    size_t limit;                             /* under pressure; read racily by the fast path */
    size_t gc_threshold;                      /* 0 = off */
    size_t reserved;                          /* total, under pressure */
    size_t reserved_peak;
    size_t high_water;                        /* reserved may not pass it while idle segments could be
                                                 released instead; see grow() in pressure.c */
#define TIDE_RECENT_RELEASES 32
    size_t recent_releases[TIDE_RECENT_RELEASES]; /* sizes released to stay under high_water */
    unsigned recent_next;
    struct {
        uintptr_t lo, hi;
    } recent_unmaps[TIDE_RECENT_RELEASES];    /* expandable: pages unmapped to stay under high_water */
    unsigned recent_unmap_next;
    struct segment *spare_segments;           /* recycled segment structs, under pressure */
    struct segment_map segmap;
    uint64_t num_alloc_retries, num_ooms, num_device_alloc, num_device_free, num_sync_all_streams,
        num_gc_released;                      /* under pressure */

    pthread_mutex_t heaps_lock;               /* serializes heap creation */
    _Atomic(struct heap *) heap_table[2 * TIDE_MAX_HEAPS]; /* open addressing by stream */
    struct heap *heaps[TIDE_MAX_HEAPS];       /* by index */
    _Atomic(uint32_t) nheaps;

    _Atomic(uint64_t) pending_seq;            /* stamps fences and owed synchronizes */

    _Atomic(struct history *) history;        /* recording now, or NULL: one branch when off */
    struct history *histories;                /* the newest history, recording or stopped; freed at the
                                                 next start (readers and start hold history_lock) */
    pthread_mutex_t history_lock;             /* start, stop, readers; taken before heap locks */
    pthread_mutex_t history_write_lock;       /* the shared ring's writers, the interned tags: a leaf */
    struct tag_string *tags;                  /* interned tags, freed by tide_destroy */
};

/* tide_malloc, naming the call site the history records (the caller outside tidepool). */
tide_status allocator_malloc(tide_allocator *t, size_t size, tide_stream stream, void **out, void *site);
/* Locks the pressure lock and every heap, in order (tide_check, tide_destroy, stats). */
void allocator_lock_all(tide_allocator *t);
void allocator_unlock_all(tide_allocator *t);
/* Synchronizes the device and drains every heap by it. Under the pressure lock, no heap lock. */
tide_status allocator_synchronize_and_drain(tide_allocator *t, uint64_t *drained);
/* Runs tide_check if the debug level asks for it; aborts on corruption. */
void allocator_debug_check_now(tide_allocator *t, const char *after);
static inline void allocator_debug_check(tide_allocator *t, int level_needed, const char *after)
{
    if (TIDE_UNLIKELY(t->conf.debug >= level_needed))
        allocator_debug_check_now(t, after);
}

static inline size_t round_up(size_t v, size_t to) { return (v + to - 1) / to * to; }

static inline enum pool_kind pool_for_size(const tide_allocator *t, size_t rounded)
{
    if (t->conf.expandable_segments)
        return POOL_LARGE;
    return rounded <= TIDE_SMALL_MAX ? POOL_SMALL : POOL_LARGE;
}

/* ---- history.c: the event rings, tags, call sites; report.c: snapshot and leak report -------------- */
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
#define HISTORY_EVENT(t, kind, stream, addr, size)                                                  \
    do {                                                                                           \
        if (TIDE_UNLIKELY(atomic_load_explicit(&(t)->history, memory_order_relaxed) != NULL))      \
            history_record((t), (kind), (stream), (addr), (size));                                 \
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
/* Under t->heaps_lock, for a heap just created: it records into the history that is on, if any. */
void history_heap_created(tide_allocator *t, struct heap *h);
void history_destroy_all(tide_allocator *t);
/* "libfoo.so(function+0x1c)" or "0x7f..." for a code address. */
void describe_code_address(void *addr, char *buf, size_t cap);

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

#endif /* TIDE_INTERNAL_H */

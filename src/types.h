/*
 * tidepool's data structures, shared by every file of the library.
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
#ifndef TIDE_TYPES_H
#define TIDE_TYPES_H

#include "tune.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>

/* ---- compiler hints --------------------------------------------------------------------------------- */
/* Which side of a branch on the hot path is common. Unhinted, GCC laid out the common side of many out
 * of line, behind a jump taken at nearly every call, and each taken jump costs time. A hint marks a
 * side that is rare by design (a debug level, a guard, a new peak, a table's growth) or that
 * callgrind's jump counts showed to be the common one on the micro patterns and the replays alike; a
 * test that goes either way gets none. */
#define TIDE_LIKELY(x) __builtin_expect(!!(x), 1)
#define TIDE_UNLIKELY(x) __builtin_expect(!!(x), 0)

/* No stack canary for this function, and why the hot path has none. Ubuntu's GCC builds with
 * -fstack-protector-strong by default, which puts a canary (a load and a store at entry, a load, a
 * compare and a branch at exit) in every function with an array or a local whose address is taken, and
 * in everything inlined into it: a cost the hot path does not need. The hot path's functions take no
 * local's address, with one exception marked with this, and the test hot_path_has_no_canary keeps it
 * so. */
#if defined(__has_attribute)
#if __has_attribute(no_stack_protector)
#define TIDE_NO_CANARY __attribute__((no_stack_protector))
#endif
#endif
#ifndef TIDE_NO_CANARY
#define TIDE_NO_CANARY
#endif

enum pool_kind { POOL_SMALL = 0, POOL_LARGE = 1, POOL_KINDS = 2 };
/* PARKED: freed with nothing holding it, and not yet merged into the cache (heap_park): counted as
 * FREE by the statistics, still in the pointer map, and seen by no code but heap_park,
 * heap_reuse_parked and heap_settle (every other path settles it first: heap_lock_and_settle). */
enum block_state { BLOCK_FREE = 0, BLOCK_ACTIVE = 1, BLOCK_PENDING = 2, BLOCK_PARKED = 3 };
/* What else holds a PENDING block (struct block's needs_sync). */
enum { BLOCK_OWES_SYNC = 1, BLOCK_FENCES_DEFERRED = 2 };

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
    uint8_t needs_sync;               /* PENDING: BLOCK_OWES_SYNC, a fence could not be recorded, and
                                         a device synchronize that starts after sync_seq frees it;
                                         BLOCK_FENCES_DEFERRED, it was freed during a graph capture
                                         and its fences are recorded when the capture ends */
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
    const tide_backend *backend;      /* NULL: reserved from the allocator's backend; else the pool's
                                         table that reserved it, which every release gives it back to */
    size_t serves_from;               /* a large-pool reservation: the smallest request its blocks serve
                                         with room to spare while the fit rules hold, from the request it
                                         was reserved for (fit_serves_from); 0 (any) for the small pool
                                         and runs of pages */
    _Atomic(struct heap *) heap;      /* written under that heap's lock; read by the segment map */
    _Atomic(uintptr_t) map_base, map_end; /* what segment-map readers compare, without locks */
    struct block *first;              /* the lowest-addressed block */
    struct segment *prev, *next;      /* the heap's list of segments */
    struct segment *idle_prev, *idle_next; /* the heap's list of wholly free segments, oldest first */
    bool idle;
    bool harbours_small;              /* a block in use in it was placed below its share bound (past the
                                         high-water mark): it cannot go back until that block is freed,
                                         so later small requests past the mark go here too rather than
                                         pin a second large segment (heap_take_past_mark); cleared when
                                         it is wholly free */
    bool asked_back;                  /* tide_empty_cache kept it for blocks in use: it goes back once
                                         wholly free (release_asked_back, pressure.c); while idle it
                                         serves no request the fit rules weigh (serves_from SIZE_MAX) */
    size_t serves_from_kept;          /* serves_from while asked_back and idle, for a reuse */
    uint32_t busy;                    /* its blocks that are not FREE (ACTIVE, PENDING, PARKED): at 1,
                                         freeing that one leaves the segment wholly free */
    uint64_t idle_since;              /* idle_clock() when it became wholly free (0 while one heap) */
    struct arena *arena;              /* expandable: the arena it lies in; NULL for a reservation */
    struct segment *run_prev, *run_next; /* expandable: the arena's runs, by address (pressure lock) */
    /* A run of a sleeping pool (sleep.c): its pages are unmapped, or being unmapped or mapped again
     * (arena's unit_first says which are mapped); its blocks keep their addresses. Written under the
     * pressure lock and its heap's lock. */
    bool asleep;
    struct sleep_copy *copy;          /* asleep, offloaded: its blocks' contents in host memory, or NULL */
    bool oversize;                    /* a reservation of max_split_size or more (oversize_stats) */
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

/* ---- the free index (free_index.c): two-level segregated fit over the FREE blocks of one pool -------- */
#define FI_SL_BITS 5
#define FI_SL_COUNT (1u << FI_SL_BITS)
/* Enough first levels for any size: a size in 512-byte units has at most 64 - 9 bits, its top bit's
 * position is at most 54, and its first level is that less FI_SL_BITS - 1. So class_of needs no bound
 * check. */
#define FI_FL_COUNT ((64 - 9) - (FI_SL_BITS - 1))
_Static_assert(TIDE_UNIT == 1u << 9, "FI_FL_COUNT assumes 512-byte units");
_Static_assert(FI_FL_COUNT <= 64, "the first-level bitmap is 64 bits");

/* Which requests a FREE block may serve when it does not fit them exactly (an exact fit always may), by
 * the request its segment was reserved for: docs/design.md, Placement. A segment takes its bound
 * (serves_from) when it is reserved; the search compares with it unless the rules are lifted. */
struct fit_rules {
    size_t oversize_min;              /* max_split_size_mb: segments made for requests of this size or
                                         more serve only requests of this size or more; SIZE_MAX: off */
    unsigned share_shift;             /* a segment made for m bytes serves requests of m >> share_shift
                                         bytes or more, so that a small block does not keep a large
                                         segment from being given back */
    bool lifted;                      /* every block serves any request it holds: under pressure, and
                                         with expandable segments (the segment is not read) */
    bool lifted_in_harbours;          /* blocks of a segment that harbours a small block serve any
                                         request they hold (heap_take_past_mark) */
};

struct free_index {
    uint64_t fl_bitmap;
    uint32_t sl_bitmap[FI_FL_COUNT];
    struct block *heads[FI_FL_COUNT][FI_SL_COUNT];
    struct block *end;                /* every class's list ends here, never at NULL: see free_index.c */
};

/* ---- the pointer map (ptr_map.c): address -> block for the blocks users hold, per heap --------------- */
struct ptr_map {
    struct block **slots;
    size_t cap;                       /* a power of two, or 0 */
    size_t count;
    size_t grow_at;                   /* the count at which an insert first grows the table */
};

/* ---- the segment map (segment_map.c): device address -> segment, lock-free reads --------------------- */
struct segment_map_leaf;
struct segment_map_mid;
struct segment_map {
    _Atomic(struct segment_map_mid *) *top;
};

/* The configuration's debug:L, named: when the library runs its validator (check.c) by itself, in any
 * build. A failed check prints the problem and aborts. (The build's assertions are apart: assertions.h.) */
enum debug_level {
    DEBUG_OFF = 0,                    /* never: tide_check only when called */
    DEBUG_RESERVE_RELEASE = 1,        /* after each call that reserves or releases memory, the whole
                                         allocator (skipped where another thread holds the pressure
                                         lock: a completion callback's call could wait for itself) */
    DEBUG_EVERY_CALL = 2,             /* also after every call on a block, the heap it used, under the
                                         heap's lock the call holds already: never skipped */
};

/* ---- the configuration (config.c) --------------------------------------------------------------------- */
struct tide_config {
    bool limit_set;
    size_t limit_bytes;               /* when limit_fraction is 0 */
    double limit_fraction;            /* 0 < f <= 1, or 0 */
    double gc_threshold;              /* 0 = off */
    size_t max_split_size;            /* SIZE_MAX = unlimited */
    int debug;                        /* enum debug_level */
    bool expandable_segments;
    bool trim_on_growth;              /* give idle segments back before passing the high-water mark */
    bool leak_report;                 /* tide_destroy prints the leak report if anything is live */
    bool scrub;                       /* zero blocks before handing them out */
    bool guard;                       /* canaries around blocks, checked at free */
    bool peer_access;                 /* tide_devices: pages mapped for every peer device too */
};

/* ---- statistics (stats.c): per-heap counters, summed on request --------------------------------------- */
struct counter {
    int64_t cur, peak;
};
/* The accumulated statistics (PyTorch's .allocated and .freed): what each statistic gained since the
 * last tide_reset_accumulated_stats, counted once per event by the event that raised it, for the
 * event's pool only (TIDE_POOL_ALL's stay 0: the pools are summed when read). What a statistic lost
 * follows and is not counted: its gains less its rise since the reset (struct stat_values, the values
 * then), which spares every event that lowers a statistic an update. blocks and bytes are what
 * allocations took: the gains of allocation and active (blocks), of allocated_bytes and active_bytes
 * (bytes), since nothing else makes a block ACTIVE. reserved is reserved_bytes as reported (asleep
 * pages are not reserved), segments is segment, split is inactive_split_bytes, split_blocks is
 * inactive_split (a count). */
struct stat_gains {
    int64_t blocks, bytes, requested;
    int64_t reserved, segments, split, split_blocks;
};
/* The values of the accumulated statistics of one pool of one heap at a moment (stats_values). */
struct stat_values {
    int64_t allocation, active, allocated, active_bytes, requested, reserved, segment, split, split_blocks;
};
/* Every statistic is exact, so that each peak is a value the statistic really had between two
 * operations. Eight are counted; three follow from them and are computed when read (pool_active and
 * the two below), which spares the fast path their updates: only their peaks are kept, checked
 * wherever they can rise. Each event updates every counter it moves once, and checks a peak only
 * where the value can rise. */
struct pool_stats {
    struct counter reserved, allocated, requested, pending;
    struct counter allocation;
    struct stat_gains gained;         /* beside the counters the allocation path moves */
    struct counter segment, pending_blocks;
    /* FREE blocks outside wholly free segments (PyTorch's inactive_split), a parked block counted once
     * it is merged (heap_settle; heap_reuse_parked passes its peak on). Moved by the block surgery in
     * heap.c, without its peak where the cache's peaks wait for stats_settle too. */
    struct counter split_blocks;
    int64_t idle;                     /* bytes in wholly free segments (the releasable cache) */
    int64_t active_peak, cached_peak, inactive_split_peak;
    /* Sleeping pools (sleep.c), under the pressure lock and the heap's lock: bytes of asleep runs with
     * no device memory behind them (counted in reserved above, which is the blocks' bookkeeping, but
     * not in the allocator's reserved total), and bytes of their contents kept in host memory. */
    struct counter asleep, offloaded;
};
/* Oversize: PyTorch's oversize_allocations and oversize_segments, blocks and segments of
 * max_split_size bytes or more (oversize_min: SIZE_MAX with the key unset, when nothing is). Segments
 * are reservations only: a run of pages (expandable segments, sleepable pools) is not split by size. */
struct oversize_stats {
    struct counter blocks, segments;
    int64_t blocks_gained, segments_gained;
    int64_t blocks_base, segments_base;
};
struct heap_stats {
    size_t oversize_min;                       /* the allocator's max_split_size (a copy near the counters) */
    struct pool_stats pool[TIDE_POOL_COUNT];   /* indexed by TIDE_POOL_ALL / _SMALL / _LARGE */
    struct stat_values base[TIDE_POOL_COUNT];  /* the values at the last tide_reset_accumulated_stats */
    struct oversize_stats oversize;
    uint64_t num_pending_drained;
    uint64_t num_fence_errors;
    /* A tide_malloc drained blocks, found no fit, and let the heap's lock go on its way to
     * pressure_malloc, which settles the peaks. Until then another thread can find the cache above its
     * peaks: tide_get_stats reports the higher of the two, and the validator lets it be. */
    bool drained_unsettled;
};

/* ---- a heap (heap.c): one stream's blocks ------------------------------------------------------------- */
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
    tide_pool_id pool_id;                     /* 0, or the private pool whose memory this heap keeps */
    const tide_backend *backend;              /* NULL: segments from the allocator's backend; else its
                                                 pool's own (tide_pool_create_with_backend) */
    bool keeps_memory;                        /* its pool's use count is above 0: no idle segment or
                                                 free page of it is released (written under the
                                                 pressure lock and read under it) */
    bool vm;                                  /* its segments are runs of mapped pages whatever
                                                 expandable_segments says: a sleepable pool's heap */
    bool sleeping;                            /* its pool sleeps (sleep.c): keeps_memory stays true,
                                                 whatever the use count, until it wakes */
    _Atomic(uint32_t) pool_mallocs;           /* tide_malloc_pool calls that chose this heap and have
                                                 not returned: it changes pools only at 0 (pool.c) */
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
    /* Its segments, and those wholly free: equal when the stream holds nothing (heap_emptied). Written
     * under its lock; read by other heaps' threads, without it, as a hint. */
    _Atomic(uint32_t) segment_count, idle_count;
    int64_t allocs_when_emptied;              /* its allocations (stats gained) when it last held nothing */
};

/* ---- the allocator (allocator.c) ---------------------------------------------------------------------- */
#define TIDE_MAX_CAPTURING_STREAMS 64         /* streams capturing a graph at once (pool.c) */
struct tide_allocator {
    tide_backend backend;
    _Atomic(uint64_t) id;                     /* unique in the process, for thread-local caches: a new
                                                 one makes every thread forget its cached heap (a
                                                 history with stacks starting: allocator.c) */
    uint32_t forks;                           /* process_forks when made: another count now means a
                                                 child's copy (CHECK_ALLOCATOR) */
    int pid;                                  /* the process that made it, for that message */
    struct tide_config conf;
    size_t device_total;
    size_t guard;                             /* bytes of canary before each block (0: guard off); the
                                                 user's pointer is the block's address plus this */
    struct fit_rules fit;                     /* which requests a segment's blocks may serve (free_index.c) */

    pthread_mutex_t pressure;                 /* see the top of this file */
    size_t limit;                             /* under pressure; read racily by the fast path */
    size_t gc_threshold;                      /* 0 = off */
    size_t reserved;                          /* total, under pressure */
    size_t reserved_peak;
    size_t high_water;                        /* reserved may not pass it while idle segments could be
                                                 released instead; see grow() in pressure.c */
    _Atomic(size_t) room_under_mark;          /* high_water - reserved (0 past it), as of the last change
                                                 of either (mark_moved): what tide_malloc reads without
                                                 the pressure lock to take a block past the mark */
    size_t largest_oversize;                  /* the largest segment of max_split_size or more ever
                                                 reserved (take_below_max_split, pressure.c) */
    size_t held_peak;                         /* the most the program has held (allocated and pending bytes,
                                                 and the request) when a growth passed high_water, since
                                                 the mark last restarted: see may_pass_mark in segment.c */
    _Atomic(bool) phase_ended;                /* a heap's emptying asked its idle segments back (heap.c,
                                                 heap_emptied): the next slow path asks back those of the
                                                 other heaps that hold nothing, and restarts the mark */
    _Atomic(uint32_t) asked_back_idle;        /* idle segments that tide_empty_cache asked back (written
                                                 under their heap's lock; read by pressure_malloc) */
    struct segment *spare_segments;           /* recycled segment structs, under pressure */
    struct segment_map segmap;
    uint64_t num_alloc_retries, num_ooms, num_device_alloc, num_device_free, num_sync_all_streams,
        num_gc_released;                      /* under pressure */
    uint64_t device_call_ns;                  /* under pressure: see note_device_call */
    struct host_buffer *sleep_host_cache;     /* sleep.c: a pool's pinned host buffers kept between its
                                                 sleeps, under pressure */
    size_t sleep_host_cached;                 /* their bytes, under pressure */

    pthread_mutex_t heaps_lock;               /* serializes heap creation */
    _Atomic(struct heap *) heap_table[2 * TIDE_MAX_HEAPS]; /* open addressing by stream */
    struct heap *heaps[TIDE_MAX_HEAPS];       /* by index */
    _Atomic(uint32_t) nheaps;

    _Atomic(uint64_t) pending_seq;            /* stamps fences and owed synchronizes */

    /* Private pools (pool.c), under heaps_lock; a pool's heaps are not in heap_table, which is for
     * streams outside pools. */
    struct private_pool *pools;
    uint32_t npools, pools_cap;
    tide_pool_id next_pool_id;
    _Atomic(uint32_t) captures;               /* graph captures underway: no fence query, synchronize
                                                 or release while above 0 */
    /* Capture is a property of a stream (pool.c): while a stream captures, its heaps query no fence;
     * the device-wide steps above (synchronize, release, recording fences at free) wait for every
     * capture. Under pressure; read without it by lifecycle_poll, only while captures is above 0. */
    _Atomic(uint32_t) device_captures;        /* tide_capture_begin: a stream the caller did not name */
    struct capturing_stream {
        _Atomic(tide_stream) stream;
        _Atomic(uint32_t) depth;              /* 0: the entry is free */
    } capturing[TIDE_MAX_CAPTURING_STREAMS];

    _Atomic(struct history *) history;        /* recording now, or NULL: one branch when off */
    /* tide_observe: hears segment, out-of-memory and empty_cache events as they happen; set and called
     * under the pressure lock (history.c) */
    _Atomic(tide_event_observer) observer;
    struct pool_backend *pool_backends;       /* pools' own backend tables (pool.c), kept until destroy */
    void *observer_ctx;
    _Atomic(bool) history_stacks;             /* it records stacks (TIDE_HISTORY_STACKS) */
    struct history *histories;                /* the newest history, recording or stopped; freed at the
                                                 next start (readers and start hold history_lock) */
    pthread_mutex_t history_lock;             /* start, stop, readers; taken before heap locks */
    pthread_mutex_t history_write_lock;       /* the shared ring's writers, the interned tags: a leaf */
    struct tag_string *tags;                  /* interned tags, freed by tide_destroy */
    /* Openings of other processes' memory (ipc.c): a leaf lock, held across the backend's ipc_open
     * and ipc_close and taken with no other lock held, so that a handle is never opened twice. */
    pthread_mutex_t ipc_lock;
    struct ipc_opening *ipc;                  /* open handles, with their uses */
    size_t nipc, ipc_cap;
};

/* ---- what the internal functions hand each other (internal.h) ---------------------------------------- */
/* A growable text for JSON and reports (util.c). On host-memory failure it stops growing and says so. */
struct text {
    char *p;
    size_t len, cap;
    bool failed;
};
/* Bytes per state over every heap (where_is_memory, segment.c). */
struct where {
    int64_t allocated, pending, cached, idle;
};
/* The block structs heap_carve_pages needs (heap_carve_blocks, heap.c). */
struct carve_blocks {
    struct block *rest_high, *carved;
};
/* What is still live, grouped by tag and call site (report_leaks_locked, report.c). */
struct leak_group;
struct leak_groups {
    struct leak_group *group;
    size_t n;
};

#endif /* TIDE_TYPES_H */

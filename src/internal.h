/*
 * tidepool's internal header: the functions each file of the library offers the others, as prototypes
 * grouped under the file that defines them (the test internal_header_by_owner keeps them there), from
 * the lowest layer up. The data structures are in types.h, the sizes in tune.h, the inline code that
 * the hot path shares in hot_path.h, stats_events.h and history_events.h; docs/design.md explains the
 * layers and their locks.
 */
#ifndef TIDE_INTERNAL_H
#define TIDE_INTERNAL_H

#include "types.h"
#include "assertions.h"

#include <stdarg.h>
#include <stdio.h>

/* ---- util.c: clocks, the spin lock's slow path, byte sizes, text ---------------------------------- */
uint64_t now_ns(void);
/* A coarse clock that orders idle segments by age (cheap; shares nothing between threads). */
uint64_t idle_clock(void);
/* "512 B", "1.5 MiB", "2.0 GiB". */
const char *format_bytes(uint64_t bytes, char buf[32]);
/* A table of items grown by doubling (to `first` items while it has none): the grown table, *cap
 * updated; or NULL, the table and *cap as they were, when the host has no memory for it or its size
 * would not fit in a size_t. */
void *grow_table(void *items, size_t *cap, size_t item_size, size_t first);
/* Into a growable text (struct text, types.h), which on host-memory failure stops growing and says so. */
void text_printf(struct text *x, const char *fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 2, 3)))
#endif
    ;
void text_json_string(struct text *x, const char *s); /* a quoted, escaped JSON string, or null */
/* Hands the text to the caller (*out), or fails with TIDE_EHOSTMEM. */
tide_status text_finish(struct text *x, char **out, const char *what);
/* Forks between the process that loaded the library and this one: 0 there, one more in each child (a
 * pthread_atfork handler counts them). An object whose count at its making differs was copied into
 * this process by a fork: its locks may be held by threads that do not exist here, and its device
 * memory is its maker's (tidepool.h, FORK). */
extern _Atomic(uint32_t) process_forks;

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
/* Whether a request of size bytes is below the share rule's bound for seg (a block of it would keep the
 * whole segment reserved: heap_take_past_mark, take_below_max_split). */
bool fit_below_share(const struct fit_rules *r, const struct segment *seg, size_t size);
/* The rules lifted: any FREE block that holds the request serves it, whatever its segment (pressure.c,
 * heap_take_past_mark). */
extern const struct fit_rules fit_any;
bool free_index_contains(const struct free_index *fi, const struct block *b);
/* For tide_check: the blocks on the index's lists (counting stops past limit, so a list made circular
 * by corruption still ends), and whether each class's bits say truly whether its list holds any. Not
 * kept as a running count, which would cost every insert and removal on the fast path. */
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
void heap_stats_reset_peaks(struct heap_stats *s);
/* Under allocator_lock_all: tide_reset_accumulated_stats. */
void stats_reset_accumulated_locked(tide_allocator *t);
/* Under allocator_lock_all. */
void stats_collect_locked(tide_allocator *t, tide_stats *out);
/* snprintf-style: the length the whole text needs. */
size_t stats_to_json(const tide_stats *s, char *buf, size_t cap);

/* ---- heap.c: one stream's blocks ---------------------------------------------------------------------- */
/* Whether none of its blocks is in use, pending or parked (a hint without its lock). */
bool heap_holds_nothing(const struct heap *h);
/* Whether its emptying may end a phase: a heap of the allocator's own reserved segments (heap_emptied);
 * under its lock. */
bool heap_ends_phases(const struct heap *h);
/* Under its lock: its idle large-pool segments not asked back yet, counted, and (count_only false) asked
 * back, as tide_empty_cache asks back the segments it keeps. */
size_t heap_ask_back_idle(struct heap *h, bool count_only);
tide_status heap_create(tide_allocator *t, tide_stream stream, uint32_t index, struct heap **out);
/* Frees the heap's bookkeeping; its segments must have been released. */
void heap_destroy(struct heap *h);
/* The size of the segment reserved for a request of rounded bytes in h's pool; takes h's lock for the
 * small pool, whose segments grow with it. */
size_t segment_size_for(struct heap *h, enum pool_kind pool, size_t rounded);
/* Under h->lock: find a FREE block for rounded bytes that the rules let serve it, and make it ACTIVE.
 * NULL if none fits (heap_take_fit, hot_path.h: by the allocator's own rules). */
struct block *heap_take_fit_by(struct heap *h, enum pool_kind pool, size_t rounded, size_t requested,
                               const struct fit_rules *rules, tide_status *status);
/* Under h->lock: past the high-water mark, any FREE block that holds rounded bytes, in a segment a small
 * block pins already where the request would pin another (rules: the allocator's, for the share bound). */
struct block *heap_take_past_mark(struct heap *h, enum pool_kind pool, size_t rounded, size_t requested,
                                  const struct fit_rules *rules, tide_status *status);
/* Under h->lock: seg (freshly reserved, or back after a refused release) joins the heap as one FREE
 * block, b (a struct with no neighbours: from block_new, or the one seg kept while it was away). */
void heap_adopt_free(struct heap *h, struct segment *seg, struct block *b);
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
/* Detaches the idle segments that tide_empty_cache asked back (pressure.c); returns their bytes. */
size_t heap_detach_asked_back(struct heap *h, struct segment **out);
/* Under h->lock: merges the parked block into the cache, as tide_free would have at once. */
void heap_settle(struct heap *h);
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
/* The one writer of high_water (under pressure), and of the room under it that tide_malloc reads
 * without the lock (room_under_mark; note_reserved and note_released keep it as reserved moves). */
void high_water_set(tide_allocator *t, size_t value);
/* Bytes per state over every heap (takes each heap's lock in turn). */
struct where where_is_memory(tide_allocator *t);
/* Under the pressure lock, before a growth of `bytes` for a request of `rounded` bytes passes the
 * high-water mark: whether the mark may simply rise (true), or cached memory must go first. It may
 * rise while reserved stays within a slack of the most the program has held (allocated and pending,
 * with the request) at any growth since the mark restarted: 30/1024 of it (TIDE_HOLD_SLACK_PER_1024).
 * docs/design.md, Holding memory. */
bool may_pass_mark(tide_allocator *t, size_t rounded, size_t bytes);
void note_reserved(tide_allocator *t, size_t bytes);   /* reserved grew: peaks, marks, counters */
void note_released(tide_allocator *t, size_t bytes, tide_release_report *r);

/* ---- pool.c: private pools and graph capture ------------------------------------------------------- */
/* Frees the pool table (tide_destroy; the heaps are the allocator's). */
void pools_destroy(tide_allocator *t);
/* Whether the heaps of stream may not query their fences now: a capture on that stream, or one that
 * named no stream. Call only while t->captures is above 0. */
bool capture_holds_poll(tide_allocator *t, tide_stream stream);
/* sleep.c's view of a sleepable pool: its heaps, whether it was asleep, and its mark set (mark > 0),
 * cleared (< 0) or left (0). */
tide_status pool_sleep_mark(tide_allocator *t, tide_pool_id id, const char *verb, int mark, struct heap **heaps,
                            uint32_t *nheaps, bool *was_asleep);

/* ---- sleep.c: sleeping pools --------------------------------------------------------------------- */
/* Gives an asleep run's host copy back (tide_destroy; the statistics are not kept). */
void sleep_copy_free(tide_allocator *t, struct segment *run);
/* The bytes of host memory an asleep run's copy holds (0: none). */
size_t sleep_copy_bytes(const struct segment *run);
/* Under the pressure lock: gives back the host buffers kept for the next sleep of pool (every pool's
 * with TIDE_POOL_ALL_HOST_BUFFERS): tide_pool_empty_cache, the pool's last release, tide_destroy. */
#define TIDE_POOL_ALL_HOST_BUFFERS ((tide_pool_id)0)
void sleep_host_cache_drop(tide_allocator *t, tide_pool_id pool);

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
/* Under h->lock (settled), where the fast path's fit found none: pressure_malloc's take past the mark,
 * where nothing pressure_malloc does before it could act; else NULL, and the slow path goes on. */
struct block *pressure_take_past_mark_at_once(tide_allocator *t, struct heap *h, enum pool_kind pool,
                                              size_t rounded, size_t requested, tide_status *status);
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
/* The same over heap h alone, under h's lock only (debug:2). What the pressure lock guards (the peaks
 * its calls leave to their end, the segment map, the arenas) is not checked: such a call may be under
 * way. */
tide_status check_heap_locked(tide_allocator *t, struct heap *h);

/* ---- report.c: the snapshot and the leak report, under allocator_lock_all --------------------------- */
/* The snapshot's JSON (tide_snapshot_json) into x. */
void report_snapshot_locked(tide_allocator *t, struct text *x);
/* The same as structures (tide_snapshot_take), in one allocation. */
tide_status report_snapshot_take_locked(tide_allocator *t, tide_snapshot **out);
/* What is still live, grouped by tag and call site, largest first; report_leak_text writes it in words
 * (tide_leak_report) and frees it. Neither needs the locks for the second step. */
tide_status report_leaks_locked(tide_allocator *t, struct leak_groups *out);
tide_status report_leak_text(struct leak_groups *leaks, char **out, uint64_t *live);

/* ---- ipc.c: openings of other processes' memory (tide_ipc_open, tide_ipc_close) ------------------ */
/* tide_destroy: closes every opening still open, whatever its uses, and frees the table. Returns how
 * many were open; *refused receives how many the backend failed to close. */
size_t ipc_close_all(tide_allocator *t, size_t *refused);

/* ---- allocator.c --------------------------------------------------------------------------------- */
/* TIDE_EINVAL for any call on an allocator that a fork copied into this process, saying why (call
 * names the call). It touches nothing of t but its pid: its locks may have been held at the fork. */
tide_status allocator_refuse_forked(const tide_allocator *t, const char *call);
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
/* Locks the pressure lock and every heap, in order (tide_check, tide_destroy, stats). */
void allocator_lock_all(tide_allocator *t);
void allocator_unlock_all(tide_allocator *t);
/* tide_check now (allocator_debug_check, hot_path.h); aborts on corruption. */
void allocator_debug_check_now(tide_allocator *t, const char *after);
/* check_heap_locked now, h locked (heap_debug_check, hot_path.h); aborts on corruption. */
void allocator_heap_check_now(tide_allocator *t, struct heap *h, const char *after);
/* A new id for t: every thread's cached heap of t is forgotten, so that their tide_malloc and tide_free
 * take the slow paths, where the stack is taken before the lock (allocator.c). */
void allocator_forget_cached_heaps(tide_allocator *t);

/* ---- history.c: the event rings, tags, call sites ---------------------------------------------------- */
struct history;
/* Events outside any heap's lock (segments, out of memory, empty_cache, annotations): rare, each
 * numbered and timed on its own in the history's shared ring. One branch when no history is on. */
void history_record(tide_allocator *t, uint32_t kind, tide_stream stream, uint64_t addr, uint64_t size);
/* The observer (tide_observe) of a free that leaves its block PENDING and of a PENDING block that
 * becomes FREE, under the heap's lock: rare paths, never a free completed at once. */
void history_observe(tide_allocator *t, uint32_t kind, tide_stream stream, uint64_t addr, uint64_t size);
/* The rest of a heap event (history_events.h): a new chunk of the ring, its time, a tag, a stack. */
void history_heap_slow(struct heap *h, uint32_t kind, uint64_t addr, uint64_t size, const char *tag,
                       const void *site);
/* Whether any thread ever set a tag (tide_set_tag): until then an allocation looks up none. */
extern _Atomic(bool) history_tags_in_use;
void history_heap_alloc_tagged(struct heap *h, struct block *b, size_t size, void *site);
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
/* Under t->heaps_lock, for a heap just created: it records into the history that is on, if any. */
void history_heap_created(tide_allocator *t, struct heap *h);
void history_destroy_all(tide_allocator *t);
/* "libfoo.so(function+0x1c)" or "0x7f..." for a code address. */
void describe_code_address(void *addr, char *buf, size_t cap);

#endif /* TIDE_INTERNAL_H */

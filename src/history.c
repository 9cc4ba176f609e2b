/*
 * The history: rings of events, and the tags and call sites of allocations while it is on.
 *
 * Cheap when off: every place that records tests one pointer. When on, each stream's heap records its
 * own events (allocations and frees, the bulk) into a ring of its own, under the heap's lock, which the
 * operation holds anyway: the common event is two stores of 8 bytes and nothing shared. Events are
 * numbered from one counter for the whole history, which a heap draws from CHUNK numbers at a time
 * (one atomic add), and timed (CLOCK_MONOTONIC) at the first and the last event of each chunk; the
 * events between are placed in time by interpolating between the two. Reading the clock at every event
 * would cost more than the allocation it records (45 ns per read on the H200 machine).
 *
 * The price is order between streams: one stream's events are in their exact order, whatever threads
 * made them, but two streams' events interleave in blocks of up to a chunk, and so do a stream's events
 * with the rare events recorded outside any heap's lock (segments, out of memory, empty_cache,
 * annotations), which go to a shared ring where each is numbered and timed on its own.
 * TIDE_HISTORY_ORDERED makes a chunk one event, for those who need the exact order across streams (a
 * trace to replay) more than the speed. (A CPU's cycle counter would be cheaper to read than the
 * clock, but on a virtual machine two CPUs' counters can disagree, and a thread that moves between them
 * would see its time go back.)
 *
 * Readers copy a heap's ring under its lock, and the shared ring without a lock: its slot's number is
 * written last, so a reader skips a slot being filled.
 *
 * What an event costs (docs/performance.md): the ring's footprint in the caches, as
 * every line of it is written once per lap (a ring larger than the core's L2 pushes the allocator's
 * own blocks and maps out of it), and about ten instructions.
 */
#define _GNU_SOURCE /* dladdr, to name code addresses */
#include "internal.h"
#include "hot_path.h"
#include "history_events.h"

#include <dlfcn.h>
#include <stdlib.h>
#include <string.h>
#if defined(__GLIBC__)
#include <execinfo.h>
#endif

#define HISTORY_MAX_CAPACITY ((size_t)1 << 26)
#define TAG_MAX 64
#define CHUNK 512 /* events a heap numbers at once, unless TIDE_HISTORY_ORDERED: the claim (an atomic add)
                   * and the two clock reads are paid once per CHUNK */
#define HISTORY_TAGGED 0x10u /* in an entry's addr_kind: its tag is in the ring's tags */

/* The shared ring's slot: one event recorded outside a heap's lock (under history_write_lock). */
struct slot {
    uint64_t seq;                     /* in the history's order, shared with the heaps' chunks */
    uint64_t time_ns;
    uint64_t addr, size;
    tide_stream stream;
    uint32_t kind;
    uint32_t nframes;
    const char *tag;
};

/* A heap's ring: NCHUNKS chunks of `chunk` entries, filled in turn. Written under the heap's lock. */
struct heap_ring {
    struct history_entry *entries;
    const char **tags;                /* per entry, made at the first tagged event */
    void **frames;                    /* TIDE_HISTORY_MAX_FRAMES per entry, with TIDE_HISTORY_STACKS */
    uint8_t *nframes;
    uint64_t *chunk_seq;              /* per chunk: its first event's number */
    uint64_t *chunk_first_ns, *chunk_last_ns; /* per chunk: its first and last event's times (0: not yet) */
    uint32_t nchunks;
    uint64_t chunks_begun;            /* the current chunk is chunks_begun - 1, at chunks_begun - 1 % nchunks */
    struct history_entry *chunk_end;  /* the current chunk's end */
    uint64_t sealed_fill;             /* events in the current chunk, once the heap no longer points here */
    uint32_t chunk;                   /* entries per chunk */
    tide_stream stream;
    struct history *hist;             /* whose numbers it draws */
};

struct history {
    size_t capacity;                  /* a power of two */
    unsigned flags;
    uint32_t chunk;                   /* events a heap numbers at once: CHUNK (at most capacity), or 1 */
    _Atomic(uint64_t) next_seq;
    _Atomic(uint64_t) lost;           /* events not recorded: no host memory for a heap's ring */
    /* events outside heaps' locks */
    struct slot *slots;
    void **slot_frames;               /* TIDE_HISTORY_MAX_FRAMES per slot, with TIDE_HISTORY_STACKS */
    uint64_t shared_next;             /* shared events so far */
    size_t shared_mask;               /* shared slots - 1 (a power of two) */
    /* each heap's ring, by heap index; made at the heap's first event */
    _Atomic(struct heap_ring *) rings[TIDE_MAX_HEAPS];
};

struct tag_string {
    struct tag_string *next;
    char text[];
};

_Atomic(bool) history_tags_in_use;

/* A heap points here when a history starts: its first event finds no room, and makes its ring. */
static struct history_entry no_ring_yet;

const char *tide_event_kind_name(uint32_t kind)
{
    static const char *const names[TIDE_EVENT_KIND_COUNT] = {
        "alloc", "free_requested", "free_completed", "segment_reserved", "segment_released", "oom",
        "empty_cache", "annotation",
    };
    return kind < TIDE_EVENT_KIND_COUNT ? names[kind] : "(unknown)";
}

/* ---- tags ---------------------------------------------------------------------------------------------- */

static _Thread_local struct {
    char text[TAG_MAX];
    uint64_t generation;              /* 0: no tag */
    /* the interned copy for one allocator, so tagging costs no lookup while the tag stays the same */
    uint64_t interned_for;            /* allocator id */
    uint64_t interned_generation;
    const char *interned;
} thread_tag;
static _Atomic(uint64_t) tag_generations = 1;

void tide_set_tag(const char *tag)
{
    if (!tag) {
        thread_tag.generation = 0;
        return;
    }
    snprintf(thread_tag.text, sizeof thread_tag.text, "%s", tag);
    thread_tag.generation = atomic_fetch_add(&tag_generations, 1);
    atomic_store_explicit(&history_tags_in_use, true, memory_order_relaxed);
}

/* The allocator's copy of text, made once; NULL if host memory ran out. Under history_write_lock. */
static const char *intern_locked(tide_allocator *t, const char *text)
{
    for (struct tag_string *s = t->tags; s; s = s->next)
        if (strcmp(s->text, text) == 0)
            return s->text;
    size_t n = strlen(text) + 1;
    struct tag_string *s = malloc(sizeof *s + n);
    if (!s)
        return NULL;
    memcpy(s->text, text, n);
    s->next = t->tags;
    t->tags = s;
    return s->text;
}

static const char *current_tag(tide_allocator *t)
{
    if (!thread_tag.generation)
        return NULL;
    uint64_t id = atomic_load_explicit(&t->id, memory_order_relaxed);
    if (thread_tag.interned_for != id || thread_tag.interned_generation != thread_tag.generation) {
        pthread_mutex_lock(&t->history_write_lock);
        thread_tag.interned = intern_locked(t, thread_tag.text);
        pthread_mutex_unlock(&t->history_write_lock);
        thread_tag.interned_for = id;
        thread_tag.interned_generation = thread_tag.generation;
    }
    return thread_tag.interned;
}


/* ---- stacks ---------------------------------------------------------------------------------------------- */

/* The caller's native stack into frames (TIDE_HISTORY_MAX_FRAMES at most): from the frame that returns
 * to `site` (the caller of the tidepool call that recorded, which knows it) or, without one, past this
 * function, the recording function and the tidepool call. Apart, so that its frame is paid only when
 * stacks are asked for. Returns the number of frames. */
__attribute__((noinline)) static uint32_t take_stack(void **frames, const void *site)
{
#if defined(__GLIBC__)
    /* Up to INNER frames of tidepool's own (and of whatever wraps backtrace, as sanitizers do) before
     * the caller's. */
    enum { INNER = 12 };
    void *buf[TIDE_HISTORY_MAX_FRAMES + INNER];
    int n = backtrace(buf, TIDE_HISTORY_MAX_FRAMES + INNER);
    int skip = n > 3 ? 3 : 0;
    for (int i = 0; site && i < n && i < INNER; i++) {
        if (buf[i] == site) {
            skip = i;
            break;
        }
    }
    int kept = n - skip > TIDE_HISTORY_MAX_FRAMES ? TIDE_HISTORY_MAX_FRAMES : n - skip;
    memcpy(frames, buf + skip, (size_t)kept * sizeof *frames);
    return (uint32_t)kept;
#else
    (void)frames;
    (void)site;
    return 0;
#endif
}

/* The stack a public call took before its locks, in host memory of the thread's own reached through
 * one thread-local pointer (the library's thread-locals stay a few words: see error.c), made at the
 * thread's first and freed when it exits. */
enum { STACK_NONE, STACK_KEPT, STACK_HELD };
struct taken_stack {
    int state;                        /* STACK_HELD: by a call under way (history_stack_begin, until
                                         history_stack_end); STACK_KEPT: by the thread's last
                                         tide_malloc (history_stack_keep), until its next call that
                                         takes one: every call that records events does */
    uint64_t kept_for;                /* STACK_KEPT: the allocator's id then */
    uint32_t nframes;
    void *frames[TIDE_HISTORY_MAX_FRAMES];
};
static _Thread_local struct taken_stack *taken;
static pthread_key_t taken_key;
static pthread_once_t taken_key_once = PTHREAD_ONCE_INIT;
static bool taken_key_made;

static void taken_free(void *p)
{
    free(p);
    taken = NULL;
}

static void make_taken_key(void) { taken_key_made = pthread_key_create(&taken_key, taken_free) == 0; }

/* Unloaded with dlclose: the key's destructor would be gone before the threads that took a stack exit. */
__attribute__((destructor)) static void delete_taken_key(void)
{
    if (taken_key_made)
        pthread_key_delete(taken_key);
}

/* Takes the stack into the thread's taken_stack, made if need be; false without host memory. */
static bool take_into_thread(const void *site)
{
    if (!taken) {
        pthread_once(&taken_key_once, make_taken_key);
        struct taken_stack *t = calloc(1, sizeof *t);
        if (!t || !taken_key_made || pthread_setspecific(taken_key, t) != 0) {
            free(t); /* without it the events take their stacks where they are recorded */
            return false;
        }
        taken = t;
    }
    taken->nframes = take_stack(taken->frames, site);
    return true;
}

bool history_stack_take(const void *site)
{
    if (taken && taken->state == STACK_HELD) /* a call inside a call: the outer one's stack */
        return false;
    if (!take_into_thread(site))
        return false;
    taken->state = STACK_HELD;
    return true;
}

void history_stack_drop(void) { taken->state = STACK_NONE; }

void history_stack_keep(uint64_t id, const void *site)
{
    if (taken && taken->state == STACK_HELD)
        return;
    if (take_into_thread(site)) {
        taken->state = STACK_KEPT;
        taken->kept_for = id;
    }
}

/* An event's stack: the one its call took before its locks, or else taken now. A kept stack serves
 * only its allocator while its id stands: a tide_malloc that passed its cached heap just before a
 * history with stacks began (and its new id) takes its own. */
static uint32_t record_stack(const tide_allocator *t, void **frames, const void *site)
{
    if (taken && (taken->state == STACK_HELD ||
                  (taken->state == STACK_KEPT && taken->kept_for == atomic_load_explicit(&t->id, memory_order_relaxed)))) {
        memcpy(frames, taken->frames, taken->nframes * sizeof *frames);
        return taken->nframes;
    }
    return take_stack(frames, site);
}

/* ---- the shared ring: events outside any heap's lock ------------------------------------------------- */

/* Under history_write_lock. */
static void record_shared(const tide_allocator *t, struct history *hist, uint32_t kind, tide_stream stream,
                          uint64_t addr, uint64_t size, const char *tag)
{
    size_t index = (size_t)hist->shared_next++ & hist->shared_mask;
    struct slot *slot = &hist->slots[index];
    slot->seq = atomic_fetch_add_explicit(&hist->next_seq, 1, memory_order_relaxed);
    slot->time_ns = now_ns();
    slot->addr = addr;
    slot->size = size;
    slot->stream = stream;
    slot->kind = kind;
    slot->tag = tag;
    slot->nframes = hist->slot_frames ? record_stack(t, &hist->slot_frames[index * TIDE_HISTORY_MAX_FRAMES], NULL) : 0;
}

void history_record(tide_allocator *t, uint32_t kind, tide_stream stream, uint64_t addr, uint64_t size)
{
    pthread_mutex_lock(&t->history_write_lock);
    struct history *hist = atomic_load_explicit(&t->history, memory_order_acquire);
    uint64_t seq = 0, time = 0;
    if (hist) { /* (it may have stopped since the caller looked) */
        record_shared(t, hist, kind, stream, addr, size, NULL);
        const struct slot *slot = &hist->slots[(size_t)(hist->shared_next - 1) & hist->shared_mask];
        seq = slot->seq;
        time = slot->time_ns;
    }
    pthread_mutex_unlock(&t->history_write_lock);
    /* Under the pressure lock, which tide_observe takes to change the observer. */
    tide_event_observer observer = atomic_load_explicit(&t->observer, memory_order_relaxed);
    if (observer) {
        tide_event e;
        memset(&e, 0, sizeof e);
        e.seq = seq;
        e.time_ns = hist ? time : now_ns();
        e.kind = kind;
        e.stream = stream;
        e.addr = addr;
        e.size = size;
        observer(t->observer_ctx, &e);
    }
}

/* Out of line: its event is a local whose address the observer gets, and inlined into lifecycle_free
 * (link-time optimization does) it would give tide_free a stack canary (hot_path_has_no_canary). */
__attribute__((noinline)) void history_observe(tide_allocator *t, uint32_t kind, tide_stream stream,
                                               uint64_t addr, uint64_t size)
{
    /* Under a heap's lock; tide_observe passes through every heap's lock after changing it. */
    tide_event_observer observer = atomic_load_explicit(&t->observer, memory_order_acquire);
    if (!observer)
        return;
    tide_event e;
    memset(&e, 0, sizeof e);
    e.time_ns = now_ns();
    e.kind = kind;
    e.stream = stream;
    e.addr = addr;
    e.size = size;
    observer(t->observer_ctx, &e);
}

tide_status tide_observe(tide_allocator *t, tide_event_observer observer, void *ctx)
{
    CHECK_ALLOCATOR(t);
    /* The context and the function are set as one, under the pressure lock and every heap's lock in
     * turn, the locks the observer is called under: once this returns, the old one is not running. */
    allocator_lock_all(t);
    atomic_store(&t->observer, NULL);
    t->observer_ctx = ctx;
    atomic_store(&t->observer, observer);
    allocator_unlock_all(t);
    return TIDE_OK;
}

/* ---- the heaps' rings --------------------------------------------------------------------------------- */

static void ring_free(struct heap_ring *r)
{
    if (!r)
        return;
    free(r->entries);
    free((void *)r->tags);
    free(r->frames);
    free(r->nframes);
    free(r->chunk_seq);
    free(r->chunk_first_ns);
    free(r->chunk_last_ns);
    free(r);
}

/* Room for `capacity` events and the chunk being filled, touched now (at tide_history_start, or under
 * the heap's lock at the first event of a heap made later) so that no event pays for a page fault.
 * NULL without host memory. */
static struct heap_ring *ring_create(struct history *hist, tide_stream stream)
{
    struct heap_ring *r = calloc(1, sizeof *r);
    if (!r)
        return NULL;
    r->nchunks = (uint32_t)(hist->capacity / hist->chunk) + 1;
    size_t entries = (size_t)r->nchunks * hist->chunk;
    r->entries = malloc(entries * sizeof *r->entries);
    r->chunk_seq = calloc(r->nchunks, sizeof *r->chunk_seq);
    r->chunk_first_ns = calloc(r->nchunks, sizeof *r->chunk_first_ns);
    r->chunk_last_ns = calloc(r->nchunks, sizeof *r->chunk_last_ns);
    if (hist->flags & TIDE_HISTORY_STACKS) {
        r->frames = calloc(entries * TIDE_HISTORY_MAX_FRAMES, sizeof *r->frames);
        r->nframes = calloc(entries, sizeof *r->nframes);
    }
    if (!r->entries || !r->chunk_seq || !r->chunk_first_ns || !r->chunk_last_ns ||
        ((hist->flags & TIDE_HISTORY_STACKS) && (!r->frames || !r->nframes))) {
        ring_free(r);
        return NULL;
    }
    memset(r->entries, 0, entries * sizeof *r->entries);
    r->hist = hist;
    r->chunk = hist->chunk;
    r->chunk_end = r->entries; /* full: the first event begins a chunk */
    r->stream = stream;
    return r;
}

/* Events in the chunk a heap is filling (or filled last). Under the heap's lock. */
static uint64_t current_fill(const struct heap *h, const struct heap_ring *r)
{
    const struct history_entry *start = &r->entries[(size_t)((r->chunks_begun - 1) % r->nchunks) * r->chunk];
    return h->history_ring == r && h->history_next ? (uint64_t)(h->history_next - start) : r->sealed_fill;
}

/* The heap stops recording into its ring: how far it got is kept for readers. Under h's lock. */
static void heap_detach(struct heap *h)
{
    struct heap_ring *r = h->history_ring;
    if (r && h->history_next && r->chunks_begun)
        r->sealed_fill = current_fill(h, r);
    h->history_next = h->history_limit = NULL;
    h->history_ring = NULL;
}

/* The heap records into r, a ring it has not used yet. Under h's lock. */
static void heap_attach(struct heap *h, struct heap_ring *r)
{
    h->history_ring = r;
    h->history_next = h->history_limit = r->chunk_end; /* full: the next event begins a chunk */
}

void history_heap_created(tide_allocator *t, struct heap *h)
{
    if (atomic_load_explicit(&t->history, memory_order_acquire))
        h->history_next = h->history_limit = &no_ring_yet;
}

__attribute__((noinline)) void history_heap_slow(struct heap *h, uint32_t kind, uint64_t addr, uint64_t size,
                                                 const char *tag, const void *site)
{
    struct heap_ring *r = h->history_ring;
    if (!r) { /* a heap made since the history started, at its first event */
        struct history *hist = atomic_load_explicit(&h->owner->history, memory_order_acquire);
        if (!hist) { /* (tide_history_stop detaches every heap: not expected) */
            heap_detach(h);
            return;
        }
        r = atomic_load_explicit(&hist->rings[h->index], memory_order_acquire);
        if (!r) {
            if (!(r = ring_create(hist, h->stream))) {
                atomic_fetch_add_explicit(&hist->lost, 1, memory_order_relaxed); /* tries again next time */
                return;
            }
            atomic_store_explicit(&hist->rings[h->index], r, memory_order_release);
        }
        heap_attach(h, r);
    }
    struct history_entry *e = h->history_next;
    if (e == r->chunk_end) { /* begin a chunk: its numbers, and its first event's time */
        uint32_t slot = (uint32_t)(r->chunks_begun % r->nchunks);
        e = &r->entries[(size_t)slot * r->chunk];
        r->chunk_end = e + r->chunk;
        r->chunk_seq[slot] = atomic_fetch_add_explicit(&r->hist->next_seq, r->chunk, memory_order_relaxed);
        r->chunk_first_ns[slot] = now_ns();
        r->chunk_last_ns[slot] = 0;
        r->chunks_begun++;
    }
    size_t index = (size_t)(e - r->entries);
    uint32_t flags = 0;
    if (tag) {
        if (!r->tags)
            r->tags = calloc((size_t)r->nchunks * r->chunk, sizeof *r->tags);
        if (r->tags) {
            r->tags[index] = tag;
            flags |= HISTORY_TAGGED;
        }
    }
    if (r->frames)
        r->nframes[index] = (uint8_t)record_stack(h->owner, &r->frames[index * TIDE_HISTORY_MAX_FRAMES], site);
    e->addr_kind = addr | kind | flags;
    e->size = size;
    if (e + 1 == r->chunk_end) { /* the chunk's last event: its time */
        uint32_t slot = (uint32_t)(index / r->chunk);
        r->chunk_last_ns[slot] = r->chunk == 1 ? r->chunk_first_ns[slot] : now_ns();
    }
    h->history_next = e + 1;
    /* the fast path up to the chunk's last event, or never when stacks are recorded */
    h->history_limit = r->frames ? e + 1 : r->chunk_end - 1;
}

void history_heap_alloc_tagged(struct heap *h, struct block *b, size_t size, void *site)
{
    b->tag = current_tag(h->owner);
    if (b->tag)
        history_heap_slow(h, TIDE_EVENT_ALLOC, b->addr, size, b->tag, site);
    else
        history_heap_event(h, TIDE_EVENT_ALLOC, b->addr, size, site);
}

/* ---- start, stop ------------------------------------------------------------------------------------- */

#define SHARED_SLOTS_MAX ((size_t)1 << 16)

static void history_free(struct history *hist)
{
    if (!hist)
        return;
    for (size_t i = 0; i < TIDE_MAX_HEAPS; i++)
        ring_free(atomic_load_explicit(&hist->rings[i], memory_order_relaxed));
    free(hist->slot_frames);
    free(hist->slots);
    free(hist);
}

tide_status tide_history_start(tide_allocator *t, size_t capacity, unsigned flags)
{
    CHECK_ALLOCATOR(t);
    if (capacity == 0 || capacity > HISTORY_MAX_CAPACITY)
        return tide__fail(TIDE_EINVAL, "tide_history_start: capacity %zu is not between 1 and %zu events",
                          capacity, HISTORY_MAX_CAPACITY);
    if (flags & ~(unsigned)(TIDE_HISTORY_STACKS | TIDE_HISTORY_ORDERED))
        return tide__fail(TIDE_EINVAL, "tide_history_start: unknown flags 0x%x", flags);
    size_t rounded = 1; /* a power of two, so a shared slot's index is a mask, not a division */
    while (rounded < capacity)
        rounded *= 2;
    capacity = rounded;
    size_t shared = capacity < SHARED_SLOTS_MAX ? capacity : SHARED_SLOTS_MAX;
    struct history *hist = calloc(1, sizeof *hist);
    struct slot *slots = hist ? calloc(shared, sizeof *slots) : NULL;
    void **frames = slots && (flags & TIDE_HISTORY_STACKS)
                        ? calloc(shared * TIDE_HISTORY_MAX_FRAMES, sizeof *frames) : NULL;
    if (!slots || ((flags & TIDE_HISTORY_STACKS) && !frames)) {
        free(slots);
        free(hist);
        return tide__fail(TIDE_EHOSTMEM, "tide_history_start: no host memory for %zu events", capacity);
    }
    hist->slots = slots;
    hist->slot_frames = frames;
    hist->shared_mask = shared - 1;
    hist->capacity = capacity;
    hist->flags = flags;
    hist->chunk = flags & TIDE_HISTORY_ORDERED ? 1 : capacity < CHUNK ? (uint32_t)capacity : CHUNK;
    /* The rings of the streams there are now, made and touched before any lock is taken (a stream
     * that appears later makes its own at its first event). */
    uint32_t made = atomic_load(&t->nheaps);
    for (uint32_t i = 0; i < made; i++) {
        struct heap_ring *r = ring_create(hist, t->heaps[i]->stream);
        if (!r) {
            history_free(hist);
            return tide__fail(TIDE_EHOSTMEM, "tide_history_start: no host memory for %zu events", capacity);
        }
        atomic_store_explicit(&hist->rings[i], r, memory_order_relaxed);
    }
    /* With stacks, every thread's tide_malloc and tide_free must take the slow paths, where the stack
     * is taken before the heap's lock: the flag first, then the new id (heap_for_stream_slow), and both
     * before any heap records into the new rings. */
    bool stacks = (flags & TIDE_HISTORY_STACKS) != 0;
    atomic_store_explicit(&t->history_stacks, stacks, memory_order_release);
    if (stacks)
        allocator_forget_cached_heaps(t);
    /* Under heaps_lock no heap is made meanwhile; under history_lock no one reads the old history
     * while it is freed; under history_write_lock no shared event is written to it. */
    pthread_mutex_lock(&t->heaps_lock);
    pthread_mutex_lock(&t->history_lock);
    pthread_mutex_lock(&t->history_write_lock);
    struct history *old = t->histories;
    t->histories = hist;
    atomic_store_explicit(&t->history, hist, memory_order_release);
    pthread_mutex_unlock(&t->history_write_lock);
    uint32_t n = atomic_load(&t->nheaps);
    for (uint32_t i = 0; i < n; i++) {
        struct heap *h = t->heaps[i];
        struct heap_ring *r = atomic_load_explicit(&hist->rings[i], memory_order_relaxed);
        heap_lock_and_settle(h);
        if (!r || h->history_ring != r) { /* (a heap may have found its new ring already) */
            heap_detach(h);
            if (r)
                heap_attach(h, r);
            else
                h->history_next = h->history_limit = &no_ring_yet;
        }
        heap_unlock(h);
    }
    history_free(old); /* no heap records into it any more */
    pthread_mutex_unlock(&t->history_lock);
    pthread_mutex_unlock(&t->heaps_lock);
    return TIDE_OK;
}

tide_status tide_history_stop(tide_allocator *t)
{
    CHECK_ALLOCATOR(t);
    pthread_mutex_lock(&t->heaps_lock);
    pthread_mutex_lock(&t->history_lock);
    pthread_mutex_lock(&t->history_write_lock);
    atomic_store_explicit(&t->history, NULL, memory_order_release);
    pthread_mutex_unlock(&t->history_write_lock);
    atomic_store_explicit(&t->history_stacks, false, memory_order_relaxed);
    uint32_t n = atomic_load(&t->nheaps);
    for (uint32_t i = 0; i < n; i++) {
        struct heap *h = t->heaps[i];
        heap_lock_and_settle(h);
        heap_detach(h);
        heap_unlock(h);
    }
    pthread_mutex_unlock(&t->history_lock);
    pthread_mutex_unlock(&t->heaps_lock);
    return TIDE_OK;
}

tide_status tide_annotate(tide_allocator *t, const char *text)
{
    CHECK_ALLOCATOR(t);
    if (!text)
        return tide__fail(TIDE_EINVAL, "tide_annotate: the text is NULL");
    bool begun = history_stack_begin(t, __builtin_return_address(0));
    pthread_mutex_lock(&t->history_write_lock);
    struct history *hist = atomic_load_explicit(&t->history, memory_order_acquire);
    const char *copy = hist ? intern_locked(t, text) : NULL;
    if (copy)
        record_shared(t, hist, TIDE_EVENT_ANNOTATION, 0, 0, 0, copy);
    pthread_mutex_unlock(&t->history_write_lock);
    history_stack_end(begun);
    if (!hist)
        return tide__fail(TIDE_EINVAL, "tide_annotate: no history is on (tide_history_start)");
    if (!copy)
        return tide__fail(TIDE_EHOSTMEM, "tide_annotate: out of host memory");
    return TIDE_OK;
}

/* ---- reading ---------------------------------------------------------------------------------------- */

/* One event as read, before the window of the newest is chosen. */
struct gathered {
    uint64_t seq, time_ns, addr, size;
    tide_stream stream;
    const char *tag;
    uint32_t kind;                    /* with HISTORY_COMPLETED_AT_ONCE */
    uint32_t nframes;
    size_t frames_at;                 /* in gather.frames */
};

/* The events read, a run per ring, each run in order. */
struct gather {
    bool stacks;                      /* frames are copied too */
    struct gathered *ev;
    void **frames;                    /* TIDE_HISTORY_MAX_FRAMES per event, with stacks */
    size_t n, cap;
    uint64_t total;                   /* events recorded, read or not */
    size_t runs[TIDE_MAX_HEAPS + 2];  /* where each run begins; the last, where the events end */
    size_t nruns;
};

/* Room for `more` events after those read (outside any lock: a ring is copied in two steps, its size
 * under the lock, then room, then the copy under the lock again). */
static bool gather_reserve(struct gather *g, size_t more)
{
    if (g->n + more <= g->cap)
        return true;
    size_t cap = g->n + more;
    struct gathered *ev = realloc(g->ev, cap * sizeof *ev);
    if (!ev)
        return false;
    g->ev = ev;
    if (g->stacks) {
        void **frames = realloc(g->frames, cap * TIDE_HISTORY_MAX_FRAMES * sizeof *frames);
        if (!frames)
            return false;
        g->frames = frames;
    }
    g->cap = cap;
    return true;
}

static struct gathered *gather_next(struct gather *g, const void *frames, uint32_t nframes)
{
    struct gathered *x = &g->ev[g->n];
    x->nframes = g->stacks && frames ? nframes : 0;
    x->frames_at = g->n * TIDE_HISTORY_MAX_FRAMES;
    if (x->nframes)
        memcpy(&g->frames[x->frames_at], frames, nframes * sizeof *g->frames);
    g->n++;
    return x;
}

/* The shared ring's newest events, at most the room there is. Under history_write_lock. */
static size_t shared_held(const struct history *hist)
{
    uint64_t slots = hist->shared_mask + 1;
    return (size_t)(hist->shared_next < slots ? hist->shared_next : slots);
}

static void gather_shared(struct gather *g, const struct history *hist)
{
    uint64_t end = hist->shared_next;
    size_t held = shared_held(hist), take = held < g->cap - g->n ? held : g->cap - g->n;
    g->total += end;
    for (uint64_t number = end - take; number < end; number++) {
        size_t index = (size_t)number & hist->shared_mask;
        const struct slot *slot = &hist->slots[index];
        struct gathered *x = gather_next(g, hist->slot_frames ? &hist->slot_frames[index * TIDE_HISTORY_MAX_FRAMES] : NULL,
                                         slot->nframes);
        x->seq = slot->seq;
        x->time_ns = slot->time_ns;
        x->addr = slot->addr;
        x->size = slot->size;
        x->stream = slot->stream;
        x->tag = slot->tag;
        x->kind = slot->kind;
    }
}


/* The events a heap's ring holds: its last nchunks chunks, the current one as filled. Under the
 * heap's lock. */
static size_t ring_held(const struct heap *h, const struct heap_ring *r)
{
    if (!r->chunks_begun)
        return 0;
    uint64_t chunks = r->chunks_begun < r->nchunks ? r->chunks_begun : r->nchunks;
    return (size_t)((chunks - 1) * r->chunk + current_fill(h, r));
}

/* A heap's ring's newest events, at most the room there is, under the heap's lock. Events of a chunk
 * between its first and last are placed in time by interpolation; those of the chunk being filled
 * take its first event's time. */
static void gather_ring(struct gather *g, struct heap *h, struct heap_ring *r, size_t guard)
{
    if (!r->chunks_begun)
        return;
    uint64_t current = r->chunks_begun - 1, fill_now = current_fill(h, r);
    g->total += current * r->chunk + fill_now;
    size_t held = ring_held(h, r), room = g->cap - g->n;
    uint64_t skip = held > room ? held - room : 0; /* the oldest, if events came since the room was made */
    uint64_t first = r->chunks_begun > r->nchunks ? r->chunks_begun - r->nchunks : 0;
    for (uint64_t c = first; c <= current; c++) {
        size_t slot = (size_t)(c % r->nchunks);
        uint64_t fill = c == current ? fill_now : r->chunk;
        uint64_t t0 = r->chunk_first_ns[slot], t1 = r->chunk_last_ns[slot];
        for (uint64_t k = 0; k < fill; k++) {
            if (skip) {
                skip--;
                continue;
            }
            size_t index = slot * r->chunk + (size_t)k;
            const struct history_entry *e = &r->entries[index];
            struct gathered *x = gather_next(g, r->frames ? &r->frames[index * TIDE_HISTORY_MAX_FRAMES] : NULL,
                                             r->frames ? r->nframes[index] : 0);
            x->seq = r->chunk_seq[slot] + k;
            x->time_ns = t1 > t0 && r->chunk > 1 ? t0 + (t1 - t0) * k / (r->chunk - 1) : t0;
            x->addr = (e->addr_kind & ~(uint64_t)(TIDE_UNIT - 1)) + guard;
            x->size = e->size;
            x->stream = r->stream;
            x->kind = (uint32_t)(e->addr_kind & (HISTORY_KIND_MASK | HISTORY_COMPLETED_AT_ONCE));
            x->tag = (e->addr_kind & HISTORY_TAGGED) && r->tags ? r->tags[index] : NULL;
        }
    }
}

static void gather_run_ends(struct gather *g)
{
    g->runs[++g->nruns] = g->n;
}

static int by_seq(const void *a, const void *b)
{
    uint64_t x = ((const struct gathered *)a)->seq, y = ((const struct gathered *)b)->seq;
    return (x > y) - (x < y);
}

/* With many runs (streams), one sort beats a merge that looks at every run's head for each event. */
#define MERGE_RUNS_MAX 16
static void gather_sort_if_many(struct gather *g)
{
    if (g->nruns <= MERGE_RUNS_MAX)
        return;
    qsort(g->ev, g->n, sizeof *g->ev, by_seq);
    g->runs[1] = g->n;
    g->nruns = 1;
}

/* The next event in order across the runs (each in order already): the lowest number at their heads.
 * next[] holds each run's head. */
static const struct gathered *merge_next(const struct gather *g, size_t *next)
{
    size_t best = SIZE_MAX;
    for (size_t k = 0; k < g->nruns; k++)
        if (next[k] < g->runs[k + 1] && (best == SIZE_MAX || g->ev[next[k]].seq < g->ev[next[best]].seq))
            best = k;
    return best == SIZE_MAX ? NULL : &g->ev[next[best]++];
}

/* tide_history_read of hist, under history_lock (which keeps a start from freeing it meanwhile). */
static tide_status read_locked(tide_allocator *t, struct history *hist, tide_event *out, size_t cap,
                               size_t *count, uint64_t *dropped)
{
    *count = 0;
    if (dropped)
        *dropped = 0;
    if (!hist)
        return TIDE_OK;
    struct gather g = {(hist->flags & TIDE_HISTORY_STACKS) != 0, NULL, NULL, 0, 0, 0, {0}, 0};
    pthread_mutex_lock(&t->history_write_lock);
    size_t want = shared_held(hist);
    pthread_mutex_unlock(&t->history_write_lock);
    bool ok = gather_reserve(&g, want);
    if (ok) {
        pthread_mutex_lock(&t->history_write_lock);
        gather_shared(&g, hist);
        pthread_mutex_unlock(&t->history_write_lock);
        gather_run_ends(&g);
    }
    /* Each ring that exists now; one made meanwhile began after this read did, and is left out. */
    uint32_t nheaps = atomic_load(&t->nheaps);
    for (uint32_t i = 0; ok && i < nheaps; i++) {
        struct heap_ring *r = atomic_load_explicit(&hist->rings[i], memory_order_acquire);
        if (!r)
            continue;
        struct heap *h = t->heaps[i];
        heap_lock_and_settle(h);
        want = ring_held(h, r);
        heap_unlock(h);
        if (!(ok = gather_reserve(&g, want)))
            break;
        heap_lock_and_settle(h);
        gather_ring(&g, h, r, t->guard);
        heap_unlock(h);
        gather_run_ends(&g);
    }
    if (!ok) {
        free(g.ev);
        free(g.frames);
        return tide__fail(TIDE_EHOSTMEM, "tide_history_read: out of host memory");
    }
    /* The newest `capacity` events, oldest first: the runs merged by number. */
    gather_sort_if_many(&g);
    size_t skip = g.n > hist->capacity ? g.n - hist->capacity : 0;
    uint64_t lost = atomic_load_explicit(&hist->lost, memory_order_relaxed);
    if (dropped)
        *dropped = g.total + lost - (g.n - skip);
    size_t heads[TIDE_MAX_HEAPS + 1], n = 0;
    for (size_t k = 0; k < g.nruns; k++)
        heads[k] = g.runs[k];
    const struct gathered *x;
    for (size_t i = 0; n < cap && (x = merge_next(&g, heads)); i++) {
        if (i < skip)
            continue;
        tide_event *e = &out[n++];
        e->seq = x->seq;
        e->time_ns = x->time_ns;
        e->kind = x->kind & HISTORY_KIND_MASK;
        e->stream = x->stream;
        e->addr = x->addr;
        e->size = x->size;
        e->tag = x->tag;
        e->nframes = x->nframes;
        if (x->nframes)
            memcpy(e->frames, &g.frames[x->frames_at], x->nframes * sizeof *e->frames);
        if ((x->kind & HISTORY_COMPLETED_AT_ONCE) && n < cap) { /* the free's completion, the same moment */
            out[n] = *e;
            out[n].kind = TIDE_EVENT_FREE_COMPLETED;
            out[n].nframes = 0;
            n++;
        }
    }
    free(g.ev);
    free(g.frames);
    *count = n;
    return TIDE_OK;
}

tide_status tide_history_read(tide_allocator *t, tide_event *out, size_t cap, size_t *count,
                              uint64_t *dropped)
{
    CHECK_ALLOCATOR(t);
    if (!count || (!out && cap))
        return tide__fail(TIDE_EINVAL, "tide_history_read: %s is NULL", !count ? "count" : "out");
    pthread_mutex_lock(&t->history_lock);
    tide_status s = read_locked(t, t->histories, out, cap, count, dropped);
    pthread_mutex_unlock(&t->history_lock);
    return s;
}

void history_destroy_all(tide_allocator *t)
{
    history_free(t->histories);
    t->histories = NULL;
    while (t->tags) {
        struct tag_string *next = t->tags->next;
        free(t->tags);
        t->tags = next;
    }
}

void describe_code_address(void *addr, char *buf, size_t cap)
{
    Dl_info info;
    if (addr && dladdr(addr, &info) && info.dli_fname) {
        const char *file = strrchr(info.dli_fname, '/');
        file = file ? file + 1 : info.dli_fname;
        if (info.dli_sname)
            snprintf(buf, cap, "%s(%s+0x%lx)", file, info.dli_sname,
                     (unsigned long)((char *)addr - (char *)info.dli_saddr));
        else
            snprintf(buf, cap, "%s+0x%lx", file, (unsigned long)((char *)addr - (char *)info.dli_fbase));
        return;
    }
    snprintf(buf, cap, "%p", addr);
}

/* The JSON names of code addresses, each made once: a history's frames repeat a few call sites, and
 * dladdr searches a library's symbols at every call (a third of the writer's time on 98,304 events
 * of stacks, before). */
struct frame_names {
    void **addr;                      /* open addressing; NULL: a free slot */
    size_t *at;                       /* where the address's quoted name begins in text */
    size_t cap, n;
    struct text text;                 /* the names, each ending in a NUL */
};

static size_t name_slot(const void *addr, size_t cap)
{
    return (size_t)(((uint64_t)(uintptr_t)addr * 0x9E3779B97F4A7C15ull) >> 32) & (cap - 1);
}

static bool names_grow(struct frame_names *m)
{
    size_t cap = m->cap ? 2 * m->cap : 256;
    void **addr = calloc(cap, sizeof *addr);
    size_t *at = malloc(cap * sizeof *at);
    if (!addr || !at) {
        free(addr);
        free(at);
        return false;
    }
    for (size_t i = 0; i < m->cap; i++) {
        if (!m->addr[i])
            continue;
        size_t j = name_slot(m->addr[i], cap);
        while (addr[j])
            j = (j + 1) & (cap - 1);
        addr[j] = m->addr[i];
        at[j] = m->at[i];
    }
    free(m->addr);
    free(m->at);
    m->addr = addr;
    m->at = at;
    m->cap = cap;
    return true;
}

/* addr's name as a quoted JSON string, valid until the next call; NULL without host memory. */
static const char *frame_name(struct frame_names *m, void *addr)
{
    if (!addr || m->text.failed || (2 * (m->n + 1) > m->cap && !names_grow(m)))
        return NULL;
    size_t i = name_slot(addr, m->cap);
    for (; m->addr[i]; i = (i + 1) & (m->cap - 1))
        if (m->addr[i] == addr)
            return m->text.p + m->at[i];
    char where[256];
    describe_code_address(addr, where, sizeof where);
    size_t at = m->text.len;
    text_json_string(&m->text, where);
    text_printf(&m->text, "%c", '\0');
    if (m->text.failed)
        return NULL;
    m->addr[i] = addr;
    m->at[i] = at;
    m->n++;
    return m->text.p + at;
}

tide_status tide_history_json(tide_allocator *t, char **out)
{
    CHECK_ALLOCATOR(t);
    if (!out)
        return tide__fail(TIDE_EINVAL, "tide_history_json: out is NULL");
    *out = NULL;
    pthread_mutex_lock(&t->history_lock);
    struct history *hist = t->histories;
    size_t cap = hist ? 2 * hist->capacity : 0, n = 0; /* a free completed at once reads as two */
    uint64_t dropped = 0;
    bool ordered = hist && (hist->flags & TIDE_HISTORY_ORDERED);
    tide_event *events = cap ? malloc(cap * sizeof *events) : NULL;
    tide_status s = cap && !events ? tide__fail(TIDE_EHOSTMEM, "tide_history_json: out of host memory")
                                   : read_locked(t, hist, events, cap, &n, &dropped);
    pthread_mutex_unlock(&t->history_lock);
    if (s != TIDE_OK) {
        free(events);
        return s;
    }
    struct text x = {0};
    struct frame_names names = {0};
    /* "ordered": whether several streams' events are in their exact order (TIDE_HISTORY_ORDERED). */
    text_printf(&x, "{\"dropped\": %llu, \"ordered\": %s, \"events\": [", (unsigned long long)dropped,
                ordered ? "true" : "false");
    for (size_t i = 0; i < n; i++) {
        const tide_event *e = &events[i];
        text_printf(&x, "%s\n  {\"seq\": %llu, \"time_ns\": %llu, \"kind\": \"%s\", \"stream\": %llu, "
                    "\"addr\": %llu, \"size\": %llu, \"tag\": ", i ? "," : "", (unsigned long long)e->seq,
                    (unsigned long long)e->time_ns, tide_event_kind_name(e->kind),
                    (unsigned long long)e->stream, (unsigned long long)e->addr, (unsigned long long)e->size);
        text_json_string(&x, e->tag);
        text_printf(&x, ", \"frames\": [");
        for (uint32_t f = 0; f < e->nframes; f++) {
            text_printf(&x, "%s", f ? ", " : "");
            const char *name = frame_name(&names, e->frames[f]);
            if (name) {
                text_printf(&x, "%s", name);
            } else {
                char where[256];
                describe_code_address(e->frames[f], where, sizeof where);
                text_json_string(&x, where);
            }
        }
        text_printf(&x, "]}");
    }
    text_printf(&x, "\n]}\n");
    free(events);
    free(names.addr);
    free(names.at);
    free(names.text.p);
    return text_finish(&x, out, "tide_history_json");
}

/*
 * The history: a ring buffer of events, and the tags and call sites of allocations while it is on.
 *
 * Cheap when off: every place that records reads one pointer (HISTORY_EVENT in internal.h). When on, a
 * thread claims slots CHUNK at a time with one atomic add and fills them without a lock or another
 * atomic read-modify-write (a locked instruction per event would also make every event wait for the
 * last one's stores to reach memory); the slot's sequence number is written last, so a reader skips a
 * slot being filled, and the slots a thread claimed but has not filled yet. Timestamps (CLOCK_MONOTONIC)
 * are read twice per chunk, at its first and its last event: the events between (all the same
 * thread's) are placed in time by interpolating between the two. Reading the clock at every event
 * would cost more than the allocation it records. The price is order: two threads' events interleave
 * in blocks of a chunk. TIDE_HISTORY_ORDERED makes a chunk one slot, for those who need the exact
 * order (a trace to replay) more than the speed. (A CPU's cycle counter would be cheaper to read, but
 * on a virtual machine two CPUs' counters can disagree, and a thread that moves between them would
 * see its time go back.)
 *
 * What an event costs when on (bench/results/2026-11-30-history.md): about 30 instructions on the fast
 * path, and the ring's footprint in the caches: every line of the ring is written once per lap, and a
 * ring larger than the core's L2 pushes the allocator's own blocks and maps out of it. Fetching the
 * lines ahead did not help (prefetch at the claim, or prefetchw ahead of each event), nor did
 * demoting written lines to the L3 (cldemote, twice as slow).
 */
#define _GNU_SOURCE /* dladdr, to name code addresses */
#include "internal.h"

#include <dlfcn.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#if defined(__GLIBC__)
#include <execinfo.h>
#endif

#define HISTORY_MAX_CAPACITY ((size_t)1 << 26)
#define TAG_MAX 64
#define CHUNK 64 /* slots a thread claims at once, unless TIDE_HISTORY_ORDERED: the claim (an atomic add)
                  * and the two clock reads (45 ns each on the H200 machine) are paid once per CHUNK */

/* One recorded event in 32 bytes, two to a cache line: the ring is written at every allocation and
 * free, and each line it moves on to is a write miss. What most events lack lives beside the ring,
 * at the slot's index, written only when there is one: the time (a chunk's first and last events), the
 * tag, the stack. A free that completes at once is one slot (COMPLETED_AT_ONCE), read back as two
 * events. */
#define COMPLETED_AT_ONCE HISTORY_COMPLETED_AT_ONCE
struct slot {
    _Atomic(uint64_t) seq_plus_one;   /* 0 while empty or being written */
    uint64_t addr;
    uint64_t packed;                  /* the size, the kind and what lives beside (PACK_ below) */
    tide_stream stream;
};
_Static_assert(sizeof(struct slot) == 32, "two slots to a cache line");
#define PACK_SIZE_BITS 48             /* sizes up to 256 TiB; larger ones are recorded as that */
#define PACK_KIND_SHIFT 48            /* 8 bits: tide_event_kind */
#define PACK_AT_ONCE (1ull << 56)     /* FREE_REQUESTED whose free completed in the same call */
#define PACK_TIMED (1ull << 57)       /* times[index] holds its time */
#define PACK_TAGGED (1ull << 58)      /* tags[index] holds its tag */
#define PACK_FRAMES_SHIFT 59          /* 5 bits: frames recorded, at most TIDE_HISTORY_MAX_FRAMES */

static inline uint64_t pack(uint32_t kind, uint64_t size, const char *tag)
{
    uint64_t max = (1ull << PACK_SIZE_BITS) - 1;
    return (size < max ? size : max) | (uint64_t)(kind & 0xFFu) << PACK_KIND_SHIFT |
           (kind & COMPLETED_AT_ONCE ? PACK_AT_ONCE : 0) | (tag ? PACK_TAGGED : 0);
}

struct history {
    struct history *next;             /* the allocator's list of rings */
    uint64_t id;                      /* unique in the process: a thread's claimed chunk names it */
    struct slot *slots;
    uint64_t *times;                  /* per slot, written for a chunk's first and last events */
    const char **tags;                /* per slot, written for tagged events */
    void **frames;                    /* TIDE_HISTORY_MAX_FRAMES per slot, with TIDE_HISTORY_STACKS */
    size_t capacity;
    unsigned flags;
    uint32_t chunk;                   /* slots a thread claims at once: CHUNK, or 1 if ordered */
    _Atomic(uint64_t) next_seq;
    uint64_t ns0;                     /* CLOCK_MONOTONIC at start */
};

struct tag_string {
    struct tag_string *next;
    char text[];
};

static uint64_t monotonic_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

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
}

/* The allocator's copy of text, made once; NULL if host memory ran out. Under history_lock. */
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
    if (thread_tag.interned_for != t->id || thread_tag.interned_generation != thread_tag.generation) {
        pthread_mutex_lock(&t->history_lock);
        thread_tag.interned = intern_locked(t, thread_tag.text);
        pthread_mutex_unlock(&t->history_lock);
        thread_tag.interned_for = t->id;
        thread_tag.interned_generation = thread_tag.generation;
    }
    return thread_tag.interned;
}

/* ---- recording ----------------------------------------------------------------------------------------- */

static _Atomic(uint64_t) history_ids = 1;

/* The slots this thread claimed and has not filled yet, in the ring of history `id`: next up to end.
 * Below fast_end, an event takes history_record's fast path: not the chunk's last (it carries a time),
 * and none at all when stacks are recorded (fast_end is then next). */
static _Thread_local struct {
    uint64_t id, next, end, fast_end;
} claimed;

/* Apart from history_record, so that its stack frame (and the frame array's stack protector) is paid
 * only when stacks are asked for. Returns the number of frames recorded at index. */
__attribute__((noinline)) static uint64_t record_stack(struct history *hist, size_t index)
{
#if defined(__GLIBC__)
    void *frames[TIDE_HISTORY_MAX_FRAMES + 4];
    int n = backtrace(frames, TIDE_HISTORY_MAX_FRAMES + 4);
    /* Leave out this function, history_record and the tidepool call that recorded: the caller's stack
     * remains. */
    int skip = n > 3 ? 3 : 0;
    int kept = n - skip > TIDE_HISTORY_MAX_FRAMES ? TIDE_HISTORY_MAX_FRAMES : n - skip;
    memcpy(&hist->frames[index * TIDE_HISTORY_MAX_FRAMES], frames + skip, (size_t)kept * sizeof *frames);
    return (uint64_t)kept;
#else
    (void)hist;
    (void)index;
    return 0;
#endif
}

/* A slot is written with its number at 0, so that a reader passes over it meanwhile: each writer
 * zeroes it and fences (written out in each, as GCC rejects a fence under ThreadSanitizer once it is
 * inlined from a helper), then slot_close puts the number back last, once everything the event has
 * (slot and side arrays) is written. */
static inline void slot_close(struct slot *slot, uint64_t seq, uint64_t addr, uint64_t packed,
                              tide_stream stream)
{
    slot->addr = addr;
    slot->packed = packed;
    slot->stream = stream;
    atomic_store_explicit(&slot->seq_plus_one, seq + 1, memory_order_release);
}

/* Records one event in the next slot this thread claimed; claims a chunk first if it has none left.
 * The first and the last event of a chunk carry the time. */
__attribute__((noinline)) static void record_in_full(struct history *hist, uint32_t kind, tide_stream stream,
                                                     uint64_t addr, uint64_t size, const char *tag)
{
    bool first = false;
    if (claimed.id != hist->id || claimed.next == claimed.end) {
        uint64_t start = atomic_fetch_add_explicit(&hist->next_seq, hist->chunk, memory_order_relaxed);
        claimed.id = hist->id;
        claimed.next = start;
        claimed.end = start + hist->chunk;
        claimed.fast_end = hist->frames ? start : claimed.end - 1;
        first = true;
    }
    uint64_t seq = claimed.next++;
    size_t index = (size_t)seq & (hist->capacity - 1);
    struct slot *slot = &hist->slots[index];
    atomic_store_explicit(&slot->seq_plus_one, 0, memory_order_relaxed);
    atomic_thread_fence(memory_order_release);
    uint64_t packed = pack(kind, size, tag);
    if (first || claimed.next == claimed.end) {
        hist->times[index] = monotonic_ns();
        packed |= PACK_TIMED;
    }
    if (tag)
        hist->tags[index] = tag;
    if (hist->frames)
        packed |= record_stack(hist, index) << PACK_FRAMES_SHIFT;
    slot_close(slot, seq, addr, packed, stream);
}

/* The common case, an untagged event between a chunk's first and last without a stack, makes no call,
 * so it saves no registers: the rest goes to record_in_full as a tail call. */
void history_record(struct history *hist, uint32_t kind, tide_stream stream, uint64_t addr,
                    uint64_t size, const char *tag)
{
    if (__builtin_expect(claimed.id != hist->id || claimed.next >= claimed.fast_end || tag, 0)) {
        record_in_full(hist, kind, stream, addr, size, tag);
        return;
    }
    uint64_t seq = claimed.next++;
    struct slot *slot = &hist->slots[(size_t)seq & (hist->capacity - 1)];
    atomic_store_explicit(&slot->seq_plus_one, 0, memory_order_relaxed);
    atomic_thread_fence(memory_order_release);
    /* no time of its own: placed between its chunk's first and last events when read */
    slot_close(slot, seq, addr, pack(kind, size, NULL), stream);
}

void history_on_alloc(struct history *hist, tide_allocator *t, struct block *b, tide_stream stream,
                      size_t size, void *site)
{
    b->tag = current_tag(t);
    b->site = site;
    history_record(hist, TIDE_EVENT_ALLOC, stream, b->addr + t->guard, size, b->tag);
}

/* ---- start, stop, read ------------------------------------------------------------------------------ */

tide_status tide_history_start(tide_allocator *t, size_t capacity, unsigned flags)
{
    if (!t)
        return tide__fail(TIDE_EINVAL, "tide_history_start: the allocator is NULL");
    if (capacity == 0 || capacity > HISTORY_MAX_CAPACITY)
        return tide__fail(TIDE_EINVAL, "tide_history_start: capacity %zu is not between 1 and %zu events",
                          capacity, HISTORY_MAX_CAPACITY);
    if (flags & ~(unsigned)(TIDE_HISTORY_STACKS | TIDE_HISTORY_ORDERED))
        return tide__fail(TIDE_EINVAL, "tide_history_start: unknown flags 0x%x", flags);
    size_t rounded = 1; /* a power of two, so a slot's index is a mask, not a division */
    while (rounded < capacity)
        rounded *= 2;
    capacity = rounded;
    struct history *hist = calloc(1, sizeof *hist);
    struct slot *slots = hist ? malloc(capacity * sizeof *slots) : NULL;
    uint64_t *times = slots ? malloc(capacity * sizeof *times) : NULL;
    const char **tags = times ? malloc(capacity * sizeof *tags) : NULL;
    void **frames = tags && (flags & TIDE_HISTORY_STACKS)
                        ? malloc(capacity * TIDE_HISTORY_MAX_FRAMES * sizeof *frames) : NULL;
    if (!tags || ((flags & TIDE_HISTORY_STACKS) && !frames)) {
        free(tags);
        free(times);
        free(slots);
        free(hist);
        return tide__fail(TIDE_EHOSTMEM, "tide_history_start: no host memory for %zu events", capacity);
    }
    /* Touched now, so that no event pays for a page fault later. */
    memset(slots, 0, capacity * sizeof *slots);
    memset(times, 0, capacity * sizeof *times);
    memset(tags, 0, capacity * sizeof *tags);
    if (frames)
        memset(frames, 0, capacity * TIDE_HISTORY_MAX_FRAMES * sizeof *frames);
    hist->frames = frames;
    hist->slots = slots;
    hist->times = times;
    hist->tags = tags;
    hist->capacity = capacity;
    hist->flags = flags;
    hist->chunk = flags & TIDE_HISTORY_ORDERED ? 1 : CHUNK;
    hist->ns0 = monotonic_ns();
    hist->id = atomic_fetch_add(&history_ids, 1);
    pthread_mutex_lock(&t->history_lock);
    hist->next = t->histories;
    t->histories = hist;
    atomic_store_explicit(&t->history, hist, memory_order_release);
    pthread_mutex_unlock(&t->history_lock);
    return TIDE_OK;
}

tide_status tide_history_stop(tide_allocator *t)
{
    if (!t)
        return tide__fail(TIDE_EINVAL, "tide_history_stop: the allocator is NULL");
    atomic_store_explicit(&t->history, NULL, memory_order_release);
    return TIDE_OK;
}

tide_status tide_annotate(tide_allocator *t, const char *text)
{
    if (!t || !text)
        return tide__fail(TIDE_EINVAL, "tide_annotate: %s is NULL", t ? "the text" : "the allocator");
    struct history *hist = atomic_load_explicit(&t->history, memory_order_acquire);
    if (!hist)
        return tide__fail(TIDE_EINVAL, "tide_annotate: no history is on (tide_history_start)");
    pthread_mutex_lock(&t->history_lock);
    const char *copy = intern_locked(t, text);
    pthread_mutex_unlock(&t->history_lock);
    if (!copy)
        return tide__fail(TIDE_EHOSTMEM, "tide_annotate: out of host memory");
    history_record(hist, TIDE_EVENT_ANNOTATION, 0, 0, 0, copy);
    return TIDE_OK;
}

/* The newest ring (recording or stopped), or NULL. */
static struct history *latest(tide_allocator *t)
{
    pthread_mutex_lock(&t->history_lock);
    struct history *hist = t->histories;
    pthread_mutex_unlock(&t->history_lock);
    return hist;
}

tide_status tide_history_read(tide_allocator *t, tide_event *out, size_t cap, size_t *count,
                              uint64_t *dropped)
{
    if (!t || !count || (!out && cap))
        return tide__fail(TIDE_EINVAL, "tide_history_read: %s is NULL",
                          !t ? "the allocator" : !count ? "count" : "out");
    *count = 0;
    if (dropped)
        *dropped = 0;
    struct history *hist = latest(t);
    if (!hist)
        return TIDE_OK;
    /* The newest event written, not the newest slot claimed: a thread may hold claimed slots it has not
     * filled yet (and may never fill). */
    uint64_t end = 0;
    for (size_t i = 0; i < hist->capacity; i++) {
        uint64_t v = atomic_load_explicit(&hist->slots[i].seq_plus_one, memory_order_acquire);
        if (v > end)
            end = v;
    }
    uint64_t begin = end > hist->capacity ? end - hist->capacity : 0;
    if (dropped)
        *dropped = begin;
    size_t n = 0;
    for (uint64_t seq = begin; seq < end && n < cap; seq++) {
        size_t index = (size_t)seq & (hist->capacity - 1);
        struct slot *slot = &hist->slots[index];
        if (atomic_load_explicit(&slot->seq_plus_one, memory_order_acquire) != seq + 1)
            continue; /* being written, or overwritten already */
        uint64_t addr = slot->addr, packed = slot->packed;
        tide_stream stream = slot->stream;
        tide_event *e = &out[n];
        e->time_ns = packed & PACK_TIMED ? hist->times[index] : 0; /* else placed below */
        e->tag = packed & PACK_TAGGED ? hist->tags[index] : NULL;
        e->nframes = (uint32_t)(packed >> PACK_FRAMES_SHIFT);
        if (e->nframes > TIDE_HISTORY_MAX_FRAMES || !hist->frames)
            e->nframes = 0;
        if (e->nframes)
            memcpy(e->frames, &hist->frames[index * TIDE_HISTORY_MAX_FRAMES], e->nframes * sizeof *e->frames);
        atomic_thread_fence(memory_order_acquire);
        if (atomic_load_explicit(&slot->seq_plus_one, memory_order_relaxed) != seq + 1)
            continue; /* overwritten while copied */
        e->seq = seq;
        e->kind = (uint32_t)(packed >> PACK_KIND_SHIFT) & 0xFFu;
        e->stream = stream;
        e->addr = addr;
        e->size = packed & ((1ull << PACK_SIZE_BITS) - 1);
        n++;
        if ((packed & PACK_AT_ONCE) && n < cap) { /* the free's completion, the same moment */
            out[n] = *e;
            out[n].kind = TIDE_EVENT_FREE_COMPLETED;
            out[n].nframes = 0;
            n++;
        }
    }
    /* Events without a stamp of their own lie in a chunk (CHUNK numbers from a multiple of CHUNK, all
     * one thread's) between its first and last events, which have one: place them between, by number.
     * Where a chunk's ends are missing (dropped, or not written yet), its events take the stamp there is,
     * else the time of the event before them. */
    const uint64_t chunk_size = hist->chunk;
    for (size_t i = 0; i < n && chunk_size > 1;) {
        uint64_t chunk = out[i].seq / chunk_size;
        size_t j = i;
        uint64_t first_ns = 0, last_ns = 0;
        for (; j < n && out[j].seq / chunk_size == chunk; j++) {
            if (out[j].time_ns && out[j].seq % chunk_size == 0)
                first_ns = out[j].time_ns;
            if (out[j].time_ns && out[j].seq % chunk_size == chunk_size - 1)
                last_ns = out[j].time_ns;
        }
        uint64_t before = i ? out[i - 1].time_ns : hist->ns0;
        uint64_t lo = first_ns ? first_ns : last_ns ? last_ns : before;
        uint64_t hi = last_ns > lo ? last_ns : lo;
        for (size_t k = i; k < j; k++) {
            if (out[k].time_ns)
                continue;
            double f = (double)(out[k].seq % chunk_size) / (double)(chunk_size - 1);
            out[k].time_ns = lo + (uint64_t)(f * (double)(hi - lo));
        }
        i = j;
    }
    *count = n;
    return TIDE_OK;
}

void history_destroy_all(tide_allocator *t)
{
    while (t->histories) {
        struct history *next = t->histories->next;
        free(t->histories->frames);
        free(t->histories->tags);
        free(t->histories->times);
        free(t->histories->slots);
        free(t->histories);
        t->histories = next;
    }
    while (t->tags) {
        struct tag_string *next = t->tags->next;
        free(t->tags);
        t->tags = next;
    }
}

/* ---- text --------------------------------------------------------------------------------------------- */

void text_printf(struct text *x, const char *fmt, ...)
{
    if (x->failed)
        return;
    for (;;) {
        va_list ap;
        va_start(ap, fmt);
        int n = vsnprintf(x->p ? x->p + x->len : NULL, x->p ? x->cap - x->len : 0, fmt, ap);
        va_end(ap);
        if (n < 0) {
            x->failed = true;
            return;
        }
        if (x->p && x->len + (size_t)n < x->cap) {
            x->len += (size_t)n;
            return;
        }
        size_t cap = x->cap ? x->cap : 4096;
        while (cap <= x->len + (size_t)n)
            cap *= 2;
        char *p = realloc(x->p, cap);
        if (!p) {
            x->failed = true;
            return;
        }
        x->p = p;
        x->cap = cap;
    }
}

void text_json_string(struct text *x, const char *s)
{
    if (!s) {
        text_printf(x, "null");
        return;
    }
    text_printf(x, "\"");
    for (; *s; s++) {
        unsigned char c = (unsigned char)*s;
        if (c == '"' || c == '\\')
            text_printf(x, "\\%c", c);
        else if (c < 0x20)
            text_printf(x, "\\u%04x", c);
        else
            text_printf(x, "%c", c);
    }
    text_printf(x, "\"");
}

tide_status text_finish(struct text *x, char **out, const char *what)
{
    if (x->failed || !x->p) {
        free(x->p);
        return tide__fail(TIDE_EHOSTMEM, "%s: out of host memory", what);
    }
    *out = x->p;
    return TIDE_OK;
}

void tide_string_free(char *text) { free(text); }

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

tide_status tide_history_json(tide_allocator *t, char **out)
{
    if (!t || !out)
        return tide__fail(TIDE_EINVAL, "tide_history_json: %s is NULL", t ? "out" : "the allocator");
    *out = NULL;
    struct history *hist = latest(t);
    size_t cap = hist ? 2 * hist->capacity : 0, n = 0; /* a free completed at once reads as two */
    uint64_t dropped = 0;
    tide_event *events = cap ? malloc(cap * sizeof *events) : NULL;
    if (cap && !events)
        return tide__fail(TIDE_EHOSTMEM, "tide_history_json: out of host memory");
    tide_history_read(t, events, cap, &n, &dropped);
    struct text x = {0};
    /* "ordered": whether several threads' events are in their exact order (TIDE_HISTORY_ORDERED). */
    text_printf(&x, "{\"dropped\": %llu, \"ordered\": %s, \"events\": [", (unsigned long long)dropped,
                hist && (hist->flags & TIDE_HISTORY_ORDERED) ? "true" : "false");
    for (size_t i = 0; i < n; i++) {
        const tide_event *e = &events[i];
        text_printf(&x, "%s\n  {\"seq\": %llu, \"time_ns\": %llu, \"kind\": \"%s\", \"stream\": %llu, "
                    "\"addr\": %llu, \"size\": %llu, \"tag\": ", i ? "," : "", (unsigned long long)e->seq,
                    (unsigned long long)e->time_ns, tide_event_kind_name(e->kind),
                    (unsigned long long)e->stream, (unsigned long long)e->addr, (unsigned long long)e->size);
        text_json_string(&x, e->tag);
        text_printf(&x, ", \"frames\": [");
        for (uint32_t f = 0; f < e->nframes; f++) {
            char where[256];
            describe_code_address(e->frames[f], where, sizeof where);
            text_printf(&x, "%s", f ? ", " : "");
            text_json_string(&x, where);
        }
        text_printf(&x, "]}");
    }
    text_printf(&x, "\n]}\n");
    free(events);
    return text_finish(&x, out, "tide_history_json");
}

/*
 * The simulated device: a backend that runs anywhere, for tests and for machines without a GPU.
 *
 * Memory is real host memory, one anonymous mapping per segment with MAP_NORESERVE, so a simulated
 * 80 GiB device costs nothing until touched, tests can write and check data in blocks, and a segment
 * released to the device is unmapped (a later touch faults, as a use of freed device memory should).
 * Virtual memory (expandable segments) is emulated the same way: an address range is an inaccessible
 * mapping, and mapping a page makes it readable and writable; unmapping one discards its contents and
 * makes it inaccessible again. As on CUDA, what one call maps is one mapping, unmapped whole: the
 * device refuses to map a page twice, to unmap one that is not mapped or part of a mapping, and to
 * release a range with pages still mapped.
 *
 * Each stream is a worker thread that runs queued work in order, each item no sooner than its delay
 * after it was queued. A fence records how many items its stream had been given; it signals once the
 * stream has completed that many. The queue has a depth, like a GPU's launch queue: enqueueing on a
 * full stream waits.
 *
 * Faults can be injected into any backend call (the Nth call fails), and every call is counted, so
 * tests can assert exactly what tidepool asked of the device.
 *
 * Memory shared between processes (CUDA IPC) is simulated between devices: a device names one of its
 * segments in a handle (tide_sim_ipc_handle), and another device opens it (ipc_open), getting the
 * segment's own address. Every device of the process is on one list, so that opening can check that
 * the segment is still there. A device opens a handle once until it closes it, as the CUDA driver.
 *
 * A child process's copy of a device made before a fork has no stream threads: every call on it fails
 * at once, without a lock (the parent's threads may have held them), but for tide_sim_get_counters,
 * which reads the counters as the fork left them, and tide_sim_destroy, which leaves the copy alone.
 *
 * With same_addresses, addresses are the same from run to run: each mapping asks for the lowest free
 * address of a range far from what the C library maps (host_map). Two runs of one sequence of calls,
 * or two builds of tidepool, then hand out the same pointers, and a test can compare them
 * (tests/test_parking.c).
 */
#include "internal.h"
#include "hot_path.h"
#include "tidepool_sim.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#ifdef __linux__
#include <sys/prctl.h>
#endif
#include <time.h>
#include <unistd.h>

struct sim_item {
    tide_sim_work_fn run;
    void *arg;
    uint64_t ready_ns;
};

struct sim_stream {
    tide_sim *sim;
    pthread_t thread;
    pthread_mutex_t lock;
    pthread_cond_t has_work;          /* the worker waits on it */
    pthread_cond_t progressed;        /* enqueuers (queue full) and waiters (fences, sync) wait on it */
    struct sim_item *ring;
    uint32_t head, count, cap;
    uint64_t enqueued;                /* items ever queued */
    _Atomic(uint64_t) completed;      /* items ever finished */
    bool stop;
};

struct sim_fence {
    struct sim_stream *stream;        /* NULL until recorded: an unrecorded fence counts as signalled */
    uint64_t target;
};

struct sim_segment {
    uintptr_t addr;
    size_t size;
    uint64_t id;                      /* unique: a segment reserved again at the same address is another */
};

#define SIM_PAGE_SIZE (2 * MiB)

struct sim_vrange {                   /* an address range reserved by va_reserve */
    uintptr_t addr;
    size_t size;
    uint64_t *page_ids;               /* per page: the id of its mapping, 0 if not mapped */
};

struct fault_plan {
    uint32_t skip, count;
};

struct sim_opening {                  /* another device's segment this one opened (ipc_open) */
    uint64_t device, segment;         /* their ids */
    uintptr_t addr;
};

struct tide_sim {
    pthread_mutex_t lock;             /* everything below except the streams' queues */
    uint64_t total, held, held_segments, live_fences;
    uint32_t queue_depth;
    bool same_addresses;              /* tide_sim_options.same_addresses: see host_map */
    struct sim_stream **streams;      /* [0] is the default stream, handle 0 */
    uint32_t nstreams, streams_cap;
    struct sim_segment *segments;
    uint64_t segment_ids;             /* the last id given, to a segment or a page's mapping */
    size_t nsegments, segments_cap;
    struct sim_vrange *vranges;
    size_t nvranges, vranges_cap;
    uint64_t mapped_pages;
    uint64_t host_bytes, host_buffers, copied_bytes; /* host_alloc and the copies (sleeping pools) */
    struct fault_plan faults[TIDE_SIM_OP_COUNT];
    uint64_t calls[TIDE_SIM_OP_COUNT], failures[TIDE_SIM_OP_COUNT];
    uint32_t forks;                   /* process_forks when made: another count means a child's copy */
    int pid;
    uint64_t id;                      /* unique in the process: handles name their device by it */
    tide_sim *next_device;            /* the process's devices (devices_lock) */
    struct sim_opening *openings;
    size_t nopenings, openings_cap;
};

static bool forked(const tide_sim *sim) { return TIDE_UNLIKELY(sim->forks != forks_now()); }

#define FORKED_WORDS "this simulated device was made in process %d, and this process (%d) is a child " \
    "forked from it: its streams are threads of the parent, which do not exist here, and a child " \
    "cannot use its parent's device memory. Create a new device in the child (tide_sim_create)"

static tide_status refuse_forked(const tide_sim *sim, const char *call)
{
    return tide__fail(TIDE_EINVAL, "%s: " FORKED_WORDS, call, sim->pid, (int)getpid());
}

/* With same_addresses, where mappings go: the lowest free addresses of [32 TiB, 96 TiB) (above
 * AddressSanitizer's shadow, which ends just past 16 TiB), first fit over the ranges that every such
 * simulated device of the process holds, each followed by a page of gap. Released ranges are used
 * again. The address is a hint, not MAP_FIXED: where the kernel cannot honour it, the mapping lands
 * elsewhere, and only the sameness of addresses across runs is lost. Off by default: valgrind runs the
 * fault sweep's expandable half several times slower with mappings placed this way. */
#define SIM_HINT_BASE ((uintptr_t)32 << 40)
#define SIM_HINT_TOP ((uintptr_t)96 << 40)
static pthread_mutex_t claims_lock = PTHREAD_MUTEX_INITIALIZER;
static struct claim {
    uintptr_t start, end;
} *claims;                            /* sorted by address, disjoint */
static size_t nclaims, claims_cap;

/* Every device of the process, for ipc_open to find the one that made a handle. */
static pthread_mutex_t devices_lock = PTHREAD_MUTEX_INITIALIZER;
static tide_sim *devices;
static uint64_t device_ids;           /* the last id given (devices_lock) */

/* A thread of the parent may have held claims_lock or devices_lock at the fork; the child's devices
 * claim afresh. */
static void reset_locks_in_child(void)
{
    claims_lock = (pthread_mutex_t)PTHREAD_MUTEX_INITIALIZER;
    devices_lock = (pthread_mutex_t)PTHREAD_MUTEX_INITIALIZER;
}
__attribute__((constructor)) static void watch_forks(void) { pthread_atfork(NULL, NULL, reset_locks_in_child); }

/* Claims the lowest free range of `claim` bytes and returns its address, or NULL. */
static void *address_claim(size_t claim)
{
    void *out = NULL;
    pthread_mutex_lock(&claims_lock);
    uintptr_t at = SIM_HINT_BASE;
    size_t i = 0;
    for (; i < nclaims && claims[i].start < at + claim; i++)
        at = claims[i].end > at ? claims[i].end : at;
    if (at + claim <= SIM_HINT_TOP) {
        if (nclaims == claims_cap) {
            struct claim *grown = grow_table(claims, &claims_cap, sizeof *grown, 64);
            if (grown)
                claims = grown;
        }
        if (nclaims < claims_cap) {
            memmove(&claims[i + 1], &claims[i], (nclaims - i) * sizeof *claims);
            claims[i] = (struct claim){at, at + claim};
            nclaims++;
            out = (void *)at;
        }
    }
    pthread_mutex_unlock(&claims_lock);
    return out;
}

/* Gives back the claimed range holding addr, if any. */
static void address_release(uintptr_t addr)
{
    pthread_mutex_lock(&claims_lock);
    for (size_t i = 0; i < nclaims; i++)
        if (claims[i].start <= addr && addr < claims[i].end) {
            memmove(&claims[i], &claims[i + 1], (nclaims - i - 1) * sizeof *claims);
            nclaims--;
            break;
        }
    pthread_mutex_unlock(&claims_lock);
}

/* An anonymous mapping of size bytes: with same_addresses at the lowest free claimed range of size + a
 * page, else where the kernel likes. */
static void *host_map(const tide_sim *sim, size_t size, int prot)
{
    void *hint = sim->same_addresses ? address_claim(size + SIM_PAGE_SIZE) : NULL;
    void *p = mmap(hint, size, prot, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (hint && p != hint)
        address_release((uintptr_t)hint);
    return p;
}

static void host_unmap(const tide_sim *sim, uintptr_t addr, size_t size)
{
    munmap((void *)addr, size);
    if (sim->same_addresses)
        address_release(addr);
}

static const char *op_names[TIDE_SIM_OP_COUNT] = {
    "reserve", "release", "fence_create", "fence_record", "fence_query", "synchronize", "mem_info",
    "fill", "verify", "va_reserve", "va_release", "map", "unmap", "host_alloc", "copy_to_host",
    "copy_to_device", "ipc_open", "ipc_close",
};

const char *tide_sim_op_name(tide_sim_op op)
{
    return (unsigned)op < TIDE_SIM_OP_COUNT ? op_names[op] : "(unknown op)";
}

/* Counts a call and says whether the fault plan makes it fail. A child's copy of the device fails
 * every call. */
static bool injected_fault(tide_sim *sim, tide_sim_op op)
{
    if (forked(sim)) {
        tide_backend_error("sim: %s: " FORKED_WORDS, op_names[op], sim->pid, (int)getpid());
        return true;
    }
    pthread_mutex_lock(&sim->lock);
    sim->calls[op]++;
    struct fault_plan *f = &sim->faults[op];
    bool fail = false;
    if (f->skip)
        f->skip--;
    else if (f->count) {
        if (f->count != UINT32_MAX)
            f->count--;
        fail = true;
        sim->failures[op]++;
    }
    pthread_mutex_unlock(&sim->lock);
    if (fail)
        tide_backend_error("sim: injected fault in %s", op_names[op]);
    return fail;
}

void tide_sim_inject_fault(tide_sim *sim, tide_sim_op op, uint32_t skip, uint32_t count)
{
    if (!sim || (unsigned)op >= TIDE_SIM_OP_COUNT || forked(sim))
        return;
    pthread_mutex_lock(&sim->lock);
    sim->faults[op] = (struct fault_plan){skip, count};
    pthread_mutex_unlock(&sim->lock);
}

void tide_sim_get_counters(tide_sim *sim, tide_sim_counters *out)
{
    memset(out, 0, sizeof *out);
    bool locked = !forked(sim); /* a child has no other thread to race with, and the lock may be held */
    if (locked)
        pthread_mutex_lock(&sim->lock);
    memcpy(out->calls, sim->calls, sizeof out->calls);
    memcpy(out->failures, sim->failures, sizeof out->failures);
    out->held_bytes = sim->held;
    out->held_segments = sim->held_segments;
    out->mapped_pages = sim->mapped_pages;
    out->va_ranges = sim->nvranges;
    out->live_fences = sim->live_fences;
    out->host_bytes = sim->host_bytes;
    out->host_buffers = sim->host_buffers;
    out->copied_bytes = sim->copied_bytes;
    out->ipc_openings = sim->nopenings;
    if (locked)
        pthread_mutex_unlock(&sim->lock);
}

/* ---- streams ------------------------------------------------------------------------------------------ */

static void sleep_ns(uint64_t ns)
{
    struct timespec ts = {(time_t)(ns / 1000000000ull), (long)(ns % 1000000000ull)};
    while (nanosleep(&ts, &ts) != 0 && errno == EINTR) {
    }
}

static void *stream_worker(void *p)
{
    struct sim_stream *s = p;
#ifdef __linux__
    /* Linux lets a sleep overrun by 50 us by default; kernels of a few microseconds need better. */
    prctl(PR_SET_TIMERSLACK, 1000UL, 0, 0, 0);
#endif
    pthread_mutex_lock(&s->lock);
    for (;;) {
        while (!s->count && !s->stop)
            pthread_cond_wait(&s->has_work, &s->lock);
        if (!s->count)
            break; /* stopping, and nothing left to run */
        struct sim_item item = s->ring[s->head];
        uint64_t now = now_ns();
        if (now < item.ready_ns) {
            pthread_mutex_unlock(&s->lock);
            sleep_ns(item.ready_ns - now);
            pthread_mutex_lock(&s->lock);
            continue;
        }
        s->head = (s->head + 1) % s->cap;
        s->count--;
        pthread_mutex_unlock(&s->lock);
        if (item.run)
            item.run(item.arg);
        pthread_mutex_lock(&s->lock);
        atomic_fetch_add(&s->completed, 1);
        pthread_cond_broadcast(&s->progressed);
    }
    pthread_mutex_unlock(&s->lock);
    return NULL;
}

static tide_status stream_start(tide_sim *sim, struct sim_stream **out)
{
    struct sim_stream *s = calloc(1, sizeof *s);
    if (!s || !(s->ring = calloc(sim->queue_depth, sizeof *s->ring))) {
        free(s);
        return tide__fail(TIDE_EHOSTMEM, "sim: out of host memory for a stream");
    }
    s->sim = sim;
    s->cap = sim->queue_depth;
    pthread_mutex_init(&s->lock, NULL);
    pthread_cond_init(&s->has_work, NULL);
    pthread_cond_init(&s->progressed, NULL);
    if (pthread_create(&s->thread, NULL, stream_worker, s) != 0) {
        free(s->ring);
        free(s);
        return tide__fail(TIDE_EHOSTMEM, "sim: could not start a stream thread");
    }
    *out = s;
    return TIDE_OK;
}

static void stream_stop(struct sim_stream *s)
{
    pthread_mutex_lock(&s->lock);
    s->stop = true;
    pthread_cond_signal(&s->has_work);
    pthread_mutex_unlock(&s->lock);
    pthread_join(s->thread, NULL);
    pthread_mutex_destroy(&s->lock);
    pthread_cond_destroy(&s->has_work);
    pthread_cond_destroy(&s->progressed);
    free(s->ring);
    free(s);
}

static struct sim_stream *stream_of(tide_sim *sim, tide_stream handle)
{
    if (handle == 0)
        return sim->streams[0];
    struct sim_stream *found = NULL;
    pthread_mutex_lock(&sim->lock);
    for (uint32_t i = 1; i < sim->nstreams; i++)
        if ((tide_stream)sim->streams[i] == handle)
            found = sim->streams[i];
    pthread_mutex_unlock(&sim->lock);
    return found;
}

static void stream_wait_until(struct sim_stream *s, uint64_t target)
{
    if (atomic_load(&s->completed) >= target)
        return;
    pthread_mutex_lock(&s->lock);
    while (atomic_load(&s->completed) < target)
        pthread_cond_wait(&s->progressed, &s->lock);
    pthread_mutex_unlock(&s->lock);
}

static void stream_drain(struct sim_stream *s)
{
    pthread_mutex_lock(&s->lock);
    uint64_t target = s->enqueued;
    pthread_mutex_unlock(&s->lock);
    stream_wait_until(s, target);
}

tide_status tide_sim_stream_create(tide_sim *sim, tide_stream *out)
{
    if (!sim || !out)
        return tide__fail(TIDE_EINVAL, "tide_sim_stream_create: sim or out is NULL");
    if (forked(sim))
        return refuse_forked(sim, "tide_sim_stream_create");
    struct sim_stream *s;
    tide_status st = stream_start(sim, &s);
    if (st != TIDE_OK)
        return st;
    pthread_mutex_lock(&sim->lock);
    if (sim->nstreams == sim->streams_cap) {
        uint32_t cap = sim->streams_cap * 2;
        struct sim_stream **grown = realloc(sim->streams, cap * sizeof *grown);
        if (!grown) {
            pthread_mutex_unlock(&sim->lock);
            stream_stop(s);
            return tide__fail(TIDE_EHOSTMEM, "sim: out of host memory for a stream");
        }
        sim->streams = grown;
        sim->streams_cap = cap;
    }
    sim->streams[sim->nstreams++] = s;
    pthread_mutex_unlock(&sim->lock);
    *out = (tide_stream)s;
    return TIDE_OK;
}

tide_status tide_sim_enqueue(tide_sim *sim, tide_stream stream, uint32_t delay_us,
                             tide_sim_work_fn run, void *arg)
{
    if (!sim)
        return tide__fail(TIDE_EINVAL, "tide_sim_enqueue: sim is NULL");
    if (forked(sim))
        return refuse_forked(sim, "tide_sim_enqueue");
    struct sim_stream *s = stream_of(sim, stream);
    if (!s)
        return tide__fail(TIDE_EINVAL, "tide_sim_enqueue: 0x%llx is not a stream of this device",
                          (unsigned long long)stream);
    pthread_mutex_lock(&s->lock);
    while (s->count == s->cap)
        pthread_cond_wait(&s->progressed, &s->lock);
    s->ring[(s->head + s->count) % s->cap] =
        (struct sim_item){run, arg, now_ns() + (uint64_t)delay_us * 1000u};
    s->count++;
    s->enqueued++;
    pthread_cond_signal(&s->has_work);
    pthread_mutex_unlock(&s->lock);
    return TIDE_OK;
}

tide_status tide_sim_stream_synchronize(tide_sim *sim, tide_stream stream)
{
    if (sim && forked(sim))
        return refuse_forked(sim, "tide_sim_stream_synchronize");
    struct sim_stream *s = sim ? stream_of(sim, stream) : NULL;
    if (!s)
        return tide__fail(TIDE_EINVAL, "tide_sim_stream_synchronize: 0x%llx is not a stream of this "
                          "device", (unsigned long long)stream);
    stream_drain(s);
    return TIDE_OK;
}

tide_status tide_sim_synchronize(tide_sim *sim)
{
    if (!sim)
        return tide__fail(TIDE_EINVAL, "tide_sim_synchronize: sim is NULL");
    if (forked(sim))
        return refuse_forked(sim, "tide_sim_synchronize");
    /* Without the device's lock while waiting: work may call tidepool, which calls the device. */
    for (uint32_t i = 0;; i++) {
        pthread_mutex_lock(&sim->lock);
        struct sim_stream *s = i < sim->nstreams ? sim->streams[i] : NULL;
        pthread_mutex_unlock(&sim->lock);
        if (!s)
            break;
        stream_drain(s);
    }
    return TIDE_OK;
}

/* ---- the backend table ----------------------------------------------------------------------------------- */

static tide_status sim_reserve(void *ctx, size_t size, uintptr_t *out)
{
    tide_sim *sim = ctx;
    if (injected_fault(sim, TIDE_SIM_RESERVE))
        return TIDE_ENOMEM;
    pthread_mutex_lock(&sim->lock);
    uint64_t free_now = sim->total - sim->held;
    bool fits = size <= free_now;
    bool room = sim->nsegments < sim->segments_cap;
    if (fits && !room) {
        struct sim_segment *grown = grow_table(sim->segments, &sim->segments_cap, sizeof *grown, 64);
        if (grown) {
            sim->segments = grown;
            room = true;
        }
    }
    pthread_mutex_unlock(&sim->lock);
    if (!fits) {
        char a[32], f[32];
        tide_backend_error("sim: out of device memory: %s asked, %s free", format_bytes(size, a),
                           format_bytes(free_now, f));
        return TIDE_ENOMEM;
    }
    if (!room) {
        tide_backend_error("sim: out of host memory to track a segment");
        return TIDE_EHOSTMEM;
    }
    void *p = host_map(sim, size, PROT_READ | PROT_WRITE);
    if (p == MAP_FAILED) {
        tide_backend_error("sim: mmap of %zu bytes failed: %s", size, strerror(errno));
        return TIDE_ENOMEM;
    }
    pthread_mutex_lock(&sim->lock);
    /* Someone else may have taken the memory while this thread mapped. */
    if (size > sim->total - sim->held || sim->nsegments == sim->segments_cap) {
        pthread_mutex_unlock(&sim->lock);
        host_unmap(sim, (uintptr_t)p, size);
        tide_backend_error("sim: out of device memory");
        return TIDE_ENOMEM;
    }
    sim->segments[sim->nsegments++] = (struct sim_segment){(uintptr_t)p, size, ++sim->segment_ids};
    sim->held += size;
    sim->held_segments++;
    pthread_mutex_unlock(&sim->lock);
    *out = (uintptr_t)p;
    return TIDE_OK;
}

static tide_status sim_release(void *ctx, uintptr_t addr, size_t size)
{
    tide_sim *sim = ctx;
    if (injected_fault(sim, TIDE_SIM_RELEASE))
        return TIDE_EDEVICE;
    pthread_mutex_lock(&sim->lock);
    size_t i = 0;
    while (i < sim->nsegments && sim->segments[i].addr != addr)
        i++;
    if (i == sim->nsegments || sim->segments[i].size != size) {
        pthread_mutex_unlock(&sim->lock);
        tide_backend_error("sim: release of 0x%llx (%zu bytes), which is not a segment it reserved",
                           (unsigned long long)addr, size);
        return TIDE_EINVAL;
    }
    sim->segments[i] = sim->segments[--sim->nsegments];
    sim->held -= size;
    sim->held_segments--;
    pthread_mutex_unlock(&sim->lock);
    host_unmap(sim, addr, size);
    return TIDE_OK;
}

static tide_status sim_fence_create(void *ctx, void **out)
{
    tide_sim *sim = ctx;
    if (injected_fault(sim, TIDE_SIM_FENCE_CREATE))
        return TIDE_EDEVICE;
    struct sim_fence *f = calloc(1, sizeof *f);
    if (!f) {
        tide_backend_error("sim: out of host memory for a fence");
        return TIDE_EHOSTMEM;
    }
    pthread_mutex_lock(&sim->lock);
    sim->live_fences++;
    pthread_mutex_unlock(&sim->lock);
    *out = f;
    return TIDE_OK;
}

static tide_status sim_fence_record(void *ctx, void *fence, tide_stream stream)
{
    tide_sim *sim = ctx;
    if (injected_fault(sim, TIDE_SIM_FENCE_RECORD))
        return TIDE_EDEVICE;
    struct sim_stream *s = stream_of(sim, stream);
    if (!s) {
        tide_backend_error("sim: fence recorded on 0x%llx, which is not a stream of this device",
                           (unsigned long long)stream);
        return TIDE_EINVAL;
    }
    struct sim_fence *f = fence;
    pthread_mutex_lock(&s->lock);
    f->stream = s;
    f->target = s->enqueued;
    pthread_mutex_unlock(&s->lock);
    return TIDE_OK;
}

static tide_status sim_fence_query(void *ctx, void *fence)
{
    tide_sim *sim = ctx;
    if (injected_fault(sim, TIDE_SIM_FENCE_QUERY))
        return TIDE_EDEVICE;
    struct sim_fence *f = fence;
    if (!f->stream || atomic_load(&f->stream->completed) >= f->target)
        return TIDE_OK;
    return TIDE_ENOTREADY;
}

static tide_status sim_fence_wait(void *ctx, void *fence)
{
    const tide_sim *sim = ctx;
    if (forked(sim)) {
        tide_backend_error("sim: fence_wait: " FORKED_WORDS, sim->pid, (int)getpid());
        return TIDE_EDEVICE;
    }
    struct sim_fence *f = fence;
    if (f->stream)
        stream_wait_until(f->stream, f->target);
    return TIDE_OK;
}

static void sim_fence_destroy(void *ctx, void *fence)
{
    tide_sim *sim = ctx;
    if (forked(sim)) /* the parent's fence, in its bookkeeping: left alone */
        return;
    free(fence);
    pthread_mutex_lock(&sim->lock);
    sim->live_fences--;
    pthread_mutex_unlock(&sim->lock);
}

static tide_status sim_synchronize(void *ctx)
{
    tide_sim *sim = ctx;
    if (injected_fault(sim, TIDE_SIM_SYNCHRONIZE))
        return TIDE_EDEVICE;
    return tide_sim_synchronize(sim);
}

static tide_status sim_mem_info(void *ctx, size_t *free_bytes, size_t *total_bytes)
{
    tide_sim *sim = ctx;
    if (injected_fault(sim, TIDE_SIM_MEM_INFO))
        return TIDE_EDEVICE;
    pthread_mutex_lock(&sim->lock);
    *free_bytes = sim->total - sim->held;
    *total_bytes = sim->total;
    pthread_mutex_unlock(&sim->lock);
    return TIDE_OK;
}

/* ---- fill and verify: the device writing and checking bytes, in order on a stream ------------------- */

struct fill_work {
    tide_sim *sim;
    uint8_t *p;
    size_t size;
    uint8_t value;
    uint64_t stamp;                   /* the last segment or mapping id when it was queued */
};

static struct sim_vrange *vrange_holding(tide_sim *sim, uintptr_t p, size_t size)
{
    for (size_t i = 0; i < sim->nvranges; i++) {
        struct sim_vrange *r = &sim->vranges[i];
        if (p >= r->addr && p + size <= r->addr + r->size)
            return &sim->vranges[i];
    }
    return NULL;
}

/* Whether [p, p+size) lies in one reserved segment, or in mapped pages of one range, that existed
 * already when the id counter stood at stamp (so not reserved or mapped again since). Under the
 * device's lock. */
static bool held_since(tide_sim *sim, uintptr_t p, size_t size, uint64_t stamp)
{
    for (size_t i = 0; i < sim->nsegments; i++) {
        const struct sim_segment *seg = &sim->segments[i];
        if (p >= seg->addr && p + size <= seg->addr + seg->size)
            return seg->id <= stamp;
    }
    const struct sim_vrange *r = vrange_holding(sim, p, size);
    if (!r || size == 0)
        return false;
    for (size_t pg = (p - r->addr) / SIM_PAGE_SIZE; pg <= (p + size - 1 - r->addr) / SIM_PAGE_SIZE; pg++)
        if (!r->page_ids[pg] || r->page_ids[pg] > stamp)
            return false;
    return true;
}

/* A real device finishes queued work before a free of its memory returns (cuMemFree synchronizes);
 * here a release does not wait, so a fill still queued when its segment went back is dropped, also if
 * the address was reserved again since: nobody can read the old segment's memory any more. Under the
 * device's lock, so a release cannot unmap it meanwhile. */
static void fill_run(void *arg)
{
    struct fill_work *w = arg;
    tide_sim *sim = w->sim;
    pthread_mutex_lock(&sim->lock);
    if (held_since(sim, (uintptr_t)w->p, w->size, w->stamp))
        memset(w->p, w->value, w->size);
    pthread_mutex_unlock(&sim->lock);
    free(w);
}

static tide_status sim_fill(void *ctx, uintptr_t addr, size_t size, uint8_t value, tide_stream stream)
{
    tide_sim *sim = ctx;
    if (injected_fault(sim, TIDE_SIM_FILL))
        return TIDE_EDEVICE;
    struct fill_work *w = malloc(sizeof *w);
    if (!w)
        return TIDE_EHOSTMEM;
    pthread_mutex_lock(&sim->lock);
    bool held = held_since(sim, addr, size, UINT64_MAX);
    uint64_t stamp = sim->segment_ids;
    pthread_mutex_unlock(&sim->lock);
    if (!held) {
        free(w);
        tide_backend_error("sim: fill of 0x%llx (%zu bytes), which is not in a segment it reserved "
                           "or in pages it mapped",
                           (unsigned long long)addr, size);
        return TIDE_EINVAL;
    }
    *w = (struct fill_work){sim, (uint8_t *)addr, size, value, stamp};
    tide_status s = tide_sim_enqueue(sim, stream, 0, fill_run, w);
    if (s != TIDE_OK)
        free(w);
    return s;
}

static tide_status sim_verify(void *ctx, uintptr_t addr, size_t size, uint8_t value, tide_stream stream,
                              size_t *first_bad)
{
    tide_sim *sim = ctx;
    if (injected_fault(sim, TIDE_SIM_VERIFY))
        return TIDE_EDEVICE;
    tide_status s = tide_sim_stream_synchronize(sim, stream);
    if (s != TIDE_OK)
        return s;
    /* A block's tail canary can be megabytes: compared a chunk at a time, byte by byte only where a
     * chunk differs. */
    uint8_t expect[4096];
    memset(expect, value, sizeof expect);
    const uint8_t *p = (const uint8_t *)addr;
    for (size_t at = 0; at < size; at += sizeof expect) {
        size_t n = size - at < sizeof expect ? size - at : sizeof expect;
        if (memcmp(p + at, expect, n) == 0)
            continue;
        for (size_t i = at;; i++)
            if (p[i] != value) {
                *first_bad = i;
                return TIDE_ECORRUPT;
            }
    }
    return TIDE_OK;
}

/* ---- virtual memory ---------------------------------------------------------------------------------- */

#define SIM_MAX_RANGE ((size_t)4 << 40)

static tide_status sim_va_reserve(void *ctx, size_t size, uintptr_t *out)
{
    tide_sim *sim = ctx;
    if (injected_fault(sim, TIDE_SIM_VA_RESERVE))
        return TIDE_ENOMEM;
    if (size == 0 || size % SIM_PAGE_SIZE) {
        tide_backend_error("sim: va_reserve of %zu bytes, not a multiple of the page size", size);
        return TIDE_EINVAL;
    }
    /* Each page has an entry in the range's table: past 4 TiB (16 MiB of table) no simulated range is
     * worth it, and far past it no host has the address space. */
    if (size > SIM_MAX_RANGE) {
        tide_backend_error("sim: an address range of %zu bytes is more than the simulated device reserves "
                           "at once (4 TiB)", size);
        return TIDE_ENOMEM;
    }
    uint64_t *ids = calloc(size / SIM_PAGE_SIZE, sizeof *ids);
    /* Inaccessible until mapped; over-reserved by a page so that it can be aligned to one. */
    void *p = ids ? host_map(sim, size + SIM_PAGE_SIZE, PROT_NONE) : MAP_FAILED;
    if (p == MAP_FAILED) {
        free(ids);
        tide_backend_error("sim: reserving an address range of %zu bytes failed", size);
        return TIDE_ENOMEM;
    }
    uintptr_t raw = (uintptr_t)p, addr = round_up(raw, SIM_PAGE_SIZE);
    if (addr > raw)
        munmap(p, addr - raw);
    munmap((void *)(addr + size), raw + SIM_PAGE_SIZE - addr);
    pthread_mutex_lock(&sim->lock);
    if (sim->nvranges == sim->vranges_cap) {
        struct sim_vrange *grown = grow_table(sim->vranges, &sim->vranges_cap, sizeof *grown, 8);
        if (!grown) {
            pthread_mutex_unlock(&sim->lock);
            host_unmap(sim, addr, size);
            free(ids);
            tide_backend_error("sim: out of host memory to track an address range");
            return TIDE_EHOSTMEM;
        }
        sim->vranges = grown;
    }
    sim->vranges[sim->nvranges++] = (struct sim_vrange){addr, size, ids};
    pthread_mutex_unlock(&sim->lock);
    *out = addr;
    return TIDE_OK;
}

static tide_status sim_va_release(void *ctx, uintptr_t addr, size_t size)
{
    tide_sim *sim = ctx;
    if (injected_fault(sim, TIDE_SIM_VA_RELEASE))
        return TIDE_EDEVICE;
    pthread_mutex_lock(&sim->lock);
    struct sim_vrange *r = vrange_holding(sim, addr, size);
    if (!r || r->addr != addr || r->size != size) {
        pthread_mutex_unlock(&sim->lock);
        tide_backend_error("sim: va_release of 0x%llx (%zu bytes), which is not a range it reserved",
                           (unsigned long long)addr, size);
        return TIDE_EINVAL;
    }
    size_t mapped = 0;
    for (size_t pg = 0; pg < size / SIM_PAGE_SIZE; pg++)
        mapped += r->page_ids[pg] != 0;
    if (mapped) {
        pthread_mutex_unlock(&sim->lock);
        tide_backend_error("sim: va_release of 0x%llx with %zu pages still mapped", (unsigned long long)addr,
                           mapped);
        return TIDE_EINVAL;
    }
    free(r->page_ids);
    *r = sim->vranges[--sim->nvranges];
    pthread_mutex_unlock(&sim->lock);
    host_unmap(sim, addr, size);
    return TIDE_OK;
}

/* The range's pages for [addr, addr+size), if it is whole pages of one range, all mapped (want_mapped)
 * or all not. Under the device's lock; sets the backend message otherwise. */
static struct sim_vrange *pages_of(tide_sim *sim, const char *op, uintptr_t addr, size_t size,
                                   bool want_mapped, size_t *first, size_t *count)
{
    struct sim_vrange *r = vrange_holding(sim, addr, size);
    if (!r || size == 0 || (addr - r->addr) % SIM_PAGE_SIZE || size % SIM_PAGE_SIZE) {
        tide_backend_error("sim: %s of 0x%llx (%zu bytes): not whole pages of a reserved address range",
                           op, (unsigned long long)addr, size);
        return NULL;
    }
    *first = (addr - r->addr) / SIM_PAGE_SIZE;
    *count = size / SIM_PAGE_SIZE;
    for (size_t pg = *first; pg < *first + *count; pg++)
        if ((r->page_ids[pg] != 0) != want_mapped) {
            tide_backend_error("sim: %s of 0x%llx (%zu bytes): the page at 0x%llx is %s", op,
                               (unsigned long long)addr, size,
                               (unsigned long long)(r->addr + pg * SIM_PAGE_SIZE),
                               want_mapped ? "not mapped" : "mapped already");
            return NULL;
        }
    return r;
}

static tide_status sim_map(void *ctx, uintptr_t addr, size_t size)
{
    tide_sim *sim = ctx;
    if (injected_fault(sim, TIDE_SIM_MAP))
        return TIDE_ENOMEM;
    size_t first, count;
    pthread_mutex_lock(&sim->lock);
    struct sim_vrange *r = pages_of(sim, "map", addr, size, false, &first, &count);
    if (!r) {
        pthread_mutex_unlock(&sim->lock);
        return TIDE_EINVAL;
    }
    if (size > sim->total - sim->held) {
        char a[32], f[32];
        uint64_t free_now = sim->total - sim->held;
        pthread_mutex_unlock(&sim->lock);
        tide_backend_error("sim: out of device memory: %s asked, %s free", format_bytes(size, a),
                           format_bytes(free_now, f));
        return TIDE_ENOMEM;
    }
    if (mprotect((void *)addr, size, PROT_READ | PROT_WRITE) != 0) {
        pthread_mutex_unlock(&sim->lock);
        tide_backend_error("sim: mprotect of %zu bytes failed: %s", size, strerror(errno));
        return TIDE_ENOMEM;
    }
    /* One mapping: like a CUDA handle, it is unmapped whole or not at all. */
    uint64_t id = ++sim->segment_ids;
    for (size_t pg = first; pg < first + count; pg++)
        r->page_ids[pg] = id;
    sim->held += size;
    sim->mapped_pages += count;
    pthread_mutex_unlock(&sim->lock);
    return TIDE_OK;
}

static tide_status sim_unmap(void *ctx, uintptr_t addr, size_t size)
{
    tide_sim *sim = ctx;
    if (injected_fault(sim, TIDE_SIM_UNMAP))
        return TIDE_EDEVICE;
    size_t first, count;
    pthread_mutex_lock(&sim->lock);
    struct sim_vrange *r = pages_of(sim, "unmap", addr, size, true, &first, &count);
    if (!r) {
        pthread_mutex_unlock(&sim->lock);
        return TIDE_EINVAL;
    }
    size_t pages = r->size / SIM_PAGE_SIZE, end = first + count;
    uint64_t id = r->page_ids[first];
    bool whole = (first == 0 || r->page_ids[first - 1] != id) && (end == pages || r->page_ids[end] != id);
    for (size_t pg = first; pg < end && whole; pg++)
        whole = r->page_ids[pg] == id;
    if (!whole) {
        pthread_mutex_unlock(&sim->lock);
        tide_backend_error("sim: unmap of 0x%llx (%zu bytes): not exactly what one map call mapped (a "
                           "mapping is unmapped whole, as on CUDA)", (unsigned long long)addr, size);
        return TIDE_EINVAL;
    }
    /* The contents go, and a later touch faults: a use of unmapped memory shows at once. */
    madvise((void *)addr, size, MADV_DONTNEED);
    mprotect((void *)addr, size, PROT_NONE);
    for (size_t pg = first; pg < first + count; pg++)
        r->page_ids[pg] = 0;
    sim->held -= size;
    sim->mapped_pages -= count;
    pthread_mutex_unlock(&sim->lock);
    return TIDE_OK;
}

/* ---- host memory and copies (offloaded contents of sleeping pools) ------------------------------------- */

/* Host memory that the device copies to and from: on CUDA, pinned. Here an anonymous mapping, so that
 * freeing it gives the memory back to the system at once, and counted. */
static tide_status sim_host_alloc(void *ctx, size_t size, void **out)
{
    tide_sim *sim = ctx;
    if (injected_fault(sim, TIDE_SIM_HOST_ALLOC))
        return TIDE_ENOMEM;
    void *p = size ? mmap(NULL, size, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0) : MAP_FAILED;
    if (p == MAP_FAILED) {
        tide_backend_error("sim: host_alloc of %zu bytes failed", size);
        return TIDE_ENOMEM;
    }
#ifdef MADV_HUGEPAGE
    /* Written whole at once: in 2 MiB pages the first touch costs a tenth of what 4 KiB pages cost
     * (9 ms against 92 for 21 MiB on the test machine), which is most of an offload here. */
    madvise(p, size, MADV_HUGEPAGE);
#endif
    pthread_mutex_lock(&sim->lock);
    sim->host_bytes += size;
    sim->host_buffers++;
    pthread_mutex_unlock(&sim->lock);
    *out = p;
    return TIDE_OK;
}

static void sim_host_free(void *ctx, void *ptr, size_t size)
{
    tide_sim *sim = ctx;
    if (!ptr || forked(sim))
        return;
    munmap(ptr, size);
    pthread_mutex_lock(&sim->lock);
    sim->host_bytes -= size;
    sim->host_buffers--;
    pthread_mutex_unlock(&sim->lock);
}

/* Whether [p, p+size) is device memory that is there now: in one reserved segment, or in mapped pages
 * of one range. Under the device's lock. */
static bool device_memory_there(tide_sim *sim, uintptr_t p, size_t size)
{
    return size && held_since(sim, p, size, UINT64_MAX);
}

static tide_status sim_copy(tide_sim *sim, tide_sim_op op, void *dst, const void *src, uintptr_t device,
                            size_t size)
{
    if (injected_fault(sim, op))
        return TIDE_EDEVICE;
    pthread_mutex_lock(&sim->lock);
    if (!device_memory_there(sim, device, size)) {
        pthread_mutex_unlock(&sim->lock);
        tide_backend_error("sim: %s of %zu bytes at 0x%llx: not device memory that is reserved or mapped",
                           op_names[op], size, (unsigned long long)device);
        return TIDE_EINVAL;
    }
    memcpy(dst, src, size); /* under the lock: no unmap takes the pages meanwhile */
    sim->copied_bytes += size;
    pthread_mutex_unlock(&sim->lock);
    return TIDE_OK;
}

static tide_status sim_copy_to_host(void *ctx, void *dst, uintptr_t src, size_t size)
{
    return sim_copy(ctx, TIDE_SIM_COPY_TO_HOST, dst, (const void *)src, src, size);
}

static tide_status sim_copy_to_device(void *ctx, uintptr_t dst, const void *src, size_t size)
{
    return sim_copy(ctx, TIDE_SIM_COPY_TO_DEVICE, (void *)dst, src, dst, size);
}

/* ---- memory shared between processes (CUDA IPC), between devices here ----------------------------- */

#define SIM_IPC_MAGIC "tidesim"

struct sim_ipc_handle {
    char magic[8];                    /* SIM_IPC_MAGIC */
    uint64_t device, segment;         /* the ids of the device that made it and of the segment */
    uint64_t addr, size;
    unsigned char zero[24];
};
_Static_assert(sizeof(struct sim_ipc_handle) == TIDE_SIM_IPC_HANDLE_BYTES, "a handle is 64 bytes, as CUDA's");

tide_status tide_sim_ipc_handle(tide_sim *sim, uintptr_t addr, void *handle)
{
    if (!sim || !handle)
        return tide__fail(TIDE_EINVAL, "tide_sim_ipc_handle: %s is NULL", sim ? "handle" : "the device");
    if (forked(sim))
        return refuse_forked(sim, "tide_sim_ipc_handle");
    struct sim_ipc_handle h;
    memset(&h, 0, sizeof h);
    memcpy(h.magic, SIM_IPC_MAGIC, sizeof h.magic);
    bool found = false;
    pthread_mutex_lock(&sim->lock);
    for (size_t i = 0; i < sim->nsegments && !found; i++) {
        const struct sim_segment *seg = &sim->segments[i];
        if (addr >= seg->addr && addr - seg->addr < seg->size) {
            h.device = sim->id;
            h.segment = seg->id;
            h.addr = seg->addr;
            h.size = seg->size;
            found = true;
        }
    }
    pthread_mutex_unlock(&sim->lock);
    if (!found)
        return tide__fail(TIDE_EINVAL, "tide_sim_ipc_handle of 0x%llx: not in a segment this device reserved",
                          (unsigned long long)addr);
    memcpy(handle, &h, sizeof h);
    return TIDE_OK;
}

/* Whether the segment a handle names is still reserved by its device. */
static bool exported_segment_there(const struct sim_ipc_handle *h)
{
    bool there = false;
    pthread_mutex_lock(&devices_lock);
    for (tide_sim *d = devices; d; d = d->next_device) {
        if (d->id != h->device || forked(d)) /* a parent's device, copied by a fork: its lock may be held */
            continue;
        pthread_mutex_lock(&d->lock);
        for (size_t i = 0; i < d->nsegments && !there; i++)
            there = d->segments[i].id == h->segment && d->segments[i].addr == h->addr &&
                    d->segments[i].size == h->size;
        pthread_mutex_unlock(&d->lock);
    }
    pthread_mutex_unlock(&devices_lock);
    return there;
}

static tide_status sim_ipc_open(void *ctx, const void *handle, size_t handle_len, uintptr_t *out)
{
    tide_sim *sim = ctx;
    if (injected_fault(sim, TIDE_SIM_IPC_OPEN))
        return TIDE_EDEVICE;
    struct sim_ipc_handle h;
    memset(&h, 0, sizeof h);
    if (handle_len == sizeof h)
        memcpy(&h, handle, sizeof h);
    if (memcmp(h.magic, SIM_IPC_MAGIC, sizeof h.magic) != 0) {
        tide_backend_error("sim: ipc_open: these %zu bytes are not a handle from tide_sim_ipc_handle", handle_len);
        return TIDE_EINVAL;
    }
    if (h.device == sim->id) {
        tide_backend_error("sim: ipc_open: the handle names a segment of this very device (0x%llx); the CUDA "
                           "driver refuses to open a handle in the process that made it", (unsigned long long)h.addr);
        return TIDE_EINVAL;
    }
    if (!exported_segment_there(&h)) {
        tide_backend_error("sim: ipc_open: the segment the handle names (0x%llx, %llu bytes) is gone: its "
                           "device released it, or was destroyed", (unsigned long long)h.addr,
                           (unsigned long long)h.size);
        return TIDE_EINVAL;
    }
    pthread_mutex_lock(&sim->lock);
    for (size_t i = 0; i < sim->nopenings; i++)
        if (sim->openings[i].device == h.device && sim->openings[i].segment == h.segment) {
            pthread_mutex_unlock(&sim->lock);
            tide_backend_error("sim: ipc_open: the handle of 0x%llx is open on this device already; as with "
                               "the CUDA driver, a handle is opened once until it is closed",
                               (unsigned long long)h.addr);
            return TIDE_EDEVICE;
        }
    if (sim->nopenings == sim->openings_cap) {
        struct sim_opening *grown = grow_table(sim->openings, &sim->openings_cap, sizeof *grown, 8);
        if (!grown) {
            pthread_mutex_unlock(&sim->lock);
            tide_backend_error("sim: ipc_open: out of host memory to track an opening");
            return TIDE_EHOSTMEM;
        }
        sim->openings = grown;
    }
    sim->openings[sim->nopenings++] = (struct sim_opening){h.device, h.segment, (uintptr_t)h.addr};
    pthread_mutex_unlock(&sim->lock);
    *out = (uintptr_t)h.addr;
    return TIDE_OK;
}

static tide_status sim_ipc_close(void *ctx, uintptr_t addr)
{
    tide_sim *sim = ctx;
    if (injected_fault(sim, TIDE_SIM_IPC_CLOSE))
        return TIDE_EDEVICE;
    pthread_mutex_lock(&sim->lock);
    size_t i = 0;
    while (i < sim->nopenings && sim->openings[i].addr != addr)
        i++;
    if (i == sim->nopenings) {
        pthread_mutex_unlock(&sim->lock);
        tide_backend_error("sim: ipc_close of 0x%llx: this device opened no handle there", (unsigned long long)addr);
        return TIDE_EINVAL;
    }
    sim->openings[i] = sim->openings[--sim->nopenings];
    pthread_mutex_unlock(&sim->lock);
    return TIDE_OK;
}

tide_backend tide_sim_backend(tide_sim *sim)
{
    tide_backend b;
    memset(&b, 0, sizeof b);
    b.struct_size = sizeof b;
    b.name = "sim";
    b.ctx = sim;
    b.reserve = sim_reserve;
    b.release = sim_release;
    b.fence_create = sim_fence_create;
    b.fence_record = sim_fence_record;
    b.fence_query = sim_fence_query;
    b.fence_wait = sim_fence_wait;
    b.fence_destroy = sim_fence_destroy;
    b.synchronize = sim_synchronize;
    b.mem_info = sim_mem_info;
    b.fill = sim_fill;
    b.verify = sim_verify;
    b.page_size = SIM_PAGE_SIZE;
    b.va_reserve = sim_va_reserve;
    b.va_release = sim_va_release;
    b.map = sim_map;
    b.unmap = sim_unmap;
    b.host_alloc = sim_host_alloc;
    b.host_free = sim_host_free;
    b.copy_to_host = sim_copy_to_host;
    b.copy_to_device = sim_copy_to_device;
    b.ipc_open = sim_ipc_open;
    b.ipc_close = sim_ipc_close;
    return b;
}

/* ---- the device ---------------------------------------------------------------------------------------- */

tide_status tide_sim_create(const tide_sim_options *opts, tide_sim **out)
{
    if (!out)
        return tide__fail(TIDE_EINVAL, "tide_sim_create: out is NULL");
    *out = NULL;
    tide_sim_options o = {sizeof o, 80 * GiB, 1024, 0};
    if (opts) {
        /* same_addresses came later: a caller built before it passes the smaller size */
        if (opts->struct_size < offsetof(tide_sim_options, same_addresses))
            return tide__fail(TIDE_EINVAL, "tide_sim_create: set opts->struct_size = "
                              "sizeof(tide_sim_options)");
        if (opts->total_bytes)
            o.total_bytes = opts->total_bytes;
        if (opts->queue_depth)
            o.queue_depth = opts->queue_depth;
        if (opts->struct_size >= offsetof(tide_sim_options, same_addresses) + sizeof o.same_addresses)
            o.same_addresses = opts->same_addresses;
    }
    tide_sim *sim = calloc(1, sizeof *sim);
    if (!sim || !(sim->streams = calloc(4, sizeof *sim->streams))) {
        free(sim);
        return tide__fail(TIDE_EHOSTMEM, "tide_sim_create: out of host memory");
    }
    pthread_mutex_init(&sim->lock, NULL);
    sim->total = o.total_bytes;
    sim->queue_depth = o.queue_depth;
    sim->same_addresses = o.same_addresses != 0;
    sim->streams_cap = 4;
    sim->forks = forks_now();
    sim->pid = (int)getpid();
    tide_status s = stream_start(sim, &sim->streams[0]);
    if (s != TIDE_OK) {
        free(sim->streams);
        pthread_mutex_destroy(&sim->lock);
        free(sim);
        return s;
    }
    sim->nstreams = 1;
    pthread_mutex_lock(&devices_lock);
    sim->id = ++device_ids;
    sim->next_device = devices;
    devices = sim;
    pthread_mutex_unlock(&devices_lock);
    *out = sim;
    return TIDE_OK;
}

void tide_sim_destroy(tide_sim *sim)
{
    /* A child's copy: its threads are the parent's, not here to join, so it is left as it is, for the
     * child's exit to reclaim. */
    if (!sim || forked(sim))
        return;
    pthread_mutex_lock(&devices_lock);
    for (tide_sim **p = &devices; *p; p = &(*p)->next_device)
        if (*p == sim) {
            *p = sim->next_device;
            break;
        }
    pthread_mutex_unlock(&devices_lock);
    tide_sim_synchronize(sim);
    for (uint32_t i = 0; i < sim->nstreams; i++)
        stream_stop(sim->streams[i]);
    for (size_t i = 0; i < sim->nsegments; i++)
        host_unmap(sim, sim->segments[i].addr, sim->segments[i].size);
    free(sim->segments);
    for (size_t i = 0; i < sim->nvranges; i++) {
        host_unmap(sim, sim->vranges[i].addr, sim->vranges[i].size);
        free(sim->vranges[i].page_ids);
    }
    free(sim->vranges);
    free(sim->openings);
    free(sim->streams);
    pthread_mutex_destroy(&sim->lock);
    free(sim);
}

/*
 * The replay engine: runs a trace's allocations and frees through tidepool on a simulated device and
 * measures what a user wants to know: peak live against peak reserved, device calls, pending frees
 * drained, time per operation, and whether tide_empty_cache gives everything back.
 */
#include "replay.h"

#include "tidepool.h"

#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

/* A simulated kernel that uses one allocation. Whichever comes second, the kernel's completion or the
 * host's free, knows whether the device held the block past its free. */
enum { KERNEL_DONE = 1, HOST_FREED = 2 };
struct kernel {
    tide_allocator *t;
    void *ptr;
    uint64_t size;
    _Atomic(int) state;
    _Atomic(uint64_t) *held;      /* bytes freed by the host but still used by kernels */
};

/* A simulated kernel's completion: it lets go of the block it used. */
static void kernel_done(void *arg)
{
    struct kernel *k = arg;
    tide_release(k->t, k->ptr);
    if (atomic_fetch_or(&k->state, KERNEL_DONE) & HOST_FREED)
        atomic_fetch_sub(k->held, k->size);
}

static double seconds_now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

struct run {
    const struct trace *trace;
    const struct replay_options *o;
    struct replay_result *r;
    tide_sim *sim;
    tide_allocator *t;
    tide_stream *streams;
    void **ptrs;                  /* by dense id; NULL when not live */
    struct kernel *kernels;       /* by dense id */
    uint64_t *sizes;              /* by dense id */
    struct kernel **lagging;      /* REPLAY_WORK_LAG: the kernels still running, a ring of `lag` */
    uint32_t lag;
    uint64_t lag_next;
    uint64_t live;
    uint64_t trace_empty_caches;  /* the trace's own `e` operations done so far */
    _Atomic(uint64_t) held;
    tide_backend inner;           /* record_calls: the simulated device's backend, behind recording_backend */
    char *err;
    size_t errcap;
};

static int failed(struct run *x, const char *what)
{
    snprintf(x->err, x->errcap, "%s: %s", what, tide_last_error());
    return -1;
}

static uint64_t reserved_now(tide_allocator *t, tide_stats *s)
{
    s->struct_size = sizeof *s;
    tide_get_stats(t, s);
    return (uint64_t)s->reserved_bytes[TIDE_POOL_ALL].current;
}

static void sample(struct run *x, uint64_t op_index)
{
    struct replay_result *r = x->r;
    tide_stats s;
    if (r->timeline_n > x->o->timeline_points) /* room for one sample more: the end */
        return;
    r->timeline_live[r->timeline_n] = x->live;
    r->timeline_reserved[r->timeline_n] = reserved_now(x->t, &s);
    r->timeline_op[r->timeline_n] = op_index;
    r->timeline_n++;
}

/* tide_empty_cache where the trace, --empty-cache-every or the end of the run says; what it left
 * reserved is a floor. Its report goes to *out if asked for. */
static int empty_cache_now(struct run *x, tide_release_report *out)
{
    tide_release_report rep;
    if (tide_empty_cache(x->t, &rep) != TIDE_OK)
        return failed(x, "tide_empty_cache");
    if (x->r->empty_cache_calls < REPLAY_FLOORS)
        x->r->floors[x->r->empty_cache_calls] = rep.reserved_bytes;
    x->r->empty_cache_calls++;
    if (out)
        *out = rep;
    return 0;
}

static int do_op(struct run *x, const struct trace_op *op)
{
    tide_stream stream = x->streams[op->stream];
    if (op->kind == TRACE_EMPTY_CACHE) {
        int rc = empty_cache_now(x, NULL);
        x->trace_empty_caches++;
        return rc;
    }
    if (op->kind == TRACE_ALLOC) {
        void *p;
        if (tide_malloc(x->t, op->size, stream, &p) != TIDE_OK)
            return failed(x, "tide_malloc");
        x->ptrs[op->id] = p;
        x->live += op->size;
        if (x->live > x->r->peak_live_bytes)
            x->r->peak_live_bytes = x->live;
        x->r->allocs++;
        if (x->o->work != REPLAY_WORK_NONE) {
            struct kernel *k = &x->kernels[op->id];
            k->t = x->t;
            k->ptr = p;
            k->size = op->size;
            k->held = &x->held;
            atomic_store(&k->state, 0);
            if (tide_retain(x->t, p) != TIDE_OK)
                return failed(x, "tide_retain");
            if (x->o->work == REPLAY_WORK_REFS) {
                if (tide_sim_enqueue(x->sim, stream, x->o->kernel_delay_us, kernel_done, k) != TIDE_OK)
                    return failed(x, "tide_sim_enqueue");
            } else {
                /* The kernel launched `lag` allocations ago completes now. */
                struct kernel **slot = &x->lagging[x->lag_next++ % x->lag];
                if (*slot)
                    kernel_done(*slot);
                *slot = k;
            }
        }
    } else {
        if (x->o->work != REPLAY_WORK_NONE) {
            struct kernel *k = &x->kernels[op->id];
            if (!(atomic_fetch_or(&k->state, HOST_FREED) & KERNEL_DONE))
                atomic_fetch_add(&x->held, k->size);
        }
        if (tide_free(x->t, x->ptrs[op->id]) != TIDE_OK)
            return failed(x, "tide_free");
        x->ptrs[op->id] = NULL;
        x->live -= x->sizes[op->id]; /* the size the allocation had */
        x->r->frees++;
    }
    uint64_t in_use = x->live + atomic_load(&x->held);
    if (in_use > x->r->peak_in_use_bytes)
        x->r->peak_in_use_bytes = in_use;
    return 0;
}

/* ---- record_calls: the simulated device's memory calls, each with the operation it came in ---------- */

/* The operation under way: every count is raised after its operation, so during one it is that
 * operation's index. */
static uint64_t current_op(const struct run *x)
{
    return x->r->allocs + x->r->frees + x->trace_empty_caches;
}

static void note_call(struct run *x, enum replay_call_kind kind, size_t bytes)
{
    struct replay_result *r = x->r;
    if (r->ncalls == r->calls_cap) {
        size_t cap = r->calls_cap ? 2 * r->calls_cap : 1024;
        struct replay_call *grown = realloc(r->calls, cap * sizeof *grown);
        if (!grown) {
            r->calls_lost = true; /* the replay goes on; whoever reads the log is told it is short */
            return;
        }
        r->calls = grown;
        r->calls_cap = cap;
    }
    r->calls[r->ncalls++] = (struct replay_call){current_op(x), bytes, kind};
}

static tide_status rec_reserve(void *ctx, size_t size, uintptr_t *out)
{
    struct run *x = ctx;
    tide_status s = x->inner.reserve(x->inner.ctx, size, out);
    if (s == TIDE_OK)
        note_call(x, REPLAY_CALL_RESERVE, size);
    return s;
}

static tide_status rec_release(void *ctx, uintptr_t addr, size_t size)
{
    struct run *x = ctx;
    tide_status s = x->inner.release(x->inner.ctx, addr, size);
    if (s == TIDE_OK)
        note_call(x, REPLAY_CALL_RELEASE, size);
    return s;
}

static tide_status rec_map(void *ctx, uintptr_t addr, size_t size)
{
    struct run *x = ctx;
    tide_status s = x->inner.map(x->inner.ctx, addr, size);
    if (s == TIDE_OK)
        note_call(x, REPLAY_CALL_MAP, size);
    return s;
}

static tide_status rec_unmap(void *ctx, uintptr_t addr, size_t size)
{
    struct run *x = ctx;
    tide_status s = x->inner.unmap(x->inner.ctx, addr, size);
    if (s == TIDE_OK)
        note_call(x, REPLAY_CALL_UNMAP, size);
    return s;
}

#define FORWARD(ret, name, params, args)                                                                   \
    static ret fwd_##name params                                                                           \
    {                                                                                                      \
        struct run *x = ctx;                                                                               \
        return x->inner.name args;                                                                         \
    }
FORWARD(tide_status, fence_create, (void *ctx, void **f), (x->inner.ctx, f))
FORWARD(tide_status, fence_record, (void *ctx, void *f, tide_stream s), (x->inner.ctx, f, s))
FORWARD(tide_status, fence_query, (void *ctx, void *f), (x->inner.ctx, f))
FORWARD(tide_status, fence_wait, (void *ctx, void *f), (x->inner.ctx, f))
FORWARD(void, fence_destroy, (void *ctx, void *f), (x->inner.ctx, f))
FORWARD(tide_status, synchronize, (void *ctx), (x->inner.ctx))
FORWARD(tide_status, mem_info, (void *ctx, size_t *fr, size_t *tot), (x->inner.ctx, fr, tot))
FORWARD(tide_status, fill, (void *ctx, uintptr_t a, size_t n, uint8_t v, tide_stream s), (x->inner.ctx, a, n, v, s))
FORWARD(tide_status, verify, (void *ctx, uintptr_t a, size_t n, uint8_t v, tide_stream s, size_t *bad),
        (x->inner.ctx, a, n, v, s, bad))
FORWARD(tide_status, va_reserve, (void *ctx, size_t n, uintptr_t *out), (x->inner.ctx, n, out))
FORWARD(tide_status, va_release, (void *ctx, uintptr_t a, size_t n), (x->inner.ctx, a, n))
#undef FORWARD

/* The simulated device's backend with its memory calls recorded; every other call passed through. */
static tide_backend recording_backend(struct run *x, tide_backend inner)
{
    x->inner = inner;
    tide_backend be = inner;
    be.ctx = x;
    be.reserve = rec_reserve;
    be.release = rec_release;
    be.fence_create = fwd_fence_create;
    be.fence_record = fwd_fence_record;
    be.fence_query = fwd_fence_query;
    be.fence_wait = inner.fence_wait ? fwd_fence_wait : NULL;
    be.fence_destroy = fwd_fence_destroy;
    be.synchronize = fwd_synchronize;
    be.mem_info = fwd_mem_info;
    be.close = NULL; /* the simulated device is destroyed by the replay itself */
    be.fill = inner.fill ? fwd_fill : NULL;
    be.verify = inner.verify ? fwd_verify : NULL;
    be.va_reserve = inner.va_reserve ? fwd_va_reserve : NULL;
    be.va_release = inner.va_release ? fwd_va_release : NULL;
    be.map = inner.map ? rec_map : NULL;
    be.unmap = inner.unmap ? rec_unmap : NULL;
    return be;
}

/* Frees what the trace left live, so that the next pass starts as a fresh run of the program would,
 * after the device finished every kernel. */
static int free_leftovers(struct run *x)
{
    for (uint32_t i = 0; x->lagging && i < x->lag; i++) {
        if (x->lagging[i])
            kernel_done(x->lagging[i]);
        x->lagging[i] = NULL;
    }
    if (x->o->work == REPLAY_WORK_REFS)
        tide_sim_synchronize(x->sim);
    for (size_t i = 0; i < x->trace->nallocs; i++) {
        if (!x->ptrs[i])
            continue;
        if (tide_free(x->t, x->ptrs[i]) != TIDE_OK)
            return failed(x, "tide_free of a leftover allocation");
        x->ptrs[i] = NULL;
    }
    x->live = 0;
    return 0;
}

/* A bar on stderr, redrawn in place: "[=========>          ]  45%". */
static void show_progress(uint64_t done, uint64_t total)
{
    int width = 40, filled = total ? (int)(done * (uint64_t)width / total) : 0;
    char bar[64];
    for (int i = 0; i < width; i++)
        bar[i] = i < filled ? '=' : i == filled ? '>' : ' ';
    bar[width] = '\0';
    fprintf(stderr, "\r[%s] %3d%%", bar, total ? (int)(done * 100 / total) : 100);
    fflush(stderr);
}

/* Not inlined: bench/callgrind_replay.sh counts the instructions of this function alone. */
__attribute__((noinline)) static int replay_passes(struct run *x)
{
    const struct trace *t = x->trace;
    const struct replay_options *o = x->o;
    struct replay_result *r = x->r;
    uint64_t total_ops = (uint64_t)t->nops * r->passes;
    uint64_t sample_every = o->timeline_points ? total_ops / o->timeline_points + 1 : UINT64_MAX;
    uint64_t op_index = 0, next_sample = 0;
    tide_stats s;
    double start = seconds_now();
    /* Countdowns, not divisions: this loop is what the speed benchmarks time. */
    for (unsigned pass = 0; pass < r->passes; pass++) {
        tide_reset_peak_stats(x->t);
        size_t next_empty = o->empty_cache_every ? o->empty_cache_every : SIZE_MAX;
        for (size_t i = 0; i < t->nops; i++, op_index++) {
            if (do_op(x, &t->ops[i]) != 0)
                return -1;
            if (o->check_every_op && tide_check(x->t) != TIDE_OK)
                return failed(x, "tide_check");
            if (op_index == next_sample) {
                sample(x, op_index);
                next_sample += sample_every;
            }
            if ((op_index & 0xFFFF) == 0 && o->progress)
                show_progress(op_index, total_ops);
            /* Counted within the pass, so every pass empties at the same points of the program. */
            if (i + 1 == next_empty) {
                next_empty += o->empty_cache_every;
                if (empty_cache_now(x, NULL) != 0)
                    return -1;
            }
        }
        if (free_leftovers(x) != 0)
            return -1;
        s.struct_size = sizeof s;
        tide_get_stats(x->t, &s);
        r->pass_peak_reserved[pass] = (uint64_t)s.reserved_bytes[TIDE_POOL_ALL].peak;
        r->pass_end_reserved[pass] = (uint64_t)s.reserved_bytes[TIDE_POOL_ALL].current;
        if (pass == 0)
            r->device_allocs_first_pass = s.num_device_alloc;
        if (pass <= 1)
            r->device_allocs_two_passes = s.num_device_alloc;
        if ((uint64_t)s.pending_free_blocks[TIDE_POOL_ALL].peak > r->peak_pending_blocks)
            r->peak_pending_blocks = (uint64_t)s.pending_free_blocks[TIDE_POOL_ALL].peak;
        if (r->pass_peak_reserved[pass] > r->peak_reserved_bytes)
            r->peak_reserved_bytes = r->pass_peak_reserved[pass];
    }
    r->seconds = seconds_now() - start;
    if (o->progress)
        fprintf(stderr, "\r%60s\r", "");
    r->ops = op_index;
    r->ns_per_op = r->ops ? r->seconds * 1e9 / (double)r->ops : 0;
    if (o->timeline_points)
        sample(x, op_index);
    return 0;
}

int replay_run(const struct trace *t, const struct replay_options *o, struct replay_result *r,
               char *err, size_t errcap)
{
    memset(r, 0, sizeof *r);
    struct run x = {.trace = t, .o = o, .r = r, .err = err, .errcap = errcap};
    r->passes = o->passes ? o->passes : 1;
    r->pass_peak_reserved = calloc(r->passes, sizeof *r->pass_peak_reserved);
    r->pass_end_reserved = calloc(r->passes, sizeof *r->pass_end_reserved);
    size_t points = o->timeline_points + 1;
    r->timeline_live = calloc(points, sizeof *r->timeline_live);
    r->timeline_reserved = calloc(points, sizeof *r->timeline_reserved);
    r->timeline_op = calloc(points, sizeof *r->timeline_op);
    x.ptrs = calloc(t->nallocs, sizeof *x.ptrs);
    x.kernels = calloc(t->nallocs, sizeof *x.kernels);
    x.streams = calloc(t->nstreams ? t->nstreams : 1, sizeof *x.streams);
    uint64_t *sizes = x.sizes = calloc(t->nallocs, sizeof *sizes);
    x.lag = o->lag ? o->lag : 64;
    x.lagging = calloc(x.lag, sizeof *x.lagging);
    int rc = -1;
    if (!r->pass_peak_reserved || !r->pass_end_reserved || !r->timeline_live || !r->timeline_reserved ||
        !r->timeline_op || !x.ptrs || !x.kernels || !x.streams || !sizes || !x.lagging) {
        snprintf(err, errcap, "out of host memory for the replay");
        goto out;
    }
    for (size_t i = 0; i < t->nops; i++)
        if (t->ops[i].kind == TRACE_ALLOC)
            sizes[t->ops[i].id] = t->ops[i].size;

    tide_sim_options so = {sizeof so, o->device_bytes, o->queue_depth};
    if (tide_sim_create(&so, &x.sim) != TIDE_OK) {
        failed(&x, "tide_sim_create");
        goto out;
    }
    for (uint32_t i = 1; i < t->nstreams; i++)
        if (tide_sim_stream_create(x.sim, &x.streams[i]) != TIDE_OK) {
            failed(&x, "tide_sim_stream_create");
            goto out;
        }
    tide_backend be = tide_sim_backend(x.sim);
    if (o->record_calls)
        be = recording_backend(&x, be);
    if (tide_create(&be, o->config, &x.t) != TIDE_OK) {
        snprintf(x.err, x.errcap, "%s", tide_last_error()); /* it names tide_create already */
        goto out;
    }
    if (o->history_capacity && tide_history_start(x.t, o->history_capacity, o->history_flags) != TIDE_OK) {
        failed(&x, "tide_history_start");
        goto out;
    }
    if (replay_passes(&x) != 0)
        goto out;
    if (o->at_end && o->at_end(x.t, o->at_end_arg, err, errcap) != 0)
        goto out;

    tide_release_report rep;
    if (empty_cache_now(&x, &rep) != 0)
        goto out;
    tide_stats s = {.struct_size = sizeof s};
    tide_get_stats(x.t, &s);
    tide_sim_counters c;
    tide_sim_get_counters(x.sim, &c);
    r->reserved_after_empty_cache_bytes = (uint64_t)s.reserved_bytes[TIDE_POOL_ALL].current;
    r->backend_held_after_empty_cache_bytes = c.held_bytes;
    r->pending_after_empty_cache_blocks = rep.pending_blocks;
    r->device_allocs = s.num_device_alloc;
    r->device_frees = s.num_device_free;
    r->pending_drained = s.num_pending_drained;
    r->ratio = r->peak_live_bytes ? (double)r->peak_reserved_bytes / (double)r->peak_live_bytes : 0;
    r->ratio_in_use =
        r->peak_in_use_bytes ? (double)r->peak_reserved_bytes / (double)r->peak_in_use_bytes : 0;
    rc = 0;
out:
    if (x.t && tide_destroy(x.t) != TIDE_OK && rc == 0)
        rc = failed(&x, "tide_destroy");
    tide_sim_destroy(x.sim);
    free(sizes);
    free(x.lagging);
    free(x.streams);
    free(x.kernels);
    free(x.ptrs);
    if (rc != 0)
        replay_result_free(r);
    return rc;
}

void replay_result_free(struct replay_result *r)
{
    free(r->pass_peak_reserved);
    free(r->pass_end_reserved);
    free(r->timeline_live);
    free(r->timeline_reserved);
    free(r->timeline_op);
    free(r->calls);
    r->calls = NULL;
    r->ncalls = r->calls_cap = 0;
    r->pass_peak_reserved = r->pass_end_reserved = NULL;
    r->timeline_live = r->timeline_reserved = r->timeline_op = NULL;
    r->timeline_n = 0;
}

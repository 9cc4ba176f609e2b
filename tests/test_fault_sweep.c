/*
 * Fault injection in the style SQLite made famous: for each shipped trace, make the Nth call of one
 * backend function fail, for every N from 1 to the number of calls the replay makes (tide_create and
 * tide_destroy included), and check that tidepool survives each. Every function of the backend table
 * that can fail is swept: reserve, release, fences, synchronize and memory info in every
 * configuration; address ranges and pages with expandable segments; fill and verify with scrub and
 * guard. The promises:
 *   - the call of tidepool's API during which the fault happened returns what the manual promises
 *     (a failed reservation is retried by the out-of-memory ladder, or reported as TIDE_ENOMEM when the
 *     device keeps refusing; fence failures are absorbed by an owed synchronize; a failed synchronize or
 *     release makes tide_empty_cache return TIDE_EDEVICE; a failed fill fails the allocation, a failed
 *     verify still frees the block; a failed address-range reservation is retried smaller; tide_create
 *     and tide_destroy say TIDE_EDEVICE with the device's words, and tide_create leaves nothing);
 *   - tide_check passes, and the device holds exactly the bytes the statistics say are reserved;
 *   - the replay goes on after the fault, and at its end everything is freed and returned: the device
 *     holds no byte and no fence.
 *
 * The device is scripted so that every run makes the same calls in the same order: memory comes from the
 * simulated device, but fences are kept here, and one signals a fixed number of trace operations after
 * it was recorded (a synchronize signals them all). One allocation in USE_EVERY is also used by a second
 * stream (tide_record_stream), so frees record fences and blocks go PENDING.
 *
 * Environment: TIDE_SWEEP_STRIDE=k tries every kth N (default: a stride that tries about
 * FAULTS_PER_MODE values of N for each kind of fault, or TIDE_SWEEP_FAULTS_PER_MODE; 1 tries every N,
 * the full sweep), TIDE_SWEEP_WINDOW=n replays
 * n operations after the fault before ending the run (default 2000; 0: to the end of the trace),
 * TIDE_SWEEP_TRACES=a,b limits the traces (names without .csv.gz).
 */
#include "harness.h"
#include "trace.h"

#include <stdbool.h>

#define USE_EVERY 8          /* one allocation in 8 is also used by the second stream */
#define FENCE_LAG 6          /* a fence signals this many trace operations after it was recorded */
#define EMPTY_CACHE_EVERY 5000
#define SECOND_STREAM ((tide_stream)7)
#define NEAR_CALLS 4096      /* no API call makes more device calls of one kind than this here */
#define FAULTS_PER_MODE 100  /* by default, each kind of fault is tried at this many N, evenly spread */

enum op { OP_RESERVE, OP_RELEASE, OP_FENCE_CREATE, OP_FENCE_RECORD, OP_FENCE_QUERY, OP_SYNCHRONIZE, OP_MAP,
          OP_UNMAP, OP_MEM_INFO, OP_FILL, OP_VERIFY, OP_VA_RESERVE, OP_VA_RELEASE, OP_COUNT };
static const char *const op_names[OP_COUNT] = {"reserve", "release", "fence_create", "fence_record",
                                               "fence_query", "synchronize", "map", "unmap", "mem_info",
                                               "fill", "verify", "va_reserve", "va_release"};

/* ---- the scripted device ------------------------------------------------------------------------------ */

struct fence {
    uint64_t recorded_at; /* UINT64_MAX: never recorded */
};

struct scripted {
    tide_sim *sim;
    tide_backend memory;  /* the simulated device, for reserve and release */
    uint64_t clock;       /* trace operations so far */
    uint64_t synced_at;   /* fences recorded at or before this have signalled */
    uint64_t calls[OP_COUNT];
    uint64_t live_fences;
    /* the fault plan: the fail_at-th call of fail_op fails, and if persistent every one after it */
    int fail_op;
    uint64_t fail_at;
    bool persistent;
    tide_status fail_status;
    uint64_t failures;
    /* what the device refused to take back, which it still holds (cleaned up after tide_destroy) */
    struct refusal {
        enum op op;
        uintptr_t addr;
        size_t size;
    } refused[16];
    int nrefused;
};

static tide_status maybe_fail(struct scripted *d, enum op op)
{
    uint64_t n = ++d->calls[op];
    if ((int)op == d->fail_op && (n == d->fail_at || (d->persistent && n > d->fail_at))) {
        d->failures++;
        tide_backend_error("scripted fault in %s (call %llu)", op_names[op], (unsigned long long)n);
        return d->fail_status;
    }
    return TIDE_OK;
}

/* A refused release, unmap or address-range release: the device still holds it. */
static tide_status refusing(struct scripted *d, enum op op, uintptr_t addr, size_t size)
{
    tide_status s = maybe_fail(d, op);
    if (s != TIDE_OK && d->nrefused < (int)(sizeof d->refused / sizeof d->refused[0]))
        d->refused[d->nrefused++] = (struct refusal){op, addr, size};
    return s;
}

static tide_status sd_reserve(void *ctx, size_t size, uintptr_t *out)
{
    struct scripted *d = ctx;
    tide_status s = maybe_fail(d, OP_RESERVE);
    return s != TIDE_OK ? s : d->memory.reserve(d->memory.ctx, size, out);
}

static tide_status sd_release(void *ctx, uintptr_t addr, size_t size)
{
    struct scripted *d = ctx;
    tide_status s = refusing(d, OP_RELEASE, addr, size);
    return s != TIDE_OK ? s : d->memory.release(d->memory.ctx, addr, size);
}

/* Expandable segments: pages and address ranges. */
static tide_status sd_map(void *ctx, uintptr_t addr, size_t size)
{
    struct scripted *d = ctx;
    tide_status s = maybe_fail(d, OP_MAP);
    return s != TIDE_OK ? s : d->memory.map(d->memory.ctx, addr, size);
}

static tide_status sd_unmap(void *ctx, uintptr_t addr, size_t size)
{
    struct scripted *d = ctx;
    tide_status s = refusing(d, OP_UNMAP, addr, size);
    return s != TIDE_OK ? s : d->memory.unmap(d->memory.ctx, addr, size);
}

static tide_status sd_va_reserve(void *ctx, size_t size, uintptr_t *out)
{
    struct scripted *d = ctx;
    tide_status s = maybe_fail(d, OP_VA_RESERVE);
    return s != TIDE_OK ? s : d->memory.va_reserve(d->memory.ctx, size, out);
}

static tide_status sd_va_release(void *ctx, uintptr_t addr, size_t size)
{
    struct scripted *d = ctx;
    tide_status s = refusing(d, OP_VA_RELEASE, addr, size);
    return s != TIDE_OK ? s : d->memory.va_release(d->memory.ctx, addr, size);
}

/* Scrub and guard: the device writing and checking bytes. */
static tide_status sd_fill(void *ctx, uintptr_t addr, size_t size, uint8_t value, tide_stream stream)
{
    struct scripted *d = ctx;
    tide_status s = maybe_fail(d, OP_FILL);
    return s != TIDE_OK ? s : d->memory.fill(d->memory.ctx, addr, size, value, stream);
}

static tide_status sd_verify(void *ctx, uintptr_t addr, size_t size, uint8_t value, tide_stream stream,
                             size_t *bad)
{
    struct scripted *d = ctx;
    tide_status s = maybe_fail(d, OP_VERIFY);
    return s != TIDE_OK ? s : d->memory.verify(d->memory.ctx, addr, size, value, stream, bad);
}

static tide_status sd_fence_create(void *ctx, void **out)
{
    struct scripted *d = ctx;
    tide_status s = maybe_fail(d, OP_FENCE_CREATE);
    if (s != TIDE_OK)
        return s;
    struct fence *f = malloc(sizeof *f);
    if (!f)
        return TIDE_EHOSTMEM;
    f->recorded_at = UINT64_MAX;
    d->live_fences++;
    *out = f;
    return TIDE_OK;
}

static tide_status sd_fence_record(void *ctx, void *fence, tide_stream stream)
{
    (void)stream;
    struct scripted *d = ctx;
    tide_status s = maybe_fail(d, OP_FENCE_RECORD);
    if (s == TIDE_OK)
        ((struct fence *)fence)->recorded_at = d->clock;
    return s;
}

static tide_status sd_fence_query(void *ctx, void *fence)
{
    struct scripted *d = ctx;
    tide_status s = maybe_fail(d, OP_FENCE_QUERY);
    if (s != TIDE_OK)
        return s;
    const struct fence *f = fence;
    bool signalled = f->recorded_at + FENCE_LAG <= d->clock ||
                     (d->synced_at != UINT64_MAX && f->recorded_at <= d->synced_at);
    return signalled ? TIDE_OK : TIDE_ENOTREADY;
}

static void sd_fence_destroy(void *ctx, void *fence)
{
    struct scripted *d = ctx;
    d->live_fences--;
    free(fence);
}

static tide_status sd_synchronize(void *ctx)
{
    struct scripted *d = ctx;
    tide_status s = maybe_fail(d, OP_SYNCHRONIZE);
    if (s == TIDE_OK)
        d->synced_at = d->clock;
    return s;
}

static tide_status sd_mem_info(void *ctx, size_t *free_bytes, size_t *total_bytes)
{
    struct scripted *d = ctx;
    tide_status s = maybe_fail(d, OP_MEM_INFO);
    return s != TIDE_OK ? s : d->memory.mem_info(d->memory.ctx, free_bytes, total_bytes);
}

static tide_backend scripted_backend(struct scripted *d)
{
    tide_backend be = {sizeof be, "scripted", d, sd_reserve, sd_release, sd_fence_create, sd_fence_record,
                       sd_fence_query, NULL, sd_fence_destroy, sd_synchronize, sd_mem_info, NULL};
    be.page_size = d->memory.page_size;
    be.va_reserve = sd_va_reserve;
    be.va_release = sd_va_release;
    be.map = sd_map;
    be.unmap = sd_unmap;
    be.fill = sd_fill;
    be.verify = sd_verify;
    return be;
}

/* ---- one replay with one fault ----------------------------------------------------------------------- */

struct run {
    const struct trace *trace;
    const char *name;
    const char *config;   /* "" or expandable_segments:True */
    int fail_op;          /* -1: none */
    uint64_t fail_at;
    bool persistent;
    tide_status fail_status; /* what the failing call returns */
    uint64_t window;      /* operations replayed after the fault (0: to the end) */
    uint64_t calls[OP_COUNT]; /* out: calls the run made */
    bool faulted;         /* out: the fault happened */
};

static int run_failed(struct run *r, const char *api, const char *what)
{
    fprintf(stderr, "%s, %s call %llu%s, during %s: %s (last error: %s)\n", r->name,
            r->fail_op >= 0 ? op_names[r->fail_op] : "no fault", (unsigned long long)r->fail_at,
            r->persistent ? " and after" : "", api, what, tide_last_error());
    harness_failures++;
    return -1;
}

/* What the device holds is what tidepool says it reserved, and every invariant holds. */
static int check_accounts(struct run *r, struct scripted *d, tide_allocator *t, const char *api)
{
    if (tide_check(t) != TIDE_OK)
        return run_failed(r, api, "tide_check failed");
    tide_sim_counters c;
    tide_sim_get_counters(d->sim, &c);
    if ((int64_t)c.held_bytes != reserved_of(t))
        return run_failed(r, api, "the device holds a different amount than tidepool reserved");
    return 0;
}

/* The API call during which the fault happened returned what the manual promises. */
static int check_fault_answer(struct run *r, const char *api, tide_status s, const tide_stats *before,
                              const tide_stats *after)
{
    bool words = strstr(tide_last_error(), "scripted fault") != NULL;
    bool malloc_call = !strcmp(api, "tide_malloc"), empty_cache_call = !strcmp(api, "tide_empty_cache");
    switch (r->fail_op) {
    case OP_RESERVE: case OP_MAP:
        if (r->fail_status == TIDE_EDEVICE) /* not a shortage: no ladder, the device's words */
            return s == TIDE_EDEVICE && words ? 0 : run_failed(r, api, "expected TIDE_EDEVICE");
        if (r->persistent) /* refused with the report, or served from memory the ladder freed up */
            return (s == TIDE_ENOMEM && strstr(tide_last_error(), "out of memory")) ||
                   (s == TIDE_OK && after->reserved_bytes[TIDE_POOL_ALL].current <=
                                    before->reserved_bytes[TIDE_POOL_ALL].current)
                       ? 0 : run_failed(r, api, "expected TIDE_ENOMEM with the report");
        /* served: by a smaller segment (a large request may do with one of its own size), or by the
         * ladder's retry */
        return s == TIDE_OK && after->num_alloc_retries <= before->num_alloc_retries + 1
                   ? 0 : run_failed(r, api, "expected the request to be served after a retry");
    case OP_FENCE_CREATE: case OP_FENCE_RECORD: case OP_FENCE_QUERY:
        /* absorbed: the block waits for a synchronize instead */
        return s == TIDE_OK && after->num_fence_errors == before->num_fence_errors + 1
                   ? 0 : run_failed(r, api, "expected the fence error to be absorbed and counted");
    case OP_VA_RESERVE:
        if (r->fail_status == TIDE_EDEVICE)
            return s == TIDE_EDEVICE && words ? 0 : run_failed(r, api, "expected TIDE_EDEVICE");
        if (r->persistent) /* no smaller range either: a device error, not a shortage the ladder fixes */
            return s == TIDE_EDEVICE && strstr(tide_last_error(), "address range")
                       ? 0 : run_failed(r, api, "expected TIDE_EDEVICE naming the address range");
        return s == TIDE_OK ? 0 : run_failed(r, api, "expected a smaller address range to serve");
    case OP_FILL: /* the block goes back to the cache and the allocation fails */
        return malloc_call && s == TIDE_EDEVICE && words &&
                       after->allocation[TIDE_POOL_ALL].current == before->allocation[TIDE_POOL_ALL].current
                   ? 0 : run_failed(r, api, "expected tide_malloc to fail with the device's words, "
                                    "allocating nothing");
    case OP_VERIFY: /* the guard could not be checked; the block is freed all the same */
        return !malloc_call && !empty_cache_call && s == TIDE_EDEVICE && words &&
                       after->allocation[TIDE_POOL_ALL].current == before->allocation[TIDE_POOL_ALL].current - 1
                   ? 0 : run_failed(r, api, "expected tide_free to free the block and say the device's "
                                    "words");
    case OP_RELEASE: case OP_UNMAP: case OP_SYNCHRONIZE:
        if (empty_cache_call)
            return s == TIDE_EDEVICE && words ? 0 : run_failed(r, api, "expected TIDE_EDEVICE with the "
                                                               "device's words");
        if (malloc_call) /* while making room: the request is still served */
            return s == TIDE_OK ? 0 : run_failed(r, api, "expected the request to be served");
        break;
    }
    return run_failed(r, api, "this call should not have used the device");
}

/* A replay in progress. */
struct replay {
    struct run *r;
    struct scripted d;
    tide_allocator *t;
    void **ptrs;           /* by allocation id */
    uint64_t faulted_at;   /* the trace operation during which the fault happened */
    int result;            /* 0, or -1 once a check failed */
};

enum step_kind { STEP_EMPTY_CACHE, STEP_MALLOC, STEP_FREE };

/* One call of tidepool's API, checked: outside the fault it must succeed; during it, it must answer
 * as the manual says, and leave the allocator valid and its accounts equal to the device's. */
static void step(struct replay *p, enum step_kind kind, uint32_t id, uint64_t size, uint64_t at)
{
    if (p->result)
        return;
    struct run *r = p->r;
    uint64_t failures = p->d.failures;
    /* The statistics before the step, for judging the fault's answer: read only when the fault is
     * near, since reading them on every step would cost most of the sweep's time. */
    bool near = !r->faulted && r->fail_op >= 0 && p->d.calls[r->fail_op] + NEAR_CALLS >= r->fail_at;
    tide_stats before;
    if (near)
        before = stats_of(p->t);
    const char *api;
    tide_status s;
    if (kind == STEP_EMPTY_CACHE) {
        api = "tide_empty_cache";
        s = tide_empty_cache(p->t, NULL);
    } else if (kind == STEP_MALLOC) {
        api = "tide_malloc";
        s = tide_malloc(p->t, size, 0, &p->ptrs[id]);
        if (s == TIDE_OK && id % USE_EVERY == 0)
            s = tide_record_stream(p->t, p->ptrs[id], SECOND_STREAM);
    } else {
        api = "tide_free";
        s = tide_free(p->t, p->ptrs[id]);
        p->ptrs[id] = NULL;
    }
    if (p->d.failures == failures || r->faulted) {
        if (s != TIDE_OK)
            p->result = run_failed(r, api, "failed outside the fault");
        return;
    }
    r->faulted = true;
    p->faulted_at = at;
    if (!near) {
        p->result = run_failed(r, api, "one call made more than NEAR_CALLS calls of the device: raise it");
        return;
    }
    tide_stats after = stats_of(p->t);
    p->result = check_fault_answer(r, api, s, &before, &after);
    if (p->result == 0)
        p->result = check_accounts(r, &p->d, p->t, api);
    p->d.fail_op = -1; /* the device recovers, and the program tries again (a free is done already) */
    if (p->result == 0 && s != TIDE_OK && kind != STEP_FREE)
        step(p, kind, id, size, at);
}

/* tide_create: a fault in it (the device's memory info) fails it with the device's words, leaving
 * nothing on the device; the device recovers and the program creates again. */
static int create_with_fault(struct replay *p, const tide_backend *be)
{
    struct run *r = p->r;
    uint64_t failures = p->d.failures;
    tide_status s = tide_create(be, r->config, &p->t);
    if (p->d.failures == failures)
        return s == TIDE_OK ? 0 : run_failed(r, "tide_create", "failed outside the fault");
    r->faulted = true;
    tide_sim_counters c;
    tide_sim_get_counters(p->d.sim, &c);
    if (s != TIDE_EDEVICE || !strstr(tide_last_error(), "scripted fault") || p->t || c.held_bytes ||
        p->d.live_fences)
        return run_failed(r, "tide_create", "expected TIDE_EDEVICE with the device's words, and nothing "
                          "created");
    p->d.fail_op = -1;
    s = tide_create(be, r->config, &p->t);
    return s == TIDE_OK ? 0 : run_failed(r, "tide_create", "failed after the device recovered");
}

/* tide_destroy: with no fault it ends clean; with one, it says TIDE_EDEVICE with the device's words.
 * Either way no fence is left, and whatever the device refused to take back is the one thing it
 * still holds: given back here, so the next run starts on an empty device. */
static void destroy_with_fault(struct replay *p)
{
    struct run *r = p->r;
    uint64_t failures = p->d.failures;
    p->d.nrefused = 0;
    tide_status s = tide_destroy(p->t);
    bool faulted = p->d.failures != failures && !r->faulted;
    if (faulted)
        r->faulted = true;
    if (!faulted && s != TIDE_OK && !p->result)
        p->result = run_failed(r, "tide_destroy", "did not end clean");
    if (faulted && !p->result && (s != TIDE_EDEVICE || !strstr(tide_last_error(), "scripted fault")))
        p->result = run_failed(r, "tide_destroy", "expected TIDE_EDEVICE with the device's words");
    if (p->d.live_fences != 0 && !p->result)
        p->result = run_failed(r, "tide_destroy", "fences left on the device");
    for (int i = 0; i < p->d.nrefused; i++) {
        const struct refusal *f = &p->d.refused[i];
        const tide_backend *m = &p->d.memory;
        if (f->op == OP_RELEASE)
            m->release(m->ctx, f->addr, f->size);
        else if (f->op == OP_UNMAP)
            m->unmap(m->ctx, f->addr, f->size);
        else
            m->va_release(m->ctx, f->addr, f->size);
    }
    tide_sim_counters c;
    tide_sim_get_counters(p->d.sim, &c);
    if (c.held_bytes && !p->result)
        p->result = run_failed(r, "tide_destroy", "the device still holds memory tidepool did not say");
}

static int replay_with_fault(struct run *r, tide_sim *sim)
{
    struct replay p = {r, {0}, NULL, NULL, 0, 0};
    p.d.sim = sim;
    p.d.memory = tide_sim_backend(sim);
    p.d.synced_at = UINT64_MAX;
    p.d.fail_op = r->fail_op;
    p.d.fail_at = r->fail_at;
    p.d.persistent = r->persistent;
    p.d.fail_status = r->fail_status;
    tide_backend be = scripted_backend(&p.d);
    if (create_with_fault(&p, &be) != 0)
        return -1;

    const struct trace *tr = r->trace;
    p.ptrs = calloc(tr->nallocs, sizeof *p.ptrs);
    for (size_t i = 0; i < tr->nops && !p.result; i++, p.d.clock++) {
        if (r->window && r->faulted && i > p.faulted_at + r->window)
            break;
        const struct trace_op *op = &tr->ops[i];
        if (i && i % EMPTY_CACHE_EVERY == 0)
            step(&p, STEP_EMPTY_CACHE, 0, 0, i);
        step(&p, op->kind == TRACE_ALLOC ? STEP_MALLOC : STEP_FREE, op->id, op->size, i);
    }
    /* The end, under the same checks: free what is live, give everything back. */
    for (uint32_t id = 0; id < tr->nallocs; id++)
        if (p.ptrs[id])
            step(&p, STEP_FREE, id, 0, tr->nops);
    step(&p, STEP_EMPTY_CACHE, 0, 0, tr->nops);
    free(p.ptrs);
    tide_stats s = stats_of(p.t);
    if (!p.result && (s.reserved_bytes[TIDE_POOL_ALL].current || s.pending_free_blocks[TIDE_POOL_ALL].current))
        p.result = run_failed(r, "tide_empty_cache", "memory left reserved or pending at the end");
    if (!p.result)
        p.result = check_accounts(r, &p.d, p.t, "the end");
    destroy_with_fault(&p);
    memcpy(r->calls, p.d.calls, sizeof r->calls);
    p.d.fail_op = -1;
    return p.result;
}

/* ---- the sweep --------------------------------------------------------------------------------------- */

static unsigned long env_number(const char *name, unsigned long fallback)
{
    const char *v = getenv(name);
    return v && *v ? strtoul(v, NULL, 10) : fallback;
}

/* The faults tried: the Nth call fails once, or every call from the Nth on until the API call it
 * happened in returns; a reservation fails as the device being out of memory or as a device error. */
struct mode {
    enum op op;
    bool persistent;
    tide_status status;
};
static const struct mode modes[] = {
    {OP_RESERVE, false, TIDE_ENOMEM},       {OP_RESERVE, true, TIDE_ENOMEM},
    {OP_RESERVE, false, TIDE_EDEVICE},      {OP_RELEASE, false, TIDE_EDEVICE},
    {OP_FENCE_CREATE, false, TIDE_EDEVICE}, {OP_FENCE_RECORD, false, TIDE_EDEVICE},
    {OP_FENCE_QUERY, false, TIDE_EDEVICE},  {OP_SYNCHRONIZE, false, TIDE_EDEVICE},
    {OP_SYNCHRONIZE, true, TIDE_EDEVICE},
    /* expandable segments: pages instead of reservations */
    {OP_MAP, false, TIDE_ENOMEM},           {OP_MAP, true, TIDE_ENOMEM},
    {OP_MAP, false, TIDE_EDEVICE},          {OP_UNMAP, false, TIDE_EDEVICE},
    {OP_VA_RESERVE, false, TIDE_ENOMEM},    {OP_VA_RESERVE, true, TIDE_ENOMEM},
    {OP_VA_RESERVE, false, TIDE_EDEVICE},   {OP_VA_RELEASE, false, TIDE_EDEVICE},
    /* every configuration: tide_create asks the device's size */
    {OP_MEM_INFO, false, TIDE_EDEVICE},
    /* scrub and guard */
    {OP_FILL, false, TIDE_EDEVICE},         {OP_VERIFY, false, TIDE_EDEVICE},
};
static unsigned long total_runs, total_survived;

/* The configurations swept. Guard only for the calls it adds (fill, verify; scrub fills as guard
 * does), on one trace: those calls are the same on every trace, and each waits for the simulated
 * stream, which makes a guarded replay slow. */
struct sweep_config {
    const char *label, *config;
    bool only_fill_and_verify;
    const char *only_trace; /* NULL: every trace */
};
static const struct sweep_config configs[] = {
    {"default", "", false, NULL},
    {"expandable", "expandable_segments:True", false, NULL},
    {"guard", "guard:True", true, "lstm_loop"},
};

static void sweep_trace(const char *name, tide_sim *sim, const struct sweep_config *sc)
{
    const char *config = sc->config;
    char path[512], err[512];
    snprintf(path, sizeof path, "%s/%s.csv.gz", TIDE_TRACES_DIR, name);
    struct trace tr;
    if (trace_load(path, &tr, err, sizeof err) != 0) {
        fprintf(stderr, "%s\n", err);
        harness_failures++;
        return;
    }
    unsigned long stride_asked = env_number("TIDE_SWEEP_STRIDE", 0);
    uint64_t window = env_number("TIDE_SWEEP_WINDOW", 2000);
    struct run clean = {&tr, name, config, -1, 0, false, TIDE_OK, 0, {0}, false};
    if (replay_with_fault(&clean, sim) != 0) {
        trace_free(&tr);
        return;
    }
    for (size_t m = 0; m < sizeof modes / sizeof *modes; m++) {
        const struct mode *mode = &modes[m];
        if (clean.calls[mode->op] == 0)
            continue; /* not a call this configuration makes (map and unmap are expandable segments') */
        if (sc->only_fill_and_verify && mode->op != OP_FILL && mode->op != OP_VERIFY)
            continue;
        unsigned long runs = 0, survived = 0;
        int failed_before = harness_failures;
        uint64_t per_mode = env_number("TIDE_SWEEP_FAULTS_PER_MODE", FAULTS_PER_MODE);
        uint64_t stride = stride_asked ? stride_asked : (clean.calls[mode->op] + per_mode - 1) / (per_mode ? per_mode : 1);
        if (stride == 0)
            stride = 1;
        for (uint64_t n = 1; n <= clean.calls[mode->op]; n += stride) {
            struct run r = {&tr, name, config, mode->op, n, mode->persistent, mode->status, window, {0}, false};
            int failures = harness_failures;
            replay_with_fault(&r, sim);
            runs++;
            if (!r.faulted) {
                fprintf(stderr, "%s: %s call %llu never happened: the replay is not repeatable\n",
                        name, op_names[mode->op], (unsigned long long)n);
                harness_failures++;
            }
            survived += harness_failures == failures;
            if (harness_failures > failed_before + 5)
                break; /* enough to go on */
        }
        fprintf(stderr, "%-17s %-11s %-12s %-10s %-11s %6llu calls, %6lu faults injected, %6lu survived\n",
                name, sc->label, op_names[mode->op], mode->persistent ? "persistent" : "once",
                tide_status_name(mode->status), (unsigned long long)clean.calls[mode->op], runs, survived);
        total_runs += runs;
        total_survived += survived;
    }
    trace_free(&tr);
}

static void test_fault_sweep(void)
{
    tide_sim *sim;
    tide_sim_options o = {sizeof o, 0, 0};
    if (tide_sim_create(&o, &sim) != TIDE_OK)
        exit(2);
    const char *only = getenv("TIDE_SWEEP_TRACES");
    const char *traces[] = {"lstm_loop", "seed_transformer", "gpt2_varlen"};
    for (size_t i = 0; i < sizeof traces / sizeof *traces; i++)
        if (!only || strstr(only, traces[i])) {
            for (size_t c = 0; c < sizeof configs / sizeof *configs; c++)
                if (!configs[c].only_trace || !strcmp(configs[c].only_trace, traces[i]))
                    sweep_trace(traces[i], sim, &configs[c]);
        }
    tide_sim_destroy(sim);
    fprintf(stderr, "%lu faults injected, %lu survived\n", total_runs, total_survived);
}

/* ---- sleep and wake ------------------------------------------------------------------------------------ */
/*
 * A scenario of sleeping pools on the simulated device: two sleepable pools (one offloaded, one
 * discarded) with blocks of several sizes, the other phase's allocations outside them between sleep and
 * wake, two cycles. For each backend call the scenario makes, the Nth call fails, for every N: each
 * API call that met the fault says so (or absorbed it: a map out of memory is retried after a release),
 * tide_check passes and the device holds what the statistics say is reserved after every call, the
 * failed call made again finishes, the offloaded pool's contents are whole after its wake, and at the
 * end the device and the host hold nothing.
 */
#define SLEEP_BLOCKS 5
static const size_t sleep_sizes[SLEEP_BLOCKS] = {4096, 3 * MIB, 1536 * 1024, 6 * MIB, 700 * 1024};

struct sleep_run {
    tide_sim *sim;
    tide_allocator *t;
    int problems;
};

static void sleep_expect(struct sleep_run *r, bool ok, const char *what)
{
    if (!ok) {
        fprintf(stderr, "  sleep sweep: %s (last error: %s)\n", what, tide_last_error());
        r->problems++;
    }
}

static void sleep_accounts(struct sleep_run *r, const char *after)
{
    tide_sim_counters c;
    tide_sim_get_counters(r->sim, &c);
    char what[96];
    snprintf(what, sizeof what, "tide_check after %s", after);
    sleep_expect(r, tide_check(r->t) == TIDE_OK, what);
    snprintf(what, sizeof what, "the device holds what is reserved after %s", after);
    sleep_expect(r, (int64_t)c.held_bytes == reserved_of(r->t), what);
}

/* Calls f until it succeeds (at most 3 times: a fault fails one call), checking the state after each
 * failure; returns how many calls failed. */
#define UNTIL_OK(r, call, name)                                                                    \
    do {                                                                                           \
        for (int try_ = 0; try_ < 3; try_++) {                                                     \
            tide_status s_ = (call);                                                               \
            sleep_accounts((r), (name));                                                           \
            if (s_ == TIDE_OK)                                                                     \
                break;                                                                             \
            sleep_expect((r), s_ == TIDE_EDEVICE || s_ == TIDE_ENOMEM || s_ == TIDE_EHOSTMEM ||    \
                                  s_ == TIDE_EINVAL, "a failed call returns a documented status"); \
            sleep_expect((r), try_ < 2, name " never succeeded");                                  \
        }                                                                                          \
    } while (0)

static void sleep_scenario(struct sleep_run *r)
{
    tide_pool_id weights = 0, kv = 0;
    uint8_t *p[SLEEP_BLOCKS] = {NULL};
    void *cache = NULL;
    UNTIL_OK(r, tide_pool_create(r->t, &weights), "tide_pool_create");
    UNTIL_OK(r, tide_pool_make_sleepable(r->t, weights), "tide_pool_make_sleepable");
    UNTIL_OK(r, tide_pool_create(r->t, &kv), "tide_pool_create");
    UNTIL_OK(r, tide_pool_make_sleepable(r->t, kv), "tide_pool_make_sleepable");
    for (int i = 0; i < SLEEP_BLOCKS; i++) {
        UNTIL_OK(r, tide_malloc_pool(r->t, sleep_sizes[i], 0, weights, (void **)&p[i]), "tide_malloc_pool");
        if (p[i])
            memset(p[i], 0x60 + i, sleep_sizes[i]);
    }
    UNTIL_OK(r, tide_malloc_pool(r->t, 8 * MIB, 0, kv, &cache), "tide_malloc_pool");
    for (int cycle = 0; cycle < 2; cycle++) {
        UNTIL_OK(r, tide_pool_sleep(r->t, weights, TIDE_SLEEP_OFFLOAD), "tide_pool_sleep (offload)");
        UNTIL_OK(r, tide_pool_sleep(r->t, kv, TIDE_SLEEP_DISCARD), "tide_pool_sleep (discard)");
        void *other = NULL;
        UNTIL_OK(r, tide_malloc(r->t, 24 * MIB, 0, &other), "tide_malloc");
        if (other)
            UNTIL_OK(r, tide_free(r->t, other), "tide_free");
        UNTIL_OK(r, tide_empty_cache(r->t, NULL), "tide_empty_cache");
        UNTIL_OK(r, tide_pool_wake(r->t, weights), "tide_pool_wake (offload)");
        UNTIL_OK(r, tide_pool_wake(r->t, kv), "tide_pool_wake (discard)");
        for (int i = 0; i < SLEEP_BLOCKS; i++)
            sleep_expect(r, p[i] && first_mismatch(p[i], sleep_sizes[i], (uint8_t)(0x60 + i)) == sleep_sizes[i],
                         "the offloaded pool's contents are whole after the wake");
    }
    for (int i = 0; i < SLEEP_BLOCKS; i++)
        UNTIL_OK(r, tide_free(r->t, p[i]), "tide_free");
    UNTIL_OK(r, tide_free(r->t, cache), "tide_free");
    UNTIL_OK(r, tide_pool_release(r->t, weights), "tide_pool_release");
    UNTIL_OK(r, tide_pool_release(r->t, kv), "tide_pool_release");
}

static uint64_t sleep_calls(tide_sim *sim, tide_sim_op op)
{
    tide_sim_counters c;
    tide_sim_get_counters(sim, &c);
    return c.calls[op];
}

static void test_sleep_wake_sweep(void)
{
    const tide_sim_op ops[] = {TIDE_SIM_SYNCHRONIZE, TIDE_SIM_HOST_ALLOC, TIDE_SIM_COPY_TO_HOST, TIDE_SIM_UNMAP,
                               TIDE_SIM_MAP, TIDE_SIM_COPY_TO_DEVICE, TIDE_SIM_VA_RESERVE};
    unsigned long faults = 0, per_op = env_number("TIDE_SWEEP_FAULTS_PER_MODE", FAULTS_PER_MODE);
    for (size_t k = 0; k < sizeof ops / sizeof ops[0]; k++) {
        /* How many calls of this kind the scenario makes without faults. */
        struct sleep_run clean = {NULL, NULL, 0};
        tide_sim_options o = {sizeof o, 1 * GIB, 0, 0};
        if (tide_sim_create(&o, &clean.sim) != TIDE_OK)
            exit(2);
        tide_backend be = tide_sim_backend(clean.sim);
        if (tide_create(&be, "", &clean.t) != TIDE_OK)
            exit(2);
        uint64_t before = sleep_calls(clean.sim, ops[k]);
        sleep_scenario(&clean);
        uint64_t n = sleep_calls(clean.sim, ops[k]) - before;
        tide_destroy(clean.t);
        tide_sim_destroy(clean.sim);
        CHECK(clean.problems == 0);
        uint64_t stride = per_op && n > per_op ? (n + per_op - 1) / per_op : 1;
        for (uint64_t nth = 0; nth < n; nth += stride) {
            struct sleep_run r = {NULL, NULL, 0};
            if (tide_sim_create(&o, &r.sim) != TIDE_OK)
                exit(2);
            be = tide_sim_backend(r.sim);
            if (tide_create(&be, "", &r.t) != TIDE_OK)
                exit(2);
            tide_sim_inject_fault(r.sim, ops[k], (uint32_t)nth, 1);
            sleep_scenario(&r);
            tide_sim_inject_fault(r.sim, ops[k], 0, 0);
            CHECK_OK(tide_destroy(r.t));
            tide_sim_counters c;
            tide_sim_get_counters(r.sim, &c);
            CHECK(c.held_bytes == 0 && c.host_bytes == 0 && c.va_ranges == 0 && c.live_fences == 0);
            if (r.problems)
                fprintf(stderr, "  sleep sweep: %s's call %llu failing: %d problem(s)\n", tide_sim_op_name(ops[k]),
                        (unsigned long long)nth + 1, r.problems);
            CHECK(r.problems == 0);
            tide_sim_destroy(r.sim);
            faults++;
        }
        fprintf(stderr, "sleep and wake: %s failing at one call in %llu of its %llu\n", tide_sim_op_name(ops[k]),
                (unsigned long long)stride, (unsigned long long)n);
    }
    fprintf(stderr, "sleep and wake: %lu faults injected\n", faults);
}

int main(void)
{
    RUN(test_sleep_wake_sweep);
    RUN(test_fault_sweep);
    return HARNESS_EXIT();
}

/*
 * A libFuzzer harness over tidepool's public API on the simulated device.
 *
 * Each input is a program: a config selector, then operations, each a byte of opcode and a few bytes
 * of arguments. The operations are every public call a user makes (malloc, free, record_stream, retain,
 * release, empty_cache, trim, limits, config strings, stats, a private pool's allocations, graph
 * captures, checkpoints of the pool and restores to them, a sleepable pool put to sleep, its contents
 * offloaded or discarded, and woken) and every invalid call (foreign and interior
 * pointers, double frees, a release without a retain, sizes of 0 and beyond the device, checkpoints
 * forged from the input's bytes), plus device faults injected into the next backend call, and a fork:
 * in the child, every call on the parent's allocator and device must fail at once, and a device and
 * allocator of its own must work. After every operation:
 *   - tide_check must pass;
 *   - an invalid call must fail with the documented status and leave the statistics byte-identical;
 *   - a new block must not overlap a live block or a freed block the device still uses.
 * Device use is modelled by kernels on the simulated device's streams that wait at a gate the input
 * opens. A kernel checks the data pattern of its block when it runs: if tidepool had handed the block
 * to a new owner (who stamps its own pattern), the kernel sees the wrong bytes. Either finding aborts,
 * which libFuzzer reports as a crash with the input that caused it.
 *
 * At the end of each input every kernel is let through, everything is freed, and tide_destroy must
 * return everything: the device holds no byte and no fence afterwards.
 *
 * Build and run: make fuzz (FUZZ_SECONDS=N), see docs/reliability.md.
 */
#include "tidepool.h"
#include "tidepool_sim.h"

#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <signal.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define MIB ((size_t)1 << 20)
#define DEVICE_BYTES (1024 * MIB) /* small, so limits, huge sizes and out-of-memory are reachable */
#define STREAMS 3                 /* the default stream and two more */
#define MAX_BLOCKS 96
#define MAX_KERNELS 24
#define STAMP 128                 /* bytes of pattern at each end of a block */
#define GATE_TIMEOUT_MS 20        /* a gate the input never opens lets its kernel through after this,
                                     so a synchronize inside tidepool (the out-of-memory ladder) ends */

static bool verbose; /* FUZZ_VERBOSE=1: print each operation, to follow a failing input */
#define SAY(...) (verbose ? (void)fprintf(stderr, __VA_ARGS__) : (void)0)

static void die(const char *what, const char *detail)
{
    fprintf(stderr, "fuzz_api: %s%s%s\n", what, detail ? ": " : "", detail ? detail : "");
    abort();
}

/* ---- the device's view: kernels at gates ------------------------------------------------------------ */

struct kernel {
    pthread_mutex_t m;
    pthread_cond_t c;
    bool open;
    atomic_bool done;
    const uint8_t *ptr;
    size_t size;
    uint8_t tag;
    tide_allocator *release_from; /* set for a kernel that holds a reference (Metal's model) */
    tide_stream stream;
};

static bool stamp_intact(const uint8_t *p, size_t size, uint8_t tag)
{
    size_t n = size < STAMP ? size : STAMP;
    for (size_t i = 0; i < n; i++)
        if (p[i] != tag || p[size - n + i] != tag)
            return false;
    return true;
}

/* Kernels' releases, counted as they begin and as they end: statistics read while none began or was
 * under way are the allocator's alone. */
static atomic_uint releases_begun, releases_ended;

static void kernel_run(void *arg)
{
    struct kernel *k = arg;
    pthread_mutex_lock(&k->m);
    struct timespec until;
    clock_gettime(CLOCK_REALTIME, &until);
    until.tv_nsec += GATE_TIMEOUT_MS * 1000000L;
    until.tv_sec += until.tv_nsec / 1000000000L;
    until.tv_nsec %= 1000000000L;
    while (!k->open)
        if (pthread_cond_timedwait(&k->c, &k->m, &until) == ETIMEDOUT)
            break;
    pthread_mutex_unlock(&k->m);
    SAY("  (device) a kernel on stream %lu reads %p%s\n", (unsigned long)k->stream, (const void *)k->ptr,
        k->open ? "" : " after its gate timed out");
    /* The kernel reads its block: a new owner's pattern here is a use after free. */
    if (!stamp_intact(k->ptr, k->size, k->tag))
        die("use-after-free detected", "a kernel found another owner's data in the block it uses");
    atomic_store_explicit(&k->done, true, memory_order_release);
    atomic_fetch_add(&releases_begun, 1);
    if (k->release_from && tide_release(k->release_from, (void *)k->ptr) != TIDE_OK)
        die("a kernel's tide_release failed", tide_last_error());
    atomic_fetch_add(&releases_ended, 1);
}

static void kernel_open(struct kernel *k)
{
    pthread_mutex_lock(&k->m);
    k->open = true;
    pthread_cond_broadcast(&k->c);
    pthread_mutex_unlock(&k->m);
}

/* ---- the program's view: blocks ----------------------------------------------------------------------- */

struct block {
    uint8_t *p;
    size_t size;
    uint8_t tag;
    tide_stream stream;    /* the stream it was allocated on */
    bool live;             /* allocated and not yet freed */
    tide_pool_id pool;     /* the world's private pool it was allocated in, 0 if none: a pool released
                              and made again is another pool, and its blocks are not this one's */
    bool in_sleepy;        /* allocated in the world's sleepable pool */
    bool lost;             /* in_sleepy: a sleep discarded its contents (written again at the wake) */
    int host_refs;         /* references the program holds (retain without release yet) */
    int kernels[MAX_KERNELS];
    int nkernels;          /* kernels that use the block */
};

struct world {
    tide_allocator *t;
    tide_stream streams[STREAMS];
    struct block blocks[MAX_BLOCKS];
    int nblocks;
    struct kernel kernels[MAX_KERNELS];
    int nkernels;
    uint8_t next_tag;
    /* Per stream: guard:True canary writes may still be queued there that tidepool did not wait for,
     * because the device call that would have waited failed (an injected fault). In stream order they
     * come before the next owner's work; the harness writes from the host, so it waits for them first. */
    bool unwaited_writes[STREAMS];
    /* The private pool (0: none yet), whether it is still in use, the captures underway, and the
     * last checkpoint of the pool taken (tide_pool_blocks). */
    tide_pool_id pool;
    bool pool_live;
    int captures;
    tide_pool_block checkpoint[MAX_BLOCKS];
    size_t ncheckpoint;
    bool have_checkpoint;
    size_t guard; /* bytes of canary before each block: 512 under guard:True */
    /* The sleepable pool (0: none yet) and whether it sleeps (tide_pool_sleeping): its blocks' memory
     * is then not there, so neither the program nor a kernel touches it. */
    tide_pool_id sleepy;
    bool asleep;
    const uint8_t *in;
    size_t len, pos;
};

static tide_sim *sim;
static tide_backend backend;
static tide_stream sim_streams[STREAMS];

static unsigned byte(struct world *w) { return w->pos < w->len ? w->in[w->pos++] : 0; }

static size_t fuzzed_size(struct world *w)
{
    unsigned kind = byte(w), a = byte(w), b = byte(w);
    switch (kind % 8) {
    case 0: return 0;                                        /* invalid */
    case 1: return DEVICE_BYTES + ((size_t)a << 20) + b + 1; /* more than the device has */
    case 2: return SIZE_MAX - a;                             /* absurd */
    case 3: case 4: return ((size_t)a << 16 | (size_t)b << 8) % (64 * MIB) + 1; /* up to 64 MiB */
    default: return ((size_t)1 << (a % 21)) + b;             /* 1 B to 1 MiB, log-uniform */
    }
}

/* Whether the block's memory is there to read and write: not while its pool sleeps. */
static bool touchable(const struct world *w, const struct block *b) { return !(b->in_sleepy && w->asleep); }

/* Was the block allocated in the world's private pool as it is now (not in one released before)? */
static bool in_current_pool(const struct world *w, const struct block *b) { return b->pool && b->pool == w->pool; }

/* Is device use of the block possibly still going on? */
static bool in_use_by_device(const struct world *w, const struct block *b)
{
    if (b->host_refs > 0)
        return true;
    for (int i = 0; i < b->nkernels; i++)
        if (!atomic_load_explicit(&w->kernels[b->kernels[i]].done, memory_order_acquire))
            return true;
    return false;
}

/* Forgets freed blocks the device is done with, so their addresses may be reused. */
static void retire_blocks(struct world *w)
{
    for (int i = 0; i < w->nblocks;)
        if (!w->blocks[i].live && !in_use_by_device(w, &w->blocks[i]))
            w->blocks[i] = w->blocks[--w->nblocks];
        else
            i++;
}

static struct block *pick_live(struct world *w)
{
    int live = 0;
    for (int i = 0; i < w->nblocks; i++)
        live += w->blocks[i].live;
    if (!live)
        return NULL;
    int n = (int)(byte(w) % (unsigned)live);
    for (int i = 0; i < w->nblocks; i++)
        if (w->blocks[i].live && n-- == 0)
            return &w->blocks[i];
    return NULL;
}

static tide_stats stats_now(tide_allocator *t)
{
    tide_stats s;
    memset(&s, 0, sizeof s);
    s.struct_size = sizeof s;
    if (tide_get_stats(t, &s) != TIDE_OK)
        die("tide_get_stats failed", tide_last_error());
    return s;
}

/* Runs an invalid call: it must return `expected` and change no statistic. A kernel completing on the
 * device's thread meanwhile changes statistics by itself (its release drains a block), so the call is
 * made again, a few times, until no release happened during it; it is rejected each time anyway. */
#define EXPECT_REJECTED(w, call, expected)                                                          \
    do {                                                                                           \
        for (int try_ = 0; try_ < 8; try_++) {                                                     \
            unsigned begun_ = atomic_load(&releases_begun), ended_ = atomic_load(&releases_ended); \
            tide_stats before_ = stats_now((w)->t);                                                \
            tide_status got_ = (call);                                                             \
            if (got_ != (expected)) {                                                              \
                fprintf(stderr, "%s returned %s, expected %s\n", #call, tide_status_name(got_),   \
                        tide_status_name(expected));                                               \
                die("an invalid call was not rejected as documented", tide_last_error());          \
            }                                                                                      \
            tide_stats after_ = stats_now((w)->t);                                                 \
            if (begun_ != ended_ || atomic_load(&releases_begun) != begun_)                        \
                continue; /* the device changed things meanwhile: ask again */                     \
            if (memcmp(&before_, &after_, sizeof before_) != 0)                                    \
                die("an invalid call changed the statistics", #call);                              \
            break;                                                                                 \
        }                                                                                          \
    } while (0)

static void stamp(struct block *b)
{
    size_t n = b->size < STAMP ? b->size : STAMP;
    memset(b->p, b->tag, n);
    memset(b->p + b->size - n, b->tag, n);
}

/* Fails unless the new block nb overlaps no live block and no freed block the device still uses. */
static void check_no_overlap(struct world *w, const struct block *nb)
{
    for (int i = 0; i < w->nblocks; i++) {
        const struct block *o = &w->blocks[i];
        if (nb->p < o->p + o->size && o->p < nb->p + nb->size)
            die(o->live ? "a new block overlaps a live block"
                        : "use-after-free: a new block overlaps a freed block the device still uses", NULL);
    }
}

/* Tracks the new block nb (stamped with a new tag), or frees it at once if there is no room. */
static void track(struct world *w, struct block nb, unsigned which)
{
    if (w->nblocks == MAX_BLOCKS) { /* no room to track it: give it back at once */
        if (tide_free(w->t, nb.p) != TIDE_OK)
            die("tide_free of a fresh block failed", tide_last_error());
        return;
    }
    nb.tag = ++w->next_tag ? w->next_tag : ++w->next_tag;
    if (w->unwaited_writes[which]) {
        if (tide_sim_stream_synchronize(sim, nb.stream) != TIDE_OK)
            die("tide_sim_stream_synchronize failed", tide_last_error());
        w->unwaited_writes[which] = false;
    }
    stamp(&nb);
    w->blocks[w->nblocks++] = nb;
}

/* tide_malloc, or tide_malloc_pool in the world's pool. */
static void malloc_in(struct world *w, tide_pool_id pool)
{
    size_t size = fuzzed_size(w);
    unsigned which = byte(w) % STREAMS;
    tide_stream stream = w->streams[which];
    retire_blocks(w);
    void *p = NULL;
    if (pool && ((pool == w->pool && !w->pool_live) || (pool == w->sleepy && w->asleep))) {
        /* a released pool takes no allocation, whatever the size, nor does a sleeping one */
        EXPECT_REJECTED(w, tide_malloc_pool(w->t, size, stream, pool, &p), TIDE_EINVAL);
        return;
    }
    tide_status s = pool ? tide_malloc_pool(w->t, size, stream, pool, &p) : tide_malloc(w->t, size, stream, &p);
    SAY("malloc %zu on stream %lu%s -> %p %s\n", size, (unsigned long)stream, pool ? " in the pool" : "", p,
        tide_status_name(s));
    if (s == TIDE_EDEVICE) /* a canary write may have been queued before the one that failed */
        w->unwaited_writes[which] = true;
    if (size == 0) {
        if (s != TIDE_EINVAL)
            die("tide_malloc of 0 bytes did not fail with TIDE_EINVAL", tide_last_error());
        return;
    }
    if (size > DEVICE_BYTES) {
        if (s != TIDE_ENOMEM || p)
            die("tide_malloc beyond the device did not fail with TIDE_ENOMEM", tide_last_error());
        return;
    }
    if (s == TIDE_ENOMEM || s == TIDE_EDEVICE) { /* the limit, or an injected fault */
        if (p)
            die("a failed tide_malloc returned a pointer", NULL);
        return;
    }
    if (s != TIDE_OK)
        die("tide_malloc failed unexpectedly", tide_last_error());
    if ((uintptr_t)p % 512)
        die("tide_malloc returned a block not aligned to 512 bytes", NULL);
    struct block nb = {.p = p, .size = size, .stream = stream, .live = true, .pool = pool != 0 && pool == w->pool ? pool : 0,
                       .in_sleepy = pool != 0 && pool == w->sleepy};
    /* The malloc may have waited for the device (the out-of-memory ladder synchronizes), so whether a
     * freed block is still in use is asked again now. A kernel marks itself done before its fence can
     * signal or its reference go, so a block reused before that is a use after free. */
    retire_blocks(w);
    check_no_overlap(w, &nb);
    track(w, nb, which);
}

static void op_malloc(struct world *w) { malloc_in(w, 0); }

static void op_free(struct world *w)
{
    struct block *b = pick_live(w);
    if (!b)
        return;
    if (touchable(w, b) && !stamp_intact(b->p, b->size, b->tag))
        die("a live block lost its pattern: another owner wrote it", NULL);
    SAY("free %p\n", (void *)b->p);
    tide_status s = tide_free(w->t, b->p);
    /* With guard:True the free checks the canaries on the device; if the device fails that check (an
     * injected fault), the block is freed all the same and the call says so. */
    if (s != TIDE_OK && !(s == TIDE_EDEVICE && strstr(tide_last_error(), "checking the block's guard"))) {
        fprintf(stderr, "tide_free returned %s\n", tide_status_name(s));
        die("tide_free of a live block failed", tide_last_error());
    }
    if (s == TIDE_EDEVICE) /* the guard check failed before it waited for the block's stream */
        for (int i = 0; i < STREAMS; i++)
            w->unwaited_writes[i] |= w->streams[i] == b->stream;
    b->live = false;
}

/* A kernel on some stream uses a live block: through record_stream (CUDA's model) or a reference it
 * releases when it completes (Metal's model). */
static void op_kernel(struct world *w)
{
    struct block *b = pick_live(w);
    unsigned how = byte(w);
    if (!b || w->nkernels == MAX_KERNELS || b->nkernels == MAX_KERNELS || !touchable(w, b))
        return; /* (a kernel on a sleeping pool's block would read memory that is not there) */
    struct kernel *k = &w->kernels[w->nkernels];
    k->open = false;
    atomic_store(&k->done, false);
    k->ptr = b->p;
    k->size = b->size;
    k->tag = b->tag;
    k->release_from = (how & 4) ? w->t : NULL;
    k->stream = w->streams[how % STREAMS];
    /* Work on the block's own stream is ordered before the next owner's, so a stream use is only
     * interesting on another stream; a reference holds the block wherever the kernel runs. */
    if (!k->release_from && k->stream == b->stream)
        k->stream = w->streams[(how + 1) % STREAMS];
    tide_status s = k->release_from ? tide_retain(w->t, b->p) : tide_record_stream(w->t, b->p, k->stream);
    if (s != TIDE_OK)
        die("tide_retain or tide_record_stream of a live block failed", tide_last_error());
    SAY("kernel %d on stream %lu uses %p by %s\n", w->nkernels, (unsigned long)k->stream, (void *)b->p,
        k->release_from ? "a reference" : "record_stream");
    if (tide_sim_enqueue(sim, k->stream, 0, kernel_run, k) != TIDE_OK)
        die("tide_sim_enqueue failed", tide_last_error());
    b->kernels[b->nkernels++] = w->nkernels++;
}

/* The device gets past the oldest closed gate on a stream, and the stream finishes. */
static void op_advance_stream(struct world *w)
{
    tide_stream s = w->streams[byte(w) % STREAMS];
    for (int i = 0; i < w->nkernels; i++)
        if (w->kernels[i].stream == s && !w->kernels[i].open) {
            SAY("kernel %d runs\n", i);
            kernel_open(&w->kernels[i]);
            break;
        }
    if (tide_sim_stream_synchronize(sim, s) != TIDE_OK)
        die("tide_sim_stream_synchronize failed", tide_last_error());
}

static void open_all_gates(struct world *w)
{
    for (int i = 0; i < w->nkernels; i++)
        kernel_open(&w->kernels[i]);
}

static void op_host_reference(struct world *w)
{
    unsigned what = byte(w);
    if (what & 1) { /* retain a live block */
        struct block *b = pick_live(w);
        if (!b || b->host_refs > 3)
            return;
        SAY("retain %p\n", (void *)b->p);
        if (tide_retain(w->t, b->p) != TIDE_OK)
            die("tide_retain of a live block failed", tide_last_error());
        b->host_refs++;
        return;
    }
    /* release a reference the program holds, on a live or freed block */
    for (int i = 0; i < w->nblocks; i++) {
        struct block *b = &w->blocks[(i + (int)what) % w->nblocks];
        if (b->host_refs > 0) {
            if (touchable(w, b) && !stamp_intact(b->p, b->size, b->tag))
                die("use-after-free detected", "a referenced block lost its pattern");
            SAY("release %p\n", (void *)b->p);
            if (tide_release(w->t, b->p) != TIDE_OK)
                die("tide_release of a held reference failed", tide_last_error());
            b->host_refs--;
            return;
        }
    }
}

static void op_empty_cache(struct world *w)
{
    open_all_gates(w); /* the synchronize in empty_cache waits for every kernel */
    tide_release_report r;
    tide_status s = tide_empty_cache(w->t, &r);
    SAY("empty_cache -> %s\n", tide_status_name(s));
    if (w->captures && s != TIDE_EBUSY)
        die("tide_empty_cache during a capture did not say TIDE_EBUSY", tide_last_error());
    if (s != TIDE_OK && s != TIDE_EDEVICE && !(w->captures && s == TIDE_EBUSY))
        die("tide_empty_cache failed unexpectedly", tide_last_error());
}

static void op_trim(struct world *w)
{
    size_t target = (size_t)byte(w) * 4 * MIB;
    tide_status s = tide_trim(w->t, target, NULL);
    SAY("trim to %zu -> %s\n", target, tide_status_name(s));
    if (s != TIDE_OK && s != TIDE_EBUSY && s != TIDE_EDEVICE)
        die("tide_trim failed unexpectedly", tide_last_error());
}

static void op_limit(struct world *w)
{
    unsigned a = byte(w), b = byte(w);
    if (a & 1) {
        double fraction = (double)b / 200.0; /* 0 .. 1.275: 0 and above 1 are invalid */
        if (fraction <= 0.0 || fraction > 1.0) {
            EXPECT_REJECTED(w, tide_set_limit_fraction(w->t, fraction), TIDE_EINVAL);
        } else {
            tide_status s = tide_set_limit_fraction(w->t, fraction);
            if (s != TIDE_OK && s != TIDE_EDEVICE)
                die("tide_set_limit_fraction failed unexpectedly", tide_last_error());
        }
    } else {
        size_t bytes = (size_t)b * 8 * MIB;
        tide_status s = tide_set_limit(w->t, bytes);
        SAY("set_limit %zu -> %s\n", bytes, tide_status_name(s));
        if (s != TIDE_OK && s != TIDE_EINVAL && s != TIDE_EDEVICE)
            die("tide_set_limit failed unexpectedly", tide_last_error());
    }
}

static void clear_faults(void)
{
    for (int op = 0; op < TIDE_SIM_OP_COUNT; op++)
        tide_sim_inject_fault(sim, (tide_sim_op)op, 0, 0);
}

/* A config string from the input: either a valid allocator or TIDE_EINVAL, never anything else. */
static void op_config(struct world *w)
{
    char conf[40];
    size_t n = byte(w) % sizeof conf;
    for (size_t i = 0; i < n; i++)
        conf[i] = (char)byte(w);
    conf[n] = '\0';
    if (n == sizeof conf - 1)
        conf[n - 1] = '\0';
    clear_faults(); /* planned faults are for the allocator under test, not this one */
    /* tide_config_check_backend's verdict is tide_create's, with the same words after the origin
     * (TIDEPOOL_CONF, which tide_create reads and the check does not, is unset by LLVMFuzzerInitialize). */
    char checked[1024];
    tide_status by_check = tide_config_check_backend(&backend, conf, NULL);
    snprintf(checked, sizeof checked, "%s", tide_last_error());
    tide_allocator *t = NULL;
    tide_status s = tide_create(&backend, conf, &t);
    /* (Not a failure after the decisions: an injected fault in the device's mem_info, host memory.) */
    if ((s == TIDE_OK || s == TIDE_EINVAL || s == TIDE_EUNSUPPORTED) && by_check != s)
        die("tide_config_check_backend and tide_create disagree on a config", conf);
    if (s == TIDE_EINVAL) {
        if (t || !*tide_last_error())
            die("a rejected config returned an allocator or no message", conf);
        const char *created = strstr(tide_last_error(), ": "), *said = strstr(checked, ": ");
        if (!created || !said || strcmp(created, said) != 0)
            die("tide_config_check_backend and tide_create refuse a config in different words", conf);
        return;
    }
    if (s == TIDE_EDEVICE) /* an injected fault in the device's mem_info */
        return;
    if (s != TIDE_OK)
        die("tide_create with a config string failed unexpectedly", tide_last_error());
    tide_sim_counters before, after;
    tide_sim_get_counters(sim, &before);
    void *p;
    if (tide_malloc(t, 4096, 0, &p) == TIDE_OK && tide_free(t, p) != TIDE_OK)
        die("tide_free on a fuzzed-config allocator failed", tide_last_error());
    s = tide_destroy(t);
    tide_sim_get_counters(sim, &after);
    bool device_failed = after.failures[TIDE_SIM_SYNCHRONIZE] != before.failures[TIDE_SIM_SYNCHRONIZE] ||
                         after.failures[TIDE_SIM_RELEASE] != before.failures[TIDE_SIM_RELEASE];
    if (s != TIDE_OK && !(s == TIDE_EDEVICE && device_failed))
        die("tide_destroy of a fuzzed-config allocator failed", tide_last_error());
    /* What the device holds is back where it was, unless it refused to take memory back. */
    if (after.held_bytes != before.held_bytes && after.failures[TIDE_SIM_RELEASE] == before.failures[TIDE_SIM_RELEASE])
        die("tide_destroy of a fuzzed-config allocator left memory on the device", NULL);
}

/* ---- fork: the child's side -------------------------------------------------------------------------- */

#define FORK_SECONDS 20 /* a child not done by then hung: a lock held at the fork, a thread it lacks */

static int child_failures;
#define CHILD_EXPECT(call, expected, words)                                                        \
    do {                                                                                           \
        tide_status got_ = (call);                                                                 \
        if (got_ != (expected) || !strstr(tide_last_error(), (words))) {                           \
            fprintf(stderr, "fuzz_api: in a forked child, %s returned %s: %s\n", #call,            \
                    tide_status_name(got_), tide_last_error());                                    \
            child_failures++;                                                                      \
        }                                                                                          \
    } while (0)
#define CHILD_REFUSED(call) CHILD_EXPECT(call, TIDE_EINVAL, "forked")
#define CHILD_OK(call) CHILD_EXPECT(call, TIDE_OK, "")

/* In the child: the parent's allocator and device refuse everything at once (kernels may have been
 * running on the device's threads at the fork, inside tidepool's locks), letting go of them frees
 * nothing and waits for nothing, and what the child makes itself works. */
static int forked_child(struct world *w, unsigned choice)
{
    const struct block *b = pick_live(w);
    void *p = NULL;
    CHILD_REFUSED(tide_malloc(w->t, 1 + choice * 4096, w->streams[choice % STREAMS], &p));
    if (b) {
        CHILD_REFUSED(tide_free(w->t, b->p));
        CHILD_REFUSED(tide_record_stream(w->t, b->p, w->streams[1]));
        CHILD_REFUSED(tide_retain(w->t, b->p));
        CHILD_REFUSED(tide_release(w->t, b->p));
    }
    if (w->pool)
        CHILD_REFUSED(tide_malloc_pool(w->t, 4096, 0, w->pool, &p));
    CHILD_REFUSED(tide_empty_cache(w->t, NULL));
    CHILD_REFUSED(tide_trim(w->t, 0, NULL));
    CHILD_REFUSED(tide_check(w->t));
    tide_stats st = {.struct_size = sizeof st};
    CHILD_REFUSED(tide_get_stats(w->t, &st));
    CHILD_REFUSED(tide_sim_synchronize(sim));
    CHILD_OK(tide_destroy(w->t));
    tide_sim_destroy(sim);

    tide_sim *mine = NULL;
    tide_sim_options o = {sizeof o, 64 * MIB, 0, 0};
    CHILD_OK(tide_sim_create(&o, &mine));
    if (!mine)
        return child_failures + 1;
    tide_backend be = tide_sim_backend(mine);
    tide_allocator *t = NULL;
    CHILD_OK(tide_create(&be, choice % 2 ? "expandable_segments:True" : "", &t));
    if (t) {
        p = NULL;
        CHILD_OK(tide_malloc(t, 1 + choice * 4096, 0, &p));
        CHILD_OK(tide_free(t, p));
        CHILD_OK(tide_empty_cache(t, NULL));
        CHILD_OK(tide_destroy(t));
    }
    tide_sim_counters c;
    tide_sim_get_counters(mine, &c);
    if (c.held_bytes) {
        fprintf(stderr, "fuzz_api: in a forked child, its own device still holds memory\n");
        child_failures++;
    }
    tide_sim_destroy(mine);
    return child_failures;
}

static void op_fork(struct world *w)
{
    unsigned choice = byte(w);
    SAY("fork: the child calls its parent's allocator, then makes its own\n");
    fflush(stderr);
    pid_t pid = fork();
    if (pid < 0)
        return; /* no process to spare: nothing to check */
    if (pid == 0)
        _exit(forked_child(w, choice) ? 1 : 0); /* no atexit handlers: they are the parent's */
    int status = 0;
    for (int waited_ms = 0; waitpid(pid, &status, WNOHANG) != pid; waited_ms++) {
        if (waited_ms >= FORK_SECONDS * 1000) {
            kill(pid, SIGKILL);
            waitpid(pid, &status, 0);
            die("a forked child hung", "a call on its parent's allocator or device did not return");
        }
        nanosleep(&(struct timespec){0, 1000000}, NULL);
    }
    if (!WIFEXITED(status) || WEXITSTATUS(status) != 0)
        die("a forked child's calls were not as the manual says (its stderr says which)", NULL);
}

static void op_invalid(struct world *w)
{
    unsigned what = byte(w);
    struct block *b = pick_live(w);
    static uint8_t foreign[1024];
    switch (what % 7) {
    case 0:
        EXPECT_REJECTED(w, tide_free(w->t, foreign + 512), TIDE_EINVAL);
        break;
    case 1:
        if (b && b->size > 512)
            EXPECT_REJECTED(w, tide_free(w->t, b->p + 512), TIDE_EINVAL);
        break;
    case 2: /* double free: a freed block whose address nothing live starts at */
        for (int i = 0; i < w->nblocks; i++) {
            const struct block *f = &w->blocks[i];
            bool reused = false;
            for (int j = 0; j < w->nblocks; j++)
                reused |= w->blocks[j].live && w->blocks[j].p <= f->p && f->p < w->blocks[j].p + w->blocks[j].size;
            if (!f->live && !reused) {
                EXPECT_REJECTED(w, tide_free(w->t, f->p), TIDE_EINVAL);
                EXPECT_REJECTED(w, tide_record_stream(w->t, f->p, w->streams[1]), TIDE_EINVAL);
                EXPECT_REJECTED(w, tide_retain(w->t, f->p), TIDE_EINVAL);
                break;
            }
        }
        break;
    case 3: /* a release with no reference held */
        if (b && b->host_refs == 0 && !in_use_by_device(w, b) && b->nkernels == 0)
            EXPECT_REJECTED(w, tide_release(w->t, b->p), TIDE_EINVAL);
        break;
    case 4:
        EXPECT_REJECTED(w, tide_record_stream(w->t, foreign, 0), TIDE_EINVAL);
        EXPECT_REJECTED(w, tide_retain(w->t, NULL), TIDE_EINVAL);
        break;
    case 6:
        op_fork(w);
        break;
    default:
        EXPECT_REJECTED(w, tide_malloc(w->t, 0, 0, &(void *){NULL}), TIDE_EINVAL);
        break;
    }
}

/* The device fails one of its next calls. */
static void op_fault(struct world *w)
{
    unsigned op = byte(w), skip = byte(w);
    tide_sim_op which = (tide_sim_op)(op % TIDE_SIM_OP_COUNT);
    tide_sim_inject_fault(sim, which, skip % 4, 1 + (op >> 7));
    SAY("fault: %s fails after %u more calls, %u time(s)\n", tide_sim_op_name(which), skip % 4, 1 + (op >> 7));
}

static void op_stats(struct world *w)
{
    char buf[16384];
    size_t len;
    if (tide_stats_json(w->t, buf, sizeof buf, &len) != TIDE_OK || len == 0)
        die("tide_stats_json failed", tide_last_error());
    unsigned b = byte(w);
    if (b & 1 && tide_reset_peak_stats(w->t) != TIDE_OK)
        die("tide_reset_peak_stats failed", tide_last_error());
    if (b & 2 && tide_reset_accumulated_stats(w->t) != TIDE_OK)
        die("tide_reset_accumulated_stats failed", tide_last_error());
}

/* ---- private pools, captures and checkpoints ------------------------------------------------------ */

static bool same_block(const tide_pool_block *a, const tide_pool_block *b)
{
    return a->ptr == b->ptr && a->size == b->size && a->requested == b->requested && a->stream == b->stream;
}

static int stream_index(const struct world *w, tide_stream stream)
{
    for (int i = 0; i < STREAMS; i++)
        if (w->streams[i] == stream)
            return i;
    die("a pool block on a stream the program never used", NULL);
    return 0;
}

/* After tide_pool_restore to cp[0..ncp), whatever it returned: the pool holds a prefix of the
 * checkpoint (all of it on success), nothing else; the program's view follows, each restored block
 * stamped anew. */
static void after_restore(struct world *w, tide_status s, const tide_pool_block *cp, size_t ncp)
{
    tide_pool_block now[MAX_BLOCKS];
    size_t n = 0;
    if (tide_pool_blocks(w->t, w->pool, now, MAX_BLOCKS, &n) != TIDE_OK)
        die("tide_pool_blocks failed", tide_last_error());
    if (n > ncp || (s == TIDE_OK && n != ncp))
        die("tide_pool_restore left blocks in the pool that the checkpoint does not have", NULL);
    for (size_t i = 0; i < n; i++)
        if (!same_block(&now[i], &cp[i]))
            die("tide_pool_restore left the pool's blocks unlike the checkpoint", NULL);
    for (int i = 0; i < w->nblocks; i++)
        if (in_current_pool(w, &w->blocks[i]))
            w->blocks[i].live = false; /* the restore freed every block the pool had */
    retire_blocks(w);
    for (size_t i = 0; i < n; i++) {
        struct block nb = {.p = (uint8_t *)now[i].ptr, .size = now[i].requested, .stream = now[i].stream,
                           .live = true, .pool = w->pool};
        check_no_overlap(w, &nb);
        track(w, nb, (unsigned)stream_index(w, nb.stream));
    }
}

/* A field of a forged checkpoint block: the real value, near it (on or off a 512-byte boundary),
 * small, near 2^64, or what makes real plus it wrap past 2^64 to a little. */
static size_t forged_value(struct world *w, size_t real)
{
    size_t how = byte(w), a = byte(w);
    switch (how % 8) {
    case 0: return real;
    case 1: return real + a * 512;
    case 2: return real - a * 512;
    case 3: return real + a % 32 * 8 - 128;
    case 4: return a * 512 + (how >> 7) * 8;
    case 5: return SIZE_MAX - a * 256;
    case 6: return (size_t)0 - real + a * 512;
    default: return how & 8 ? 0 : real * (a % 4 + 1);
    }
}

/* Could tide_pool_blocks have reported cp[0..n) on this allocator? What the harness knows of the
 * layout (the pool's segments aside, which tide_pool_of and tide_segment_of confirm afterwards). */
static bool plausible_checkpoint(const struct world *w, const tide_pool_block *cp, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        const tide_pool_block *c = &cp[i];
        if (c->ptr < w->guard || (c->ptr - w->guard) % 512 || c->size % 512 || c->size < 512 + 2 * w->guard ||
            c->size > UINTPTR_MAX - (c->ptr - w->guard) || c->requested == 0 ||
            c->requested > c->size - 2 * w->guard)
            return false;
        if (i && cp[i - 1].ptr - w->guard + cp[i - 1].size > c->ptr - w->guard)
            return false;
    }
    return true;
}

/* A checkpoint forged from the input's bytes, each field of each block possibly hostile, modelled on the
 * pool's blocks now, on the last checkpoint, or on a whole segment of the pool. Refused, it must change
 * nothing (the statistics and the pool's blocks); accepted, it must be one the pool could have reported
 * (tide_check passes after every operation), and the pool then holds exactly it. */
static void op_forged_restore(struct world *w)
{
    static uint8_t foreign[4096];
    tide_pool_block now[MAX_BLOCKS], forged[4];
    size_t nnow = 0;
    if (tide_pool_blocks(w->t, w->pool, now, MAX_BLOCKS, &nnow) != TIDE_OK)
        die("tide_pool_blocks failed", tide_last_error());
    unsigned shape = byte(w);
    size_t n = 1 + shape % 4;
    for (size_t i = 0; i < n; i++) {
        unsigned from = byte(w), fields = byte(w);
        tide_pool_block model = {.ptr = (uintptr_t)foreign + 512 + w->guard, .size = 512 + 2 * w->guard,
                                 .requested = 1, .stream = 0};
        if (from % 3 == 0 && nnow)
            model = now[(from / 3) % nnow];
        else if (from % 3 == 1 && w->have_checkpoint && w->ncheckpoint)
            model = w->checkpoint[(from / 3) % w->ncheckpoint];
        else if (nnow) { /* the whole segment of one of the pool's blocks */
            model = now[(from / 3) % nnow];
            uintptr_t base;
            size_t size;
            if (tide_segment_of(w->t, (void *)model.ptr, &base, &size) != TIDE_OK)
                die("tide_segment_of a pool block failed", tide_last_error());
            model.ptr = base + w->guard;
            model.size = size;
        }
        forged[i] = model;
        if (fields & 1)
            forged[i].ptr = forged_value(w, model.ptr);
        if (fields & 2)
            forged[i].size = forged_value(w, model.size);
        if (fields & 4)
            forged[i].requested = forged_value(w, model.requested);
        if (fields & 8)
            forged[i].stream = fields & 16 ? w->streams[byte(w) % STREAMS] : forged_value(w, model.stream);
    }
    /* A count far past the blocks given: refused before any block past the fourth is read
     * (AddressSanitizer would see the read). */
    size_t count = (shape & 0xF0) == 0xF0 ? SIZE_MAX - (shape & 0x0F) : n;
    if (!w->pool_live || w->captures) {
        EXPECT_REJECTED(w, tide_pool_restore(w->t, w->pool, forged, count),
                        w->pool_live ? TIDE_EBUSY : TIDE_EINVAL);
        return;
    }
    for (int i = 0; i < w->nblocks; i++)
        if (in_current_pool(w, &w->blocks[i]) && w->blocks[i].host_refs > 0)
            return; /* memory the program holds a reference to: TIDE_EBUSY, by design */
    open_all_gates(w); /* an accepted restore may wait for the device */
    for (int attempt = 0; attempt < 8; attempt++) {
        unsigned begun = atomic_load(&releases_begun), ended = atomic_load(&releases_ended);
        tide_stats before = stats_now(w->t);
        tide_sim_counters c0, c1;
        tide_sim_get_counters(sim, &c0);
        tide_status s = tide_pool_restore(w->t, w->pool, forged, count);
        tide_sim_get_counters(sim, &c1);
        SAY("forged restore of %zu blocks (0x%lx, %zu bytes for %zu on stream %lu, ...) -> %s\n", count,
            (unsigned long)forged[0].ptr, forged[0].size, forged[0].requested, (unsigned long)forged[0].stream,
            tide_status_name(s));
        if (s != TIDE_EINVAL) {
            bool faulted = false;
            for (int op = 0; op < TIDE_SIM_OP_COUNT; op++)
                faulted |= c1.failures[op] != c0.failures[op];
            if (s != TIDE_OK && !(faulted && (s == TIDE_EBUSY || s == TIDE_EDEVICE)))
                die("tide_pool_restore of a forged checkpoint failed unexpectedly", tide_last_error());
            if (count != n || !plausible_checkpoint(w, forged, n))
                die("tide_pool_restore accepted a checkpoint the pool could not have reported", NULL);
            for (size_t i = 0; i < n; i++) {
                tide_pool_id of = 0;
                uintptr_t base;
                size_t size;
                if (tide_pool_of(w->t, (void *)forged[i].ptr, &of) == TIDE_OK &&
                    (of != w->pool || tide_segment_of(w->t, (void *)forged[i].ptr, &base, &size) != TIDE_OK ||
                     forged[i].ptr - w->guard < base ||
                     forged[i].size > base + size - (forged[i].ptr - w->guard)))
                    die("tide_pool_restore put a block outside the pool's segments", NULL);
            }
            after_restore(w, s, forged, n);
            return;
        }
        tide_stats after = stats_now(w->t);
        tide_pool_block later[MAX_BLOCKS];
        size_t nlater = 0;
        if (tide_pool_blocks(w->t, w->pool, later, MAX_BLOCKS, &nlater) != TIDE_OK)
            die("tide_pool_blocks failed", tide_last_error());
        if (begun != ended || atomic_load(&releases_begun) != begun)
            continue; /* the device changed things meanwhile: ask again */
        if (memcmp(&before, &after, sizeof before) != 0)
            die("a refused forged checkpoint changed the statistics", tide_last_error());
        bool same = nlater == nnow;
        for (size_t i = 0; same && i < nnow; i++)
            same = same_block(&now[i], &later[i]);
        if (!same)
            die("a refused forged checkpoint changed the pool's blocks", tide_last_error());
        if (memcmp(c0.calls, c1.calls, sizeof c0.calls) != 0)
            die("a refused forged checkpoint called the device", tide_last_error());
        return;
    }
}

static void op_pool(struct world *w, unsigned what)
{
    static uint8_t foreign[4096];
    switch (what) {
    case 0: /* a new pool, or the one in use released */
        if (w->pool && w->pool_live) {
            if (tide_pool_release(w->t, w->pool) != TIDE_OK)
                die("tide_pool_release failed", tide_last_error());
            w->pool_live = false;
        } else {
            if (tide_pool_create(w->t, &w->pool) != TIDE_OK)
                die("tide_pool_create failed", tide_last_error());
            w->pool_live = true;
            w->have_checkpoint = false;
        }
        SAY("pool %llu %s\n", (unsigned long long)w->pool, w->pool_live ? "created" : "released");
        break;
    case 1:
        if (w->pool)
            malloc_in(w, w->pool);
        break;
    case 2: /* a capture begins, or one ends */
        if (w->captures < 2 && (byte(w) & 1 || w->captures == 0)) {
            if (tide_capture_begin(w->t) != TIDE_OK)
                die("tide_capture_begin failed", tide_last_error());
            w->captures++;
        } else if (w->captures) {
            if (tide_capture_end(w->t) != TIDE_OK)
                die("tide_capture_end failed", tide_last_error());
            w->captures--;
        } else {
            EXPECT_REJECTED(w, tide_capture_end(w->t), TIDE_EINVAL);
        }
        SAY("captures underway: %d\n", w->captures);
        break;
    case 3: /* a checkpoint */
        if (!w->pool)
            break;
        if (tide_pool_blocks(w->t, w->pool, w->checkpoint, MAX_BLOCKS, &w->ncheckpoint) != TIDE_OK)
            die("tide_pool_blocks failed", tide_last_error());
        if (w->ncheckpoint > MAX_BLOCKS)
            die("the pool lists more blocks than the program holds", NULL);
        w->have_checkpoint = true;
        SAY("checkpoint: %zu blocks\n", w->ncheckpoint);
        break;
    case 4: { /* back to the checkpoint */
        if (!w->have_checkpoint || !w->pool_live)
            break;
        if (w->captures) {
            EXPECT_REJECTED(w, tide_pool_restore(w->t, w->pool, w->checkpoint, w->ncheckpoint), TIDE_EBUSY);
            break;
        }
        for (int i = 0; i < w->nblocks; i++)
            if (in_current_pool(w, &w->blocks[i]) && w->blocks[i].host_refs > 0)
                return; /* memory the program holds a reference to: TIDE_EBUSY, by design */
        open_all_gates(w); /* the restore may wait for the device */
        tide_sim_counters before, after;
        tide_sim_get_counters(sim, &before);
        tide_status s = tide_pool_restore(w->t, w->pool, w->checkpoint, w->ncheckpoint);
        tide_sim_get_counters(sim, &after);
        SAY("restore %zu blocks -> %s\n", w->ncheckpoint, tide_status_name(s));
        /* Only a device fault can leave a freed block waiting (TIDE_EBUSY) or fail a guard check. */
        bool faulted = false;
        for (int op = 0; op < TIDE_SIM_OP_COUNT; op++)
            faulted |= after.failures[op] != before.failures[op];
        if (s != TIDE_OK && !(faulted && (s == TIDE_EBUSY || s == TIDE_EDEVICE)))
            die("tide_pool_restore failed unexpectedly", tide_last_error());
        after_restore(w, s, w->checkpoint, w->ncheckpoint);
        break;
    }
    default: { /* checkpoints that are not the pool's */
        tide_pool_block bad[2];
        tide_status want = w->captures ? TIDE_EBUSY : TIDE_EINVAL;
        if (!w->pool) {
            EXPECT_REJECTED(w, tide_pool_restore(w->t, 12345, NULL, 0), TIDE_EINVAL);
            break;
        }
        if (!w->pool_live) {
            EXPECT_REJECTED(w, tide_pool_restore(w->t, w->pool, NULL, 0), TIDE_EINVAL);
            break;
        }
        bad[0] = (tide_pool_block){.ptr = (uintptr_t)foreign + 512, .size = 512, .requested = 100, .stream = 0};
        EXPECT_REJECTED(w, tide_pool_restore(w->t, w->pool, bad, 1), want);
        if (w->have_checkpoint && w->ncheckpoint >= 2) {
            bad[0] = w->checkpoint[1];
            bad[1] = w->checkpoint[0];
            EXPECT_REJECTED(w, tide_pool_restore(w->t, w->pool, bad, 2), want);
        }
        if (w->have_checkpoint && w->ncheckpoint >= 1) {
            bad[0] = w->checkpoint[0];
            bad[0].requested = bad[0].size + 1;
            EXPECT_REJECTED(w, tide_pool_restore(w->t, w->pool, bad, 1), want);
        }
        op_forged_restore(w);
        break;
    }
    }
}

/* The sleepable pool: made, allocated in, put to sleep (contents offloaded or discarded), woken. A
 * call that meets an injected fault must say so, leave the pool asleep (unless the sleep's
 * synchronize failed first), and the next call finishes; after a wake every block whose contents were
 * offloaded has its pattern, and a discarded one is written again, as the program would. */
static void op_sleep(struct world *w, unsigned what)
{
    if (!w->sleepy) {
        if (tide_pool_create(w->t, &w->sleepy) != TIDE_OK || tide_pool_make_sleepable(w->t, w->sleepy) != TIDE_OK)
            die("making a sleepable pool failed", tide_last_error());
        SAY("sleepable pool %llu\n", (unsigned long long)w->sleepy);
        return;
    }
    tide_sim_counters c0, c1;
    tide_sim_get_counters(sim, &c0);
    tide_status s = TIDE_OK;
    switch (what) {
    case 0: case 4:
        malloc_in(w, w->sleepy);
        return;
    case 1: case 2: { /* sleep: offload, or discard */
        if (w->captures) {
            EXPECT_REJECTED(w, tide_pool_sleep(w->t, w->sleepy, what == 1 ? TIDE_SLEEP_OFFLOAD : 0), TIDE_EBUSY);
            return;
        }
        open_all_gates(w); /* the sleep synchronizes */
        s = tide_pool_sleep(w->t, w->sleepy, what == 1 ? TIDE_SLEEP_OFFLOAD : TIDE_SLEEP_DISCARD);
        SAY("sleep (%s) -> %s\n", what == 1 ? "offload" : "discard", tide_status_name(s));
        if (what == 2)
            for (int i = 0; i < w->nblocks; i++)
                w->blocks[i].lost |= w->blocks[i].in_sleepy;
        break;
    }
    case 3: { /* wake */
        if (w->captures) {
            if (w->asleep)
                EXPECT_REJECTED(w, tide_pool_wake(w->t, w->sleepy), TIDE_EBUSY);
            return;
        }
        s = tide_pool_wake(w->t, w->sleepy);
        SAY("wake -> %s\n", tide_status_name(s));
        break;
    }
    default: { /* what a sleeping pool refuses, and bad flags */
        EXPECT_REJECTED(w, tide_pool_sleep(w->t, w->sleepy, 0x80), TIDE_EINVAL);
        if (w->asleep)
            EXPECT_REJECTED(w, tide_pool_restore(w->t, w->sleepy, NULL, 0), TIDE_EINVAL);
        return;
    }
    }
    tide_sim_get_counters(sim, &c1);
    bool faulted = false;
    for (int op = 0; op < TIDE_SIM_OP_COUNT; op++)
        faulted |= c1.failures[op] != c0.failures[op];
    if (s != TIDE_OK && !(faulted && (s == TIDE_EDEVICE || s == TIDE_EHOSTMEM || s == TIDE_ENOMEM)) &&
        !(what == 3 && s == TIDE_ENOMEM)) /* a wake may find the limit or the device full */
        die("tide_pool_sleep or tide_pool_wake failed unexpectedly", tide_last_error());
    uint32_t sleeping = 0;
    if (tide_pool_sleeping(w->t, w->sleepy, &sleeping) != TIDE_OK)
        die("tide_pool_sleeping failed", tide_last_error());
    if (s != TIDE_OK && what == 3 && !sleeping)
        die("a wake that failed left the pool awake", NULL);
    if (s == TIDE_OK && (what == 3) == (sleeping != 0))
        die("a sleep or wake that succeeded left the pool in the wrong state", NULL);
    bool woke = w->asleep && !sleeping;
    w->asleep = sleeping != 0;
    if (!woke)
        return;
    for (int i = 0; i < w->nblocks; i++) { /* offloaded contents are back; discarded ones are written again */
        struct block *b = &w->blocks[i];
        if (!b->in_sleepy || !b->live)
            continue;
        if (b->lost) {
            stamp(b);
            b->lost = false;
        } else if (!stamp_intact(b->p, b->size, b->tag)) {
            die("a block of a woken pool lost its offloaded contents", NULL);
        }
    }
}

static const char *const configs[] = {
    "",
    "limit:256MiB",
    "garbage_collection_threshold:0.5,limit:512MiB",
    "max_split_size_mb:24",
    "trim_on_growth:False",
    "debug:1",
    "guard:True", /* canaries around blocks (scrub is left out: the harness writes blocks from the host
                     at once, where a scrub still queued on the stream would overwrite them) */
    "expandable_segments:True",
    "expandable_segments:True,limit:256MiB,garbage_collection_threshold:0.5",
};

int LLVMFuzzerInitialize(int *argc, char ***argv);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
    (void)argc;
    (void)argv;
    unsetenv("TIDEPOOL_CONF");
    verbose = getenv("FUZZ_VERBOSE") && *getenv("FUZZ_VERBOSE") == '1';
    tide_sim_options o = {sizeof o, DEVICE_BYTES, 0};
    if (tide_sim_create(&o, &sim) != TIDE_OK)
        die("tide_sim_create failed", tide_last_error());
    backend = tide_sim_backend(sim);
    sim_streams[0] = 0;
    for (int i = 1; i < STREAMS; i++)
        if (tide_sim_stream_create(sim, &sim_streams[i]) != TIDE_OK)
            die("tide_sim_stream_create failed", tide_last_error());
    return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    static struct world w;
    memset(&w, 0, sizeof w);
    w.in = data;
    w.len = size;
    memcpy(w.streams, sim_streams, sizeof w.streams);
    for (int i = 0; i < MAX_KERNELS; i++) {
        pthread_mutex_init(&w.kernels[i].m, NULL);
        pthread_cond_init(&w.kernels[i].c, NULL);
    }
    const char *conf = configs[byte(&w) % (sizeof configs / sizeof *configs)];
    w.guard = strstr(conf, "guard:True") ? 512 : 0;
    if (tide_create(&backend, conf, &w.t) != TIDE_OK)
        die("tide_create failed", tide_last_error());

    while (w.pos < w.len) {
        unsigned op = byte(&w);
        if (op >= 250) { /* the top six opcodes: pools, captures, checkpoints */
            op_pool(&w, op - 250);
            if (tide_check(w.t) != TIDE_OK)
                die("tide_check failed", tide_last_error());
            continue;
        }
        if (op >= 244) { /* the six below them: the sleepable pool */
            op_sleep(&w, op - 244);
            if (tide_check(w.t) != TIDE_OK)
                die("tide_check failed", tide_last_error());
            continue;
        }
        switch (op % 13) {
        case 0: case 1: case 2: op_malloc(&w); break;
        case 3: case 4: op_free(&w); break;
        case 5: op_kernel(&w); break;
        case 6: op_advance_stream(&w); break;
        case 7: op_host_reference(&w); break;
        case 8: op_empty_cache(&w); break;
        case 9: op_trim(&w); op_stats(&w); break;
        case 10: op_limit(&w); break;
        case 11: op_invalid(&w); op_config(&w); break;
        default: op_fault(&w); break;
        }
        if (tide_check(w.t) != TIDE_OK)
            die("tide_check failed", tide_last_error());
    }

    /* The end: the device finishes, the program lets go of everything, nothing is left anywhere. */
    clear_faults();
    for (; w.captures > 0; w.captures--)
        if (tide_capture_end(w.t) != TIDE_OK)
            die("tide_capture_end at the end failed", tide_last_error());
    open_all_gates(&w);
    if (tide_sim_synchronize(sim) != TIDE_OK)
        die("tide_sim_synchronize failed", tide_last_error());
    for (int i = 0; i < w.nblocks; i++) {
        struct block *b = &w.blocks[i];
        if (b->live && tide_free(w.t, b->p) != TIDE_OK)
            die("tide_free at the end failed", tide_last_error());
        for (; b->host_refs > 0; b->host_refs--)
            if (tide_release(w.t, b->p) != TIDE_OK)
                die("tide_release at the end failed", tide_last_error());
    }
    if (w.pool_live && tide_pool_release(w.t, w.pool) != TIDE_OK)
        die("tide_pool_release at the end failed", tide_last_error());
    /* A sleeping pool is left asleep: tide_destroy gives back its ranges and host copies too. */
    if (w.sleepy && tide_pool_release(w.t, w.sleepy) != TIDE_OK)
        die("tide_pool_release of the sleepable pool at the end failed", tide_last_error());
    tide_stats s = stats_now(w.t);
    if (s.allocation[TIDE_POOL_ALL].current != 0)
        die("allocations counted after every block was freed", NULL);
    if (tide_destroy(w.t) != TIDE_OK)
        die("tide_destroy did not end clean", tide_last_error());
    tide_sim_counters c;
    tide_sim_get_counters(sim, &c);
    if (c.held_bytes != 0 || c.held_segments != 0 || c.live_fences != 0 || c.host_bytes != 0)
        die("the device still holds memory, fences or host copies after tide_destroy", NULL);
    for (int i = 0; i < MAX_KERNELS; i++) {
        pthread_mutex_destroy(&w.kernels[i].m);
        pthread_cond_destroy(&w.kernels[i].c);
    }
    return 0;
}

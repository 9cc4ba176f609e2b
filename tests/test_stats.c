/*
 * Statistics: the identities between them hold at every point, peaks rise and reset, each peak is the
 * highest value seen between two calls (with one stream), the versioned struct fills only what the
 * caller knows, and the JSON carries the same numbers under PyTorch's names.
 */
#include "harness.h"
#include "internal.h" /* stats_to_json, for statistics no allocator reaches */

#include <ctype.h>
#include <errno.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <time.h>

#define ALL TIDE_POOL_ALL

static void check_identities(const tide_stats *s)
{
    for (int k = 0; k < TIDE_POOL_COUNT; k++) {
        CHECK(s->reserved_bytes[k].current ==
              s->allocated_bytes[k].current + s->pending_free_bytes[k].current + s->cached_bytes[k].current);
        CHECK(s->active_bytes[k].current == s->allocated_bytes[k].current + s->pending_free_bytes[k].current);
        CHECK(s->inactive_split_bytes[k].current <= s->cached_bytes[k].current);
        CHECK(s->requested_bytes[k].current <= s->allocated_bytes[k].current);
        CHECK(s->allocated_bytes[k].peak >= s->allocated_bytes[k].current);
    }
    /* The pools add up to the total. */
    CHECK(s->allocated_bytes[ALL].current ==
          s->allocated_bytes[TIDE_POOL_SMALL].current + s->allocated_bytes[TIDE_POOL_LARGE].current);
    CHECK(s->reserved_bytes[ALL].current ==
          s->reserved_bytes[TIDE_POOL_SMALL].current + s->reserved_bytes[TIDE_POOL_LARGE].current);
}

static void test_identities_hold_throughout(void)
{
    struct fixture f;
    fixture_open(&f, 0, NULL);
    void *p[40];
    uint64_t rng = 5;
    for (int i = 0; i < 40; i++) {
        CHECK_OK(tide_malloc(f.t, (size_t)(rng_next(&rng) % (8 * MIB)) + 1, 0, &p[i]));
        tide_stats s = stats_of(f.t);
        check_identities(&s);
        if (i % 3 == 0)
            CHECK_OK(tide_retain(f.t, p[i]));
    }
    for (int i = 0; i < 40; i++) {
        CHECK_OK(tide_free(f.t, p[i]));
        tide_stats s = stats_of(f.t);
        check_identities(&s);
    }
    tide_stats s = stats_of(f.t);
    CHECK(s.pending_free_blocks[ALL].current == 14);
    for (int i = 0; i < 40; i += 3)
        CHECK_OK(tide_release(f.t, p[i]));
    s = stats_of(f.t);
    check_identities(&s);
    CHECK(s.pending_free_blocks[ALL].current == 0);
    CHECK(s.pending_free_blocks[ALL].peak == 14);
    fixture_close(&f);
}

static void test_peaks_and_reset(void)
{
    struct fixture f;
    fixture_open(&f, 0, NULL);
    void *a, *b;
    CHECK_OK(tide_malloc(f.t, 30 * MIB, 0, &a));
    CHECK_OK(tide_malloc(f.t, 10 * MIB, 0, &b));
    CHECK_OK(tide_free(f.t, a));
    tide_stats s = stats_of(f.t);
    CHECK(s.allocated_bytes[ALL].peak == (int64_t)(40 * MIB));
    CHECK(s.allocated_bytes[ALL].current == (int64_t)(10 * MIB));
    CHECK(s.reserved_bytes[ALL].peak == (int64_t)(40 * MIB));
    CHECK_OK(tide_empty_cache(f.t, NULL));
    CHECK_OK(tide_reset_peak_stats(f.t));
    s = stats_of(f.t);
    CHECK(s.allocated_bytes[ALL].peak == (int64_t)(10 * MIB));
    CHECK(s.reserved_bytes[ALL].peak == (int64_t)(10 * MIB));
    CHECK(s.cached_bytes[ALL].peak == 0);
    CHECK_OK(tide_free(f.t, b));
    fixture_close(&f);
}

static void test_versioned_struct(void)
{
    struct fixture f;
    fixture_open(&f, 0, NULL);
    void *p;
    CHECK_OK(tide_malloc(f.t, 4096, 0, &p));
    /* An older caller that knows only the first few fields: nothing past them is written. */
    tide_stats s;
    memset(&s, 0xAB, sizeof s);
    s.struct_size = (uint32_t)(offsetof(tide_stats, allocated_bytes));
    CHECK_OK(tide_get_stats(f.t, &s));
    CHECK(s.version == TIDE_STATS_VERSION);
    CHECK(s.reserved_bytes[ALL].current == (int64_t)(2 * MIB));
    const uint8_t *rest = (const uint8_t *)&s.allocated_bytes;
    CHECK(rest[0] == 0xAB && rest[sizeof s.allocated_bytes - 1] == 0xAB);
    CHECK_OK(tide_free(f.t, p));
    fixture_close(&f);
}

/* The value of a flat key in the JSON text, or -1. */
static long long json_value(const char *json, const char *key)
{
    char quoted[128];
    snprintf(quoted, sizeof quoted, "\"%s\": ", key);
    const char *at = strstr(json, quoted);
    return at ? strtoll(at + strlen(quoted), NULL, 10) : -1;
}

static void test_json_has_pytorch_names_and_same_numbers(void)
{
    struct fixture f;
    fixture_open(&f, 0, "limit:8GiB");
    void *a, *b;
    CHECK_OK(tide_malloc(f.t, 1000, 0, &a));
    CHECK_OK(tide_malloc(f.t, 5 * MIB, 0, &b));
    CHECK_OK(tide_retain(f.t, b));
    CHECK_OK(tide_free(f.t, b));
    size_t need = 0;
    CHECK_STATUS(tide_stats_json(f.t, NULL, 0, &need), TIDE_EINVAL);
    char *json = malloc(need + 1);
    CHECK_OK(tide_stats_json(f.t, json, need + 1, &need));
    CHECK(strlen(json) == need);
    tide_stats s = stats_of(f.t);
    CHECK(json_value(json, "allocated_bytes.all.current") == s.allocated_bytes[ALL].current);
    CHECK(json_value(json, "allocated_bytes.small_pool.current") == 1024);
    CHECK(json_value(json, "reserved_bytes.large_pool.peak") == (long long)(20 * MIB));
    CHECK(json_value(json, "pending_free_bytes.all.current") == (long long)(5 * MIB));
    CHECK(json_value(json, "pending_free_blocks.all.current") == 1);
    CHECK(json_value(json, "requested_bytes.all.current") == 1000);
    CHECK(json_value(json, "inactive_split_bytes.all.current") == s.inactive_split_bytes[ALL].current);
    CHECK(json_value(json, "num_device_alloc") == 2);
    CHECK(json_value(json, "num_ooms") == 0);
    CHECK(json_value(json, "limit_bytes") == (long long)(8 * GIB));
    CHECK(json[0] == '{' && strstr(json, "}\n") != NULL);
    free(json);
    CHECK_OK(tide_release(f.t, b));
    CHECK_OK(tide_free(f.t, a));
    fixture_close(&f);
}

/* key's value in a JSON text, read strictly as the type its field has: digits alone for a uint64_t
 * (strtoull would take "-1" as 2^64 - 1), and the whole number up to the next ',' or '\n'. */
static bool json_u64(const char *json, const char *key, uint64_t *out)
{
    char quoted[160];
    snprintf(quoted, sizeof quoted, "\"%s\": ", key);
    const char *at = strstr(json, quoted);
    if (!at || !isdigit((unsigned char)at[strlen(quoted)]))
        return false;
    char *end;
    errno = 0;
    unsigned long long v = strtoull(at + strlen(quoted), &end, 10);
    *out = v;
    return errno == 0 && (*end == ',' || *end == '\n');
}

static bool json_i64(const char *json, const char *key, int64_t *out)
{
    char quoted[160];
    snprintf(quoted, sizeof quoted, "\"%s\": ", key);
    const char *at = strstr(json, quoted);
    if (!at)
        return false;
    char *end;
    errno = 0;
    long long v = strtoll(at + strlen(quoted), &end, 10);
    *out = v;
    return errno == 0 && (*end == ',' || *end == '\n');
}

/* Every number in the JSON is written in its field's own type, so each extreme comes back as it was:
 * 0, 2^53 + 1, 2^63 and 2^64 - 1 in the uint64_t fields, INT64_MIN and INT64_MAX in the int64_t
 * statistics (which no allocator reaches, so the struct is made up here); and through the public calls,
 * a limit of SIZE_MAX and of 2^63, which tide_set_limit accepts, in tide_stats_json and the snapshot. */
static void test_json_numbers_are_exact(void)
{
    static const uint64_t uextremes[] = {0, ((uint64_t)1 << 53) + 1, (uint64_t)1 << 63, UINT64_MAX};
    static const int64_t iextremes[] = {INT64_MIN, INT64_MAX, 0, -1};
    static const char *const pools[TIDE_POOL_COUNT] = {"all", "small_pool", "large_pool"};
    for (size_t e = 0; e < sizeof uextremes / sizeof uextremes[0]; e++) {
        tide_stats s;
        memset(&s, 0, sizeof s);
        const struct {
            const char *name;
            uint64_t *field;
        } counts[] = {
            {"num_alloc_retries", &s.num_alloc_retries},       {"num_ooms", &s.num_ooms},
            {"num_device_alloc", &s.num_device_alloc},         {"num_device_free", &s.num_device_free},
            {"num_sync_all_streams", &s.num_sync_all_streams}, {"num_pending_drained", &s.num_pending_drained},
            {"num_gc_released", &s.num_gc_released},           {"num_fence_errors", &s.num_fence_errors},
            {"limit_bytes", &s.limit_bytes},                   {"gc_threshold_bytes", &s.gc_threshold_bytes},
            {"device_total_bytes", &s.device_total_bytes},     {"num_streams", &s.num_streams},
            {"device_call_ns", &s.device_call_ns},             {"sleep_host_cached_bytes", &s.sleep_host_cached_bytes},
        };
        const struct {
            const char *name;
            tide_stat *stat;
        } stats[] = {
            {"reserved_bytes", s.reserved_bytes},         {"allocated_bytes", s.allocated_bytes},
            {"requested_bytes", s.requested_bytes},       {"active_bytes", s.active_bytes},
            {"pending_free_bytes", s.pending_free_bytes}, {"cached_bytes", s.cached_bytes},
            {"inactive_split_bytes", s.inactive_split_bytes}, {"allocation", s.allocation},
            {"segment", s.segment},                       {"pending_free_blocks", s.pending_free_blocks},
        };
        size_t ncounts = sizeof counts / sizeof counts[0], nstats = sizeof stats / sizeof stats[0];
        for (size_t i = 0; i < ncounts; i++)
            *counts[i].field = uextremes[(e + i) % 4];
        for (size_t i = 0; i < nstats; i++)
            for (int k = 0; k < TIDE_POOL_COUNT; k++) {
                stats[i].stat[k].current = iextremes[(e + i + (size_t)k) % 4];
                stats[i].stat[k].peak = iextremes[(e + i + (size_t)k + 1) % 4];
            }
        size_t need = stats_to_json(&s, NULL, 0);
        char *json = malloc(need + 1);
        CHECK(json && stats_to_json(&s, json, need + 1) == need && strlen(json) == need);
        for (size_t i = 0; json && i < ncounts; i++) {
            uint64_t v = 1;
            if (!json_u64(json, counts[i].name, &v) || v != *counts[i].field) {
                fprintf(stderr, "%s: wrote %llu, read back %llu\n", counts[i].name,
                        (unsigned long long)*counts[i].field, (unsigned long long)v);
                harness_failures++;
            }
        }
        for (size_t i = 0; json && i < nstats; i++)
            for (int k = 0; k < TIDE_POOL_COUNT; k++)
                for (int peak = 0; peak < 2; peak++) {
                    char key[128];
                    snprintf(key, sizeof key, "%s.%s.%s", stats[i].name, pools[k], peak ? "peak" : "current");
                    int64_t want = peak ? stats[i].stat[k].peak : stats[i].stat[k].current, v = 1;
                    if (!json_i64(json, key, &v) || v != want) {
                        fprintf(stderr, "%s: wrote %lld, read back %lld\n", key, (long long)want, (long long)v);
                        harness_failures++;
                    }
                }
        free(json);
    }

    struct fixture f;
    fixture_open(&f, 0, NULL);
    static const size_t limits[] = {SIZE_MAX, (size_t)1 << 63};
    for (size_t i = 0; i < 2; i++) {
        CHECK_OK(tide_set_limit(f.t, limits[i]));
        char json[8192];
        uint64_t v = 0;
        CHECK_OK(tide_stats_json(f.t, json, sizeof json, NULL));
        CHECK(json_u64(json, "limit_bytes", &v) && v == limits[i]);
        char *snapshot = NULL;
        CHECK_OK(tide_snapshot_json(f.t, &snapshot));
        v = 0;
        CHECK(snapshot && json_u64(snapshot, "limit_bytes", &v) && v == limits[i]);
        tide_string_free(snapshot);
    }
    fixture_close(&f);
}

static void test_several_streams_add_up(void)
{
    struct fixture f;
    fixture_open(&f, 0, NULL);
    tide_stream s1, s2;
    CHECK_OK(tide_sim_stream_create(f.sim, &s1));
    CHECK_OK(tide_sim_stream_create(f.sim, &s2));
    void *a, *b;
    CHECK_OK(tide_malloc(f.t, 3 * MIB, s1, &a));
    CHECK_OK(tide_malloc(f.t, 4096, s2, &b));
    tide_stats s = stats_of(f.t);
    CHECK(s.num_streams == 2);
    CHECK(s.allocated_bytes[ALL].current == (int64_t)(3 * MIB + 4096));
    CHECK(s.reserved_bytes[ALL].current == (int64_t)(18 * MIB + 2 * MIB)); /* six of 3 MiB; small */
    CHECK(s.segment[ALL].current == 2);
    check_identities(&s);
    CHECK_OK(tide_free(f.t, a));
    CHECK_OK(tide_free(f.t, b));
    fixture_close(&f);
}

/* ---- peaks are exact ------------------------------------------------------------------------------- */

/* Every statistic of one pool, in the order of tide_stats. */
#define STAT_KINDS 10
static const tide_stat *stat_of(const tide_stats *s, int kind, int pool)
{
    const tide_stat *kinds[STAT_KINDS] = {
        s->reserved_bytes,       s->allocated_bytes, s->requested_bytes, s->active_bytes,
        s->pending_free_bytes,   s->cached_bytes,    s->inactive_split_bytes,
        s->allocation,           s->segment,         s->pending_free_blocks,
    };
    return &kinds[kind][pool];
}
static const char *const stat_names[STAT_KINDS] = {
    "reserved_bytes", "allocated_bytes", "requested_bytes", "active_bytes", "pending_free_bytes",
    "cached_bytes",   "inactive_split_bytes", "allocation", "segment", "pending_free_blocks",
};

/* The highest current value each statistic showed after any call so far, as a program polling
 * tide_get_stats after every call would see it. */
struct seen_peaks {
    int64_t peak[STAT_KINDS][TIDE_POOL_COUNT];
};

static void seen_reset(struct seen_peaks *seen, const tide_stats *s)
{
    for (int kind = 0; kind < STAT_KINDS; kind++)
        for (int pool = 0; pool < TIDE_POOL_COUNT; pool++)
            seen->peak[kind][pool] = stat_of(s, kind, pool)->current;
}

/* With one stream, each peak is exact: the highest value the statistic had between two calls, no
 * more (a value passed through inside a call does not count) and no less. With several, each stream's
 * peaks are summed, an upper bound, but all pools' reserved bytes stay exact. Returns the mismatches. */
static int peaks_match(struct seen_peaks *seen, const tide_stats *s, int step, const char *conf,
                       const char *call, bool one_stream)
{
    int mismatches = 0;
    for (int kind = 0; kind < STAT_KINDS; kind++)
        for (int pool = 0; pool < TIDE_POOL_COUNT; pool++) {
            const tide_stat *st = stat_of(s, kind, pool);
            int64_t *p = &seen->peak[kind][pool];
            if (st->current > *p)
                *p = st->current;
            bool exact = one_stream || (kind == 0 && pool == TIDE_POOL_ALL); /* reserved_bytes.all */
            if (exact ? st->peak != *p : st->peak < *p) {
                fprintf(stderr, "config \"%s\", step %d (%s): %s[%d].peak is %lld, the highest value seen "
                        "%lld\n", conf, step, call, stat_names[kind], pool, (long long)st->peak, (long long)*p);
                mismatches++;
            }
        }
    return mismatches;
}

/* A size from 1 byte to 32 MiB, about log-uniform, so both pools see splits, merges and new segments. */
static size_t random_size(uint64_t *rng)
{
    unsigned bits = (unsigned)(rng_next(rng) % 26);
    return (size_t)(rng_next(rng) % ((size_t)1 << bits)) + 1;
}

static void no_work(void *arg) { (void)arg; }

/* Random calls, allocating on one stream (or on two, taking turns by slot): allocations of both pools,
 * frees, blocks held by a reference (tide_retain, PENDING until tide_release) or used by another stream
 * with work queued on it (PENDING until its fence signals, drained by a later tide_malloc), emptying,
 * trimming and resets. The peaks are compared after every call (peaks_match). */
static void peaks_over_random_calls(const char *conf, uint64_t seed, bool one_stream)
{
    enum { SLOTS = 48, STEPS = 6000 };
    struct fixture f;
    fixture_open(&f, 4 * GIB, conf);
    tide_stream other, second;
    CHECK_OK(tide_sim_stream_create(f.sim, &other));
    CHECK_OK(tide_sim_stream_create(f.sim, &second));
    void *live[SLOTS] = {0};
    bool retained[SLOTS] = {0};
    void *pending[SLOTS];            /* freed while retained: PENDING until released */
    int npending = 0;
    uint64_t rng = seed;
    struct seen_peaks seen;
    tide_stats s = stats_of(f.t);
    seen_reset(&seen, &s);
    int mismatches = 0;
    for (int step = 0; step < STEPS && mismatches == 0; step++) {
        unsigned slot = (unsigned)(rng_next(&rng) % SLOTS), what = (unsigned)(rng_next(&rng) % 100);
        const char *call = "tide_free";
        if (what < 2) {
            call = "tide_empty_cache";
            CHECK_OK(tide_empty_cache(f.t, NULL));
        } else if (what < 4) {
            call = "tide_trim";
            tide_status st = tide_trim(f.t, (size_t)(rng_next(&rng) % (256 * MIB)), NULL);
            CHECK(st == TIDE_OK || st == TIDE_EBUSY); /* EBUSY: the target is below what is in use */
        } else if (what < 5) {
            call = "tide_reset_peak_stats";
            CHECK_OK(tide_reset_peak_stats(f.t));
            s = stats_of(f.t);
            seen_reset(&seen, &s);
        } else if (what < 15 && npending > 0) {
            call = "tide_release";
            unsigned k = (unsigned)(rng_next(&rng) % (unsigned)npending);
            CHECK_OK(tide_release(f.t, pending[k]));
            pending[k] = pending[--npending];
        } else if (live[slot] == NULL) {
            call = "tide_malloc";
            tide_stream stream = one_stream || slot % 2 == 0 ? 0 : second;
            CHECK_OK(tide_malloc(f.t, random_size(&rng), stream, &live[slot]));
            unsigned held = (unsigned)npending; /* pending[] has room for every retained block */
            for (unsigned i = 0; i < SLOTS; i++)
                held += live[i] && retained[i];
            retained[slot] = what % 4 == 0 && held < SLOTS;
            if (retained[slot])
                CHECK_OK(tide_retain(f.t, live[slot]));
            if (what % 4 == 1) {
                CHECK_OK(tide_sim_enqueue(f.sim, other, (uint32_t)(rng_next(&rng) % 200), no_work, NULL));
                CHECK_OK(tide_record_stream(f.t, live[slot], other));
            }
        } else {
            CHECK_OK(tide_free(f.t, live[slot]));
            if (retained[slot])
                pending[npending++] = live[slot];
            live[slot] = NULL;
        }
        s = stats_of(f.t);
        mismatches += peaks_match(&seen, &s, step, conf, call, one_stream);
        if (step % 64 == 0)
            CHECK_OK(tide_check(f.t)); /* the validator: no peak below its value, among the rest */
    }
    CHECK(mismatches == 0);
    while (npending > 0)
        CHECK_OK(tide_release(f.t, pending[--npending]));
    for (unsigned i = 0; i < SLOTS; i++)
        if (live[i]) {
            if (retained[i])
                CHECK_OK(tide_release(f.t, live[i]));
            CHECK_OK(tide_free(f.t, live[i]));
        }
    fixture_close(&f);
}

static void test_peaks_are_exact_with_one_stream(void)
{
    peaks_over_random_calls("", 11, true);
    peaks_over_random_calls("expandable_segments:True", 12, true);
    peaks_over_random_calls("garbage_collection_threshold:0.5", 13, true);
}

static void test_peaks_bound_the_truth_with_two_streams(void)
{
    peaks_over_random_calls("", 21, false);
    peaks_over_random_calls("expandable_segments:True", 22, false);
}

/* ---- a tide_malloc seen from another thread between its drain and its fit --------------------------- */

/* A tide_malloc that drains PENDING blocks and then finds no fit lets the heap's lock go on its way to
 * pressure_malloc, which settles the peaks. Another thread can look in between: it must never find a
 * peak below its value, neither through tide_get_stats nor through the validator. */
struct onlooker {
    tide_allocator *t;
    atomic_int stop, peaks_below, check_failures, looks;
};

static void *look_on(void *arg)
{
    struct onlooker *o = arg;
    while (!atomic_load(&o->stop)) {
        if (tide_check(o->t) != TIDE_OK && atomic_fetch_add(&o->check_failures, 1) == 0)
            fprintf(stderr, "onlooker: %s\n", tide_last_error());
        tide_stats s = stats_of(o->t);
        for (int k = 0; k < TIDE_POOL_COUNT; k++)
            if (s.cached_bytes[k].peak < s.cached_bytes[k].current ||
                s.inactive_split_bytes[k].peak < s.inactive_split_bytes[k].current)
                atomic_fetch_add(&o->peaks_below, 1);
        atomic_fetch_add(&o->looks, 1);
    }
    return NULL;
}

static void test_peaks_never_below_values_another_thread_sees(void)
{
    struct fixture f;
    fixture_open(&f, 64 * GIB, NULL);
    tide_stream other;
    CHECK_OK(tide_sim_stream_create(f.sim, &other));
    struct onlooker o = {.t = f.t};
    pthread_t thread;
    CHECK(pthread_create(&thread, NULL, look_on, &o) == 0);
    for (int i = 0; i < 600; i++) {
        size_t size = (size_t)(i % 20 + 1) * 2 * MIB + 4096;
        void *p, *q;
        CHECK_OK(tide_malloc(f.t, size, 0, &p));
        CHECK_OK(tide_sim_enqueue(f.sim, other, 0, no_work, NULL));
        CHECK_OK(tide_record_stream(f.t, p, other));
        CHECK_OK(tide_free(f.t, p)); /* PENDING until the other stream's fence */
        CHECK_OK(tide_sim_stream_synchronize(f.sim, other));
        CHECK_OK(tide_reset_peak_stats(f.t)); /* so that the drain below raises the cache past its peak */
        CHECK_OK(tide_malloc(f.t, size + 2 * MIB, 0, &q)); /* drains p, finds no fit, grows */
        CHECK_OK(tide_free(f.t, q));
        CHECK_OK(tide_empty_cache(f.t, NULL));
    }
    atomic_store(&o.stop, 1);
    pthread_join(thread, NULL);
    CHECK(atomic_load(&o.looks) > 0);
    CHECK(atomic_load(&o.peaks_below) == 0);
    CHECK(atomic_load(&o.check_failures) == 0);
    fixture_close(&f);
}

/* ---- device_call_ns: the time the backend's memory calls took ----------------------------------------- */

/* The simulated device's own calls, each made to take at least SLOW_CALL_NS longer. */
#define SLOW_CALL_NS 2000000ull
static tide_backend sim_calls;

static void spin_for(uint64_t ns)
{
    struct timespec a, b;
    clock_gettime(CLOCK_MONOTONIC, &a);
    do
        clock_gettime(CLOCK_MONOTONIC, &b);
    while ((uint64_t)(b.tv_sec - a.tv_sec) * 1000000000ull + (uint64_t)b.tv_nsec - (uint64_t)a.tv_nsec < ns);
}

static tide_status slow_reserve(void *ctx, size_t size, uintptr_t *out)
{
    spin_for(SLOW_CALL_NS);
    return sim_calls.reserve(ctx, size, out);
}

static tide_status slow_release(void *ctx, uintptr_t addr, size_t size)
{
    spin_for(SLOW_CALL_NS);
    return sim_calls.release(ctx, addr, size);
}

static tide_status slow_map(void *ctx, uintptr_t addr, size_t size)
{
    spin_for(SLOW_CALL_NS);
    return sim_calls.map(ctx, addr, size);
}

static tide_status slow_unmap(void *ctx, uintptr_t addr, size_t size)
{
    spin_for(SLOW_CALL_NS);
    return sim_calls.unmap(ctx, addr, size);
}

static uint64_t call_ns(tide_allocator *t) { return stats_of(t).device_call_ns; }

/* Each reservation, release, map and unmap adds its time; a block served from the cache adds nothing;
 * the JSON says the same number. */
static void test_device_call_time(void)
{
    for (int expandable = 0; expandable < 2; expandable++) {
        tide_sim *sim;
        CHECK_OK(tide_sim_create(NULL, &sim));
        sim_calls = tide_sim_backend(sim);
        tide_backend slow = sim_calls;
        slow.reserve = slow_reserve;
        slow.release = slow_release;
        slow.map = slow_map;
        slow.unmap = slow_unmap;
        tide_allocator *t;
        CHECK_OK(tide_create(&slow, expandable ? "expandable_segments:True" : "", &t));
        CHECK(call_ns(t) == 0);
        void *p;
        CHECK_OK(tide_malloc(t, 8 * MIB, 0, &p));
        uint64_t after_growth = call_ns(t);
        CHECK(after_growth >= SLOW_CALL_NS);
        CHECK_OK(tide_free(t, p));
        CHECK_OK(tide_malloc(t, 8 * MIB, 0, &p)); /* from the cache */
        CHECK(call_ns(t) == after_growth);
        CHECK_OK(tide_free(t, p));
        CHECK_OK(tide_empty_cache(t, NULL));
        CHECK(call_ns(t) >= after_growth + SLOW_CALL_NS);
        char json[8192];
        size_t need;
        CHECK_OK(tide_stats_json(t, json, sizeof json, &need));
        CHECK(json_value(json, "device_call_ns") == (long long)call_ns(t));
        CHECK_OK(tide_destroy(t));
        tide_sim_destroy(sim);
    }
}

int main(void)
{
    RUN(test_identities_hold_throughout);
    RUN(test_peaks_and_reset);
    RUN(test_versioned_struct);
    RUN(test_json_has_pytorch_names_and_same_numbers);
    RUN(test_json_numbers_are_exact);
    RUN(test_several_streams_add_up);
    RUN(test_peaks_are_exact_with_one_stream);
    RUN(test_peaks_bound_the_truth_with_two_streams);
    RUN(test_peaks_never_below_values_another_thread_sees);
    RUN(test_device_call_time);
    return HARNESS_EXIT();
}

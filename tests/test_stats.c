/*
 * Statistics: the identities between them hold at every point, peaks rise and reset, each peak is the
 * highest value seen between two calls (with one stream), the versioned struct fills only what the
 * caller knows, the JSON carries the same numbers under PyTorch's names, and what each statistic
 * gained and lost (PyTorch's .allocated and .freed) is exact after a known sequence of calls.
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

/* ---- accumulated statistics: what each gained and lost -------------------------------------------- */

#define ACCUMULATED 9
/* The statistics that are accumulated, their accumulated values, and their names in the JSON. */
static const tide_stat *accumulated_stat(const tide_stats *s, int i)
{
    const tide_stat *v[ACCUMULATED] = {s->allocation,      s->segment,      s->active,       s->allocated_bytes,
                                       s->reserved_bytes,  s->active_bytes, s->inactive_split_bytes,
                                       s->requested_bytes, s->inactive_split};
    return v[i];
}
static const tide_stat_accumulated *accumulated_of(const tide_stats *s, int i)
{
    const tide_stat_accumulated *v[ACCUMULATED] = {
        s->accumulated.allocation,      s->accumulated.segment,      s->accumulated.active,
        s->accumulated.allocated_bytes, s->accumulated.reserved_bytes, s->accumulated.active_bytes,
        s->accumulated.inactive_split_bytes, s->accumulated.requested_bytes, s->accumulated_inactive_split};
    return v[i];
}
static const char *const accumulated_names[ACCUMULATED] = {
    "allocation", "segment", "active", "allocated_bytes", "reserved_bytes", "active_bytes",
    "inactive_split_bytes", "requested_bytes", "inactive_split"};

/* allocated - freed is how far each statistic moved since the reset (then: the values at the reset, or
 * NULL for creation), the pools add up to the total, and nothing is negative. */
static void check_accumulated(const tide_stats *s, const tide_stats *then)
{
    for (int i = 0; i < ACCUMULATED; i++) {
        const tide_stat_accumulated *a = accumulated_of(s, i);
        for (int k = 0; k < TIDE_POOL_COUNT; k++) {
            int64_t moved = accumulated_stat(s, i)[k].current - (then ? accumulated_stat(then, i)[k].current : 0);
            if (a[k].allocated - a[k].freed != moved || a[k].allocated < 0 || a[k].freed < 0) {
                fprintf(stderr, "%s[%d]: allocated %lld, freed %lld, moved %lld\n", accumulated_names[i], k,
                        (long long)a[k].allocated, (long long)a[k].freed, (long long)moved);
                harness_failures++;
            }
        }
        CHECK(a[ALL].allocated == a[TIDE_POOL_SMALL].allocated + a[TIDE_POOL_LARGE].allocated);
        CHECK(a[ALL].freed == a[TIDE_POOL_SMALL].freed + a[TIDE_POOL_LARGE].freed);
    }
    const struct {
        const tide_stat *stat, *then;
        const tide_stat_accumulated *a;
    } oversize[] = {{&s->oversize_allocations, then ? &then->oversize_allocations : NULL, &s->accumulated.oversize_allocations},
                    {&s->oversize_segments, then ? &then->oversize_segments : NULL, &s->accumulated.oversize_segments}};
    for (int i = 0; i < 2; i++)
        CHECK(oversize[i].a->allocated - oversize[i].a->freed ==
              oversize[i].stat->current - (oversize[i].then ? oversize[i].then->current : 0));
    /* active is ACTIVE and PENDING blocks */
    for (int k = 0; k < TIDE_POOL_COUNT; k++)
        CHECK(s->active[k].current == s->allocation[k].current + s->pending_free_blocks[k].current);
}

#define EXPECT_ACC_AT(acc, name, pool, want_allocated, want_freed)                                  \
    do {                                                                                           \
        const tide_stat_accumulated *a_ = (acc);                                                   \
        if (a_->allocated != (int64_t)(want_allocated) || a_->freed != (int64_t)(want_freed)) {    \
            fprintf(stderr, "%s:%d: %s[%d]: allocated %lld, freed %lld; expected %lld, %lld\n",    \
                    __FILE__, __LINE__, name, (int)(pool), (long long)a_->allocated, (long long)a_->freed,\
                    (long long)(want_allocated), (long long)(want_freed));                         \
            harness_failures++;                                                                    \
        }                                                                                          \
    } while (0)
#define EXPECT_ACC(s, field, pool, want_allocated, want_freed)                                      \
    EXPECT_ACC_AT(&(s).accumulated.field[pool], #field, pool, want_allocated, want_freed)
/* inactive_split's, outside the accumulated struct (since version 6) */
#define EXPECT_SPLIT_BLOCKS_ACC(s, pool, want_allocated, want_freed)                                \
    EXPECT_ACC_AT(&(s).accumulated_inactive_split[pool], "inactive_split", pool, want_allocated, want_freed)

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
        check_accumulated(&s, NULL);
    }
    tide_stats s = stats_of(f.t);
    CHECK(s.pending_free_blocks[ALL].current == 14);
    for (int i = 0; i < 40; i += 3)
        CHECK_OK(tide_release(f.t, p[i]));
    s = stats_of(f.t);
    check_identities(&s);
    check_accumulated(&s, NULL);
    CHECK(s.pending_free_blocks[ALL].current == 0);
    CHECK(s.pending_free_blocks[ALL].peak == 14);
    CHECK(s.accumulated.allocation[ALL].allocated == 40 && s.accumulated.allocation[ALL].freed == 40);
    CHECK(s.accumulated.active[ALL].allocated == 40 && s.accumulated.active[ALL].freed == 40);
    CHECK(s.active[ALL].peak == 40 + 14); /* allocation's peak and pending_free_blocks', added */
    CHECK_OK(tide_check(f.t));
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
    /* A caller of version 4 (up to sleep_host_cached_bytes): the fields of version 5 stay as they were. */
    memset(&s, 0xAB, sizeof s);
    s.struct_size = (uint32_t)offsetof(tide_stats, active);
    CHECK_OK(tide_get_stats(f.t, &s));
    CHECK(s.version == TIDE_STATS_VERSION && s.allocation[ALL].current == 1 && s.sleep_host_cached_bytes == 0);
    rest = (const uint8_t *)&s.active;
    for (size_t i = 0; i < sizeof s - offsetof(tide_stats, active); i++)
        if (rest[i] != 0xAB) {
            fprintf(stderr, "byte %zu past a version 4 struct was written\n", i);
            harness_failures++;
            break;
        }
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

/* The JSON's inactive_split keys (a count, not inactive_split_bytes) carry the struct's numbers. */
static bool json_inactive_split_matches(tide_allocator *t, const tide_stats *s)
{
    char json[16384];
    if (tide_stats_json(t, json, sizeof json, NULL) != TIDE_OK)
        return false;
    return json_value(json, "inactive_split.large_pool.current") == s->inactive_split[TIDE_POOL_LARGE].current &&
           json_value(json, "inactive_split.all.peak") == s->inactive_split[TIDE_POOL_ALL].peak &&
           json_value(json, "inactive_split.all.allocated") == s->accumulated_inactive_split[TIDE_POOL_ALL].allocated &&
           json_value(json, "inactive_split.all.freed") == s->accumulated_inactive_split[TIDE_POOL_ALL].freed;
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
    /* PyTorch's .allocated and .freed, and its active and oversize statistics */
    CHECK(json_value(json, "allocation.all.allocated") == 2);
    CHECK(json_value(json, "allocation.all.freed") == 1);
    CHECK(json_value(json, "active.all.current") == 2);
    CHECK(json_value(json, "active.all.freed") == 0);
    CHECK(json_value(json, "allocated_bytes.all.allocated") == (long long)(1024 + 5 * MIB));
    CHECK(json_value(json, "allocated_bytes.large_pool.freed") == (long long)(5 * MIB));
    CHECK(json_value(json, "requested_bytes.small_pool.allocated") == 1000);
    CHECK(json_value(json, "segment.large_pool.allocated") == 1);
    CHECK(json_value(json, "segment.large_pool.freed") == 0);
    CHECK(json_value(json, "reserved_bytes.all.allocated") == (long long)(22 * MIB));
    CHECK(json_value(json, "inactive_split_bytes.all.allocated") ==
          s.accumulated.inactive_split_bytes[ALL].allocated);
    CHECK(json_value(json, "active_bytes.large_pool.freed") == 0);
    CHECK(json_value(json, "oversize_allocations.current") == 0);
    CHECK(json_value(json, "oversize_segments.allocated") == 0);
    CHECK(json_value(json, "oversize_segments.freed") == 0);
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
            {"active", s.active},
        };
        size_t ncounts = sizeof counts / sizeof counts[0], nstats = sizeof stats / sizeof stats[0];
        for (size_t i = 0; i < ncounts; i++)
            *counts[i].field = uextremes[(e + i) % 4];
        for (size_t i = 0; i < nstats; i++)
            for (int k = 0; k < TIDE_POOL_COUNT; k++) {
                stats[i].stat[k].current = iextremes[(e + i + (size_t)k) % 4];
                stats[i].stat[k].peak = iextremes[(e + i + (size_t)k + 1) % 4];
            }
        tide_stat_accumulated *acc = (tide_stat_accumulated *)(void *)&s.accumulated; /* all of that type */
        size_t nacc = sizeof s.accumulated / sizeof *acc;
        for (size_t i = 0; i < nacc; i++) {
            acc[i].allocated = iextremes[(e + i) % 4];
            acc[i].freed = iextremes[(e + i + 1) % 4];
        }
        s.oversize_allocations = (tide_stat){iextremes[e % 4], iextremes[(e + 2) % 4]};
        s.oversize_segments = (tide_stat){iextremes[(e + 1) % 4], iextremes[(e + 3) % 4]};
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
        for (int i = 0; json && i < ACCUMULATED; i++)
            for (int k = 0; k < TIDE_POOL_COUNT; k++)
                for (int freed = 0; freed < 2; freed++) {
                    char key[128];
                    snprintf(key, sizeof key, "%s.%s.%s", accumulated_names[i], pools[k], freed ? "freed" : "allocated");
                    const tide_stat_accumulated *a = &accumulated_of(&s, i)[k];
                    int64_t want = freed ? a->freed : a->allocated, v = 1;
                    if (!json_i64(json, key, &v) || v != want) {
                        fprintf(stderr, "%s: wrote %lld, read back %lld\n", key, (long long)want, (long long)v);
                        harness_failures++;
                    }
                }
        const struct {
            const char *key;
            int64_t want;
        } oversize[] = {
            {"oversize_allocations.current", s.oversize_allocations.current},
            {"oversize_allocations.peak", s.oversize_allocations.peak},
            {"oversize_allocations.allocated", s.accumulated.oversize_allocations.allocated},
            {"oversize_allocations.freed", s.accumulated.oversize_allocations.freed},
            {"oversize_segments.current", s.oversize_segments.current},
            {"oversize_segments.peak", s.oversize_segments.peak},
            {"oversize_segments.allocated", s.accumulated.oversize_segments.allocated},
            {"oversize_segments.freed", s.accumulated.oversize_segments.freed},
        };
        for (size_t i = 0; json && i < sizeof oversize / sizeof oversize[0]; i++) {
            int64_t v = 1;
            if (!json_i64(json, oversize[i].key, &v) || v != oversize[i].want) {
                fprintf(stderr, "%s: wrote %lld, read back %lld\n", oversize[i].key, (long long)oversize[i].want,
                        (long long)v);
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
        char json[16384];
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
#define STAT_KINDS 11
static const tide_stat *stat_of(const tide_stats *s, int kind, int pool)
{
    const tide_stat *kinds[STAT_KINDS] = {
        s->reserved_bytes,       s->allocated_bytes, s->requested_bytes, s->active_bytes,
        s->pending_free_bytes,   s->cached_bytes,    s->inactive_split_bytes,
        s->allocation,           s->segment,         s->pending_free_blocks,
        s->inactive_split,
    };
    return &kinds[kind][pool];
}
static const char *const stat_names[STAT_KINDS] = {
    "reserved_bytes", "allocated_bytes", "requested_bytes", "active_bytes", "pending_free_bytes",
    "cached_bytes",   "inactive_split_bytes", "allocation", "segment", "pending_free_blocks",
    "inactive_split",
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
        char json[16384];
        size_t need;
        CHECK_OK(tide_stats_json(t, json, sizeof json, &need));
        CHECK(json_value(json, "device_call_ns") == (long long)call_ns(t));
        CHECK_OK(tide_destroy(t));
        tide_sim_destroy(sim);
    }
}


/* ---- accumulated statistics after known sequences ---------------------------------------------------- */

/* One stream, default configuration: each figure worked out by hand from the sizes. */
static void test_accumulated_known_sequence(void)
{
    struct fixture f;
    fixture_open(&f, 0, NULL);
    const int64_t small_seg = 2 * MIB, large_seg = 20 * MIB;
    const int S = TIDE_POOL_SMALL, L = TIDE_POOL_LARGE;
    void *a, *b, *c;
    CHECK_OK(tide_malloc(f.t, 1000, 0, &a));    /* 1024 bytes of a new 2 MiB segment */
    CHECK_OK(tide_malloc(f.t, 5 * MIB, 0, &b)); /* 5 MiB of a new 20 MiB segment */
    CHECK_OK(tide_malloc(f.t, 3000, 0, &c));    /* 3072 bytes after a */
    uintptr_t base;
    size_t size;
    CHECK_OK(tide_segment_of(f.t, b, &base, &size));
    CHECK(size == (size_t)large_seg);
    CHECK_OK(tide_free(f.t, a));                /* beside c: stays in the split cache */
    CHECK_OK(tide_free(f.t, b));                /* its segment wholly free again */
    tide_stats s = stats_of(f.t);
    check_accumulated(&s, NULL);
    EXPECT_ACC(s, allocation, S, 2, 1);
    EXPECT_ACC(s, allocation, L, 1, 1);
    EXPECT_ACC(s, allocation, ALL, 3, 2);
    EXPECT_ACC(s, active, ALL, 3, 2);
    EXPECT_ACC(s, allocated_bytes, S, 1024 + 3072, 1024);
    EXPECT_ACC(s, allocated_bytes, L, 5 * MIB, 5 * MIB);
    EXPECT_ACC(s, active_bytes, ALL, 1024 + 3072 + 5 * MIB, 1024 + 5 * MIB);
    EXPECT_ACC(s, requested_bytes, S, 4000, 1000);
    EXPECT_ACC(s, requested_bytes, L, 5 * MIB, 5 * MIB);
    EXPECT_ACC(s, segment, ALL, 2, 0);
    EXPECT_ACC(s, reserved_bytes, S, small_seg, 0);
    EXPECT_ACC(s, reserved_bytes, L, large_seg, 0);
    /* The split cache: a split its new segment (the rest gained), c took 3072 of that rest (lost),
     * a's free gave 1024 back; b split its segment (the rest gained), and its free made the segment
     * wholly free (the rest lost). */
    EXPECT_ACC(s, inactive_split_bytes, S, (small_seg - 1024) + 1024, 3072);
    EXPECT_ACC(s, inactive_split_bytes, L, large_seg - 5 * MIB, large_seg - 5 * MIB);
    CHECK(s.inactive_split_bytes[S].current == small_seg - 3072);
    /* Its blocks: a's and b's splits left a FREE rest each (gained), c's split of the small rest left
     * one (no change), a's free left a FREE block beside c (gained), b's merged with its rest into a
     * wholly free segment (lost). */
    EXPECT_SPLIT_BLOCKS_ACC(s, S, 2, 0);
    EXPECT_SPLIT_BLOCKS_ACC(s, L, 1, 1);
    CHECK(s.inactive_split[S].current == 2 && s.inactive_split[L].current == 0 && s.inactive_split[ALL].peak == 3);

    CHECK_OK(tide_empty_cache(f.t, NULL));      /* the large segment goes */
    CHECK_OK(tide_free(f.t, c));                /* the small one is wholly free */
    CHECK_OK(tide_empty_cache(f.t, NULL));      /* and goes */
    s = stats_of(f.t);
    check_accumulated(&s, NULL);
    EXPECT_ACC(s, allocation, ALL, 3, 3);
    EXPECT_ACC(s, active_bytes, ALL, 4096 + 5 * MIB, 4096 + 5 * MIB);
    EXPECT_ACC(s, requested_bytes, ALL, 4000 + 5 * MIB, 4000 + 5 * MIB);
    EXPECT_ACC(s, segment, S, 1, 1);
    EXPECT_ACC(s, segment, L, 1, 1);
    EXPECT_ACC(s, reserved_bytes, ALL, small_seg + large_seg, small_seg + large_seg);
    EXPECT_ACC(s, inactive_split_bytes, S, small_seg, small_seg);
    EXPECT_ACC(s, inactive_split_bytes, ALL, small_seg + large_seg - 5 * MIB, small_seg + large_seg - 5 * MIB);
    EXPECT_SPLIT_BLOCKS_ACC(s, ALL, 3, 3); /* c's free merged both its FREE neighbours */
    CHECK(s.num_device_alloc == 2 && s.num_device_free == 2);
    CHECK_OK(tide_check(f.t));
    fixture_close(&f);
}

/* inactive_split counts a freed block as merged at once, even when the next allocation takes it back
 * before anything else happens (the parked block: heap_park), so that its peak and accumulated values
 * are those PyTorch's allocator, which merges at every free, would report. */
static void test_inactive_split_counts_a_block_taken_back(void)
{
    struct fixture f;
    fixture_open(&f, 0, NULL);
    const int L = TIDE_POOL_LARGE;
    void *a, *b, *c;
    CHECK_OK(tide_malloc(f.t, 4 * MIB, 0, &a)); /* a, b and c in one 20 MiB segment, 8 MiB FREE after */
    CHECK_OK(tide_malloc(f.t, 4 * MIB, 0, &b));
    CHECK_OK(tide_malloc(f.t, 4 * MIB, 0, &c));
    CHECK_OK(tide_reset_peak_stats(f.t));
    CHECK_OK(tide_reset_accumulated_stats(f.t));
    const tide_stats then = stats_of(f.t);
    CHECK(then.inactive_split[L].current == 1 && then.inactive_split[L].peak == 1);
    void *again;
    CHECK_OK(tide_free(f.t, b));                  /* between two ACTIVE blocks: a FREE block more */
    CHECK_OK(tide_malloc(f.t, 4 * MIB, 0, &again));
    CHECK(again == b);
    tide_stats s = stats_of(f.t);
    CHECK(s.inactive_split[L].current == 1 && s.inactive_split[L].peak == 2);
    EXPECT_SPLIT_BLOCKS_ACC(s, L, 1, 1);
    check_accumulated(&s, &then);
    /* Freed beside a FREE neighbour, it merges: no block more, then the count falls as a takes the rest. */
    CHECK_OK(tide_free(f.t, c));
    CHECK_OK(tide_malloc(f.t, 4 * MIB, 0, &again));
    s = stats_of(f.t);
    CHECK(s.inactive_split[L].current == 1 && s.inactive_split[L].peak == 2);
    CHECK(json_inactive_split_matches(f.t, &s));
    CHECK_OK(tide_free(f.t, a));
    CHECK_OK(tide_free(f.t, b));
    CHECK_OK(tide_free(f.t, again));
    s = stats_of(f.t);
    CHECK(s.inactive_split[TIDE_POOL_ALL].current == 0); /* the segment is wholly free */
    CHECK_OK(tide_check(f.t));
    fixture_close(&f);
}

/* tide_reset_accumulated_stats: everything accumulated starts again from 0, the current values and
 * peaks stay, and what was live at the reset is freed after it (freed past allocated). */
static void test_accumulated_reset(void)
{
    struct fixture f;
    fixture_open(&f, 0, NULL);
    void *a, *b;
    CHECK_OK(tide_malloc(f.t, 6 * MIB, 0, &a));
    CHECK_OK(tide_malloc(f.t, 8 * MIB, 0, &b));
    CHECK_OK(tide_free(f.t, b));
    CHECK_OK(tide_empty_cache(f.t, NULL));
    tide_stats before = stats_of(f.t);
    CHECK(before.num_device_alloc > 0 && before.num_sync_all_streams > 0);
    CHECK_OK(tide_reset_accumulated_stats(f.t));
    tide_stats then = stats_of(f.t);
    for (int i = 0; i < ACCUMULATED; i++)
        for (int k = 0; k < TIDE_POOL_COUNT; k++) {
            CHECK(accumulated_of(&then, i)[k].allocated == 0 && accumulated_of(&then, i)[k].freed == 0);
            CHECK(accumulated_stat(&then, i)[k].current == accumulated_stat(&before, i)[k].current);
            CHECK(accumulated_stat(&then, i)[k].peak == accumulated_stat(&before, i)[k].peak);
        }
    CHECK(then.num_device_alloc == 0 && then.num_device_free == 0 && then.num_sync_all_streams == 0);
    CHECK(then.num_alloc_retries == 0 && then.num_ooms == 0 && then.device_call_ns == 0);
    CHECK(then.allocated_bytes[ALL].peak == (int64_t)(14 * MIB)); /* peaks stay */

    CHECK_OK(tide_free(f.t, a)); /* allocated before the reset */
    tide_stats s = stats_of(f.t);
    check_accumulated(&s, &then);
    EXPECT_ACC(s, allocation, ALL, 0, 1);
    EXPECT_ACC(s, allocated_bytes, TIDE_POOL_LARGE, 0, 6 * MIB);
    EXPECT_ACC(s, segment, ALL, 0, 0);
    void *c;
    CHECK_OK(tide_malloc(f.t, 1, 0, &c)); /* a new small segment */
    CHECK_OK(tide_free(f.t, c));
    CHECK_OK(tide_empty_cache(f.t, NULL));
    s = stats_of(f.t);
    check_accumulated(&s, &then);
    EXPECT_ACC(s, allocation, ALL, 1, 2);
    EXPECT_ACC(s, requested_bytes, ALL, 1, 1 + 6 * MIB);
    EXPECT_ACC(s, segment, TIDE_POOL_SMALL, 1, 1);
    EXPECT_ACC(s, segment, TIDE_POOL_LARGE, 0, 1);
    CHECK(s.num_device_alloc == 1 && s.num_device_free == 2);
    CHECK_OK(tide_check(f.t));
    fixture_close(&f);
}

/* A free that waits for the device: allocation loses the block at tide_free, active only when it
 * becomes FREE. */
static void test_accumulated_active_waits_for_the_device(void)
{
    struct fixture f;
    fixture_open(&f, 0, NULL);
    tide_stream other;
    CHECK_OK(tide_sim_stream_create(f.sim, &other));
    void *p;
    CHECK_OK(tide_malloc(f.t, 4096, 0, &p));
    CHECK_OK(tide_retain(f.t, p));
    CHECK_OK(tide_free(f.t, p));
    tide_stats s = stats_of(f.t);
    check_accumulated(&s, NULL);
    EXPECT_ACC(s, allocation, ALL, 1, 1);
    EXPECT_ACC(s, active, ALL, 1, 0);
    EXPECT_ACC(s, active_bytes, ALL, 4096, 0);
    CHECK(s.active[ALL].current == 1);
    CHECK_OK(tide_release(f.t, p));
    s = stats_of(f.t);
    check_accumulated(&s, NULL);
    EXPECT_ACC(s, active, ALL, 1, 1);
    EXPECT_ACC(s, active_bytes, ALL, 4096, 4096);
    CHECK(s.active[ALL].current == 0 && s.active[ALL].peak == 2); /* an upper bound once a free waited */
    CHECK_OK(tide_check(f.t));
    fixture_close(&f);
}

/* Two streams: their events add up, whatever the order. */
static void test_accumulated_two_streams(void)
{
    struct fixture f;
    fixture_open(&f, 0, NULL);
    tide_stream s1;
    CHECK_OK(tide_sim_stream_create(f.sim, &s1));
    void *p[8];
    for (int i = 0; i < 8; i++)
        CHECK_OK(tide_malloc(f.t, (size_t)(i + 1) * 300 * 1024, i % 2 ? s1 : 0, &p[i]));
    for (int i = 0; i < 8; i += 2)
        CHECK_OK(tide_free(f.t, p[i]));
    tide_stats s = stats_of(f.t);
    check_accumulated(&s, NULL);
    EXPECT_ACC(s, allocation, ALL, 8, 4);
    EXPECT_ACC(s, requested_bytes, ALL, 36 * 300 * 1024, (1 + 3 + 5 + 7) * 300 * 1024);
    for (int i = 1; i < 8; i += 2)
        CHECK_OK(tide_free(f.t, p[i]));
    CHECK_OK(tide_empty_cache(f.t, NULL));
    s = stats_of(f.t);
    check_accumulated(&s, NULL);
    CHECK(s.accumulated.reserved_bytes[ALL].allocated == s.accumulated.reserved_bytes[ALL].freed);
    CHECK(s.accumulated.segment[ALL].allocated == (int64_t)s.num_device_alloc);
    CHECK(s.accumulated.segment[ALL].freed == (int64_t)s.num_device_free);
    CHECK_OK(tide_check(f.t));
    fixture_close(&f);
}

/* oversize_allocations and oversize_segments, with max_split_size_mb:40. */
static void test_oversize(void)
{
    struct fixture f;
    fixture_open(&f, 0, "max_split_size_mb:40");
    void *big, *small, *also;
    CHECK_OK(tide_malloc(f.t, 50 * MIB, 0, &big));   /* a segment of its own, 50 MiB: both oversize */
    CHECK_OK(tide_malloc(f.t, 8 * MIB, 0, &small));  /* neither */
    CHECK_OK(tide_check(f.t));                       /* the walk counts them as the counters do */
    tide_stats s = stats_of(f.t);
    CHECK(s.oversize_allocations.current == 1 && s.oversize_segments.current == 1);
    CHECK_OK(tide_free(f.t, big));
    CHECK_OK(tide_malloc(f.t, 45 * MIB, 0, &also)); /* from the cached 50 MiB segment */
    CHECK_OK(tide_free(f.t, also));
    s = stats_of(f.t);
    check_accumulated(&s, NULL);
    CHECK(s.oversize_allocations.current == 0 && s.oversize_allocations.peak == 1);
    CHECK(s.accumulated.oversize_allocations.allocated == 2 && s.accumulated.oversize_allocations.freed == 2);
    CHECK(s.oversize_segments.current == 1 && s.accumulated.oversize_segments.allocated == 1);
    CHECK_OK(tide_empty_cache(f.t, NULL));
    s = stats_of(f.t);
    CHECK(s.oversize_segments.current == 0 && s.oversize_segments.peak == 1);
    CHECK(s.accumulated.oversize_segments.allocated == 1 && s.accumulated.oversize_segments.freed == 1);
    CHECK_OK(tide_free(f.t, small));
    CHECK_OK(tide_check(f.t));
    fixture_close(&f);

    /* Without the key nothing is oversize. */
    fixture_open(&f, 0, NULL);
    CHECK_OK(tide_malloc(f.t, 50 * MIB, 0, &big));
    s = stats_of(f.t);
    CHECK(s.oversize_allocations.current == 0 && s.oversize_segments.current == 0);
    CHECK(s.accumulated.oversize_allocations.allocated == 0);
    CHECK_OK(tide_free(f.t, big));
    fixture_close(&f);
}

/* Pages: with expandable segments, reserved_bytes gains the pages mapped and loses those unmapped;
 * a sleepable pool's sleep loses them and its wake gains them again. */
static void test_accumulated_pages(void)
{
    struct fixture f;
    fixture_open(&f, 0, "expandable_segments:True");
    void *a, *b;
    CHECK_OK(tide_malloc(f.t, 3 * MIB, 0, &a));     /* 2 pages mapped */
    CHECK_OK(tide_malloc(f.t, 1 * MIB, 0, &b));     /* within them */
    tide_stats s = stats_of(f.t);
    check_accumulated(&s, NULL);
    EXPECT_ACC(s, reserved_bytes, ALL, 4 * MIB, 0);
    EXPECT_ACC(s, segment, ALL, 1, 0);
    void *c;
    CHECK_OK(tide_malloc(f.t, 5 * MIB, 0, &c));     /* the run grows by the pages it lacks */
    s = stats_of(f.t);
    check_accumulated(&s, NULL);
    CHECK(s.segment[ALL].current == 1 && s.reserved_bytes[ALL].current > (int64_t)(4 * MIB));
    EXPECT_ACC(s, reserved_bytes, ALL, held_by_device(f.sim), 0);
    EXPECT_ACC(s, segment, ALL, 1, 0);
    CHECK_OK(tide_free(f.t, c));
    CHECK_OK(tide_free(f.t, a));
    CHECK_OK(tide_empty_cache(f.t, NULL));         /* the first page goes: the run is what is left */
    s = stats_of(f.t);
    check_accumulated(&s, NULL);
    CHECK(s.accumulated.reserved_bytes[ALL].freed > 0 && s.reserved_bytes[ALL].current > 0);
    int64_t mapped = s.accumulated.reserved_bytes[ALL].allocated;
    CHECK_OK(tide_free(f.t, b));
    CHECK_OK(tide_empty_cache(f.t, NULL));
    s = stats_of(f.t);
    check_accumulated(&s, NULL);
    EXPECT_ACC(s, reserved_bytes, ALL, mapped, mapped);
    CHECK(s.accumulated.segment[ALL].allocated == s.accumulated.segment[ALL].freed);
    CHECK_OK(tide_check(f.t));
    fixture_close(&f);

    fixture_open(&f, 0, NULL);
    tide_pool_id pool;
    CHECK_OK(tide_pool_create(f.t, &pool));
    CHECK_OK(tide_pool_make_sleepable(f.t, pool));
    void *w;
    CHECK_OK(tide_malloc_pool(f.t, 4 * MIB, 0, pool, &w));
    tide_stats awake = stats_of(f.t);
    CHECK_OK(tide_pool_sleep(f.t, pool, TIDE_SLEEP_DISCARD));
    s = stats_of(f.t);
    check_accumulated(&s, NULL);
    CHECK(s.accumulated.reserved_bytes[ALL].freed == awake.reserved_bytes[ALL].current);
    CHECK(s.reserved_bytes[ALL].current == 0);
    CHECK_OK(tide_pool_wake(f.t, pool));
    s = stats_of(f.t);
    check_accumulated(&s, NULL);
    CHECK(s.accumulated.reserved_bytes[ALL].allocated == 2 * awake.reserved_bytes[ALL].current);
    CHECK_OK(tide_check(f.t));
    CHECK_OK(tide_free(f.t, w));
    CHECK_OK(tide_pool_release(f.t, pool));
    fixture_close(&f);
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
    RUN(test_accumulated_known_sequence);
    RUN(test_accumulated_reset);
    RUN(test_inactive_split_counts_a_block_taken_back);
    RUN(test_accumulated_active_waits_for_the_device);
    RUN(test_accumulated_two_streams);
    RUN(test_oversize);
    RUN(test_accumulated_pages);
    return HARNESS_EXIT();
}

/*
 * Statistics: the identities between them hold at every point, peaks rise and reset, the versioned
 * struct fills only what the caller knows, and the JSON carries the same numbers under PyTorch's names.
 */
#include "harness.h"

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

int main(void)
{
    RUN(test_identities_hold_throughout);
    RUN(test_peaks_and_reset);
    RUN(test_versioned_struct);
    RUN(test_json_has_pytorch_names_and_same_numbers);
    RUN(test_several_streams_add_up);
    return HARNESS_EXIT();
}

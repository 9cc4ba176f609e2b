/*
 * The configuration string: every key, every kind of bad value, and TIDEPOOL_CONF under the API's
 * string.
 */
#include "harness.h"
#include "internal.h"

static struct tide_config parsed(const char *text, tide_status expect)
{
    struct tide_config c;
    config_defaults(&c);
    tide_status s = config_parse(&c, text, "test");
    if (s != expect) {
        fprintf(stderr, "config \"%s\": %s (expected %s): %s\n", text, tide_status_name(s),
                tide_status_name(expect), tide_last_error());
        harness_failures++;
    }
    return c;
}

static void test_good_strings(void)
{
    struct tide_config c = parsed("limit:8GiB", TIDE_OK);
    CHECK(c.limit_set && c.limit_bytes == 8 * GIB && c.limit_fraction == 0);
    c = parsed(" limit : 512MB , debug:2 ", TIDE_OK);
    CHECK(c.limit_bytes == 512000000 && c.debug == 2);
    c = parsed("limit:0.75", TIDE_OK);
    CHECK(c.limit_fraction == 0.75);
    c = parsed("limit:90%", TIDE_OK);
    CHECK(c.limit_fraction > 0.899 && c.limit_fraction < 0.901);
    c = parsed("limit:4096", TIDE_OK);
    CHECK(c.limit_bytes == 4096);
    c = parsed("garbage_collection_threshold:0.6,max_split_size_mb:256", TIDE_OK);
    CHECK(c.gc_threshold == 0.6 && c.max_split_size == 256 * MIB);
    c = parsed("expandable_segments:False", TIDE_OK);
    CHECK(!c.expandable_segments && c.trim_on_growth);
    c = parsed("expandable_segments:True", TIDE_OK);
    CHECK(c.expandable_segments);
    c = parsed("expandable_segments:True,peer_access:True", TIDE_OK);
    CHECK(c.expandable_segments && c.peer_access);
    c = parsed("trim_on_growth:False", TIDE_OK);
    CHECK(!c.trim_on_growth);
    c = parsed("scrub:1,guard:true,leak_report:TRUE,trim_on_growth:0", TIDE_OK); /* as tidepool.h says */
    CHECK(c.scrub && c.guard && c.leak_report && !c.trim_on_growth);
    c = parsed("", TIDE_OK);
    CHECK(!c.limit_set && c.max_split_size == SIZE_MAX);
    c = parsed("debug:0,debug:1", TIDE_OK); /* the later entry wins */
    CHECK(c.debug == 1);
}

static void test_bad_strings(void)
{
    static const struct {
        const char *text;
        tide_status status;
        const char *words;
    } cases[] = {
        {"limit", TIDE_EINVAL, "has no ':'"},
        {"limit:", TIDE_EINVAL, "needs both a key and a value"},
        {":8GiB", TIDE_EINVAL, "needs both a key and a value"},
        {"limit:8GiB,", TIDE_EINVAL, "empty entry"},
        {",", TIDE_EINVAL, "empty entry"},
        {"limit:-1", TIDE_EINVAL, "bad value '-1' for limit"},
        {"limit:8 parsecs", TIDE_EINVAL, "bad value"},
        {"limit:1.5", TIDE_EINVAL, "fraction of the device"},
        {"limit:0", TIDE_EINVAL, "bad value"},
        {"limit:150%", TIDE_EINVAL, "bad value"},
        {"garbage_collection_threshold:1.5", TIDE_EINVAL, "0 < F < 1"},
        {"garbage_collection_threshold:0", TIDE_EINVAL, "0 < F < 1"},
        {"max_split_size_mb:20", TIDE_EINVAL, "above 20"},
        {"max_split_size_mb:big", TIDE_EINVAL, "whole number"},
        {"debug:3", TIDE_EINVAL, "0, 1 or 2"},
        {"expandable_segments:maybe", TIDE_EINVAL, "True or False"},
        {"trim_on_growth:yes", TIDE_EINVAL, "True or False"},
        {"peer_access:2", TIDE_EINVAL, "True or False"},
        {"leak_report:on", TIDE_EINVAL, "True or False"},
        {"scrub:true ish", TIDE_EINVAL, "True or False"},
        {"guard:", TIDE_EINVAL, "needs both a key and a value"},
        {"guard:TRUE!", TIDE_EINVAL, "True or False"},
        {"limit:1e999", TIDE_EINVAL, "bad value '1e999' for limit"},      /* not finite */
        {"garbage_collection_threshold:abc", TIDE_EINVAL, "0 < F < 1"},
        {"garbage_collection_threshold:0.5000000000000000000000000000000000000000000000000000000000000001",
         TIDE_EINVAL, "0 < F < 1"},                                        /* longer than any number */
        {"max_split_size_mb:99999999999999999999999", TIDE_EINVAL, "whole number"}, /* past 64 bits */
        {"debug:18446744073709551617", TIDE_EINVAL, "0, 1 or 2"},
        {"roundup_power2_divisions:4", TIDE_EINVAL, "unknown key 'roundup_power2_divisions'"},
        {"debug:1,Limit:1GiB", TIDE_EINVAL, "unknown key 'Limit'"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        struct tide_config c = parsed(cases[i].text, cases[i].status);
        CHECK_MESSAGE(cases[i].words);
        CHECK_MESSAGE("test: "); /* messages name where the string came from */
        /* A failed parse changes nothing. */
        struct tide_config fresh;
        config_defaults(&fresh);
        CHECK(memcmp(&c, &fresh, sizeof c) == 0);
    }
}

static void test_sizes(void)
{
    uint64_t v;
    CHECK(parse_size("1KiB", 4, &v) && v == 1024);
    CHECK(parse_size("1.5MiB", 6, &v) && v == 1572864);
    CHECK(parse_size("2GB", 3, &v) && v == 2000000000);
    CHECK(parse_size("7", 1, &v) && v == 7);
    CHECK(!parse_size("0.3B", 4, &v)); /* not a whole number of bytes */
    CHECK(!parse_size("GiB", 3, &v));
    CHECK(!parse_size("1 XB", 4, &v));
}

static void test_environment_and_api_together(void)
{
    tide_sim *sim;
    tide_sim_options o = {sizeof o, 16 * GIB, 0};
    CHECK_OK(tide_sim_create(&o, &sim));
    tide_backend be = tide_sim_backend(sim);
    tide_allocator *t;
    tide_stats s;

    setenv("TIDEPOOL_CONF", "limit:4GiB,garbage_collection_threshold:0.5", 1);
    CHECK_OK(tide_create(&be, NULL, &t));
    s = stats_of(t);
    CHECK(s.limit_bytes == 4 * GIB && s.gc_threshold_bytes == 2 * GIB);
    CHECK_OK(tide_destroy(t));

    /* The API's string wins where both set a key; the environment's other keys stay. */
    CHECK_OK(tide_create(&be, "limit:0.25", &t));
    s = stats_of(t);
    CHECK(s.limit_bytes == 4 * GIB && s.gc_threshold_bytes == 2 * GIB);
    CHECK_OK(tide_destroy(t));
    CHECK_OK(tide_create(&be, "limit:1GiB", &t));
    s = stats_of(t);
    CHECK(s.limit_bytes == GIB && s.gc_threshold_bytes == GIB / 2);
    CHECK_OK(tide_destroy(t));

    setenv("TIDEPOOL_CONF", "limit:4GiB,colour:blue", 1);
    CHECK_STATUS(tide_create(&be, NULL, &t), TIDE_EINVAL);
    CHECK_MESSAGE("TIDEPOOL_CONF: unknown key 'colour'");
    unsetenv("TIDEPOOL_CONF");

    CHECK_OK(tide_create(&be, NULL, &t));
    s = stats_of(t);
    CHECK(s.limit_bytes == 16 * GIB && s.gc_threshold_bytes == 0 && s.device_total_bytes == 16 * GIB);
    CHECK_OK(tide_set_limit_fraction(t, 0.5));
    CHECK(stats_of(t).limit_bytes == 8 * GIB);
    CHECK_OK(tide_destroy(t));
    tide_sim_destroy(sim);
}

int main(void)
{
    RUN(test_good_strings);
    RUN(test_bad_strings);
    RUN(test_sizes);
    RUN(test_environment_and_api_together);
    return HARNESS_EXIT();
}

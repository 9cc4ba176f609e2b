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

/* Sizes are computed exactly from their digits: every whole number below 2^64, and a decimal with a
 * unit wherever the product is a whole number of bytes; anything else is refused, saying why. */
static void test_sizes_are_exact(void)
{
    static const struct {
        const char *text;
        uint64_t bytes;      /* when words is NULL */
        const char *words;   /* in the message of a refusal */
    } cases[] = {
        {"7", 7, NULL},
        {"1KiB", 1024, NULL},
        {"1.5MiB", 1572864, NULL},
        {"2GB", 2000000000, NULL},
        {"4.1GB", 4100000000u, NULL},                     /* 4.1 x 1e9 is no double's product */
        {"1.5GiB", 1610612736, NULL},
        {"0.1KB", 100, NULL},
        {"1 KiB", 1024, NULL},
        {"0", 0, NULL},
        {"000000000000000000000000000042", 42, NULL},
        {"9007199254740993", 9007199254740993u, NULL},   /* 2^53 + 1: a double says ...992 */
        {"18000000000000000001", 18000000000000000001u, NULL},
        {"18446744073709551615", UINT64_MAX, NULL},
        {"18446744073709551615B", UINT64_MAX, NULL},
        {"16777215.9999999999990905052982270717620849609375TiB", UINT64_MAX, NULL}, /* 38 places */
        {"0.0000000000009094947017729282379150390625TiB", 1, NULL},                /* 2^-40 TiB */
        {"18446744073709551616", 0, "more than 2^64 - 1"},
        {"17179869184GiB", 0, "more than 2^64 - 1"},
        {"99999999999999999999999", 0, "more than 2^64 - 1"},
        {"1.0000000000000000001", 0, "it is 1.0000000000000000001 bytes, not a whole number"},
        {"0.3B", 0, "it is 0.3 bytes, not a whole number"},
        {"1.0000001KiB", 0, "it is 1024.0001024 bytes, not a whole number"},
        {"0.0001KB", 0, "it is 0.1 bytes"},
        {"0.00000000000090949470177292823791503906251TiB", 0, "more than 40 digits after the point"},
        {"1e3", 0, "'e3' is not a unit"},
        {"1 XB", 0, "'XB' is not a unit"},
        {"0x10", 0, "'x10' is not a unit"},
        {"GiB", 0, "expected a whole number of bytes"},
        {"-1", 0, "expected a whole number of bytes"},
        {" 1", 0, "expected a whole number of bytes"},
        {"1.2.3", 0, "expected a whole number of bytes"},
        {".", 0, "expected a whole number of bytes"},
        {"", 0, "expected a whole number of bytes"},
        {"inf", 0, "expected a whole number of bytes"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        uint64_t v = 12345;
        tide_status s = tide_parse_size(cases[i].text, &v);
        if (!cases[i].words) {
            if (s != TIDE_OK || v != cases[i].bytes) {
                fprintf(stderr, "tide_parse_size(\"%s\"): %s, %llu (expected %llu): %s\n", cases[i].text,
                        tide_status_name(s), (unsigned long long)v, (unsigned long long)cases[i].bytes,
                        tide_last_error());
                harness_failures++;
            }
            continue;
        }
        CHECK_STATUS(s, TIDE_EINVAL);
        CHECK(v == 12345); /* left alone */
        if (!strstr(tide_last_error(), cases[i].words)) {
            fprintf(stderr, "tide_parse_size(\"%s\"): '%s' lacks '%s'\n", cases[i].text, tide_last_error(),
                    cases[i].words);
            harness_failures++;
        }
    }
    /* The configuration reads sizes with the same parser. */
    struct tide_config c = parsed("limit:18446744073709551615", TIDE_OK);
    CHECK(c.limit_bytes == SIZE_MAX && c.limit_fraction == 0);
    c = parsed("limit:4.1GB", TIDE_OK);
    CHECK(c.limit_bytes == 4100000000u);
    c = parsed("limit:9007199254740993", TIDE_OK);
    CHECK(c.limit_bytes == 9007199254740993u);
    parsed("limit:0.3B", TIDE_EINVAL);
    CHECK_MESSAGE("it is 0.3 bytes, not a whole number");
    parsed("limit:18446744073709551616", TIDE_EINVAL);
    CHECK_MESSAGE("more than 2^64 - 1");
}

/* Fractions are checked against their bounds on their digits, and have at most 15 places, so the double
 * they become lies on the same side of every bound. */
static void test_fractions_are_exact(void)
{
    struct tide_config c = parsed("limit:100%", TIDE_OK);
    CHECK(c.limit_fraction == 1.0);
    c = parsed("limit:0.5%", TIDE_OK);
    CHECK(c.limit_fraction == 0.005);
    c = parsed("limit:99.9999999999999%", TIDE_OK);
    CHECK(c.limit_fraction < 1.0);
    c = parsed("limit:1.000", TIDE_OK);
    CHECK(c.limit_fraction == 1.0);
    c = parsed("limit:.25", TIDE_OK);
    CHECK(c.limit_fraction == 0.25);
    c = parsed("garbage_collection_threshold:0.999999999999999", TIDE_OK);
    CHECK(c.gc_threshold < 1.0);
    c = parsed("garbage_collection_threshold:0.000000000000001", TIDE_OK);
    CHECK(c.gc_threshold > 0);
    static const struct {
        const char *text, *words;
    } bad[] = {
        {"limit:1.0000000000000000001", "it is more than 1"},   /* a double says 1 */
        {"limit:100.0000000000001%", "it is more than 100%"},
        {"limit:0.0", "it is 0"},
        {"limit:0%", "it is 0"},
        {"limit:0.0000000000000001", "more than 15 digits after the point"},
        {"limit:99.99999999999999%", "more than 13 digits after the point"},
        {"garbage_collection_threshold:0.99999999999999999999", "more than 15 digits"}, /* a double: 1 */
        {"garbage_collection_threshold:1", "it is 1"},
        {"garbage_collection_threshold:1.0", "it is 1"},
        {"garbage_collection_threshold:1e-5", "no exponent"},
        {"garbage_collection_threshold:-0.5", "no sign"},
        {"garbage_collection_threshold:0x1p-1", "not a decimal"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        parsed(bad[i].text, TIDE_EINVAL);
        CHECK_MESSAGE(bad[i].words);
    }
}

/* Whole-number keys: digits only, exactly, any number of them. */
static void test_whole_numbers(void)
{
    struct tide_config c = parsed("debug:000000000000000000000000000002", TIDE_OK);
    CHECK(c.debug == 2);
    c = parsed("max_split_size_mb:8796093022207", TIDE_OK); /* 2^43 - 1: the most that fits in bytes */
    CHECK(c.max_split_size == (size_t)8796093022207 * MIB);
    parsed("max_split_size_mb:8796093022208", TIDE_EINVAL);
    parsed("max_split_size_mb:64.0", TIDE_EINVAL);
    parsed("max_split_size_mb:18446744073709551615", TIDE_EINVAL);
    parsed("debug:1.0", TIDE_EINVAL);
    parsed("debug:18446744073709551618", TIDE_EINVAL);
}

/* The text of a message after its origin ("tide_create config: ", "check: "). */
static const char *after_origin(const char *message)
{
    const char *colon = strstr(message, ": ");
    return colon ? colon + 2 : message;
}

/* tide_config_check, tide_config_check_backend and tide_create take the same decisions: for every
 * documented key and value and a set of bad strings, over backends that lack what some keys need, the
 * same status and the same words. */
static void test_check_and_create_agree(void)
{
    tide_sim *sim;
    tide_sim_options o = {sizeof o, GIB, 0, 0};
    CHECK_OK(tide_sim_create(&o, &sim));
    tide_backend full = tide_sim_backend(sim);
    tide_backend no_vm = full, no_fill = full, no_verify = full, odd_pages = full, old_table = full;
    no_vm.name = "no-vm";
    no_vm.map = NULL;
    no_fill.name = "no-fill";
    no_fill.fill = NULL;
    no_verify.name = NULL; /* unnamed, as a backend may be */
    no_verify.verify = NULL;
    odd_pages.name = "odd-pages";
    odd_pages.page_size = 3 * MIB;
    old_table.name = "old-table";
    old_table.struct_size = (uint32_t)offsetof(tide_backend, fill); /* before fill, verify and VM */
    const tide_backend *backends[] = {&full, &no_vm, &no_fill, &no_verify, &odd_pages, &old_table};

    /* Every key with each value its documentation names, then strings of several keys and bad ones. */
    static const char *const values[][6] = {
        {"limit", "8GiB", "512MB", "1073741824", "0.9", "90%"},
        {"garbage_collection_threshold", "0.5", "0.999", NULL},
        {"max_split_size_mb", "21", "256", NULL},
        {"trim_on_growth", "True", "False", NULL},
        {"expandable_segments", "True", "False", "true", "1", "0"},
        {"peer_access", "True", "False", "TRUE", "1", NULL},
        {"scrub", "True", "False", NULL},
        {"guard", "True", "False", NULL},
        {"leak_report", "True", "False", NULL},
        {"debug", "0", "1", "2", NULL},
    };
    static const char *const more[] = {
        "", "expandable_segments:True,peer_access:True", "peer_access:True,expandable_segments:True",
        "expandable_segments:True,peer_access:True,expandable_segments:False", "peer_access:0",
        "scrub:True,guard:True", "guard:True,expandable_segments:True,peer_access:True",
        "peer_access:True,guard:True", "peer_access:True,scrub:True,limit:1GiB",
        "limit:18446744073709551615", "limit:4.1GB,garbage_collection_threshold:0.8", "limit:100%",
        "limit:0.3B", "limit:0", "limit:-1", "limit:1.5", "limit:150%", "limit:1e999",
        "garbage_collection_threshold:1", "garbage_collection_threshold:0",
        "garbage_collection_threshold:0.99999999999999999999", "max_split_size_mb:20",
        "max_split_size_mb:18446744073709551615", "debug:3", "debug:-1", "debug:1.0",
        "expandable_segments:maybe", "peer_access:yes", "guard:TRUE!", "colour:blue", "limit", ",",
        "limit:8GiB,", "debug:1,Limit:1GiB", "expandable_segments:True,scrub:True,guard:True,debug:2",
    };
    char strings[128][96];
    size_t n = 0;
    for (size_t k = 0; k < sizeof values / sizeof values[0]; k++)
        for (size_t v = 1; v < 6 && values[k][v]; v++)
            snprintf(strings[n++], sizeof strings[0], "%s:%s", values[k][0], values[k][v]);
    for (size_t i = 0; i < sizeof more / sizeof more[0]; i++)
        snprintf(strings[n++], sizeof strings[0], "%s", more[i]);
    /* Every key the library lists is among them. */
    const tide_config_key *key;
    for (size_t i = 0; (key = tide_config_key_at(i)) != NULL; i++) {
        bool listed = false;
        for (size_t k = 0; k < sizeof values / sizeof values[0]; k++)
            listed = listed || strcmp(values[k][0], key->name) == 0;
        if (!listed) {
            fprintf(stderr, "key %s is not in the test's list\n", key->name);
            harness_failures++;
        }
    }

    unsetenv("TIDEPOOL_CONF");
    size_t refused_by_create = 0, refused_for_backend = 0;
    for (size_t i = 0; i < n; i++) {
        char check[1024];
        tide_status by_check = tide_config_check(strings[i], "check");
        snprintf(check, sizeof check, "%s", tide_last_error());
        for (size_t b = 0; b < sizeof backends / sizeof backends[0]; b++) {
            char created[1024], checked[1024];
            tide_allocator *t = NULL;
            tide_status by_create = tide_create(backends[b], strings[i], &t);
            snprintf(created, sizeof created, "%s", tide_last_error());
            if (t)
                CHECK_OK(tide_destroy(t));
            tide_status by_backend = tide_config_check_backend(backends[b], strings[i], "check");
            snprintf(checked, sizeof checked, "%s", tide_last_error());
            refused_by_create += by_create != TIDE_OK;
            refused_for_backend += by_create != TIDE_OK && by_check == TIDE_OK;
            /* With the backend: the very verdict. */
            bool same = by_backend == by_create &&
                        (by_create == TIDE_OK || strcmp(after_origin(created), after_origin(checked)) == 0);
            /* Without one: the same wherever the backend has every function; elsewhere a refusal is
             * tide_create's too, and an acceptance may meet a refusal for the backend's sake only. */
            bool same_without = b == 0 ? by_check == by_create
                                       : by_check == TIDE_OK ? by_create == TIDE_OK || by_create == TIDE_EUNSUPPORTED
                                                             : by_create == by_check;
            if (by_check != TIDE_OK && by_create != TIDE_OK)
                same_without = same_without && strcmp(after_origin(created), after_origin(check)) == 0;
            if (!same || !same_without) {
                fprintf(stderr, "\"%s\" over %s: tide_create %s (%s), tide_config_check_backend %s (%s), "
                        "tide_config_check %s (%s)\n", strings[i], backends[b]->name ? backends[b]->name : "?",
                        tide_status_name(by_create), by_create ? created : "", tide_status_name(by_backend),
                        by_backend ? checked : "", tide_status_name(by_check), by_check ? check : "");
                harness_failures++;
            }
        }
    }
    /* The loop met both verdicts, and refusals for the backend's sake. */
    CHECK(refused_by_create > 0 && refused_by_create < n * (sizeof backends / sizeof backends[0]));
    CHECK(refused_for_backend > 0);
    CHECK_STATUS(tide_config_check_backend(NULL, "", NULL), TIDE_EINVAL);
    CHECK_MESSAGE("the backend is NULL");
    tide_sim_destroy(sim);
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
    RUN(test_sizes_are_exact);
    RUN(test_fractions_are_exact);
    RUN(test_whole_numbers);
    RUN(test_check_and_create_agree);
    RUN(test_environment_and_api_together);
    return HARNESS_EXIT();
}

/*
 * Bad input gets a clear status and message, and changes nothing: the statistics are identical before
 * and after, and tide_check passes.
 */
#include "harness.h"

struct scene {
    struct fixture f;
    void *live, *pending, *freed;
    tide_stats before;
};

static void scene_open(struct scene *s)
{
    fixture_open(&s->f, 4 * GIB, NULL);
    CHECK_OK(tide_malloc(s->f.t, 10000, 0, &s->live));
    CHECK_OK(tide_malloc(s->f.t, 20000, 0, &s->pending));
    CHECK_OK(tide_malloc(s->f.t, 30000, 0, &s->freed));
    CHECK_OK(tide_retain(s->f.t, s->pending));
    CHECK_OK(tide_free(s->f.t, s->pending));
    CHECK_OK(tide_free(s->f.t, s->freed));
    s->before = stats_of(s->f.t);
}

/* Nothing changed since scene_open. */
static void unchanged(struct scene *s)
{
    tide_stats now = stats_of(s->f.t);
    CHECK(memcmp(&now, &s->before, sizeof now) == 0);
    CHECK_OK(tide_check(s->f.t));
}

static void scene_close(struct scene *s)
{
    CHECK_OK(tide_release(s->f.t, s->pending));
    CHECK_OK(tide_free(s->f.t, s->live));
    fixture_close(&s->f);
}

static void test_double_free(void)
{
    struct scene s;
    scene_open(&s);
    CHECK_STATUS(tide_free(s.f.t, s.freed), TIDE_EINVAL);
    CHECK_MESSAGE("double free");
    unchanged(&s);
    CHECK_STATUS(tide_free(s.f.t, s.pending), TIDE_EINVAL); /* freed, still held by the device */
    CHECK_MESSAGE("double free");
    CHECK_MESSAGE("pending");
    unchanged(&s);
    scene_close(&s);
}

static void test_free_of_pointer_not_ours(void)
{
    struct scene s;
    scene_open(&s);
    int on_stack;
    CHECK_STATUS(tide_free(s.f.t, &on_stack), TIDE_EINVAL);
    CHECK_MESSAGE("which tidepool did not allocate");
    void *host = malloc(64);
    CHECK_STATUS(tide_free(s.f.t, host), TIDE_EINVAL);
    CHECK_MESSAGE("which tidepool did not allocate");
    free(host);
    unchanged(&s);
    scene_close(&s);
}

static void test_free_of_interior_pointer(void)
{
    struct scene s;
    scene_open(&s);
    CHECK_STATUS(tide_free(s.f.t, (char *)s.live + 512), TIDE_EINVAL);
    CHECK_MESSAGE("interior pointer");
    CHECK_MESSAGE("512 bytes into the block");
    CHECK_STATUS(tide_free(s.f.t, (char *)s.live + 1), TIDE_EINVAL);
    CHECK_MESSAGE("interior pointer");
    unchanged(&s);
    scene_close(&s);
}

static void test_sizes_zero_and_too_large(void)
{
    struct scene s;
    scene_open(&s);
    void *p = (void *)1;
    CHECK_STATUS(tide_malloc(s.f.t, 0, 0, &p), TIDE_EINVAL);
    CHECK_MESSAGE("size 0");
    CHECK(p == NULL);
    CHECK_STATUS(tide_malloc(s.f.t, 4 * GIB + 1, 0, &p), TIDE_ENOMEM);
    CHECK_MESSAGE("more than the device's total memory");
    CHECK_STATUS(tide_malloc(s.f.t, SIZE_MAX, 0, &p), TIDE_ENOMEM);
    unchanged(&s);
    /* The whole device is a valid size. */
    CHECK_OK(tide_malloc(s.f.t, 4 * GIB - 64 * MIB, 0, &p));
    CHECK_OK(tide_free(s.f.t, p));
    CHECK_OK(tide_trim(s.f.t, 4 * MIB, NULL));
    s.before = stats_of(s.f.t);
    scene_close(&s);
}

/* On a device that reports UINT64_MAX bytes, sizes near SIZE_MAX: no size computation may wrap (a
 * wrapped rounding once made a tiny block, and the next allocation got the same address). Each is
 * refused with TIDE_ENOMEM (with expandable segments, the whole device's 2^62 bytes may instead be
 * TIDE_EDEVICE: no host can reserve an address range that large) and changes nothing; allocations
 * after them are whole and apart. */
static void test_sizes_near_size_max_on_a_huge_device(void)
{
    static const char *const confs[] = {"", "guard:True", "expandable_segments:True", "limit:100%",
                                        "garbage_collection_threshold:0.5"};
    const size_t sizes[] = {SIZE_MAX, SIZE_MAX - 1, SIZE_MAX - 511, SIZE_MAX - 512, SIZE_MAX - MIB,
                            SIZE_MAX - 2 * MIB + 1, SIZE_MAX / 2 + 1, (size_t)1 << 62, ((size_t)1 << 62) + 1};
    for (size_t c = 0; c < sizeof confs / sizeof confs[0]; c++) {
        struct fixture f;
        fixture_open(&f, UINT64_MAX, confs[c]);
        void *a, *b;
        CHECK_OK(tide_malloc(f.t, MIB, 0, &a));
        tide_stats before = stats_of(f.t);
        for (size_t i = 0; i < sizeof sizes / sizeof sizes[0]; i++) {
            void *p = (void *)1;
            tide_status st = tide_malloc(f.t, sizes[i], 0, &p);
            int refused = st == TIDE_ENOMEM || (st == TIDE_EDEVICE && c == 2 && sizes[i] == (size_t)1 << 62);
            if (!refused || p != NULL)
                fprintf(stderr, "  %s: tide_malloc(%zu) gave %s, %p\n", confs[c], sizes[i], tide_status_name(st), p);
            CHECK(refused && p == NULL);
            tide_stats now = stats_of(f.t);
            CHECK(now.allocated_bytes[TIDE_POOL_ALL].current == before.allocated_bytes[TIDE_POOL_ALL].current);
            CHECK(now.allocation[TIDE_POOL_ALL].current == 1);
            CHECK_OK(tide_check(f.t));
        }
        CHECK_OK(tide_malloc(f.t, MIB, 0, &b));
        CHECK(b != a && ((uintptr_t)b >= (uintptr_t)a + MIB || (uintptr_t)b + MIB <= (uintptr_t)a));
        CHECK_OK(tide_check(f.t));
        /* The limit and fractions of it stay representable. */
        CHECK_OK(tide_set_limit_fraction(f.t, 1.0));
        CHECK_OK(tide_set_limit(f.t, SIZE_MAX));
        CHECK_OK(tide_free(f.t, a));
        CHECK_OK(tide_free(f.t, b));
        fixture_close(&f);
    }
}

static void test_references_misused(void)
{
    struct scene s;
    scene_open(&s);
    CHECK_STATUS(tide_release(s.f.t, s.live), TIDE_EINVAL);
    CHECK_MESSAGE("without a matching tide_retain");
    CHECK_STATUS(tide_retain(s.f.t, s.pending), TIDE_EINVAL);
    CHECK_MESSAGE("freed already");
    CHECK_STATUS(tide_record_stream(s.f.t, s.pending, 0x1234), TIDE_EINVAL);
    CHECK_MESSAGE("freed already");
    CHECK_STATUS(tide_release(s.f.t, s.freed), TIDE_EINVAL);
    CHECK_STATUS(tide_retain(s.f.t, (char *)s.live + 1024), TIDE_EINVAL);
    CHECK_MESSAGE("interior pointer");
    unchanged(&s);
    scene_close(&s);
}

static void test_null_arguments_and_bad_settings(void)
{
    struct scene s;
    scene_open(&s);
    void *p;
    CHECK_STATUS(tide_malloc(NULL, 16, 0, &p), TIDE_EINVAL);
    CHECK_MESSAGE("allocator is NULL");
    CHECK_STATUS(tide_malloc(s.f.t, 16, 0, NULL), TIDE_EINVAL);
    CHECK_OK(tide_free(s.f.t, NULL));
    CHECK_STATUS(tide_set_limit(s.f.t, 0), TIDE_EINVAL);
    CHECK_STATUS(tide_set_limit_fraction(s.f.t, 1.5), TIDE_EINVAL);
    CHECK_STATUS(tide_set_limit_fraction(s.f.t, 0), TIDE_EINVAL);
    tide_stats st;
    st.struct_size = 0;
    CHECK_STATUS(tide_get_stats(s.f.t, &st), TIDE_EINVAL);
    CHECK_MESSAGE("struct_size");
    char small[16];
    size_t need = 0;
    CHECK_STATUS(tide_stats_json(s.f.t, small, sizeof small, &need), TIDE_EINVAL);
    CHECK(need > sizeof small);
    CHECK(strlen(small) == sizeof small - 1);
    unchanged(&s);
    scene_close(&s);
}

static tide_status mem_info_refused(void *ctx, size_t *free_bytes, size_t *total_bytes)
{
    (void)ctx;
    (void)free_bytes;
    (void)total_bytes;
    tide_backend_error("the device is unplugged");
    return TIDE_EDEVICE;
}

static tide_status mem_info_empty(void *ctx, size_t *free_bytes, size_t *total_bytes)
{
    (void)ctx;
    *free_bytes = *total_bytes = 0;
    return TIDE_OK;
}

/* A malformed config, and a backend that is not right, refuse to create and reserve nothing. */
static void test_malformed_config_refuses_to_create(void)
{
    tide_sim *sim;
    CHECK_OK(tide_sim_create(NULL, &sim));
    tide_backend be = tide_sim_backend(sim);
    tide_allocator *t = (tide_allocator *)1;
    CHECK_STATUS(tide_create(&be, "limit:lots", &t), TIDE_EINVAL);
    CHECK_MESSAGE("bad value 'lots' for limit");
    CHECK(t == NULL);
    CHECK_STATUS(tide_create(&be, "colour:blue", &t), TIDE_EINVAL);
    CHECK_MESSAGE("unknown key 'colour'");
    tide_backend broken = be;
    broken.fence_query = NULL;
    CHECK_STATUS(tide_create(&broken, NULL, &t), TIDE_EINVAL);
    CHECK_MESSAGE("no fence_query function");
    CHECK_STATUS(tide_create(NULL, NULL, &t), TIDE_EINVAL);
    CHECK_STATUS(tide_create(&be, NULL, NULL), TIDE_EINVAL);
    CHECK_MESSAGE("tide_create: out is NULL");

    /* A backend of the program's own, wrong in each way tide_create checks. */
    broken = be;
    broken.struct_size = (uint32_t)offsetof(tide_backend, close) - 1; /* built against an old header */
    CHECK_STATUS(tide_create(&broken, NULL, &t), TIDE_EINVAL);
    CHECK_MESSAGE("set it to sizeof(tide_backend)");
    broken = be;
    broken.mem_info = mem_info_refused;
    CHECK_STATUS(tide_create(&broken, NULL, &t), TIDE_EDEVICE);
    CHECK_MESSAGE("tide_create: asking the sim device for its memory: the device is unplugged");
    broken.mem_info = mem_info_empty;
    broken.name = NULL; /* a backend need not name itself */
    CHECK_STATUS(tide_create(&broken, NULL, &t), TIDE_EDEVICE);
    CHECK_MESSAGE("tide_create: the (unnamed) device reports no memory");
    broken = be;
    broken.name = NULL;
    broken.fill = NULL;
    CHECK_STATUS(tide_create(&broken, "scrub:True", &t), TIDE_EUNSUPPORTED);
    CHECK_MESSAGE("the (unnamed) backend has none");
    CHECK(t == NULL);
    tide_sim_counters c;
    tide_sim_get_counters(sim, &c);
    CHECK(c.calls[TIDE_SIM_RESERVE] == 0);
    tide_sim_destroy(sim);
}

/* Each thread has its own last message: a failure on one thread leaves another's message as it was,
 * and a thread that has not failed reads "". A thread's message is freed when it exits (valgrind and
 * LeakSanitizer runs of this test count it as leaked otherwise). */
struct message_thread {
    tide_allocator *t;
    char seen_first[256], seen_after[256];
};

static void *fail_on_own_thread(void *arg)
{
    struct message_thread *m = arg;
    snprintf(m->seen_first, sizeof m->seen_first, "%s", tide_last_error());
    void *p;
    CHECK_STATUS(tide_malloc(m->t, 0, 0, &p), TIDE_EINVAL);
    snprintf(m->seen_after, sizeof m->seen_after, "%s", tide_last_error());
    return NULL;
}

static void test_messages_are_per_thread(void)
{
    struct fixture f;
    fixture_open(&f, 4 * GIB, NULL);
    int on_stack;
    CHECK_STATUS(tide_free(f.t, &on_stack), TIDE_EINVAL);
    CHECK_MESSAGE("which tidepool did not allocate");
    for (int i = 0; i < 3; i++) {
        struct message_thread m = {f.t, "unset", "unset"};
        pthread_t thread;
        CHECK(pthread_create(&thread, NULL, fail_on_own_thread, &m) == 0);
        pthread_join(thread, NULL);
        CHECK(strcmp(m.seen_first, "") == 0);
        CHECK(strstr(m.seen_after, "size 0") != NULL);
    }
    CHECK_MESSAGE("which tidepool did not allocate");
    fixture_close(&f);
}

/* One allocator serves TIDE_MAX_STREAMS streams (tidepool.h); the next stream's allocation is refused
 * and changes nothing, and the streams it has go on working. */
static void test_one_stream_too_many(void)
{
    struct fixture f;
    fixture_open(&f, 0, NULL);
    static void *blocks[TIDE_MAX_STREAMS];
    for (uintptr_t i = 0; i < TIDE_MAX_STREAMS; i++)
        CHECK_OK(tide_malloc(f.t, 512, 1000 + i, &blocks[i]));
    tide_stats before = stats_of(f.t);
    CHECK(before.num_streams == TIDE_MAX_STREAMS);
    void *p = &p;
    CHECK_STATUS(tide_malloc(f.t, 512, 1000 + TIDE_MAX_STREAMS, &p), TIDE_EINVAL);
    CHECK(p == NULL);
    CHECK_MESSAGE("too many streams: one allocator serves at most 1024");
    tide_stats after = stats_of(f.t);
    CHECK(memcmp(&before, &after, sizeof after) == 0);
    CHECK_OK(tide_check(f.t));
    CHECK_OK(tide_free(f.t, blocks[7]));
    CHECK_OK(tide_malloc(f.t, 4096, 1000 + 7, &blocks[7]));
    for (uintptr_t i = 0; i < TIDE_MAX_STREAMS; i++)
        CHECK_OK(tide_free(f.t, blocks[i]));
    CHECK_OK(tide_empty_cache(f.t, NULL));
    fixture_close(&f);
}

/* Every status has its name, and a value that is no status says so. */
static void test_status_names(void)
{
    static const struct {
        tide_status status;
        const char *name;
    } names[] = {
        {TIDE_OK, "TIDE_OK"},         {TIDE_EINVAL, "TIDE_EINVAL"},     {TIDE_ENOMEM, "TIDE_ENOMEM"},
        {TIDE_EBUSY, "TIDE_EBUSY"},   {TIDE_EDEVICE, "TIDE_EDEVICE"},   {TIDE_ECORRUPT, "TIDE_ECORRUPT"},
        {TIDE_ENOTREADY, "TIDE_ENOTREADY"}, {TIDE_EUNSUPPORTED, "TIDE_EUNSUPPORTED"},
        {TIDE_EHOSTMEM, "TIDE_EHOSTMEM"},
    };
    for (size_t i = 0; i < sizeof names / sizeof names[0]; i++)
        CHECK(strcmp(tide_status_name(names[i].status), names[i].name) == 0);
    CHECK(strcmp(tide_status_name((tide_status)99), "TIDE_E(unknown status)") == 0);
}

int main(void)
{
    RUN(test_double_free);
    RUN(test_free_of_pointer_not_ours);
    RUN(test_free_of_interior_pointer);
    RUN(test_sizes_zero_and_too_large);
    RUN(test_sizes_near_size_max_on_a_huge_device);
    RUN(test_references_misused);
    RUN(test_null_arguments_and_bad_settings);
    RUN(test_malformed_config_refuses_to_create);
    RUN(test_messages_are_per_thread);
    RUN(test_one_stream_too_many);
    RUN(test_status_names);
    return HARNESS_EXIT();
}

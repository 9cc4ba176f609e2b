/*
 * Host memory refused, one allocation at a time (SQLite's malloc test, for tidepool): a workload of
 * allocations and frees on two streams, cross-stream uses, a history, snapshots, statistics and
 * empty_cache runs once with nothing refused, counting the library's host allocations; then once for
 * each N, with the Nth refused. Each run must survive:
 *   - every call returns TIDE_OK or TIDE_EHOSTMEM (a call that could not get host memory says so), or
 *     what its manual allows otherwise (TIDE_ENOMEM past the limit, TIDE_EBUSY from a trim);
 *   - tide_check passes after every call (or itself reports TIDE_EHOSTMEM), and the device holds
 *     exactly the bytes the statistics say are reserved: no page is mapped, nor memory reserved, that
 *     the allocator does not account for;
 *   - at the end everything is freed and given back, and tide_destroy leaves the device empty.
 * Built against tidepool_host_faults, the library with host_faults.h forced in (tests/CMakeLists.txt).
 * Reserved segments and expandable segments, each also under a limit; and expandable segments where
 * the first growth's map is refused partway and the undo of its mapped pages refused too. Last, a
 * trim whose unmaps the device refuses, and an allocation that needs a new segment, while the heap is
 * out of spare block structs, each of their host allocations refused in turn (the *_spare_block
 * tests).
 */
#include "harness.h"
#include "host_faults.h"

#include <stdbool.h>

#define LIVE 12
#define STEPS 160

struct run {
    unsigned long refuse;     /* the host allocation to refuse, counted from the run's start; 0: none */
    const char *conf;
    bool strand;              /* the first growth's map refused partway, and its undo too (expandable) */
    const char *failed_at;    /* the first call that broke a promise, or NULL */
    tide_status failed_with;
    int step;
};

static bool acceptable(tide_status s) { return s == TIDE_OK || s == TIDE_EHOSTMEM; }

/* What a call may also answer, by its manual: a trim that cannot reach its target says TIDE_EBUSY; an
 * allocation past the limit, TIDE_ENOMEM. */
static tide_status allowed(tide_status s, tide_status also)
{
    return s == also ? TIDE_OK : s;
}

/* The promises after a call: its status, the validator, and the device's bytes against the stats. */
static void after(struct run *r, tide_sim *sim, tide_allocator *t, const char *call, tide_status s, int step)
{
    if (r->failed_at)
        return;
    tide_status checked = tide_check(t);
    tide_stats st;
    st.struct_size = sizeof st;
    tide_status got = tide_get_stats(t, &st);
    tide_sim_counters c;
    tide_sim_get_counters(sim, &c);
    const char *broken = !acceptable(s) ? call
                         : !acceptable(checked) ? "tide_check"
                         : got != TIDE_OK ? "tide_get_stats"
                         : (int64_t)c.held_bytes != st.reserved_bytes[TIDE_POOL_ALL].current ? "device bytes != reserved"
                         : NULL;
    if (broken) {
        r->failed_at = broken;
        r->failed_with = !acceptable(s) ? s : checked;
        r->step = step;
    }
}

/* The device and an allocator on it, with r's config; false (having said why, where that breaks a
 * promise) if either could not be made. */
static bool open_run(struct run *r, tide_sim **sim, tide_allocator **t)
{
    tide_sim_options o = {sizeof o, 1ull << 36, 0, 0};
    if (tide_sim_create(&o, sim) != TIDE_OK)
        return false; /* the device itself could not be made: nothing to check */
    tide_backend be = tide_sim_backend(*sim);
    *t = NULL;
    tide_status s = tide_create(&be, r->conf, t);
    if (s != TIDE_OK) {
        if (!acceptable(s) || *t) {
            r->failed_at = "tide_create";
            r->failed_with = s;
        }
        tide_sim_destroy(*sim);
        return false;
    }
    return true;
}

/* The end of every run: the n blocks in live freed, the cache emptied, everything given back. */
static void finish_run(struct run *r, tide_sim *sim, tide_allocator *t, void **live, int n, int step)
{
    for (int k = 0; k < n; k++)
        if (live[k])
            after(r, sim, t, "tide_free (the end)", tide_free(t, live[k]), step);
    tide_sim_synchronize(sim);
    after(r, sim, t, "tide_empty_cache (the end)", tide_empty_cache(t, NULL), step);
    tide_stats st;
    st.struct_size = sizeof st;
    if (!r->failed_at && tide_get_stats(t, &st) == TIDE_OK && st.reserved_bytes[TIDE_POOL_ALL].current != 0) {
        r->failed_at = "tide_empty_cache (the end): memory left reserved";
        r->step = step;
    }
    tide_status s = tide_destroy(t);
    tide_sim_counters c;
    tide_sim_get_counters(sim, &c);
    if (!r->failed_at && (s != TIDE_OK || c.held_bytes != 0)) {
        r->failed_at = s != TIDE_OK ? "tide_destroy" : "tide_destroy: the device still holds memory";
        r->failed_with = s;
        r->step = step;
    }
    tide_sim_destroy(sim);
}

static void workload(struct run *r)
{
    tide_sim *sim;
    tide_allocator *t;
    if (!open_run(r, &sim, &t))
        return;
    tide_status s;
    tide_stream streams[4] = {0, 0, 0, 0}; /* the default stream, and three more where they can be made */
    for (int i = 1; i < 4; i++)
        if (tide_sim_stream_create(sim, &streams[i]) != TIDE_OK)
            streams[i] = 0;
    tide_stream other = streams[1];
    void *stranding = NULL;
    if (r->strand) { /* three pages, mapped one by one: the third refused, and the undo of the first two */
        tide_sim_inject_fault(sim, TIDE_SIM_MAP, 2, 1);
        tide_sim_inject_fault(sim, TIDE_SIM_UNMAP, 0, UINT32_MAX);
        s = tide_malloc(t, (5u << 20) + 1, 0, &stranding);
        tide_sim_inject_fault(sim, TIDE_SIM_MAP, 0, 0);
        tide_sim_inject_fault(sim, TIDE_SIM_UNMAP, 0, 0);
        after(r, sim, t, "tide_malloc (stranding pages)", s, -1);
        if (s == TIDE_OK)
            after(r, sim, t, "tide_free (stranding pages)", tide_free(t, stranding), -1);
    }
    static const size_t sizes[] = {4096, 100 << 10, 1536 << 10, 3 << 20, 25 << 20, 700};
    void *live[LIVE] = {0};
    for (int step = 0; step < STEPS && !r->failed_at; step++) {
        int k = step % LIVE;
        if (live[k]) {
            after(r, sim, t, "tide_free", s = tide_free(t, live[k]), step);
            live[k] = NULL;
        }
        tide_stream stream = step % 3 == 2 ? other : 0;
        s = tide_malloc(t, sizes[(step * 7) % 6], stream, &live[k]);
        if (s != TIDE_OK)
            live[k] = NULL;
        after(r, sim, t, "tide_malloc", allowed(s, TIDE_ENOMEM), step);
        if (live[k] && step % 5 == 1) /* used by one other stream, or (every third time) by three */
            for (int i = 1; i < (step % 15 == 1 ? 4 : 2); i++)
                after(r, sim, t, "tide_record_stream", tide_record_stream(t, live[k], streams[i]), step);
        if (step == 16)
            after(r, sim, t, "tide_history_start", tide_history_start(t, 64, step % 2 ? 0 : TIDE_HISTORY_STACKS), step);
        if (step == 24)
            tide_set_tag("host-faults: a tag");
        if (step == 32)
            tide_set_tag(NULL);
        if (step == 50) {
            char *text = NULL;
            after(r, sim, t, "tide_leak_report", tide_leak_report(t, &text, NULL), step);
            tide_string_free(text);
            after(r, sim, t, "tide_trim", allowed(tide_trim(t, 0, NULL), TIDE_EBUSY), step);
        }
        if (step % 16 == 8) {
            char *text = NULL;
            after(r, sim, t, "tide_snapshot_json", tide_snapshot_json(t, &text), step);
            tide_string_free(text);
        }
        if (step == 24 || step == 40) { /* (naming every frame of every event is slow: twice is enough) */
            char *text = NULL;
            after(r, sim, t, "tide_history_json", tide_history_json(t, &text), step);
            tide_string_free(text);
        }
        if (step == 40)
            tide_history_stop(t);
        if (step % 20 == 19)
            after(r, sim, t, "tide_empty_cache", tide_empty_cache(t, NULL), step);
    }
    finish_run(r, sim, t, live, LIVE, STEPS);
}

/* Many live blocks on many streams: each stream's heap made, its pointer map grown several times
 * (to 2048 slots, for 100 blocks), half the blocks freed and allocated again, in an order that mixes
 * the streams, and a trim. (tide_check walks every block, so it runs
 * every 128 calls and after any call that fails, not after each.) */
#define MANY_STREAMS 6
#define MANY_BLOCKS 600
static void many_after(struct run *r, tide_sim *sim, tide_allocator *t, const char *call, tide_status s,
                       int step)
{
    if (s != TIDE_OK || step % 128 == 0)
        after(r, sim, t, call, s, step);
}

static void workload_many(struct run *r)
{
    tide_sim *sim;
    tide_allocator *t;
    if (!open_run(r, &sim, &t))
        return;
    tide_stream streams[MANY_STREAMS] = {0};
    for (int i = 1; i < MANY_STREAMS; i++)
        if (tide_sim_stream_create(sim, &streams[i]) != TIDE_OK)
            streams[i] = 0;
    static void *live[MANY_BLOCKS];
    static const size_t sizes[] = {512, 3000, 40 << 10, 700, 1 << 20, 9000, 100 << 10};
    int step = 0;
    for (int round = 0; round < 2 && !r->failed_at; round++)
        for (int k = round; k < MANY_BLOCKS && !r->failed_at; k += 1 + round, step++) {
            if (live[k]) /* the second round: every other block freed and made again */
                many_after(r, sim, t, "tide_free", tide_free(t, live[k]), step);
            live[k] = NULL;
            tide_status s = tide_malloc(t, sizes[(k * 5 + round) % 7], streams[(k * 7) % MANY_STREAMS], &live[k]);
            if (s != TIDE_OK)
                live[k] = NULL;
            many_after(r, sim, t, "tide_malloc", s, step);
        }
    after(r, sim, t, "tide_trim", allowed(tide_trim(t, 0, NULL), TIDE_EBUSY), step);
    finish_run(r, sim, t, live, MANY_BLOCKS, step);
    memset(live, 0, sizeof live);
}

/* Refuse every Nth host allocation only (TIDE_HOST_FAULTS_EVERY, default 1: each one). The valgrind
 * build takes every third: memcheck runs this test some twenty times slower, and the sanitizer build
 * still refuses each allocation in turn. */
static unsigned long refusal_stride(void)
{
    const char *env = getenv("TIDE_HOST_FAULTS_EVERY");
    long every = env ? atol(env) : 1;
    return every > 0 ? (unsigned long)every : 1;
}

static void sweep_workload(const char *name, const char *conf, bool strand, void (*run_once)(struct run *))
{
    /* A first run makes what a process makes once (a thread's message buffer, keys); the second counts
     * what every run makes. */
    struct run warm = {0, conf, strand, NULL, TIDE_OK, 0}, clean = warm;
    run_once(&warm);
    unsigned long before = tide__host_faults_calls();
    run_once(&clean);
    unsigned long calls = tide__host_faults_calls() - before;
    CHECK(clean.failed_at == NULL);
    CHECK(calls > 50); /* the workload does reach the library's allocations */
    unsigned long survived = 0, unreached = 0, tried = 0, stride = refusal_stride();
    for (unsigned long n = 1; n <= calls; n += stride, tried++) {
        struct run r = {n, conf, strand, NULL, TIDE_OK, 0};
        unsigned long refused_before = tide__host_faults_refused();
        tide__host_faults_arm(n);
        run_once(&r);
        tide__host_faults_arm(0);
        if (tide__host_faults_refused() == refused_before) {
            unreached++; /* this run made fewer host allocations than the counting run */
            fprintf(stderr, "%s: host allocation %lu of %lu never made in its run\n", name, n,
                    calls);
        }
        if (r.failed_at) {
            fprintf(stderr, "%s: host allocation %lu of %lu refused: %s broke at step %d (%s): %s\n",
                    name, n, calls, r.failed_at, r.step, tide_status_name(r.failed_with),
                    tide_last_error());
            harness_failures++;
        } else {
            survived++;
        }
    }
    /* Every allocation was refused in its run, but for one at most: the segment map makes a table for
     * each 32 GiB of device addresses it meets, so a run whose memory the kernel places across such a
     * boundary makes one allocation more than the others. (The simulator's same_addresses would make
     * that the same in every run, but valgrind runs this test three times slower with it.) */
    CHECK(unreached <= 1);
    fprintf(stderr, "%s: %lu host allocations, %lu of them refused, each in a run of its own: %lu runs survived\n",
            name, calls, tried - unreached, survived);
}

static void sweep(const char *conf, bool strand)
{
    sweep_workload(strand ? "expandable_segments:True, pages stranded" : conf ? conf : "(default)", conf, strand,
                   workload);
}

static void test_reserved_segments(void) { sweep(NULL, false); }
static void test_expandable_segments(void) { sweep("expandable_segments:True", false); }
/* Under a limit the workload reaches, so that memory is released to make room (the ladder). */
static void test_under_a_limit(void) { sweep("limit:96MiB,garbage_collection_threshold:0.8", false); }
static void test_expandable_under_a_limit(void) { sweep("expandable_segments:True,limit:96MiB", false); }
/* Pages a refused map leaves mapped, when the unmap that would undo them is refused as well, must join
 * a run (the allocator keeps them) whichever host allocation fails around them: the pages are mapped
 * only once everything they need to join is got. */
static void test_expandable_stranded_pages(void) { sweep("expandable_segments:True", true); }
static void test_many_blocks_on_many_streams(void)
{
    sweep_workload("many blocks on many streams", NULL, false, workload_many);
}
static void test_many_blocks_on_many_streams_expandable(void)
{
    sweep_workload("many blocks on many streams, expandable_segments:True", "expandable_segments:True", false,
                   workload_many);
}

/* ---- the heap out of spare block structs --------------------------------------------------------- */

/* What is done with the heap's spare block structs used up, each of its host allocations refused in
 * turn: a trim whose unmaps the device refuses (expandable segments), or an allocation that needs a
 * new segment. */
enum spare_act { TRIM_REFUSED, NEW_SEGMENT };

struct spare_run {
    enum spare_act act;
    int spares;               /* spare block structs left in the heap before the act: 0 or 1 */
    unsigned long act_calls;  /* host allocations the act made */
    unsigned long act_chunks; /* of them, chunks of block structs */
    struct run run;           /* its refuse: the host allocation of the act to refuse, from 1; 0: none */
};

/* First a run of 3 + 8 + 3 MiB whose 8 MiB in the middle is then freed (with expandable segments, the
 * FREE block begins and ends inside pages, and a trim carves the three whole pages between out of its
 * middle). Then the heap's spare block structs are used up but r->spares: block structs come 128 to a
 * chunk, and each small allocation split off a FREE tail takes one. Then the act, with its rth host
 * allocation refused (TRIM_REFUSED: and every unmap). Then unmaps are allowed again, and everything
 * must go back to the device. */
static void spare_scenario(struct spare_run *r)
{
    const size_t mib = (size_t)1 << 20;
    tide_sim *sim;
    tide_allocator *t;
    if (!open_run(&r->run, &sim, &t)) { /* nothing is refused yet */
        CHECK(false);
        return;
    }
    void *a = NULL, *m = NULL, *c = NULL, *big = NULL, *tiny[600] = {0};
    CHECK_OK(tide_malloc(t, 3 * mib, 0, &a));
    CHECK_OK(tide_malloc(t, 8 * mib, 0, &m));
    CHECK_OK(tide_malloc(t, 3 * mib, 0, &c));
    CHECK_OK(tide_free(t, m));
    int n = 0, chunks = 0;
    while (chunks < 2 && n < 600) { /* the second new chunk is made by a split: 127 spares are left */
        unsigned long before = tide__host_faults_aligned_calls();
        CHECK_OK(tide_malloc(t, 512, 0, &tiny[n++]));
        chunks += tide__host_faults_aligned_calls() > before;
    }
    CHECK(chunks == 2);
    for (int k = 0; k < 127 - r->spares && n < 600; k++)
        CHECK_OK(tide_malloc(t, 512, 0, &tiny[n++]));

    if (r->act == TRIM_REFUSED)
        tide_sim_inject_fault(sim, TIDE_SIM_UNMAP, 0, UINT32_MAX);
    unsigned long calls_before = tide__host_faults_calls(), chunks_before = tide__host_faults_aligned_calls();
    tide__host_faults_arm(r->run.refuse);
    tide_status s = r->act == TRIM_REFUSED ? tide_trim(t, 0, NULL) : tide_malloc(t, 64 * mib, 0, &big);
    tide__host_faults_arm(0);
    r->act_calls = tide__host_faults_calls() - calls_before;
    r->act_chunks = tide__host_faults_aligned_calls() - chunks_before;
    tide_sim_inject_fault(sim, TIDE_SIM_UNMAP, 0, 0);
    if (r->act == TRIM_REFUSED)
        after(&r->run, sim, t, "tide_trim", allowed(allowed(s, TIDE_EDEVICE), TIDE_EBUSY), 0);
    else
        after(&r->run, sim, t, "tide_malloc", s, 0);

    CHECK_OK(tide_free(t, a));
    CHECK_OK(tide_free(t, c));
    if (big)
        CHECK_OK(tide_free(t, big));
    for (int k = 0; k < n; k++)
        CHECK_OK(tide_free(t, tiny[k]));
    finish_run(&r->run, sim, t, NULL, 0, 1);
}

static void spare_sweep(const char *name, enum spare_act act, const char *conf, int spares)
{
    struct spare_run clean = {act, spares, 0, 0, {0, conf, false, NULL, TIDE_OK, 0}};
    spare_scenario(&clean);
    CHECK(clean.run.failed_at == NULL);
    CHECK(clean.act_chunks == 1); /* the heap did run out of spare block structs during the act */
    unsigned long survived = 0, stride = refusal_stride();
    for (unsigned long k = 1; k <= clean.act_calls; k += stride) {
        struct spare_run r = {act, spares, 0, 0, {k, conf, false, NULL, TIDE_OK, 0}};
        spare_scenario(&r);
        if (r.run.failed_at) {
            fprintf(stderr, "%s, %d spare(s): host allocation %lu of %lu refused: %s broke at step %d (%s): %s\n",
                    name, spares, k, clean.act_calls, r.run.failed_at, r.run.step,
                    tide_status_name(r.run.failed_with), tide_last_error());
            harness_failures++;
        } else {
            survived++;
        }
    }
    fprintf(stderr, "%s, %d spare block struct(s) before it: %lu host allocations, every %lu refused in a "
            "run of its own: %lu runs survived\n", name, spares, clean.act_calls, stride, survived);
}

/* A segment (here, pages carved out of a FREE block) that the device refuses to release goes back to
 * its heap, and that must need no host memory: the pages keep a block struct of their own while they
 * are away. A carve that cannot get its block structs must change nothing. */
static void test_refused_release_with_one_spare_block(void)
{
    spare_sweep("a refused release", TRIM_REFUSED, "expandable_segments:True", 1);
}
static void test_refused_release_with_no_spare_block(void)
{
    spare_sweep("a refused release", TRIM_REFUSED, "expandable_segments:True", 0);
}
/* A new segment (or new pages) must not be reserved before the heap has the block struct to take it
 * in: one reserved and then not taken in would stay counted, in no heap. */
static void test_new_segment_with_no_spare_block(void)
{
    spare_sweep("a new segment", NEW_SEGMENT, NULL, 0);
}
static void test_new_pages_with_no_spare_block(void)
{
    spare_sweep("new pages", NEW_SEGMENT, "expandable_segments:True", 0);
}

int main(void)
{
    RUN(test_reserved_segments);
    RUN(test_expandable_segments);
    RUN(test_under_a_limit);
    RUN(test_expandable_under_a_limit);
    RUN(test_expandable_stranded_pages);
    RUN(test_many_blocks_on_many_streams);
    RUN(test_many_blocks_on_many_streams_expandable);
    RUN(test_refused_release_with_one_spare_block);
    RUN(test_refused_release_with_no_spare_block);
    RUN(test_new_segment_with_no_spare_block);
    RUN(test_new_pages_with_no_spare_block);
    return HARNESS_EXIT();
}

/*
 * The parked block (heap_park) must be invisible: tidepool with it and tidepool without it (the same
 * sources built with TIDE_NO_PARKING) must hand out the same pointers, report the same statistics and
 * leave the same snapshot, for any sequence of calls. This program runs a fixed, seeded sequence under
 * several configurations and prints, for each, a digest of everything a program can see: every status
 * and pointer returned, the statistics every 64 calls, and the snapshot at the end. tests/CMakeLists.txt
 * builds it twice, against each library, and requires the two outputs to be equal
 * (parking_is_invisible). The simulated device is asked to map memory at the same addresses in every
 * run (same_addresses), so the pointers of two processes compare.
 *
 * The sequence leans on what parking changes: a block freed and its size asked for again at once
 * (taken back, or not when the search would have placed the request elsewhere), with FREE, PENDING
 * and ACTIVE neighbours, in both pools, around oversize blocks, frees pending on a second stream,
 * references, empty_cache, trim and a limit that makes the allocator release memory to fit.
 *
 * Everything here is synchronous, so that the runs are the same: a block used on another stream is
 * freed after that stream is synchronized (its fence has signalled by the next allocation).
 * Allocations use the first stream only. With two heaps, which heap's idle segment goes back first
 * when memory must be released (growth past the most ever reserved, trim, a limit) is decided by a
 * coarse clock, whose ties fall either way from run to run; each heap's peaks, and so their sums, then
 * differ (about one run in 30, with or without parking), which this comparison could not tell from a
 * difference parking makes.
 */
#include "harness.h"

#define MAX_LIVE 128
#define OPS 12000

struct world {
    struct fixture f;
    tide_stream streams[2];
    struct {
        void *p;
        size_t size;
        tide_stream stream;
    } live[MAX_LIVE];
    int nlive;
    uint64_t rng, digest;
    unsigned long mallocs, frees;
};

static void mix(struct world *w, const void *data, size_t n)
{
    const unsigned char *c = data;
    for (size_t i = 0; i < n; i++) {
        w->digest ^= c[i];
        w->digest *= 0x100000001b3ull; /* FNV-1a */
    }
}

static void mix_u64(struct world *w, uint64_t v) { mix(w, &v, sizeof v); }

static size_t pick_size(struct world *w)
{
    static const size_t palette[] = {512,       4096,      65536,     1 << 20,   (1 << 20) + 512,
                                     3u << 20,  8u << 20,  40u << 20, 64u << 20, 130000};
    uint64_t r = rng_next(&w->rng);
    if (r % 10 < 7)
        return palette[(r / 10) % (sizeof palette / sizeof palette[0])];
    unsigned bits = (unsigned)((r / 10) % 25);
    size_t base = (size_t)1 << bits;
    return base + (r / 1000) % base;
}

static void do_malloc(struct world *w, size_t size, tide_stream stream)
{
    if (w->nlive == MAX_LIVE)
        return;
    void *p = NULL;
    tide_status s = tide_malloc(w->f.t, size, stream, &p);
    mix_u64(w, (uint64_t)s);
    mix_u64(w, (uint64_t)(uintptr_t)p);
    if (s != TIDE_OK) {
        CHECK(s == TIDE_ENOMEM);
        return;
    }
    w->mallocs++;
    w->live[w->nlive].p = p;
    w->live[w->nlive].size = size;
    w->live[w->nlive].stream = stream;
    w->nlive++;
}

/* Frees live block i: plainly, used by the other stream first (PENDING until that stream is done), or
 * held by a reference that is let go right after (PENDING, then FREE). */
static void do_free(struct world *w, int i, unsigned how)
{
    void *p = w->live[i].p;
    tide_stream other = w->live[i].stream == w->streams[0] ? w->streams[1] : w->streams[0];
    if (how == 1) {
        CHECK_OK(tide_record_stream(w->f.t, p, other));
        CHECK_OK(tide_sim_enqueue(w->f.sim, other, 0, NULL, NULL));
    } else if (how == 2) {
        CHECK_OK(tide_retain(w->f.t, p));
    }
    CHECK_OK(tide_free(w->f.t, p));
    if (how == 1)
        CHECK_OK(tide_sim_stream_synchronize(w->f.sim, other));
    else if (how == 2)
        CHECK_OK(tide_release(w->f.t, p));
    w->frees++;
    w->live[i] = w->live[--w->nlive];
}

/* The snapshot, with the second stream's handle (a host pointer, which differs between processes) and
 * the time the device calls took left out. */
static void mix_snapshot(struct world *w, const char *json)
{
    char handle[32];
    snprintf(handle, sizeof handle, "%llu", (unsigned long long)w->streams[1]);
    size_t n = strlen(handle);
    static const char timed[] = "\"device_call_ns\": ";
    for (const char *c = json; *c;) {
        if (strncmp(c, timed, sizeof timed - 1) == 0) {
            for (c += sizeof timed - 1; *c >= '0' && *c <= '9'; c++)
                ;
        } else if (strncmp(c, handle, n) == 0) {
            mix(w, "S1", 2);
            c += n;
        } else {
            mix(w, c++, 1);
        }
    }
}

/* Every statistic but the time the device calls took, which no two runs share. */
static void mix_stats(struct world *w)
{
    tide_stats s = stats_of(w->f.t);
    s.device_call_ns = 0;
    mix(w, &s, sizeof s);
}

static void one_op(struct world *w)
{
    uint64_t r = rng_next(&w->rng) % 100;
    int i = w->nlive ? (int)(rng_next(&w->rng) % (uint64_t)w->nlive) : -1;
    tide_stream stream = w->streams[0];
    if (r < 30 || i < 0) {
        do_malloc(w, pick_size(w), stream);
    } else if (r < 55) {
        do_free(w, i, 0);
    } else if (r < 80) { /* the pattern parking is for: free, then the same size again */
        size_t size = w->live[i].size;
        tide_stream same = w->live[i].stream;
        do_free(w, i, 0);
        do_malloc(w, size, same);
    } else if (r < 86) {
        size_t size = w->live[i].size;
        tide_stream same = w->live[i].stream;
        do_free(w, i, (unsigned)(1 + rng_next(&w->rng) % 2));
        do_malloc(w, size, same);
    } else if (r < 94) { /* free, then another size */
        do_free(w, i, 0);
        do_malloc(w, pick_size(w), stream);
    } else if (r < 96) {
        tide_release_report rep;
        CHECK_OK(tide_empty_cache(w->f.t, &rep));
        mix(w, &rep, sizeof rep);
    } else if (r < 98) {
        tide_status s = tide_trim(w->f.t, (size_t)(rng_next(&w->rng) % (256 * MIB)), NULL);
        CHECK(s == TIDE_OK || s == TIDE_EBUSY);
        mix_u64(w, (uint64_t)s);
    } else { /* a same-size loop, as a training step's temporaries make */
        size_t size = pick_size(w);
        for (int k = 0; k < 20; k++) {
            do_malloc(w, size, stream);
            if (w->nlive)
                do_free(w, w->nlive - 1, 0);
        }
    }
}

static void run(const char *conf)
{
    struct world w;
    memset(&w, 0, sizeof w);
    w.rng = 20261130;
    w.digest = 0xcbf29ce484222325ull;
    tide_sim_options o = {sizeof o, 8 * GIB, 0, 1}; /* memory at the same addresses in every run */
    fixture_open_sim(&w.f, &o, conf);
    w.streams[0] = 0;
    CHECK_OK(tide_sim_stream_create(w.f.sim, &w.streams[1]));
    const char *trace = getenv("TIDE_PARKING_TRACE"); /* each call's digest, to find where two runs part */
    for (unsigned long op = 1; op <= OPS; op++) {
        one_op(&w);
        if (trace)
            fprintf(stderr, "%s %lu %016llx\n", conf, op, (unsigned long long)w.digest);
        if (op % 64 == 0)
            mix_stats(&w);
        if (op % 1000 == 0 && tide_check(w.f.t) != TIDE_OK) {
            fprintf(stderr, "%s: after operation %lu: %s\n", conf, op, tide_last_error());
            harness_failures++;
        }
    }
    char *snapshot = NULL;
    CHECK_OK(tide_snapshot_json(w.f.t, &snapshot));
    if (snapshot)
        mix_snapshot(&w, snapshot);
    free(snapshot);
    while (w.nlive)
        do_free(&w, w.nlive - 1, 0);
    mix_stats(&w);
    CHECK_OK(tide_empty_cache(w.f.t, NULL));
    CHECK(reserved_of(w.f.t) == 0);
    printf("%-45s %lu mallocs, %lu frees, digest %016llx\n", conf[0] ? conf : "(default)", w.mallocs,
           w.frees, (unsigned long long)w.digest);
    fixture_close(&w.f);
}

int main(void)
{
    run("");
    run("expandable_segments:True");
    run("max_split_size_mb:32");
    run("limit:768MiB,garbage_collection_threshold:0.6");
    run("expandable_segments:True,limit:512MiB");
    return HARNESS_EXIT();
}

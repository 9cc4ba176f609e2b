/*
 * Expandable segments (expandable_segments:True) on the simulated device, whose virtual memory works
 * as CUDA's does: an address range reserved once, pages mapped and unmapped one by one, an unmapped
 * page inaccessible (a touch faults) and its contents gone.
 *
 * Every page state: mapped under an ACTIVE block, under a PENDING block, under FREE bytes only (which
 * may be unmapped, splitting its run, unless another page mapped in the same call holds a live block),
 * unmapped; runs that grow, split and merge again; streams that
 * never share a page; empty_cache and trim unmapping every page they can and no other; faults in map
 * and unmap; and a seeded random run with tide_check after every call and every live block's data
 * checked after every release of memory.
 */
#include "harness.h"

#include <errno.h>
#include <stdbool.h>
#include <unistd.h>

#define PAGE (2 * MIB)
#define CONF "expandable_segments:True"

/* Whether every page of [p, p+n) can be read, found without touching it: the kernel says EFAULT
 * when write() is handed an inaccessible buffer. */
static bool accessible(const void *p, size_t n)
{
    int fds[2];
    if (pipe(fds) != 0)
        return false;
    bool ok = true;
    uintptr_t first = (uintptr_t)p / PAGE * PAGE; /* the device maps and unmaps whole pages */
    for (uintptr_t a = first; a < (uintptr_t)p + n && ok; a += PAGE) {
        const char *byte = (const char *)(a < (uintptr_t)p ? (uintptr_t)p : a);
        char sink;
        ok = write(fds[1], byte, 1) == 1 && read(fds[0], &sink, 1) == 1;
    }
    close(fds[0]);
    close(fds[1]);
    return ok;
}

static void fill(void *p, size_t n, uint8_t v) { memset(p, v, n); }

/* The block still holds its pattern (and can be read at all). One byte in every 4 KiB is checked, and
 * the last: a page unmapped and mapped again reads as zeros throughout. */
static bool intact(const void *p, size_t n, uint8_t v)
{
    if (!accessible(p, n))
        return false;
    const uint8_t *b = p;
    for (size_t i = 0; i < n; i += 4096)
        if (b[i] != v)
            return false;
    return b[n - 1] == v;
}

static tide_sim_counters counters(tide_sim *sim)
{
    tide_sim_counters c;
    tide_sim_get_counters(sim, &c);
    return c;
}

static int64_t segments_of(tide_allocator *t) { return stats_of(t).segment[TIDE_POOL_ALL].current; }

/* Reserved bytes are exactly the pages the device has mapped. */
static void check_accounting(struct fixture *f)
{
    tide_sim_counters c = counters(f->sim);
    CHECK((int64_t)c.held_bytes == reserved_of(f->t));
    CHECK(c.mapped_pages * PAGE == c.held_bytes);
    CHECK_OK(tide_check(f->t));
}

static void test_grows_by_pages(void)
{
    struct fixture f;
    fixture_open(&f, 0, CONF);
    void *a, *b, *c;
    CHECK_OK(tide_malloc(f.t, 4096, 0, &a));
    CHECK(reserved_of(f.t) == (int64_t)PAGE); /* one page, not a 2 MiB small segment by rule */
    CHECK(counters(f.sim).va_ranges == 1);
    CHECK_OK(tide_malloc(f.t, 3 * MIB, 0, &b)); /* grows the same run by just the pages it lacks */
    CHECK(reserved_of(f.t) == (int64_t)(2 * PAGE));
    CHECK(segments_of(f.t) == 1);
    CHECK((uintptr_t)b == (uintptr_t)a + 4096); /* right after a: the run's free tail was used */
    CHECK_OK(tide_malloc(f.t, 30 * MIB, 0, &c)); /* no 20 MiB segment rounding: 30 MiB more, in pages */
    CHECK(reserved_of(f.t) == (int64_t)(17 * PAGE)); /* 4 KiB + 3 MiB + 30 MiB need 17 pages */
    CHECK(segments_of(f.t) == 1);
    check_accounting(&f);
    tide_stats s = stats_of(f.t);
    CHECK(s.reserved_bytes[TIDE_POOL_SMALL].current == 0); /* one pool per stream */
    CHECK_OK(tide_free(f.t, a));
    CHECK_OK(tide_free(f.t, b));
    CHECK_OK(tide_free(f.t, c));
    tide_release_report r;
    CHECK_OK(tide_empty_cache(f.t, &r));
    CHECK(r.reserved_bytes == 0);
    CHECK(counters(f.sim).mapped_pages == 0);
    check_accounting(&f);
    fixture_close(&f);
}

static void test_free_pages_between_live_blocks(void)
{
    struct fixture f;
    fixture_open(&f, 0, CONF);
    /* [low 1 MiB][middle 9 MiB][high 1 MiB] in one run */
    void *low, *mid, *high;
    CHECK_OK(tide_malloc(f.t, 1 * MIB, 0, &low));
    CHECK_OK(tide_malloc(f.t, 9 * MIB, 0, &mid));
    CHECK_OK(tide_malloc(f.t, 1 * MIB, 0, &high));
    if (!low || !mid || !high)
        return;
    CHECK(segments_of(f.t) == 1);
    fill(low, 1 * MIB, 0x11);
    fill(high, 1 * MIB, 0x22);
    int64_t before = reserved_of(f.t);
    CHECK_OK(tide_free(f.t, mid));
    /* The middle block's whole pages can go although its neighbours are live: the run splits. */
    tide_release_report r;
    CHECK_OK(tide_empty_cache(f.t, &r));
    CHECK(r.released_bytes >= 4 * PAGE);
    CHECK(reserved_of(f.t) == before - (int64_t)r.released_bytes);
    CHECK(segments_of(f.t) == 2);
    CHECK(intact(low, 1 * MIB, 0x11));
    CHECK(intact(high, 1 * MIB, 0x22));
    check_accounting(&f);
    /* The unmapped hole is inaccessible, as freed device memory should be. */
    uintptr_t hole = ((uintptr_t)mid + PAGE - 1) / PAGE * PAGE;
    CHECK(!accessible((void *)hole, 1));
    /* A request that fits the hole and the free bytes beside it maps the hole again and joins the
     * runs into one. */
    void *again;
    CHECK_OK(tide_malloc(f.t, 9 * MIB, 0, &again));
    CHECK(again == mid);
    CHECK(segments_of(f.t) == 1);
    CHECK(reserved_of(f.t) == before);
    fill(again, 9 * MIB, 0x33);
    CHECK(intact(low, 1 * MIB, 0x11));
    CHECK(intact(high, 1 * MIB, 0x22));
    check_accounting(&f);
    CHECK_OK(tide_free(f.t, again));
    CHECK_OK(tide_free(f.t, low));
    CHECK_OK(tide_free(f.t, high));
    CHECK_OK(tide_empty_cache(f.t, NULL));
    CHECK(reserved_of(f.t) == 0);
    fixture_close(&f);
}

struct hold {
    tide_allocator *t;
    void *p;
    struct gate *gate;
};

static void kernel_holding(void *arg)
{
    struct hold *h = arg;
    gate_pass(h->gate);
    tide_release(h->t, h->p);
}

static void test_pending_pages_stay_mapped(void)
{
    struct fixture f;
    fixture_open(&f, 0, CONF);
    void *p, *q;
    CHECK_OK(tide_malloc(f.t, 8 * MIB, 0, &p));
    CHECK_OK(tide_malloc(f.t, 8 * MIB, 0, &q));
    fill(p, 8 * MIB, 0x44);
    /* a kernel holds p: freed now, it is PENDING until the kernel completes */
    struct gate g;
    gate_init(&g);
    struct hold h = {f.t, p, &g};
    CHECK_OK(tide_retain(f.t, p));
    tide_stream s;
    CHECK_OK(tide_sim_stream_create(f.sim, &s));
    CHECK_OK(tide_sim_enqueue(f.sim, s, 0, kernel_holding, &h));
    CHECK_OK(tide_free(f.t, p));
    CHECK_OK(tide_free(f.t, q));
    CHECK_STATUS(tide_trim(f.t, 0, NULL), TIDE_EBUSY); /* p is still in use: 0 cannot be reached */
    /* q's pages went; p's stayed, with the data the kernel may still read */
    CHECK(intact(p, 8 * MIB, 0x44));
    tide_stats st = stats_of(f.t);
    CHECK(st.pending_free_bytes[TIDE_POOL_ALL].current == (int64_t)(8 * MIB));
    CHECK(reserved_of(f.t) >= (int64_t)(8 * MIB) && reserved_of(f.t) <= (int64_t)(8 * MIB + 2 * PAGE));
    check_accounting(&f);
    gate_open(&g);
    CHECK_OK(tide_sim_synchronize(f.sim));
    CHECK_OK(tide_empty_cache(f.t, NULL));
    CHECK(reserved_of(f.t) == 0);
    check_accounting(&f);
    fixture_close(&f);
}

static void test_streams_never_share_a_page(void)
{
    struct fixture f;
    fixture_open(&f, 0, CONF);
    tide_stream s1;
    CHECK_OK(tide_sim_stream_create(f.sim, &s1));
    void *a[8], *b[8];
    for (int i = 0; i < 8; i++) {
        CHECK_OK(tide_malloc(f.t, 100 * 1024, 0, &a[i]));
        CHECK_OK(tide_malloc(f.t, 100 * 1024, s1, &b[i]));
    }
    for (int i = 0; i < 8; i++)
        for (int j = 0; j < 8; j++) {
            uintptr_t pa = (uintptr_t)a[i] / PAGE, pb = (uintptr_t)b[j] / PAGE;
            uintptr_t pa_end = ((uintptr_t)a[i] + 100 * 1024 - 1) / PAGE, pb_end = ((uintptr_t)b[j] + 100 * 1024 - 1) / PAGE;
            CHECK(pa_end < pb || pb_end < pa);
        }
    CHECK(counters(f.sim).va_ranges == 2); /* an address range per stream */
    for (int i = 0; i < 8; i++) {
        CHECK_OK(tide_free(f.t, a[i]));
        CHECK_OK(tide_free(f.t, b[i]));
    }
    check_accounting(&f);
    fixture_close(&f);
}

static void test_faults_change_nothing(void)
{
    struct fixture f;
    fixture_open(&f, 0, CONF);
    void *keep, *p;
    CHECK_OK(tide_malloc(f.t, 1 * MIB, 0, &keep));
    fill(keep, 1 * MIB, 0x55);
    /* map fails every time: the allocation fails with the out-of-memory report, nothing changes */
    int64_t before = reserved_of(f.t);
    tide_sim_inject_fault(f.sim, TIDE_SIM_MAP, 0, UINT32_MAX);
    CHECK_STATUS(tide_malloc(f.t, 64 * MIB, 0, &p), TIDE_ENOMEM);
    CHECK_MESSAGE("out of memory");
    CHECK(p == NULL);
    CHECK(reserved_of(f.t) == before);
    tide_sim_inject_fault(f.sim, TIDE_SIM_MAP, 0, 0);
    check_accounting(&f);
    /* unmap fails: empty_cache says so, and the pages stay, counted and reusable */
    CHECK_OK(tide_malloc(f.t, 64 * MIB, 0, &p));
    CHECK_OK(tide_free(f.t, p));
    int64_t mapped = reserved_of(f.t);
    tide_sim_inject_fault(f.sim, TIDE_SIM_UNMAP, 0, UINT32_MAX);
    CHECK_STATUS(tide_empty_cache(f.t, NULL), TIDE_EDEVICE);
    CHECK_MESSAGE("injected fault in unmap");
    CHECK(reserved_of(f.t) == mapped);
    check_accounting(&f);
    CHECK_OK(tide_malloc(f.t, 64 * MIB, 0, &p)); /* served from the pages that stayed */
    CHECK(reserved_of(f.t) == mapped);
    CHECK_OK(tide_free(f.t, p));
    tide_sim_inject_fault(f.sim, TIDE_SIM_UNMAP, 0, 0);
    CHECK_OK(tide_empty_cache(f.t, NULL));
    CHECK(reserved_of(f.t) == (int64_t)PAGE); /* keep's page */
    CHECK(intact(keep, 1 * MIB, 0x55));
    check_accounting(&f);
    /* the address range cannot be reserved: a clear error */
    tide_stream s1;
    CHECK_OK(tide_sim_stream_create(f.sim, &s1));
    tide_sim_inject_fault(f.sim, TIDE_SIM_VA_RESERVE, 0, UINT32_MAX);
    CHECK_STATUS(tide_malloc(f.t, 4096, s1, &p), TIDE_EDEVICE);
    CHECK_MESSAGE("expandable segments: reserving an address range of 2.0 MiB");
    tide_sim_inject_fault(f.sim, TIDE_SIM_VA_RESERVE, 0, 0);
    check_accounting(&f);
    CHECK_OK(tide_free(f.t, keep));
    fixture_close(&f);
}

/* A map refused partway, and the unmap that would undo what it mapped refused too: the pages left
 * mapped are kept, counted and in a run, and never mapped over. Before, the next try mapped over them
 * and tide_malloc failed with the device's TIDE_EINVAL (found by fuzzing: fuzz/regressions/b8ce6cdf9447). */
static void test_refused_undo_keeps_pages(void)
{
    struct fixture f;
    fixture_open(&f, 0, CONF);
    void *p = NULL;
    tide_sim_inject_fault(f.sim, TIDE_SIM_MAP, 2, 1);           /* the third page of three */
    tide_sim_inject_fault(f.sim, TIDE_SIM_UNMAP, 0, UINT32_MAX); /* and every unmap, for now */
    CHECK_OK(tide_malloc(f.t, 5 * MIB + 1, 0, &p));              /* the two kept pages, and one more */
    check_accounting(&f);
    CHECK(reserved_of(f.t) == (int64_t)(3 * PAGE));
    tide_sim_inject_fault(f.sim, TIDE_SIM_UNMAP, 0, 0);
    if (p) {
        fill(p, 5 * MIB + 1, 0x3c);
        CHECK(intact(p, 5 * MIB + 1, 0x3c));
        CHECK_OK(tide_free(f.t, p));
    }
    CHECK_OK(tide_empty_cache(f.t, NULL));
    CHECK(reserved_of(f.t) == 0);
    check_accounting(&f);
    fixture_close(&f);
}

/* A backend whose map is refused with a device error (not out of memory) at chosen calls: the CUDA
 * backend's answer to, say, CUDA_ERROR_INVALID_VALUE from cuMemMap. The simulated device's own injected
 * map faults say out of memory. */
static struct {
    tide_backend inner;
    uint32_t skip, count;
} device_error_map;

static tide_status map_with_device_error(void *ctx, uintptr_t addr, size_t size)
{
    if (device_error_map.skip)
        device_error_map.skip--;
    else if (device_error_map.count) {
        device_error_map.count--;
        tide_backend_error("test: the device refused the map (not for lack of memory)");
        return TIDE_EDEVICE;
    }
    return device_error_map.inner.map(ctx, addr, size);
}

static void open_with_device_error_map(struct fixture *f)
{
    if (tide_sim_create(NULL, &f->sim) != TIDE_OK)
        exit(2);
    device_error_map.inner = tide_sim_backend(f->sim);
    f->backend = device_error_map.inner;
    f->backend.map = map_with_device_error;
    device_error_map.skip = device_error_map.count = 0;
    CHECK_OK(tide_create(&f->backend, CONF, &f->t));
}

/* A map refused for another reason than memory: tide_malloc fails at once with the device's status,
 * its words and where the map was, and changes nothing (no retry: releasing memory cannot help).
 * Should the undo of the pages mapped before it be refused too, the message gives both, and those
 * pages are kept, counted, and given back later. */
static void test_map_refused_by_the_device(void)
{
    struct fixture f;
    open_with_device_error_map(&f);
    void *keep, *p = (void *)1;
    CHECK_OK(tide_malloc(f.t, 4096, 0, &keep));
    int64_t before = reserved_of(f.t);
    uint64_t unmaps = counters(f.sim).calls[TIDE_SIM_UNMAP];
    device_error_map.skip = 1; /* the second page of a growth by two (keep's page serves the first 2 MiB) */
    device_error_map.count = 1;
    CHECK_STATUS(tide_malloc(f.t, 5 * MIB + 1, 0, &p), TIDE_EDEVICE);
    CHECK_MESSAGE("mapping 2.0 MiB of device memory at 0x");
    CHECK_MESSAGE("the device refused the map");
    CHECK(p == NULL);
    CHECK(reserved_of(f.t) == before);
    CHECK(counters(f.sim).calls[TIDE_SIM_UNMAP] > unmaps); /* the two mapped pages were undone */
    CHECK(stats_of(f.t).num_alloc_retries == 0);
    check_accounting(&f);

    /* Now the undo is refused as well. */
    device_error_map.skip = 1;
    device_error_map.count = 1;
    tide_sim_inject_fault(f.sim, TIDE_SIM_UNMAP, 0, UINT32_MAX);
    CHECK_STATUS(tide_malloc(f.t, 5 * MIB + 1, 0, &p), TIDE_EDEVICE);
    CHECK_MESSAGE("the device refused the map");
    CHECK_MESSAGE("and unmapping the 2.0 MiB mapped before it was refused: sim: injected fault in unmap");
    CHECK(reserved_of(f.t) == before + (int64_t)PAGE); /* kept, and counted */
    check_accounting(&f);
    tide_sim_inject_fault(f.sim, TIDE_SIM_UNMAP, 0, 0);
    CHECK_OK(tide_malloc(f.t, 5 * MIB + 1, 0, &p)); /* the kept pages serve, with one more */
    fill(p, 5 * MIB + 1, 0x5a);
    CHECK(intact(p, 5 * MIB + 1, 0x5a));
    CHECK_OK(tide_free(f.t, p));
    CHECK_OK(tide_free(f.t, keep));
    CHECK_OK(tide_empty_cache(f.t, NULL));
    CHECK(reserved_of(f.t) == 0);
    check_accounting(&f);
    fixture_close(&f);
}

static void test_needs_virtual_memory(void)
{
    tide_sim *sim;
    CHECK_OK(tide_sim_create(NULL, &sim));
    tide_backend be = tide_sim_backend(sim);
    be.map = NULL;
    tide_allocator *t = NULL;
    CHECK_STATUS(tide_create(&be, CONF, &t), TIDE_EUNSUPPORTED);
    CHECK_MESSAGE("needs a backend with virtual memory");
    CHECK(t == NULL);
    be = tide_sim_backend(sim);
    be.page_size = 4096;
    CHECK_STATUS(tide_create(&be, CONF, &t), TIDE_EUNSUPPORTED);
    CHECK_MESSAGE("not a multiple of 2 MiB");
    be = tide_sim_backend(sim);
    CHECK_STATUS(tide_create(&be, "peer_access:True", &t), TIDE_EINVAL);
    CHECK_MESSAGE("peer_access:True needs expandable_segments:True");
    CHECK_OK(tide_create(&be, CONF ",peer_access:True", &t));
    CHECK_OK(tide_destroy(t));
    tide_sim_destroy(sim);
}

static void test_destroy_gives_back(void)
{
    struct fixture f;
    fixture_open(&f, 0, CONF);
    void *p;
    CHECK_OK(tide_malloc(f.t, 5 * MIB, 0, &p));
    CHECK_OK(tide_free(f.t, p));
    CHECK_OK(tide_destroy(f.t));
    tide_sim_counters c = counters(f.sim);
    CHECK(c.held_bytes == 0 && c.mapped_pages == 0 && c.va_ranges == 0);
    tide_sim_destroy(f.sim);
}

/* Sets the high-water mark to `bytes` (an allocation of that size, freed) and empties the cache. */
static void mark_then_empty(struct fixture *f, size_t bytes)
{
    void *p;
    CHECK_OK(tide_malloc(f->t, bytes, 0, &p));
    CHECK_OK(tide_free(f->t, p));
    CHECK_OK(tide_empty_cache(f->t, NULL));
    CHECK(reserved_of(f->t) == 0);
}

/* The high-water mark outlives tide_empty_cache (coming back up to it unmaps nothing), and
 * tide_reset_peak_stats resets it (growing past it then unmaps free pages elsewhere first). */
static void test_mark_outlives_empty_cache(void)
{
    struct fixture f;
    fixture_open(&f, 0, CONF);
    void *x, *y, *z, *w;
    mark_then_empty(&f, 64 * MIB);
    uint64_t unmaps = counters(f.sim).calls[TIDE_SIM_UNMAP];
    CHECK_OK(tide_malloc(f.t, 8 * MIB, 0, &x));
    CHECK_OK(tide_malloc(f.t, 8 * MIB, 0, &y));
    CHECK_OK(tide_free(f.t, x));
    CHECK_OK(tide_malloc(f.t, 16 * MIB, 0, &z)); /* x's pages stay: 24 MiB is under the 64 MiB mark */
    CHECK(counters(f.sim).calls[TIDE_SIM_UNMAP] == unmaps);
    CHECK(reserved_of(f.t) == (int64_t)(32 * MIB));
    CHECK_OK(tide_reset_peak_stats(f.t)); /* a new phase: the mark is what is reserved now */
    CHECK_OK(tide_free(f.t, z));                  /* [x: free 8][y 8][z: free 16] */
    CHECK_OK(tide_malloc(f.t, 40 * MIB, 0, &w)); /* past the mark: x's free pages go first */
    CHECK(counters(f.sim).calls[TIDE_SIM_UNMAP] > unmaps);
    CHECK(stats_of(f.t).reserved_bytes[TIDE_POOL_ALL].peak == (int64_t)(48 * MIB)); /* not 56 */
    check_accounting(&f);
    CHECK_OK(tide_free(f.t, y));
    CHECK_OK(tide_free(f.t, w));
    fixture_close(&f);
}

/* max_split_size_mb keeps big reserved segments whole; a run of pages splits at any size under it too.
 * Under the rule, a free stretch of 64 MiB or more would serve no smaller request, so every small one
 * would map new pages beside it (and the stretch grow), and a larger request would take it whole. */
static void test_runs_split_past_max_split_size(void)
{
    struct fixture f;
    fixture_open(&f, 0, CONF ",max_split_size_mb:64");
    void *big, *small, *mid;
    CHECK_OK(tide_malloc(f.t, 200 * MIB, 0, &big));
    CHECK_OK(tide_free(f.t, big)); /* a free stretch of 200 MiB, mapped */
    int64_t reserved = reserved_of(f.t);
    CHECK_OK(tide_malloc(f.t, 10 * MIB, 0, &small));
    CHECK_OK(tide_malloc(f.t, 100 * MIB, 0, &mid));
    CHECK(reserved_of(f.t) == reserved); /* both from the stretch: no page mapped */
    CHECK(small == big);
    CHECK(stats_of(f.t).allocated_bytes[TIDE_POOL_ALL].current == (int64_t)(110 * MIB)); /* not 200 */
    check_accounting(&f);
    CHECK_OK(tide_free(f.t, small));
    CHECK_OK(tide_free(f.t, mid));
    fixture_close(&f);
}

/* Growing past the most ever reserved maps page by page, and any of those pages can go alone; growing
 * back up to it (after tide_empty_cache) maps pages in pairs (TIDE_MAP_UNIT_PAGES), and a pair goes
 * together: not one page while the other holds a live block. (The simulated device, like CUDA,
 * refuses to unmap part of what one call mapped.) */
static void test_units(void)
{
    struct fixture f;
    fixture_open(&f, 0, CONF);
    tide_release_report r;
    for (int back_to_mark = 0; back_to_mark < 2; back_to_mark++) {
        void *a, *small;
        if (back_to_mark)
            mark_then_empty(&f, 4 * PAGE);
        CHECK(reserved_of(f.t) == 0);
        uint64_t maps = counters(f.sim).calls[TIDE_SIM_MAP];
        CHECK_OK(tide_malloc(f.t, 8 * MIB, 0, &a));
        CHECK(counters(f.sim).calls[TIDE_SIM_MAP] == maps + (back_to_mark ? 2 : 4));
        CHECK(reserved_of(f.t) == (int64_t)(4 * PAGE));
        CHECK_OK(tide_free(f.t, a));
        CHECK_OK(tide_malloc(f.t, 4096, 0, &small)); /* in the first page */
        CHECK((uintptr_t)small == (uintptr_t)a);
        fill(small, 4096, 0x5a);
        CHECK_OK(tide_empty_cache(f.t, &r));
        /* the small block's page stays; in a pair, so does the other page */
        CHECK(r.released_bytes == (back_to_mark ? 2 * PAGE : 3 * PAGE));
        CHECK(intact(small, 4096, 0x5a));
        check_accounting(&f);
        CHECK_OK(tide_free(f.t, small));
        CHECK_OK(tide_empty_cache(f.t, &r));
        CHECK(reserved_of(f.t) == 0);
        check_accounting(&f);
        CHECK_OK(tide_reset_peak_stats(f.t)); /* the mark back to nothing reserved */
    }
    fixture_close(&f);
}

/* ---- a seeded random run ------------------------------------------------------------------------------ */

static uint64_t rng_state = 0x9E3779B97F4A7C15ull;
static uint64_t rng(void)
{
    rng_state ^= rng_state << 13;
    rng_state ^= rng_state >> 7;
    rng_state ^= rng_state << 17;
    return rng_state;
}

#define LIVE 48

static void test_random_with_check(void)
{
    struct fixture f;
    fixture_open(&f, 4 * GIB, CONF ",limit:1GiB");
    void *live[LIVE] = {0};
    size_t size[LIVE] = {0};
    uint8_t tag[LIVE] = {0};
    int ops = getenv("TIDE_EXPANDABLE_OPS") ? atoi(getenv("TIDE_EXPANDABLE_OPS")) : 3000;
    int checked_releases = 0;
    for (int op = 0; op < ops; op++) {
        int i = (int)(rng() % LIVE);
        uint64_t what = rng() % 100;
        if (what < 70) {
            if (live[i]) {
                CHECK(intact(live[i], size[i], tag[i]));
                CHECK_OK(tide_free(f.t, live[i]));
                live[i] = NULL;
            } else {
                /* log-uniform sizes from 512 B to 16 MiB */
                size_t n = (size_t)512 << (rng() % 15);
                n += rng() % n;
                tide_status s = tide_malloc(f.t, n, 0, &live[i]);
                CHECK(s == TIDE_OK || s == TIDE_ENOMEM);
                if (s == TIDE_OK) {
                    size[i] = n;
                    tag[i] = (uint8_t)(1 + rng() % 250);
                    fill(live[i], n, tag[i]);
                }
            }
        } else {
            /* give memory back, then every live block must still be there, whole */
            if (what < 85)
                CHECK_OK(tide_empty_cache(f.t, NULL));
            else
                tide_trim(f.t, (size_t)(rng() % (512 * MIB)), NULL); /* may be EBUSY */
            for (int k = 0; k < LIVE; k++)
                if (live[k] && !intact(live[k], size[k], tag[k])) {
                    fprintf(stderr, "op %d: a live block of %zu bytes lost its data or its pages\n", op,
                            size[k]);
                    harness_failures++;
                }
            checked_releases++;
        }
        if (tide_check(f.t) != TIDE_OK) {
            fprintf(stderr, "op %d: tide_check: %s\n", op, tide_last_error());
            harness_failures++;
            break;
        }
        tide_sim_counters c = counters(f.sim);
        if ((int64_t)c.held_bytes != reserved_of(f.t)) {
            fprintf(stderr, "op %d: the device holds %llu bytes, the stats say %lld\n", op,
                    (unsigned long long)c.held_bytes, (long long)reserved_of(f.t));
            harness_failures++;
            break;
        }
    }
    CHECK(checked_releases > 0);
    for (int k = 0; k < LIVE; k++)
        if (live[k])
            CHECK_OK(tide_free(f.t, live[k]));
    CHECK_OK(tide_empty_cache(f.t, NULL));
    CHECK(reserved_of(f.t) == 0);
    fixture_close(&f);
}

int main(void)
{
    RUN(test_grows_by_pages);
    RUN(test_free_pages_between_live_blocks);
    RUN(test_pending_pages_stay_mapped);
    RUN(test_streams_never_share_a_page);
    RUN(test_faults_change_nothing);
    RUN(test_refused_undo_keeps_pages);
    RUN(test_map_refused_by_the_device);
    RUN(test_needs_virtual_memory);
    RUN(test_destroy_gives_back);
    RUN(test_mark_outlives_empty_cache);
    RUN(test_units);
    RUN(test_runs_split_past_max_split_size);
    RUN(test_random_with_check);
    return HARNESS_EXIT();
}

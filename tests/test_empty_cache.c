/*
 * tide_empty_cache gives everything back: after it, with nothing allocated and nothing referenced,
 * reserved memory is 0 and the device holds nothing. A block still referenced stays PENDING, is
 * reported, and goes back at a later tide_empty_cache once released. A new phase of the program
 * (tide_empty_cache, and with expandable segments tide_reset_peak_stats too) is placed as a new
 * allocator would place it, also where the program frees its last blocks only after the empty_cache:
 * the segments those kept go back once wholly free, at the next allocation that needs a segment.
 */
#include "harness.h"
#include "trace.h"
#include "tune.h"

#include <stdbool.h>

#define ALL TIDE_POOL_ALL

static void test_everything_freed_gives_everything_back(void)
{
    struct fixture f;
    fixture_open(&f, 0, NULL);
    tide_stream s2;
    CHECK_OK(tide_sim_stream_create(f.sim, &s2));
    void *p[64];
    for (int i = 0; i < 64; i++)
        CHECK_OK(tide_malloc(f.t, (size_t)(i + 1) * 37 * 1024 + (i % 7) * 3 * MIB, i % 2 ? s2 : 0, &p[i]));
    for (int i = 0; i < 64; i++)
        CHECK_OK(tide_free(f.t, p[i]));
    CHECK(held_by_device(f.sim) > 0);
    tide_release_report r;
    CHECK_OK(tide_empty_cache(f.t, &r));
    CHECK(r.reserved_bytes == 0);
    CHECK(r.pending_blocks == 0);
    CHECK(r.released_segments > 0);
    tide_stats s = stats_of(f.t);
    CHECK(s.reserved_bytes[ALL].current == 0);
    CHECK(s.segment[ALL].current == 0);
    CHECK(s.num_device_free == s.num_device_alloc);
    CHECK(held_by_device(f.sim) == 0);
    CHECK_OK(tide_check(f.t));
    fixture_close(&f);
}

static void test_live_allocations_stay_and_the_rest_goes(void)
{
    struct fixture f;
    fixture_open(&f, 0, NULL);
    void *keep, *drop1, *drop2;
    CHECK_OK(tide_malloc(f.t, 4096, 0, &keep));        /* a small segment, kept */
    CHECK_OK(tide_malloc(f.t, 50 * MIB, 0, &drop1));   /* its own segment, freed */
    CHECK_OK(tide_malloc(f.t, 3 * MIB, 0, &drop2));    /* an 18 MiB segment (six of 3 MiB), freed */
    CHECK_OK(tide_free(f.t, drop1));
    CHECK_OK(tide_free(f.t, drop2));
    tide_release_report r;
    CHECK_OK(tide_empty_cache(f.t, &r));
    CHECK(r.released_segments == 2);
    CHECK(r.released_bytes == 68 * MIB);
    CHECK(r.reserved_bytes == 2 * MIB);
    CHECK(held_by_device(f.sim) == 2 * MIB);
    CHECK_OK(tide_free(f.t, keep));
    CHECK_OK(tide_empty_cache(f.t, &r));
    CHECK(r.reserved_bytes == 0 && held_by_device(f.sim) == 0);
    fixture_close(&f);
}

static void test_referenced_block_is_reported_then_released(void)
{
    struct fixture f;
    fixture_open(&f, 0, NULL);
    void *p, *q;
    CHECK_OK(tide_malloc(f.t, 12345, 0, &p));
    CHECK_OK(tide_malloc(f.t, 5 * MIB, 0, &q));
    CHECK_OK(tide_retain(f.t, p)); /* in-flight work that never completes by itself */
    CHECK_OK(tide_free(f.t, p));
    CHECK_OK(tide_free(f.t, q));
    tide_release_report r;
    CHECK_OK(tide_empty_cache(f.t, &r));
    CHECK(r.pending_blocks == 1);
    CHECK(r.pending_bytes == 12800);           /* 12345 rounded up to 512 */
    CHECK(r.reserved_bytes == 2 * MIB);        /* its segment stays; the large one went */
    CHECK(held_by_device(f.sim) == 2 * MIB);
    tide_stats s = stats_of(f.t);
    CHECK(s.pending_free_blocks[ALL].current == 1);
    CHECK_OK(tide_check(f.t));
    CHECK_OK(tide_release(f.t, p));
    CHECK_OK(tide_empty_cache(f.t, &r));
    CHECK(r.pending_blocks == 0 && r.reserved_bytes == 0);
    CHECK(held_by_device(f.sim) == 0);
    fixture_close(&f);
}

/* A fence not yet signalled: empty_cache synchronizes the device, so the kernel finishes, the fence
 * signals, and the block goes back in the same call. */
static void test_synchronize_drains_fenced_blocks(void)
{
    struct fixture f;
    fixture_open(&f, 0, NULL);
    tide_stream b;
    CHECK_OK(tide_sim_stream_create(f.sim, &b));
    void *p;
    CHECK_OK(tide_malloc(f.t, MIB, 0, &p));
    CHECK_OK(tide_record_stream(f.t, p, b));
    struct fill_kernel k = {NULL, p, MIB, 9, NULL};
    CHECK_OK(tide_sim_enqueue(f.sim, b, 20000, fill_kernel_run, &k)); /* finishes in 20 ms */
    CHECK_OK(tide_free(f.t, p));
    CHECK(stats_of(f.t).pending_free_blocks[ALL].current == 1);
    tide_release_report r;
    CHECK_OK(tide_empty_cache(f.t, &r));
    CHECK(r.drained_blocks == 1);
    CHECK(r.pending_blocks == 0 && r.reserved_bytes == 0);
    CHECK(stats_of(f.t).num_sync_all_streams == 1);
    fixture_close(&f);
}

/* If the device cannot synchronize, empty_cache says so, still gives back what it safely can, and
 * keeps fenced blocks pending. */
static void test_failed_synchronize_is_reported(void)
{
    struct fixture f;
    fixture_open(&f, 0, NULL);
    tide_stream b;
    CHECK_OK(tide_sim_stream_create(f.sim, &b));
    struct gate g;
    gate_init(&g);
    void *p, *q;
    CHECK_OK(tide_malloc(f.t, 4096, 0, &p));
    CHECK_OK(tide_malloc(f.t, 30 * MIB, 0, &q));
    CHECK_OK(tide_record_stream(f.t, p, b));
    struct fill_kernel k = {&g, p, 4096, 1, NULL};
    CHECK_OK(tide_sim_enqueue(f.sim, b, 0, fill_kernel_run, &k));
    CHECK_OK(tide_free(f.t, p));
    CHECK_OK(tide_free(f.t, q));
    tide_sim_inject_fault(f.sim, TIDE_SIM_SYNCHRONIZE, 0, 1);
    tide_release_report r;
    CHECK_STATUS(tide_empty_cache(f.t, &r), TIDE_EDEVICE);
    CHECK_MESSAGE("injected fault in synchronize");
    CHECK(r.released_bytes == 30 * MIB);   /* the wholly free segment went anyway */
    CHECK(r.pending_blocks == 1);          /* the fenced block did not */
    CHECK_OK(tide_check(f.t));
    gate_open(&g);
    CHECK_OK(tide_empty_cache(f.t, &r));
    CHECK(r.pending_blocks == 0 && r.reserved_bytes == 0);
    gate_destroy(&g);
    fixture_close(&f);
}

static void test_destroy_reports_live_allocations(void)
{
    struct fixture f;
    fixture_open(&f, 0, NULL);
    void *p, *q;
    CHECK_OK(tide_malloc(f.t, 1000, 0, &p));
    CHECK_OK(tide_malloc(f.t, 2 * MIB, 0, &q));
    CHECK_STATUS(tide_destroy(f.t), TIDE_EBUSY);
    CHECK_MESSAGE("2 allocations");
    CHECK(held_by_device(f.sim) == 0); /* released anyway */
    tide_sim_destroy(f.sim);
}

/* One phase: a shipped trace replayed on the default stream (its empty_cache lines honoured), then
 * everything still live freed; the most reserved after any of its calls (only an allocation reserves
 * more). Read from the current figure, not the peak, so that no tide_reset_peak_stats is needed. */
/* A segment kept by tide_empty_cache for a block in use is asked back: freed, it serves no smaller
 * request (which would keep it), and the next allocation that needs a segment gives it back; a
 * request of its exact size takes it again, and then it stays. During a graph capture nothing goes
 * back. */
static void test_segment_kept_for_a_block_goes_back_once_free(void)
{
    struct fixture f;
    fixture_open(&f, 0, NULL);
    void *kept, *small, *again;
    CHECK_OK(tide_malloc(f.t, 50 * MIB, 0, &kept));
    CHECK_OK(tide_empty_cache(f.t, NULL));
    CHECK_OK(tide_free(f.t, kept));
    CHECK(reserved_of(f.t) == 50 * MIB);      /* freed: cached until an allocation needs a segment */
    CHECK_OK(tide_check(f.t));
    CHECK_OK(tide_malloc(f.t, 12 * MIB, 0, &small));
    CHECK(reserved_of(f.t) == 12 * MIB);      /* its own segment; the 50 MiB one went back */
    CHECK(held_by_device(f.sim) == 12 * MIB);
    CHECK_OK(tide_check(f.t));
    CHECK_OK(tide_free(f.t, small));
    CHECK_OK(tide_empty_cache(f.t, NULL));
    CHECK(reserved_of(f.t) == 0);

    /* the exact size takes it back, with no driver call, and keeps it */
    CHECK_OK(tide_malloc(f.t, 50 * MIB, 0, &kept));
    CHECK_OK(tide_empty_cache(f.t, NULL));
    CHECK_OK(tide_free(f.t, kept));
    uint64_t reserves = stats_of(f.t).num_device_alloc;
    CHECK_OK(tide_malloc(f.t, 50 * MIB, 0, &again));
    CHECK(again == kept && stats_of(f.t).num_device_alloc == reserves);
    CHECK_OK(tide_free(f.t, again));
    CHECK_OK(tide_malloc(f.t, 12 * MIB, 0, &small)); /* no longer asked back: serves as any segment */
    CHECK(reserved_of(f.t) == 50 * MIB);
    CHECK_OK(tide_free(f.t, small));
    CHECK_OK(tide_check(f.t));

    /* during a capture it stays */
    CHECK_OK(tide_empty_cache(f.t, NULL));
    CHECK_OK(tide_malloc(f.t, 50 * MIB, 0, &kept));
    CHECK_OK(tide_empty_cache(f.t, NULL));
    CHECK_OK(tide_free(f.t, kept));
    CHECK_OK(tide_capture_begin(f.t));
    CHECK_OK(tide_malloc(f.t, 12 * MIB, 0, &small));
    CHECK(reserved_of(f.t) >= (int64_t)(50 * MIB));
    CHECK_OK(tide_free(f.t, small));
    CHECK_OK(tide_capture_end(f.t));
    CHECK_OK(tide_check(f.t));
    fixture_close(&f);
}

static int64_t phase_peak(tide_allocator *t, const struct trace *tr)
{
    void **ptr = calloc(tr->nallocs ? tr->nallocs : 1, sizeof *ptr);
    CHECK(ptr != NULL);
    if (!ptr)
        return -1;
    int64_t peak = 0;
    for (size_t i = 0; i < tr->nops; i++) {
        const struct trace_op *op = &tr->ops[i];
        if (op->kind == TRACE_ALLOC) {
            CHECK_OK(tide_malloc(t, op->size, 0, &ptr[op->id]));
            int64_t reserved = reserved_of(t);
            peak = reserved > peak ? reserved : peak;
        } else if (op->kind == TRACE_FREE) {
            CHECK_OK(tide_free(t, ptr[op->id]));
            ptr[op->id] = NULL;
        } else {
            CHECK_OK(tide_empty_cache(t, NULL));
        }
    }
    for (size_t i = 0; i < tr->nallocs; i++)
        if (ptr[i])
            CHECK_OK(tide_free(t, ptr[i]));
    free(ptr);
    return peak;
}

/* The same phase twice in one allocator, separated as HOLDING MEMORY in tidepool.h says a new phase
 * begins: tide_empty_cache, and with expandable segments tide_reset_peak_stats too. The first phase
 * gives memory back to stay under the high-water mark and remembers what it gave back; had the second
 * kept those memories, it would raise its new mark where a new allocator gives idle memory back first:
 * gpt2_varlen then peaked at 18404 MiB instead of 13982 (default config), seed_transformer at 2614
 * instead of 2610 (expandable segments). Any difference at all fails. */
static void second_phase_peaks_as_the_first(const char *trace_name, const char *conf, bool reset_peaks,
                                            bool empty_between)
{
    char path[512], err[512];
    snprintf(path, sizeof path, "%s/%s", TIDE_TRACES_DIR, trace_name);
    struct trace tr;
    if (trace_load(path, &tr, err, sizeof err) != 0) {
        fprintf(stderr, "%s\n", err);
        harness_failures++;
        return;
    }
    struct fixture f;
    fixture_open(&f, 0, conf);
    int64_t first = phase_peak(f.t, &tr);
    if (empty_between)
        CHECK_OK(tide_empty_cache(f.t, NULL));
    if (reset_peaks)
        CHECK_OK(tide_reset_peak_stats(f.t));
    int64_t second = phase_peak(f.t, &tr);
    if (first != second)
        fprintf(stderr, "%s (%s): the first phase peaked at %lld bytes reserved, the second at %lld\n",
                trace_name, conf ? conf : "default config", (long long)first, (long long)second);
    CHECK(first > 0 && first == second);
    CHECK_OK(tide_check(f.t));
    fixture_close(&f);
    trace_free(&tr);
}

static void test_a_new_phase_is_placed_as_in_a_new_allocator(void)
{
    second_phase_peaks_as_the_first("gpt2_varlen.csv.gz", NULL, false, true);
    second_phase_peaks_as_the_first("seed_transformer.csv.gz", "expandable_segments:True", true, true);
    /* A recorded training run ends with torch.cuda.empty_cache() while its model and optimizer live;
     * they are freed after it (phase_peak's end). With the segments they kept cached, the second run
     * peaked at 3944 MiB instead of 3580. */
    second_phase_peaks_as_the_first("train/lstm.csv.gz", NULL, false, false);
    second_phase_peaks_as_the_first("train/gpt2.csv.gz", NULL, false, false);
}

/* 30 MiB held across 4,000 allocations of 100 MiB, then let go of: two idle segments. */
static void long_phase_then_nothing(tide_allocator *t)
{
    void *p, *x;
    CHECK_OK(tide_malloc(t, 30 * MIB, 0, &p));
    for (int i = 0; i < 2 * TIDE_PHASE_ALLOCS_PER_SEGMENT; i++) {
        CHECK_OK(tide_malloc(t, 100 * MIB, 0, &x));
        CHECK_OK(tide_free(t, x));
    }
    CHECK_OK(tide_free(t, p));
}

/* A program that lets go of every block after a long phase starts the next as a new allocator would,
 * without tide_empty_cache: its idle segments are asked back (heap_emptied). Kept, a 40 MiB request
 * of the next phase carves the idle 100 MiB segment (a 30 MiB one is too small), and the phase's own
 * 100 MiB tensor then reserves another: 200 MiB for 140 live. A loop that lets go of everything at
 * each step keeps its cache: no driver call after its first step. */
static void test_a_phase_that_lets_go_of_everything_ends(void)
{
    struct fixture f;
    fixture_open(&f, 0, NULL);
    void *q, *y;
    long_phase_then_nothing(f.t);
    CHECK(reserved_of(f.t) == 130 * MIB);     /* cached until an allocation leaves the fast path */
    CHECK_OK(tide_check(f.t));
    CHECK_OK(tide_malloc(f.t, 40 * MIB, 0, &q));
    CHECK_OK(tide_malloc(f.t, 100 * MIB, 0, &y));
    CHECK(reserved_of(f.t) == 140 * MIB);
    CHECK(stats_of(f.t).num_device_free == 2);
    CHECK_OK(tide_free(f.t, q));
    CHECK_OK(tide_free(f.t, y));
    CHECK_OK(tide_check(f.t));
    fixture_close(&f);

    fixture_open(&f, 0, NULL);
    uint64_t reserves = 0;
    for (int step = 0; step < 2000; step++) {
        void *a, *b, *c;
        CHECK_OK(tide_malloc(f.t, 40 * MIB, 0, &a));
        CHECK_OK(tide_malloc(f.t, 100 * MIB, 0, &b));
        CHECK_OK(tide_malloc(f.t, MIB / 4, 0, &c));
        CHECK_OK(tide_free(f.t, b));
        CHECK_OK(tide_free(f.t, a));
        CHECK_OK(tide_free(f.t, c));
        if (step == 0)
            reserves = stats_of(f.t).num_device_alloc;
    }
    CHECK(reserves == 3 && stats_of(f.t).num_device_alloc == reserves);
    CHECK(stats_of(f.t).num_device_free == 0);
    CHECK_OK(tide_check(f.t));
    fixture_close(&f);

    /* trim_on_growth:False keeps everything until the program asks */
    fixture_open(&f, 0, "trim_on_growth:False");
    long_phase_then_nothing(f.t);
    CHECK_OK(tide_malloc(f.t, 40 * MIB, 0, &q));
    CHECK(stats_of(f.t).num_device_free == 0 && reserved_of(f.t) == 130 * MIB);
    CHECK_OK(tide_free(f.t, q));
    fixture_close(&f);
}

/* A stream with no large segment of its own ends no phase: a side stream whose few small blocks it lets
 * go of at every step (a loader's, a logger's) found every other stream empty between steps, and had the
 * main stream's idle segments given back each time. */
static void test_a_stream_of_small_blocks_ends_no_phase(void)
{
    struct fixture f;
    fixture_open(&f, 0, NULL);
    tide_stream side;
    CHECK_OK(tide_sim_stream_create(f.sim, &side));
    void *big, *small, *more[9];
    CHECK_OK(tide_malloc(f.t, 100 * MIB, 0, &big));
    CHECK_OK(tide_free(f.t, big)); /* stream 0 holds nothing: a 100 MiB segment idle */
    /* Each step reads the statistics, as a loop that logs its memory does; the read merges the free
     * block (parked on the fast path), and the side stream then holds nothing. */
    for (int i = 0; i < 2 * TIDE_PHASE_ALLOCS_PER_SEGMENT; i++) {
        CHECK_OK(tide_malloc(f.t, MIB / 4, side, &small));
        CHECK_OK(tide_free(f.t, small));
        CHECK(stats_of(f.t).num_device_free == 0);
    }
    /* The ninth leaves the fast path for a second small segment, which raises the mark (no trim). */
    for (int i = 0; i < 9; i++)
        CHECK_OK(tide_malloc(f.t, MIB / 4, side, &more[i]));
    CHECK_OK(tide_malloc(f.t, 100 * MIB, 0, &big));
    tide_stats s = stats_of(f.t);
    CHECK(s.num_device_free == 0);
    CHECK(s.num_device_alloc == 3); /* the 100 MiB segment, the side stream's two small ones */
    CHECK_OK(tide_free(f.t, big));
    for (int i = 0; i < 9; i++)
        CHECK_OK(tide_free(f.t, more[i]));
    CHECK_OK(tide_check(f.t));
    fixture_close(&f);
}

int main(void)
{
    RUN(test_everything_freed_gives_everything_back);
    RUN(test_live_allocations_stay_and_the_rest_goes);
    RUN(test_referenced_block_is_reported_then_released);
    RUN(test_synchronize_drains_fenced_blocks);
    RUN(test_failed_synchronize_is_reported);
    RUN(test_destroy_reports_live_allocations);
    RUN(test_segment_kept_for_a_block_goes_back_once_free);
    RUN(test_a_new_phase_is_placed_as_in_a_new_allocator);
    RUN(test_a_phase_that_lets_go_of_everything_ends);
    RUN(test_a_stream_of_small_blocks_ends_no_phase);
    return HARNESS_EXIT();
}

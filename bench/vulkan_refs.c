/*
 * What holding blocks by submitted work costs, on a Vulkan device (Mesa's lavapipe anywhere) beside
 * the simulated device, in a training loop's shape (bench/seed_loop.py's): each step allocates three
 * blocks, submits work that holds them, frees them while it is in flight, and every 105 steps the
 * loop waits for the device and empties the cache. The work is empty (a submission that only signals its timeline value; on the
 * simulated device, a work item that only releases), so the figures are the allocator's and the
 * hold's, not a kernel's. The device runs at most LAG steps behind: each step first waits for the
 * step LAG before it, as a program waits for the frame or batch before last.
 *
 *   build/bench/vulkan_refs [STEPS]        (default 20000)
 *
 * Per operation (one block: its allocation, its hold by a submission, its free, its release by the
 * completion): the whole loop's time divided by its blocks; the median step's time in tide_malloc and
 * tide_free, in the hold, and in a submission that holds nothing, each divided by the step's blocks
 * (medians, which a busy machine's preemptions barely move); tidepool's own part is malloc + free +
 * the hold less the bare submission. Driver calls: memory allocations and frees, in all and after each window's first
 * period of sizes (21 steps: the warm-up after each empty_cache). Exits 77 without a Vulkan driver.
 */
#include "tidepool.h"
#include "tidepool_sim.h"
#include "tidepool_vulkan.h"

#include <sched.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define EVERY 105   /* five periods of the step's sizes (21 steps) */
#define WARM_UP 21  /* one period */
#define LAG 4 /* steps the device may run behind the program: the loop waits for step - LAG */
#define MIB ((size_t)1 << 20)

struct figures {
    double ns_per_op, malloc_free_ns_per_op, hold_ns_per_op;
    double bare_submit_ns;            /* a submission that holds nothing, with the same wait per step */
    uint64_t device_calls, device_calls_after_warm_up;
    int64_t peak_reserved, reserved_at_end;
};

/* Per-step samples: the figures are medians, which the preemptions of a busy machine barely move. */
static double *alloc_samples, *hold_samples, *bare_samples;

static int by_value(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

static double median(double *v, int n)
{
    qsort(v, (size_t)n, sizeof *v, by_value);
    return v[n / 2];
}

static double now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec * 1e9 + (double)ts.tv_nsec;
}

static void sizes_of(int step, size_t sizes[3])
{
    sizes[0] = (size_t)(step % 7 + 1) * 64 * 1024;
    sizes[1] = 3 * MIB / 2;
    sizes[2] = 5 * MIB + (size_t)(step % 3) * MIB;
}

static int64_t reserved_now(tide_allocator *t, int64_t *peak)
{
    tide_stats s = {.struct_size = sizeof s};
    tide_get_stats(t, &s);
    *peak = s.reserved_bytes[TIDE_POOL_ALL].peak;
    return s.reserved_bytes[TIDE_POOL_ALL].current;
}

static int failed(const char *what)
{
    fprintf(stderr, "vulkan_refs: %s: %s\n", what, tide_last_error());
    return 1;
}

static void nothing(void *arg) { atomic_fetch_add((_Atomic(int) *)arg, 1); }

/* The device's own cost of a submission: ns per work item that holds nothing. */
static double sim_bare_submit_ns(tide_sim *sim, int n)
{
    _Atomic(int) done = 0;
    double start = now_ns(), in_submit = 0;
    for (int i = 0; i < n; i++) {
        while (atomic_load(&done) < i - LAG)
            sched_yield();
        double a = now_ns();
        tide_sim_enqueue(sim, 0, 0, nothing, &done);
        bare_samples[i] = now_ns() - a;
        in_submit += bare_samples[i];
    }
    tide_sim_synchronize(sim);
    (void)start;
    (void)in_submit;
    return median(bare_samples, n);
}

static double vk_bare_submit_ns(tide_vk *vk, int n)
{
    uint64_t values[LAG + 1] = {0};
    double in_submit = 0;
    for (int i = 0; i < n; i++) {
        if (i >= LAG)
            tide_vk_wait(vk, values[(i - LAG) % (LAG + 1)]);
        double a = now_ns();
        tide_vk_submit(vk, NULL, NULL, 0, NULL, 0, &values[i % (LAG + 1)]);
        bare_samples[i] = now_ns() - a;
        in_submit += bare_samples[i];
    }
    tide_vk_wait(vk, values[(n - 1) % (LAG + 1)]);
    (void)in_submit;
    return median(bare_samples, n);
}

/* ---- the simulated device: tide_retain, then a work item that releases ---------------------------- */

struct release_work {
    tide_allocator *t;
    void *blocks[3];
    _Atomic(int) *done;
};

static void release_blocks(void *arg)
{
    struct release_work *w = arg;
    for (int i = 0; i < 3; i++)
        tide_release(w->t, w->blocks[i]);
    atomic_fetch_add(w->done, 1);
}

static int run_sim(int steps, struct figures *f)
{
    tide_sim *sim;
    tide_allocator *t;
    if (tide_sim_create(NULL, &sim) != TIDE_OK)
        return failed("tide_sim_create");
    tide_backend b = tide_sim_backend(sim);
    if (tide_create(&b, NULL, &t) != TIDE_OK)
        return failed("tide_create");
    struct release_work *work = calloc(LAG + 1, sizeof *work);
    _Atomic(int) done = 0; /* work items run, in order */
    tide_sim_counters c;
    double in_allocator = 0, in_hold = 0, start = now_ns();
    uint64_t calls_at_warm_up = 0, after_warm_up = 0;
    for (int step = 0; step < steps; step++) {
        int in_window = step % EVERY;
        size_t sizes[3];
        sizes_of(step, sizes);
        while (atomic_load(&done) < step - LAG)
            sched_yield();
        struct release_work *w = &work[step % (LAG + 1)];
        w->t = t;
        w->done = &done;
        double a = now_ns();
        for (int i = 0; i < 3; i++)
            if (tide_malloc(t, sizes[i], 0, &w->blocks[i]) != TIDE_OK)
                return failed("tide_malloc");
        double mid = now_ns();
        in_allocator += mid - a;
        alloc_samples[step] = mid - a;
        for (int i = 0; i < 3; i++)
            tide_retain(t, w->blocks[i]);
        if (tide_sim_enqueue(sim, 0, 0, release_blocks, w) != TIDE_OK)
            return failed("tide_sim_enqueue");
        a = now_ns();
        in_hold += a - mid;
        hold_samples[step] = a - mid;
        for (int i = 0; i < 3; i++)
            tide_free(t, w->blocks[i]);
        double freeing = now_ns() - a;
        in_allocator += freeing;
        alloc_samples[step] += freeing;
        tide_sim_get_counters(sim, &c);
        if (in_window == WARM_UP - 1)
            calls_at_warm_up = c.calls[TIDE_SIM_RESERVE] + c.calls[TIDE_SIM_RELEASE];
        if (in_window == EVERY - 1) {
            after_warm_up += c.calls[TIDE_SIM_RESERVE] + c.calls[TIDE_SIM_RELEASE] - calls_at_warm_up;
            if (tide_empty_cache(t, NULL) != TIDE_OK)
                return failed("tide_empty_cache");
        }
    }
    tide_sim_synchronize(sim);
    tide_empty_cache(t, NULL);
    double total = now_ns() - start;
    tide_sim_get_counters(sim, &c);
    f->ns_per_op = total / (3.0 * steps);
    (void)in_allocator;
    (void)in_hold;
    f->malloc_free_ns_per_op = median(alloc_samples, steps) / 3;
    f->hold_ns_per_op = median(hold_samples, steps) / 3;
    f->device_calls = c.calls[TIDE_SIM_RESERVE] + c.calls[TIDE_SIM_RELEASE];
    f->device_calls_after_warm_up = after_warm_up;
    f->reserved_at_end = reserved_now(t, &f->peak_reserved);
    f->bare_submit_ns = sim_bare_submit_ns(sim, steps);
    tide_destroy(t);
    tide_sim_destroy(sim);
    free(work);
    return 0;
}

/* ---- Vulkan: tide_vk_submit holds the blocks, the completion thread releases ---------------------- */

static int run_vulkan(tide_vk *vk, int steps, struct figures *f)
{
    tide_backend b = tide_vk_backend(vk);
    tide_allocator *t;
    if (tide_create(&b, NULL, &t) != TIDE_OK)
        return failed("tide_create");
    tide_vk_counters c0, c;
    tide_vk_get_counters(vk, &c0);
    double in_allocator = 0, in_hold = 0, start = now_ns();
    uint64_t calls_at_warm_up = 0, after_warm_up = 0, values[LAG + 1] = {0};
    for (int step = 0; step < steps; step++) {
        int in_window = step % EVERY;
        size_t sizes[3];
        sizes_of(step, sizes);
        void *blocks[3];
        if (step >= LAG && tide_vk_wait(vk, values[(step - LAG) % (LAG + 1)]) != TIDE_OK)
            return failed("tide_vk_wait");
        double a = now_ns();
        for (int i = 0; i < 3; i++)
            if (tide_malloc(t, sizes[i], 0, &blocks[i]) != TIDE_OK)
                return failed("tide_malloc");
        double mid = now_ns();
        in_allocator += mid - a;
        alloc_samples[step] = mid - a;
        if (tide_vk_submit(vk, t, NULL, 0, blocks, 3, &values[step % (LAG + 1)]) != TIDE_OK)
            return failed("tide_vk_submit");
        a = now_ns();
        in_hold += a - mid;
        hold_samples[step] = a - mid;
        for (int i = 0; i < 3; i++)
            tide_free(t, blocks[i]);
        double freeing = now_ns() - a;
        in_allocator += freeing;
        alloc_samples[step] += freeing;
        tide_vk_get_counters(vk, &c);
        if (in_window == WARM_UP - 1)
            calls_at_warm_up = c.memory_allocations + c.memory_frees;
        if (in_window == EVERY - 1) {
            after_warm_up += c.memory_allocations + c.memory_frees - calls_at_warm_up;
            if (tide_empty_cache(t, NULL) != TIDE_OK)
                return failed("tide_empty_cache");
        }
    }
    tide_empty_cache(t, NULL);
    double total = now_ns() - start;
    tide_vk_get_counters(vk, &c);
    f->ns_per_op = total / (3.0 * steps);
    (void)in_allocator;
    (void)in_hold;
    f->malloc_free_ns_per_op = median(alloc_samples, steps) / 3;
    f->hold_ns_per_op = median(hold_samples, steps) / 3;
    f->device_calls = c.memory_allocations + c.memory_frees - c0.memory_allocations - c0.memory_frees;
    f->device_calls_after_warm_up = after_warm_up;
    f->reserved_at_end = reserved_now(t, &f->peak_reserved);
    f->bare_submit_ns = vk_bare_submit_ns(vk, steps);
    tide_destroy(t);
    return 0;
}

int main(int argc, char **argv)
{
    int steps = argc > 1 ? atoi(argv[1]) : 20000;
    if (steps < EVERY || argc > 2) {
        fprintf(stderr, "usage: vulkan_refs [STEPS, at least %d]\n", EVERY);
        return 2;
    }
    alloc_samples = calloc((size_t)steps, sizeof(double));
    hold_samples = calloc((size_t)steps, sizeof(double));
    bare_samples = calloc((size_t)steps, sizeof(double));
    if (!alloc_samples || !hold_samples || !bare_samples)
        return 1;
    tide_vk *vk;
    tide_status s = tide_vk_create(NULL, &vk);
    if (s == TIDE_EUNSUPPORTED) {
        printf("skipped: %s\n", tide_last_error());
        return 77;
    }
    if (s != TIDE_OK)
        return failed("tide_vk_create");
    tide_vk_handles h;
    tide_vk_get_handles(vk, &h);
    struct figures sim, vul;
    /* a short run of each first, so that neither pays for first touches in the timed one */
    if (run_sim(EVERY, &sim) || run_vulkan(vk, EVERY, &vul) || run_sim(steps, &sim) || run_vulkan(vk, steps, &vul))
        return 1;
    printf("%d steps of the training loop, 3 blocks each (%d operations), empty_cache every %d steps\n", steps,
           3 * steps, EVERY);
    printf("| device | ns per operation, the whole loop | median: tide_malloc + tide_free | the hold: tide_retain x3 + "
           "enqueue, or tide_vk_submit, per block | a submission holding nothing, per block | tidepool's own: "
           "malloc + free + (hold - submission) | driver memory calls | after each window's first %d steps | "
           "peak reserved MiB | reserved at end |\n", WARM_UP);
    printf("|---|---|---|---|---|---|---|---|---|---|\n");
    const struct figures *rows[2] = {&sim, &vul};
    const char *names[2] = {"simulated", h.device_name};
    double own[2];
    for (int i = 0; i < 2; i++) {
        own[i] = rows[i]->malloc_free_ns_per_op + rows[i]->hold_ns_per_op - rows[i]->bare_submit_ns / 3;
        printf("| %s | %.0f | %.0f | %.0f | %.0f | %.0f | %ju | %ju | %.1f | %jd |\n", names[i], rows[i]->ns_per_op,
               rows[i]->malloc_free_ns_per_op, rows[i]->hold_ns_per_op, rows[i]->bare_submit_ns / 3, own[i],
               (uintmax_t)rows[i]->device_calls, (uintmax_t)rows[i]->device_calls_after_warm_up,
               (double)rows[i]->peak_reserved / (double)MIB, (intmax_t)rows[i]->reserved_at_end);
    }
    tide_vk_counters c;
    tide_vk_get_counters(vk, &c);
    printf("Vulkan / simulated, per operation: %.2fx the whole loop, %.2fx tidepool's own; the completion thread "
           "woke %ju times for %ju submissions\n", vul.ns_per_op / sim.ns_per_op, own[1] / own[0],
           (uintmax_t)c.completion_wakeups, (uintmax_t)c.submissions);
    tide_vk_destroy(vk);
    return 0;
}

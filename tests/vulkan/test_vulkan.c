/*
 * The Vulkan backend on a real Vulkan driver (Mesa's lavapipe in CI, on the CPU): submitted work holds
 * its blocks until its timeline-semaphore value is reached.
 *
 *   test_vulkan [--rounds N] [--steps N]     tidepool's path: must never see a reuse too early
 *   test_vulkan --without-references [--rounds N]
 *                                            the negative control: the same rounds with the blocks
 *                                            not held; must see every round corrupted
 *
 * A round: the fill kernel is submitted on a block, waiting at a gate; the program frees the block at
 * once and allocates the same size, and writes its own pattern into the new block from the host; only
 * then is the gate opened and the kernel writes its pattern. If the new block is the old one (reused
 * while the kernel still runs), the kernel's words land in the new owner's block every time.
 * Exits 77 (skipped, saying why) where there is no Vulkan driver.
 */
#include "harness.h"
#include "tidepool_vulkan.h"
#include "vk_kernel.h"

#include <stdatomic.h>
#include <stdbool.h>
#include <time.h>

#define OLD_OWNER 0xA11CE5EDu
#define NEW_OWNER 0x0B0B0B0Bu
#define SPIN_LIMIT (1u << 26)

static tide_vk *vk;
static struct vk_kernel kernel;
static uint32_t *gate;        /* word 0: the gate of gated kernels; word 1: always open */
static void *gate_block;

static tide_stats stats_now(tide_allocator *t)
{
    tide_stats s = {.struct_size = sizeof s};
    tide_get_stats(t, &s);
    return s;
}

static uint32_t *host_of(tide_allocator *t, void *p)
{
    void *h = NULL;
    CHECK_OK(tide_vk_host_address(t, p, &h));
    return h;
}

static size_t first_word_not(const uint32_t *w, size_t n, uint32_t v)
{
    for (size_t i = 0; i < n; i++)
        if (w[i] != v)
            return i;
    return n;
}

static tide_allocator *open_allocator(void)
{
    tide_backend b = tide_vk_backend(vk);
    tide_allocator *t = NULL;
    CHECK_OK(tide_create(&b, "debug:1", &t));
    CHECK_OK(tide_malloc(t, 512, 0, &gate_block));
    gate = host_of(t, gate_block);
    gate[0] = 0;
    gate[1] = 1;
    return t;
}

static void close_allocator(tide_allocator *t)
{
    CHECK_OK(tide_free(t, gate_block));
    CHECK_OK(tide_empty_cache(t, NULL));
    CHECK(stats_now(t).reserved_bytes[TIDE_POOL_ALL].current == 0);
    CHECK_OK(tide_destroy(t));
    tide_vk_counters c;
    tide_vk_get_counters(vk, &c);
    CHECK(c.held_bytes == 0 && c.held_segments == 0);
}

/* A block's pointer is its device address: the kernel writes through it, the host reads the same
 * words; tide_vk_buffer_of names its buffer and offset; wrong pointers and allocators are refused. */
static void test_addresses_and_buffers(void)
{
    tide_allocator *t = open_allocator();
    void *p, *q;
    CHECK_OK(tide_malloc(t, 3 * MIB + 1000, 0, &p));
    CHECK_OK(tide_malloc(t, 4096, 0, &q));
    CHECK((uintptr_t)p % 512 == 0);
    VkBuffer bp = NULL, bq = NULL;
    uint64_t op = ~0ull, oq = ~0ull;
    CHECK_OK(tide_vk_buffer_of(t, p, &bp, &op));
    CHECK_OK(tide_vk_buffer_of(t, (char *)q, &bq, &oq));
    CHECK(bp && bq && bp != bq); /* large and small pools: two segments */
    uintptr_t base;
    size_t size;
    CHECK_OK(tide_segment_of(t, p, &base, &size));
    CHECK(op == (uint64_t)((uintptr_t)p - base) && op + 3 * MIB + 1000 <= size);

    unsigned slot;
    VkCommandBuffer cb = kernel_begin(&kernel, &slot);
    uint32_t words = (uint32_t)((3 * MIB + 1000) / 4);
    kernel_fill(&kernel, cb, p, words, 0x12345678u, &gate[1] /* open */, SPIN_LIMIT);
    uint64_t v = kernel_submit(&kernel, slot, t, &p, 1);
    CHECK(v != 0);
    CHECK_OK(tide_vk_wait(vk, v));
    CHECK(first_word_not(host_of(t, p), words, 0x12345678u) == words);

    /* bad input: changes nothing */
    int local;
    CHECK_STATUS(tide_vk_buffer_of(t, &local, &bp, &op), TIDE_EINVAL);
    CHECK_STATUS(tide_vk_buffer_of(t, p, NULL, &op), TIDE_EINVAL);
    CHECK_STATUS(tide_vk_submit(vk, t, NULL, 1, NULL, 0, NULL), TIDE_EINVAL);
    void *bad[2] = {q, &local};
    CHECK_STATUS(tide_vk_submit(vk, t, NULL, 0, bad, 2, NULL), TIDE_EINVAL);
    CHECK_MESSAGE("block 1");
    CHECK_OK(tide_free(t, q)); /* the failed submit let q's retain go again: it is FREE at once */
    CHECK(stats_now(t).pending_free_blocks[TIDE_POOL_ALL].current == 0);
    CHECK_STATUS(tide_vk_wait(vk, v + 1000), TIDE_EINVAL);

    tide_sim *sim;
    tide_allocator *on_sim;
    CHECK_OK(tide_sim_create(NULL, &sim));
    tide_backend sb = tide_sim_backend(sim);
    CHECK_OK(tide_create(&sb, NULL, &on_sim));
    void *s;
    CHECK_OK(tide_malloc(on_sim, 4096, 0, &s));
    CHECK_STATUS(tide_vk_buffer_of(on_sim, s, &bp, &op), TIDE_EINVAL);
    CHECK_MESSAGE("not Vulkan");
    CHECK_STATUS(tide_vk_submit(vk, on_sim, NULL, 0, &s, 1, NULL), TIDE_EINVAL);
    CHECK_OK(tide_free(on_sim, s));
    CHECK_OK(tide_destroy(on_sim));
    tide_sim_destroy(sim);

    CHECK_OK(tide_free(t, p));
    CHECK_OK(tide_check(t));
    close_allocator(t);

    /* options a device cannot be made with */
    tide_vk *other = (tide_vk *)&local;
    tide_vk_options o = {.struct_size = 0};
    CHECK_STATUS(tide_vk_create(&o, &other), TIDE_EINVAL);
    CHECK_MESSAGE("struct_size");
    CHECK(other == NULL);
    o = (tide_vk_options){.struct_size = sizeof o, .host_visible = 2};
    CHECK_STATUS(tide_vk_create(&o, &other), TIDE_EINVAL);
    o = (tide_vk_options){.struct_size = sizeof o, .device_index = 99};
    CHECK_STATUS(tide_vk_create(&o, &other), TIDE_EUNSUPPORTED);
    CHECK_MESSAGE("no such device index");
    /* the device's own memory, which the host does not see */
    o = (tide_vk_options){.struct_size = sizeof o};
    CHECK_OK(tide_vk_create(&o, &other));
    tide_backend ob = tide_vk_backend(other);
    tide_allocator *ot;
    CHECK_OK(tide_create(&ob, NULL, &ot));
    CHECK_OK(tide_malloc(ot, 4096, 0, &p));
    void *h;
    CHECK_STATUS(tide_vk_host_address(ot, p, &h), TIDE_EUNSUPPORTED);
    CHECK_STATUS(tide_vk_submit(vk, ot, NULL, 0, &p, 1, NULL), TIDE_EINVAL); /* another device's allocator */
    CHECK_OK(tide_vk_buffer_of(ot, p, &bp, &op));
    CHECK_OK(tide_free(ot, p));
    CHECK_OK(tide_destroy(ot));
    tide_vk_destroy(other);
}

/* The rounds (see the top of the file). Returns the rounds whose new owner's words were overwritten. */
static int gated_rounds(int rounds, bool hold)
{
    tide_allocator *t = open_allocator();
    int corrupted = 0, reused = 0, ran_late = 0;
    for (int round = 0; round < rounds; round++) {
        size_t size = (size_t)(round % 7 + 1) * 24 * 1024 + (round % 3 == 2 ? 3 * MIB : 0);
        uint32_t words = (uint32_t)(size / 4);
        void *x, *y;
        CHECK_OK(tide_malloc(t, size, 0, &x));
        uint32_t *hx = host_of(t, x);
        atomic_store((_Atomic uint32_t *)&gate[0], 0);
        unsigned slot;
        VkCommandBuffer cb = kernel_begin(&kernel, &slot);
        kernel_fill(&kernel, cb, x, words, OLD_OWNER ^ (uint32_t)round, &gate[0], SPIN_LIMIT);
        uint64_t v = kernel_submit(&kernel, slot, t, hold ? &x : NULL, hold ? 1 : 0);
        CHECK_OK(tide_free(t, x));
        if (hold)
            CHECK(stats_now(t).pending_free_blocks[TIDE_POOL_ALL].current == 1);

        CHECK_OK(tide_malloc(t, size, 0, &y));
        uint32_t *hy = host_of(t, y);
        reused += y == x;
        if (hold && (uintptr_t)y < (uintptr_t)x + size && (uintptr_t)x < (uintptr_t)y + size) {
            fprintf(stderr, "round %d: %p handed out again while the kernel holding it is queued\n", round, x);
            harness_failures++;
        }
        for (uint32_t i = 0; i < words; i++)
            hy[i] = NEW_OWNER;
        /* the kernel has not finished: it waits at the gate */
        ran_late += kernel_timeline_now(&kernel) < v;
        atomic_store((_Atomic uint32_t *)&gate[0], 1);
        CHECK_OK(tide_vk_wait(vk, v));

        size_t bad = first_word_not(hy, words, NEW_OWNER);
        if (bad != words) {
            corrupted++;
            if (hold || corrupted == 1)
                fprintf(stderr, "%suse-after-free (round %d): word %zu of the new block %p is 0x%08x, the "
                        "kernel of its previous owner wrote it\n", hold ? "" : "negative control: ", round,
                        bad, y, hy[bad]);
            if (hold)
                harness_failures++;
        }
        if (hold) {
            /* the old owner's words are whole, and the block came back once the kernel was done */
            CHECK(first_word_not(hx, words, OLD_OWNER ^ (uint32_t)round) == words);
            CHECK(stats_now(t).pending_free_blocks[TIDE_POOL_ALL].current == 0);
        }
        CHECK_OK(tide_free(t, y));
        if (round % 64 == 63)
            CHECK_OK(tide_empty_cache(t, NULL));
    }
    CHECK(ran_late == rounds); /* every kernel was still running when its block was freed */
    tide_stats s = stats_now(t);
    fprintf(stderr, "%s: %d rounds, %d reused the freed block at once, %d corrupted; %ju blocks came back "
            "from PENDING\n", hold ? "held by their submissions" : "not held (negative control)", rounds,
            reused, corrupted, (uintmax_t)s.num_pending_drained);
    if (hold)
        CHECK(reused == 0 && s.num_pending_drained >= (uint64_t)rounds);
    CHECK_OK(tide_check(t));
    close_allocator(t);
    return corrupted;
}

static int rounds = 300, steps = 1200;

static void test_held_blocks_are_never_reused_early(void) { gated_rounds(rounds, true); }

/* Work the program submits itself, signalling a semaphore of its own: tide_vk_hold keeps the block
 * until the semaphore reaches the value (signalled here from the host), and no longer. */
static void test_hold_on_a_program_semaphore(void)
{
    tide_allocator *t = open_allocator();
    VkSemaphoreTypeCreateInfo type = {VK_STRUCTURE_TYPE_SEMAPHORE_TYPE_CREATE_INFO, NULL, VK_SEMAPHORE_TYPE_TIMELINE, 0};
    VkSemaphoreCreateInfo sci = {VK_STRUCTURE_TYPE_SEMAPHORE_CREATE_INFO, &type, 0};
    VkSemaphore mine = NULL;
    CHECK(kernel.f.CreateSemaphore(kernel.h.device, &sci, NULL, &mine) == VK_SUCCESS);
    void *x, *y, *z;
    CHECK_OK(tide_malloc(t, 8192, 0, &x));
    CHECK_OK(tide_malloc(t, 8192, 0, &z));
    CHECK_OK(tide_vk_hold(vk, t, mine, 5, &x, 1));
    /* the completion thread now waits for 5; a hold for 3 must wake it */
    nanosleep(&(struct timespec){0, 20000000}, NULL);
    void *both[2] = {z, z};
    CHECK_OK(tide_vk_hold(vk, t, mine, 3, both, 2)); /* values on one semaphore in any order */
    CHECK_OK(tide_free(t, x));
    CHECK_OK(tide_free(t, z));
    CHECK_OK(tide_malloc(t, 8192, 0, &y));
    CHECK(y != x && y != z);
    CHECK(stats_now(t).pending_free_blocks[TIDE_POOL_ALL].current == 2);
    VkSemaphoreSignalInfo si = {VK_STRUCTURE_TYPE_SEMAPHORE_SIGNAL_INFO, NULL, mine, 3};
    CHECK(kernel.f.SignalSemaphore(kernel.h.device, &si) == VK_SUCCESS);
    int64_t pending = 2;
    for (int i = 0; i < 2000 && (pending = stats_now(t).pending_free_blocks[TIDE_POOL_ALL].current) == 2; i++)
        nanosleep(&(struct timespec){0, 1000000}, NULL);
    CHECK(pending == 1); /* z came back (both its holds), x is still held */
    si.value = 5;
    CHECK(kernel.f.SignalSemaphore(kernel.h.device, &si) == VK_SUCCESS);
    for (int i = 0; i < 2000 && (pending = stats_now(t).pending_free_blocks[TIDE_POOL_ALL].current) == 1; i++)
        nanosleep(&(struct timespec){0, 1000000}, NULL);
    CHECK(pending == 0);
    /* a hold the program never signals: tide_empty_cache waits for it, so it is signalled first */
    CHECK_OK(tide_vk_hold(vk, t, mine, 6, &y, 1));
    CHECK_OK(tide_free(t, y));
    si.value = 6;
    CHECK(kernel.f.SignalSemaphore(kernel.h.device, &si) == VK_SUCCESS);
    tide_release_report r;
    CHECK_OK(tide_empty_cache(t, &r));
    CHECK(r.pending_blocks == 0);
    CHECK_STATUS(tide_vk_hold(vk, t, NULL, 1, &gate_block, 1), TIDE_EINVAL);
    kernel.f.DestroySemaphore(kernel.h.device, mine, NULL);
    close_allocator(t);
}

/* A training loop (the shape of bench/seed_loop.py's): each step allocates, submits a kernel on its
 * blocks, and frees them while it runs; tide_empty_cache every 42 steps, after waiting for the device
 * as that loop does. The device runs LAG steps behind the program, exactly: each kernel waits at a gate of its own that the program
 * opens LAG steps later, so every run sees the same blocks in flight. Reserved memory is the same in
 * every window, comes back to 0 at every empty_cache, and the device is asked for memory only in the
 * warm-up (the first period of the sizes, 21 steps) after each empty_cache. */
static void test_training_loop(void)
{
    enum { EVERY = 42, PERIOD = 21, LAG = 8 };
    tide_allocator *t = open_allocator();
    uint32_t *gates = gate;          /* one word per step in flight, in gate_block */
    uint64_t values[LAG] = {0};
    int64_t first_window_peak = 0, worst_peak = 0, least_peak = INT64_MAX, window_peak = 0;
    uint64_t late_allocations = 0;
    tide_vk_counters c0 = {0}, c;
    for (int step = 0; step < steps; step++) {
        int in_window = step % EVERY;
        if (in_window >= LAG) {
            atomic_store((_Atomic uint32_t *)&gates[(step - LAG) % LAG], 1);
            CHECK_OK(tide_vk_wait(vk, values[(step - LAG) % LAG]));
        }
        gates[step % LAG] = 0;
        size_t sizes[3] = {(size_t)(step % 7 + 1) * 64 * 1024, 3 * MIB / 2, 5 * MIB + (size_t)(step % 3) * MIB};
        void *blocks[3];
        unsigned slot;
        VkCommandBuffer cb = kernel_begin(&kernel, &slot);
        for (int i = 0; i < 3; i++) {
            CHECK_OK(tide_malloc(t, sizes[i], 0, &blocks[i]));
            kernel_fill(&kernel, cb, blocks[i], 4096, (uint32_t)step, (char *)gate_block + 4 * (step % LAG),
                        SPIN_LIMIT);
        }
        CHECK((values[step % LAG] = kernel_submit(&kernel, slot, t, blocks, 3)) != 0);
        for (int i = 0; i < 3; i++)
            CHECK_OK(tide_free(t, blocks[i]));
        int64_t reserved = stats_now(t).reserved_bytes[TIDE_POOL_ALL].current;
        if (reserved > window_peak)
            window_peak = reserved;
        tide_vk_get_counters(vk, &c);
        if (in_window == PERIOD - 1)
            c0 = c;
        if (in_window == EVERY - 1 || step == steps - 1) {
            for (int i = 0; i < LAG; i++)
                atomic_store((_Atomic uint32_t *)&gates[i], 1);
            late_allocations += c.memory_allocations - c0.memory_allocations;
            tide_release_report r;
            CHECK_OK(tide_empty_cache(t, &r));
            CHECK(r.reserved_bytes == 2 * MIB && r.pending_blocks == 0); /* the small segment of gate_block */
            if (step < EVERY)
                first_window_peak = window_peak;
            else if (in_window == EVERY - 1) {
                worst_peak = window_peak > worst_peak ? window_peak : worst_peak;
                least_peak = window_peak < least_peak ? window_peak : least_peak;
            }
            window_peak = 0;
        }
    }
    fprintf(stderr, "training loop: %d steps, %d submissions, %d in flight: peak reserved %.1f MiB in the first "
            "window, %.1f to %.1f MiB in the %d after; %ju segments reserved after the warm-ups\n", steps,
            steps, LAG - 1, (double)first_window_peak / (double)MIB, (double)least_peak / (double)MIB,
            (double)worst_peak / (double)MIB, steps / EVERY - 1, (uintmax_t)late_allocations);
    CHECK(first_window_peak > 0);
    if (steps >= 2 * EVERY)
        CHECK(worst_peak == first_window_peak && least_peak == first_window_peak);
    CHECK(late_allocations == 0);
    close_allocator(t);
}

int main(int argc, char **argv)
{
    bool negative_control = false;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--without-references"))
            negative_control = true;
        else if (!strcmp(argv[i], "--rounds") && i + 1 < argc && atoi(argv[i + 1]) > 0)
            rounds = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--steps") && i + 1 < argc && atoi(argv[i + 1]) > 0)
            steps = atoi(argv[++i]);
        else {
            fprintf(stderr, "usage: test_vulkan [--without-references] [--rounds N] [--steps N]\n");
            return 2;
        }
    }
    tide_vk_options o = {.struct_size = sizeof o, .host_visible = 1};
    tide_status s = tide_vk_create(&o, &vk);
    if (s == TIDE_EUNSUPPORTED) {
        printf("skipped: %s\n", tide_last_error());
        return 77;
    }
    if (s != TIDE_OK) {
        fprintf(stderr, "tide_vk_create: %s\n", tide_last_error());
        return 1;
    }
    if (kernel_open(&kernel, vk) != 0)
        return 1;
    fprintf(stderr, "Vulkan device: %s\n", kernel.h.device_name);
    if (negative_control) {
        int corrupted = gated_rounds(rounds, false);
        /* Without references, every round hands the block on while its kernel waits at the gate. */
        printf("negative control: %d of %d rounds corrupted\n", corrupted, rounds);
        kernel_close(&kernel);
        tide_vk_destroy(vk);
        return corrupted == rounds && harness_failures == 0 ? 0 : 1;
    }
    RUN(test_addresses_and_buffers);
    RUN(test_held_blocks_are_never_reused_early);
    RUN(test_hold_on_a_program_semaphore);
    RUN(test_training_loop);
    kernel_close(&kernel);
    tide_vk_destroy(vk);
    return HARNESS_EXIT();
}

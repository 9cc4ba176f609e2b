/*
 * Memory of another process (tide_ipc_open, tide_ipc_close), on two simulated devices: a sender that
 * names one of its segments in a handle (tide_sim_ipc_handle) and a receiver whose allocator opens it.
 * The simulated device refuses a second open of a handle it has open, as the CUDA driver does, so
 * every test here also shows that tidepool asks the device to open each handle once, and counts the
 * uses itself: the device's counters say how many opens and closes reached it.
 */
#include "harness.h"

#include <stddef.h>

/* A sender with one live block and a receiver, both simulated devices with an allocator. */
struct pair {
    struct fixture sender, receiver;
    void *block;                      /* the sender's, 1 MiB into its segment or wherever it lies */
    uintptr_t base;                   /* its segment */
    size_t offset;                    /* of the block in its segment */
    unsigned char handle[TIDE_SIM_IPC_HANDLE_BYTES];
};

static void pair_open(struct pair *p)
{
    fixture_open(&p->sender, 0, NULL);
    fixture_open(&p->receiver, 0, NULL);
    CHECK_OK(tide_malloc(p->sender.t, 3 * MIB, 0, &p->block));
    size_t size = 0;
    CHECK_OK(tide_segment_of(p->sender.t, p->block, &p->base, &size));
    p->offset = (uintptr_t)p->block - p->base;
    memset(p->block, 0x5A, 3 * MIB);
    CHECK_OK(tide_sim_ipc_handle(p->sender.sim, (uintptr_t)p->block, p->handle));
}

static void pair_close(struct pair *p)
{
    CHECK_OK(tide_free(p->sender.t, p->block));
    fixture_close(&p->receiver);
    fixture_close(&p->sender);
}

static tide_sim_counters counters(tide_sim *sim)
{
    tide_sim_counters c;
    tide_sim_get_counters(sim, &c);
    return c;
}

/* The simulated device's own rule, below tidepool: a handle opens once until it is closed, never on
 * the device that made it, and not after its segment is gone. */
static void test_sim_opens_a_handle_once(void)
{
    struct pair p;
    pair_open(&p);
    const tide_backend *rb = &p.receiver.backend, *sb = &p.sender.backend;
    uintptr_t a = 0, b = 0;
    CHECK_OK(rb->ipc_open(rb->ctx, p.handle, sizeof p.handle, &a));
    CHECK(a == p.base);
    CHECK(((const unsigned char *)a)[p.offset] == 0x5A); /* the sender's memory */
    CHECK_STATUS(rb->ipc_open(rb->ctx, p.handle, sizeof p.handle, &b), TIDE_EDEVICE);
    CHECK_MESSAGE("open on this device already");
    CHECK(counters(p.receiver.sim).ipc_openings == 1);
    CHECK_STATUS(sb->ipc_open(sb->ctx, p.handle, sizeof p.handle, &b), TIDE_EINVAL);
    CHECK_MESSAGE("this very device");
    CHECK_OK(rb->ipc_close(rb->ctx, a));
    CHECK_STATUS(rb->ipc_close(rb->ctx, a), TIDE_EINVAL);
    CHECK_MESSAGE("opened no handle there");
    CHECK_OK(rb->ipc_open(rb->ctx, p.handle, sizeof p.handle, &b)); /* closed: it opens again */
    CHECK(b == a);
    CHECK_OK(rb->ipc_close(rb->ctx, b));
    unsigned char junk[TIDE_SIM_IPC_HANDLE_BYTES] = {1, 2, 3};
    CHECK_STATUS(rb->ipc_open(rb->ctx, junk, sizeof junk, &b), TIDE_EINVAL);
    CHECK_STATUS(rb->ipc_open(rb->ctx, p.handle, 63, &b), TIDE_EINVAL);
    CHECK_STATUS(tide_sim_ipc_handle(p.sender.sim, 4096, junk), TIDE_EINVAL); /* no segment there */
    CHECK(counters(p.receiver.sim).ipc_openings == 0);
    pair_close(&p);

    /* A segment released by its device: its handle opens no more. */
    pair_open(&p);
    CHECK_OK(tide_free(p.sender.t, p.block));
    CHECK_OK(tide_empty_cache(p.sender.t, NULL));
    CHECK_STATUS(p.receiver.backend.ipc_open(p.receiver.backend.ctx, p.handle, sizeof p.handle, &a), TIDE_EINVAL);
    CHECK_MESSAGE("is gone");
    CHECK_OK(tide_malloc(p.sender.t, 4096, 0, &p.block)); /* for pair_close to free */
    pair_close(&p);
}

/* One opening per handle, counted: the device sees one open and, with the last close, one close. */
static void test_uses_are_counted(void)
{
    struct pair p;
    pair_open(&p);
    tide_allocator *t = p.receiver.t;
    void *a = NULL, *b = NULL, *c = NULL;
    CHECK_OK(tide_ipc_open(t, p.handle, sizeof p.handle, &a));
    CHECK_OK(tide_ipc_open(t, p.handle, sizeof p.handle, &b));
    CHECK_OK(tide_ipc_open(t, p.handle, sizeof p.handle, &c));
    CHECK(a == (void *)p.base && b == a && c == a);
    CHECK(((unsigned char *)a)[p.offset + 3 * MIB - 1] == 0x5A);
    tide_sim_counters k = counters(p.receiver.sim);
    CHECK(k.calls[TIDE_SIM_IPC_OPEN] == 1);
    CHECK(k.ipc_openings == 1);
    CHECK_OK(tide_ipc_close(t, a));
    CHECK_OK(tide_ipc_close(t, b));
    k = counters(p.receiver.sim);
    CHECK(k.calls[TIDE_SIM_IPC_CLOSE] == 0); /* one use left */
    CHECK(k.ipc_openings == 1);
    CHECK_OK(tide_ipc_close(t, c));
    k = counters(p.receiver.sim);
    CHECK(k.calls[TIDE_SIM_IPC_CLOSE] == 1);
    CHECK(k.ipc_openings == 0);
    /* Closed as many times as opened: one more close is refused and changes nothing. */
    CHECK_STATUS(tide_ipc_close(t, a), TIDE_EINVAL);
    CHECK_MESSAGE("closed as many times as it was opened");
    CHECK(counters(p.receiver.sim).calls[TIDE_SIM_IPC_CLOSE] == 1);
    /* Opened again: a new opening through the device. */
    CHECK_OK(tide_ipc_open(t, p.handle, sizeof p.handle, &a));
    CHECK(counters(p.receiver.sim).calls[TIDE_SIM_IPC_OPEN] == 2);
    CHECK_OK(tide_ipc_close(t, a));
    CHECK(counters(p.receiver.sim).ipc_openings == 0);
    CHECK_OK(tide_check(t));
    pair_close(&p);
}

/* Two senders' segments open at once: each handle its own opening, closed on its own. */
static void test_two_handles(void)
{
    struct pair p;
    pair_open(&p);
    struct fixture other;
    fixture_open(&other, 0, NULL);
    void *block2;
    CHECK_OK(tide_malloc(other.t, 4096, 0, &block2));
    unsigned char handle2[TIDE_SIM_IPC_HANDLE_BYTES];
    CHECK_OK(tide_sim_ipc_handle(other.sim, (uintptr_t)block2, handle2));
    tide_allocator *t = p.receiver.t;
    void *a, *b, *a2;
    CHECK_OK(tide_ipc_open(t, p.handle, sizeof p.handle, &a));
    CHECK_OK(tide_ipc_open(t, handle2, sizeof handle2, &b));
    CHECK_OK(tide_ipc_open(t, p.handle, sizeof p.handle, &a2));
    CHECK(a != b && a2 == a);
    CHECK(counters(p.receiver.sim).ipc_openings == 2);
    CHECK_OK(tide_ipc_close(t, b));
    CHECK(counters(p.receiver.sim).ipc_openings == 1);
    CHECK_STATUS(tide_ipc_close(t, b), TIDE_EINVAL);
    CHECK_OK(tide_ipc_close(t, a));
    CHECK_OK(tide_ipc_close(t, a2));
    CHECK(counters(p.receiver.sim).ipc_openings == 0);
    CHECK_OK(tide_free(other.t, block2));
    fixture_close(&other);
    pair_close(&p);
}

/* Closing what is not an opening changes nothing: the opening that is there keeps its uses. */
static void test_bad_closes_change_nothing(void)
{
    struct pair p;
    pair_open(&p);
    tide_allocator *t = p.receiver.t;
    void *a, *mine;
    CHECK_OK(tide_ipc_open(t, p.handle, sizeof p.handle, &a));
    CHECK_OK(tide_ipc_open(t, p.handle, sizeof p.handle, &a));
    CHECK_OK(tide_malloc(t, 4096, 0, &mine));
    CHECK_STATUS(tide_ipc_close(t, mine), TIDE_EINVAL); /* the receiver's own block */
    CHECK_MESSAGE("no opening of another process's memory is there");
    CHECK_STATUS(tide_ipc_close(t, NULL), TIDE_EINVAL);
    CHECK_STATUS(tide_ipc_close(t, (char *)a + 512), TIDE_EINVAL); /* inside it, not its address */
    CHECK(counters(p.receiver.sim).calls[TIDE_SIM_IPC_CLOSE] == 0);
    CHECK_OK(tide_ipc_close(t, a));
    CHECK(counters(p.receiver.sim).ipc_openings == 1); /* still its second use */
    CHECK_OK(tide_ipc_close(t, a));
    CHECK(counters(p.receiver.sim).ipc_openings == 0);
    CHECK_OK(tide_free(t, mine));
    pair_close(&p);
}

static void test_bad_input(void)
{
    struct pair p;
    pair_open(&p);
    tide_allocator *t = p.receiver.t;
    void *a = (void *)1;
    CHECK_STATUS(tide_ipc_open(NULL, p.handle, sizeof p.handle, &a), TIDE_EINVAL);
    CHECK_STATUS(tide_ipc_open(t, p.handle, sizeof p.handle, NULL), TIDE_EINVAL);
    CHECK_STATUS(tide_ipc_open(t, NULL, sizeof p.handle, &a), TIDE_EINVAL);
    CHECK(a == NULL);
    CHECK_STATUS(tide_ipc_open(t, p.handle, 0, &a), TIDE_EINVAL);
    unsigned char big[TIDE_IPC_HANDLE_MAX + 1] = {0};
    CHECK_STATUS(tide_ipc_open(t, big, sizeof big, &a), TIDE_EINVAL);
    CHECK_MESSAGE("a handle of 129 bytes");
    CHECK_STATUS(tide_ipc_close(NULL, a), TIDE_EINVAL);
    /* A handle the device refuses: its words, and nothing counted. */
    a = (void *)1;
    CHECK_STATUS(tide_ipc_open(t, big, 64, &a), TIDE_EINVAL);
    CHECK_MESSAGE("tide_ipc_open: the sim device could not open the handle: sim: ipc_open: these 64 bytes");
    CHECK(a == NULL);
    CHECK(counters(p.receiver.sim).ipc_openings == 0);
    pair_close(&p);
}

/* A backend without the calls, or a table from before them (a smaller struct_size). */
static void test_backend_without_ipc(void)
{
    struct pair p;
    pair_open(&p);
    tide_backend none = p.receiver.backend;
    none.ipc_open = NULL;
    tide_backend old = p.receiver.backend;
    old.struct_size = (uint32_t)offsetof(tide_backend, ipc_open);
    const tide_backend *tables[] = {&none, &old};
    for (int i = 0; i < 2; i++) {
        tide_allocator *t;
        CHECK_OK(tide_create(tables[i], NULL, &t));
        void *a = (void *)1;
        CHECK_STATUS(tide_ipc_open(t, p.handle, sizeof p.handle, &a), TIDE_EUNSUPPORTED);
        CHECK_MESSAGE("the sim backend cannot open memory of another process");
        CHECK(a == NULL);
        CHECK_STATUS(tide_ipc_close(t, a), TIDE_EINVAL);
        CHECK_OK(tide_destroy(t));
    }
    CHECK(counters(p.receiver.sim).calls[TIDE_SIM_IPC_OPEN] == 0);
    pair_close(&p);
}

/* The device fails: an open that failed counts nothing; a last close that failed leaves the opening
 * open, and the next close closes it. */
static void test_device_failures(void)
{
    struct pair p;
    pair_open(&p);
    tide_allocator *t = p.receiver.t;
    void *a = (void *)1;
    tide_sim_inject_fault(p.receiver.sim, TIDE_SIM_IPC_OPEN, 0, 1);
    CHECK_STATUS(tide_ipc_open(t, p.handle, sizeof p.handle, &a), TIDE_EDEVICE);
    CHECK_MESSAGE("injected fault in ipc_open");
    CHECK(a == NULL);
    CHECK_OK(tide_ipc_open(t, p.handle, sizeof p.handle, &a)); /* asks the device again */
    CHECK(counters(p.receiver.sim).calls[TIDE_SIM_IPC_OPEN] == 2);
    tide_sim_inject_fault(p.receiver.sim, TIDE_SIM_IPC_CLOSE, 0, 1);
    CHECK_STATUS(tide_ipc_close(t, a), TIDE_EDEVICE);
    CHECK_MESSAGE("stays open");
    CHECK(counters(p.receiver.sim).ipc_openings == 1);
    void *again;
    CHECK_OK(tide_ipc_open(t, p.handle, sizeof p.handle, &again)); /* still open: no new open */
    CHECK(again == a && counters(p.receiver.sim).calls[TIDE_SIM_IPC_OPEN] == 2);
    CHECK_OK(tide_ipc_close(t, a));
    CHECK(counters(p.receiver.sim).ipc_openings == 1);
    CHECK_OK(tide_ipc_close(t, a));
    CHECK(counters(p.receiver.sim).ipc_openings == 0);
    pair_close(&p);
}

/* tide_destroy closes what is left open, whatever its uses, and says so. */
static void test_destroy_closes_what_is_open(void)
{
    struct pair p;
    pair_open(&p);
    void *a;
    CHECK_OK(tide_ipc_open(p.receiver.t, p.handle, sizeof p.handle, &a));
    CHECK_OK(tide_ipc_open(p.receiver.t, p.handle, sizeof p.handle, &a));
    CHECK_STATUS(tide_destroy(p.receiver.t), TIDE_EBUSY);
    CHECK_MESSAGE("1 opening of another process's memory (tide_ipc_open) still open, closed now");
    tide_sim_counters k = counters(p.receiver.sim);
    CHECK(k.ipc_openings == 0 && k.calls[TIDE_SIM_IPC_CLOSE] == 1);
    tide_sim_destroy(p.receiver.sim);

    /* With a live allocation as well: both are named, the allocation first. */
    fixture_open(&p.receiver, 0, NULL);
    void *mine;
    CHECK_OK(tide_malloc(p.receiver.t, 4096, 0, &mine));
    CHECK_OK(tide_ipc_open(p.receiver.t, p.handle, sizeof p.handle, &a));
    CHECK_STATUS(tide_destroy(p.receiver.t), TIDE_EBUSY);
    CHECK_MESSAGE("1 allocation (4.0 KiB) still live");
    CHECK_MESSAGE("; 1 opening of another process's memory (tide_ipc_open) still open, closed now");
    CHECK(counters(p.receiver.sim).ipc_openings == 0);
    tide_sim_destroy(p.receiver.sim);

    /* The device refuses the close: said too. */
    fixture_open(&p.receiver, 0, NULL);
    CHECK_OK(tide_ipc_open(p.receiver.t, p.handle, sizeof p.handle, &a));
    tide_sim_inject_fault(p.receiver.sim, TIDE_SIM_IPC_CLOSE, 0, 1);
    CHECK_STATUS(tide_destroy(p.receiver.t), TIDE_EBUSY);
    CHECK_MESSAGE("closed now (the device refused to close 1)");
    tide_sim_destroy(p.receiver.sim);

    fixture_open(&p.receiver, 0, NULL); /* for pair_close */
    pair_close(&p);
}

/* Threads opening and closing one handle at once: the device, which refuses a second open, never sees
 * one, and the last close of each round closes it. */
#define THREADS 8
#define ROUNDS 2000
struct worker {
    struct pair *p;
    int failures;
};

static void *open_close(void *arg)
{
    struct worker *w = arg;
    for (int i = 0; i < ROUNDS; i++) {
        void *a = NULL, *b = NULL;
        if (tide_ipc_open(w->p->receiver.t, w->p->handle, sizeof w->p->handle, &a) != TIDE_OK ||
            tide_ipc_open(w->p->receiver.t, w->p->handle, sizeof w->p->handle, &b) != TIDE_OK || a != b ||
            a != (void *)w->p->base) {
            fprintf(stderr, "open: %s\n", tide_last_error());
            w->failures++;
        }
        if (a && tide_ipc_close(w->p->receiver.t, a) != TIDE_OK)
            w->failures++;
        if (b && tide_ipc_close(w->p->receiver.t, b) != TIDE_OK)
            w->failures++;
    }
    return NULL;
}

static void test_threads_open_once(void)
{
    struct pair p;
    pair_open(&p);
    pthread_t th[THREADS];
    struct worker w[THREADS];
    for (int i = 0; i < THREADS; i++) {
        w[i] = (struct worker){&p, 0};
        pthread_create(&th[i], NULL, open_close, &w[i]);
    }
    for (int i = 0; i < THREADS; i++) {
        pthread_join(th[i], NULL);
        CHECK(w[i].failures == 0);
    }
    tide_sim_counters k = counters(p.receiver.sim);
    CHECK(k.ipc_openings == 0);
    CHECK(k.failures[TIDE_SIM_IPC_OPEN] == 0);
    CHECK(k.calls[TIDE_SIM_IPC_OPEN] == k.calls[TIDE_SIM_IPC_CLOSE]);
    CHECK(k.calls[TIDE_SIM_IPC_OPEN] >= 1 && k.calls[TIDE_SIM_IPC_OPEN] <= (uint64_t)THREADS * ROUNDS);
    pair_close(&p);
}

int main(void)
{
    RUN(test_sim_opens_a_handle_once);
    RUN(test_uses_are_counted);
    RUN(test_two_handles);
    RUN(test_bad_closes_change_nothing);
    RUN(test_bad_input);
    RUN(test_backend_without_ipc);
    RUN(test_device_failures);
    RUN(test_destroy_closes_what_is_open);
    RUN(test_threads_open_once);
    return HARNESS_EXIT();
}

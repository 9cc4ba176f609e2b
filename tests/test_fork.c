/*
 * fork(): a child process's copies of its parent's allocator, simulated device and set of devices
 * refuse every call at once, saying why, and tide_destroy leaves them alone; no call in the child waits
 * for a lock that a thread of the parent held at the fork, or for a stream thread the child does not
 * have; what the child makes itself works, and the parent goes on as if nothing happened.
 *
 * Each child runs under a watchdog: one that has not exited after CHILD_SECONDS is killed, and the test
 * fails saying it hung (TIDE_FORK_CHILD_SECONDS changes the limit).
 */
#include "harness.h"
#include "internal.h"
#include "hot_path.h"
#include "tidepool_cuda.h"

#include <signal.h>
#include <stdatomic.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define CHILD_SECONDS 30
#define FORKED "a child forked from it"

static void sleep_ms(long ms)
{
    struct timespec ts = {ms / 1000, (ms % 1000) * 1000000L};
    nanosleep(&ts, NULL);
}

static bool in_a_child; /* then a child forks grandchildren, in its own process group */

/* Runs child(arg) in a forked child; its failures (harness_failures, counted in the child's copy) are
 * its exit status. True if it exited 0 in time. A child is killed with its own children, if any (a
 * grandchild's watchdog gets half the time). */
static bool in_child(const char *what, int (*child)(void *), void *arg)
{
    const char *env = getenv("TIDE_FORK_CHILD_SECONDS");
    long limit_ms = 1000L * (env ? atol(env) : CHILD_SECONDS) / (in_a_child ? 2 : 1);
    bool group = !in_a_child;
    fflush(stdout);
    fflush(stderr);
    pid_t pid = fork();
    if (pid < 0) {
        perror("fork");
        harness_failures++;
        return false;
    }
    if (pid == 0) {
        if (group)
            setpgid(0, 0);
        in_a_child = true;
        harness_failures = 0;
        int failures = child(arg);
        fflush(stderr);
        _exit(failures ? 1 : 0); /* no atexit handlers: they are the parent's */
    }
    if (group)
        setpgid(pid, pid); /* as the child does: whichever comes first */
    int status = 0;
    for (long waited = 0;; waited += 10) {
        pid_t done = waitpid(pid, &status, WNOHANG);
        if (done == pid)
            break;
        if (waited >= limit_ms) {
            kill(group ? -pid : pid, SIGKILL);
            waitpid(pid, &status, 0);
            fprintf(stderr, "%s: the child hung (killed after %ld s)\n", what, limit_ms / 1000);
            harness_failures++;
            return false;
        }
        sleep_ms(10);
    }
    if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
        fprintf(stderr, "%s: the child %s %d\n", what, WIFEXITED(status) ? "exited with" : "died of signal",
                WIFEXITED(status) ? WEXITSTATUS(status) : WTERMSIG(status));
        harness_failures++;
        return false;
    }
    return true;
}

/* ---- the parent's objects in the child ------------------------------------------------------------ */

/* Device work that holds its stream until the parent lets it go: queued work at the fork. */
static pthread_mutex_t gate_lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t gate_cond = PTHREAD_COND_INITIALIZER;
static bool gate_is_open;

static void wait_at_gate(void *arg)
{
    (void)arg;
    pthread_mutex_lock(&gate_lock);
    while (!gate_is_open)
        pthread_cond_wait(&gate_cond, &gate_lock);
    pthread_mutex_unlock(&gate_lock);
}

static void open_the_gate(void)
{
    pthread_mutex_lock(&gate_lock);
    gate_is_open = true;
    pthread_cond_broadcast(&gate_cond);
    pthread_mutex_unlock(&gate_lock);
}

/* The parent's world at the fork (globals, so that the child's copies stay reachable when it exits). */
static struct fixture parent;
static void *live, *referenced;
static tide_stream other;
static tide_pool_id pool;
static tide_devices *devices;
static struct fixture sender;         /* another device, whose segment the parent has open */
static void *sent, *opened;
static unsigned char handle[TIDE_SIM_IPC_HANDLE_BYTES];

#define REFUSED(call)                                                                              \
    do {                                                                                           \
        CHECK_STATUS(call, TIDE_EINVAL);                                                           \
        CHECK_MESSAGE(FORKED);                                                                     \
    } while (0)

static int every_call_refused(void *arg)
{
    (void)arg;
    tide_allocator *t = parent.t;
    void *p = (void *)1;
    REFUSED(tide_malloc(t, 4096, 0, &p));
    CHECK(p == NULL);
    REFUSED(tide_malloc(t, 4096, other, &p));
    REFUSED(tide_free(t, live));
    REFUSED(tide_record_stream(t, live, other));
    REFUSED(tide_retain(t, live));
    REFUSED(tide_release(t, referenced));
    REFUSED(tide_empty_cache(t, NULL));
    REFUSED(tide_trim(t, 0, NULL));
    REFUSED(tide_set_limit(t, 1 << 30));
    REFUSED(tide_set_limit_fraction(t, 0.5));
    tide_stats s = {.struct_size = sizeof s};
    REFUSED(tide_get_stats(t, &s));
    REFUSED(tide_reset_peak_stats(t));
    REFUSED(tide_reset_accumulated_stats(t));
    char buf[64];
    REFUSED(tide_stats_json(t, buf, sizeof buf, NULL));
    REFUSED(tide_check(t));
    char *text = NULL;
    REFUSED(tide_snapshot_json(t, &text));
    REFUSED(tide_leak_report(t, &text, NULL));
    REFUSED(tide_history_json(t, &text));
    CHECK(text == NULL);
    tide_event ev[4];
    size_t n;
    REFUSED(tide_history_read(t, ev, 4, &n, NULL));
    REFUSED(tide_history_start(t, 64, 0));
    REFUSED(tide_history_stop(t));
    REFUSED(tide_annotate(t, "in the child"));
    tide_pool_id id;
    REFUSED(tide_pool_create(t, &id));
    REFUSED(tide_pool_retain(t, pool));
    REFUSED(tide_pool_release(t, pool));
    uint32_t uses;
    REFUSED(tide_pool_use_count(t, pool, &uses));
    size_t reserved, allocated;
    REFUSED(tide_pool_memory(t, pool, &reserved, &allocated));
    REFUSED(tide_malloc_pool(t, 4096, 0, pool, &p));
    uintptr_t base;
    REFUSED(tide_segment_of(t, live, &base, &reserved));
    REFUSED(tide_pool_of(t, live, &id));
    REFUSED(tide_pool_blocks(t, pool, NULL, 0, &n));
    REFUSED(tide_pool_restore(t, pool, NULL, 0));
    REFUSED(tide_capture_begin(t));
    REFUSED(tide_capture_end(t));
    REFUSED(tide_ipc_open(t, handle, sizeof handle, &p)); /* open in the parent already */
    CHECK(p == NULL);
    REFUSED(tide_ipc_close(t, opened));

    /* The device: its stream threads are the parent's (and one is inside queued work). */
    tide_stream s2;
    REFUSED(tide_sim_stream_create(parent.sim, &s2));
    REFUSED(tide_sim_enqueue(parent.sim, 0, 0, wait_at_gate, NULL));
    REFUSED(tide_sim_stream_synchronize(parent.sim, other));
    REFUSED(tide_sim_synchronize(parent.sim));
    REFUSED(tide_sim_ipc_handle(parent.sim, (uintptr_t)live, handle));
    tide_sim_inject_fault(parent.sim, TIDE_SIM_RESERVE, 0, 1); /* does nothing */
    tide_sim_counters c;
    tide_sim_get_counters(parent.sim, &c); /* as the fork left them */
    CHECK(c.held_bytes > 0);
    CHECK(c.failures[TIDE_SIM_RESERVE] == 0);
    /* A new allocator over the parent's device is refused by the device. */
    tide_allocator *t2 = (tide_allocator *)1;
    CHECK_STATUS(tide_create(&parent.backend, NULL, &t2), TIDE_EDEVICE);
    CHECK_MESSAGE(FORKED);
    CHECK(t2 == NULL);

    /* The set of devices (CUDA: no GPU is needed to be refused). */
    REFUSED(tide_devices_get(devices, 0, &t2));
    REFUSED(tide_devices_malloc(devices, 0, 4096, 0, &p));
    REFUSED(tide_devices_free(devices, 0, live));
    REFUSED(tide_devices_record_stream(devices, live, other));
    REFUSED(tide_devices_empty_cache(devices));

    /* Letting go: nothing is freed, nothing waits, nothing fails; the last message stays. */
    tide__fail(TIDE_EINVAL, "the message before");
    CHECK_OK(tide_destroy(t));
    CHECK_OK(tide_devices_destroy(devices));
    tide_sim_destroy(parent.sim);
    CHECK_MESSAGE("the message before");
    return harness_failures;
}

static void open_parent(void)
{
    fixture_open(&parent, 0, NULL);
    CHECK_OK(tide_sim_stream_create(parent.sim, &other));
    CHECK_OK(tide_malloc(parent.t, 1 << 20, other, &live));
    CHECK_OK(tide_malloc(parent.t, 4096, 0, &referenced));
    CHECK_OK(tide_retain(parent.t, referenced));
    CHECK_OK(tide_pool_create(parent.t, &pool));
    CHECK_OK(tide_history_start(parent.t, 256, 0));
    CHECK_OK(tide_devices_create(NULL, &devices));
    fixture_open(&sender, 0, NULL);
    CHECK_OK(tide_malloc(sender.t, 4096, 0, &sent));
    CHECK_OK(tide_sim_ipc_handle(sender.sim, (uintptr_t)sent, handle));
    CHECK_OK(tide_ipc_open(parent.t, handle, sizeof handle, &opened));
}

static void close_parent(void)
{
    CHECK_OK(tide_ipc_close(parent.t, opened)); /* the parent's opening outlived the child's calls */
    CHECK_OK(tide_free(sender.t, sent));
    fixture_close(&sender);
    CHECK_OK(tide_history_stop(parent.t));
    CHECK_OK(tide_pool_release(parent.t, pool));
    CHECK_OK(tide_free(parent.t, referenced));
    CHECK_OK(tide_release(parent.t, referenced));
    CHECK_OK(tide_free(parent.t, live));
    fixture_close(&parent);
    CHECK_OK(tide_devices_destroy(devices));
}

/* A thread of the parent inside each lock at the fork, and device work queued behind work that has
 * not finished: before, the child spun for ever on the heap's lock at its first tide_malloc, and its
 * tide_destroy waited for ever for the stream threads it does not have. */
static void test_every_call_refused_with_every_lock_held(void)
{
    open_parent();
    gate_is_open = false;
    CHECK_OK(tide_sim_enqueue(parent.sim, other, 0, wait_at_gate, NULL));
    CHECK_OK(tide_sim_enqueue(parent.sim, other, 0, NULL, NULL));
    tide_allocator *t = parent.t;
    uint32_t nheaps = atomic_load(&t->nheaps);
    pthread_mutex_lock(&t->pressure); /* in the library's order */
    pthread_mutex_lock(&t->heaps_lock);
    pthread_mutex_lock(&t->history_lock);
    pthread_mutex_lock(&t->history_write_lock);
    pthread_mutex_lock(&t->ipc_lock);
    for (uint32_t i = 0; i < nheaps; i++)
        heap_lock_and_settle(t->heaps[i]);
    in_child("every call, every lock held", every_call_refused, NULL);
    for (uint32_t i = nheaps; i-- > 0;)
        heap_unlock(t->heaps[i]);
    pthread_mutex_unlock(&t->ipc_lock);
    pthread_mutex_unlock(&t->history_write_lock);
    pthread_mutex_unlock(&t->history_lock);
    pthread_mutex_unlock(&t->heaps_lock);
    pthread_mutex_unlock(&t->pressure);
    open_the_gate();
    /* The parent's allocator is its own still. */
    void *p;
    CHECK_OK(tide_malloc(t, 4096, 0, &p));
    CHECK_OK(tide_free(t, p));
    CHECK_OK(tide_check(t));
    close_parent();
}

/* With no lock held (the calls would have gone through, on the parent's memory). */
static void test_every_call_refused(void)
{
    open_parent();
    in_child("every call", every_call_refused, NULL);
    close_parent();
}

/* ---- what the child makes ------------------------------------------------------------------------- */

static int grandchild(void *arg)
{
    struct fixture *child = arg;
    void *p;
    REFUSED(tide_malloc(child->t, 4096, 0, &p));
    CHECK_OK(tide_destroy(child->t));
    tide_sim_destroy(child->sim);
    return harness_failures;
}

static int child_makes_its_own(void *arg)
{
    (void)arg;
    struct fixture mine;
    fixture_open(&mine, 0, NULL);
    tide_stream s;
    CHECK_OK(tide_sim_stream_create(mine.sim, &s));
    void *p, *q;
    CHECK_OK(tide_malloc(mine.t, 1 << 20, 0, &p));
    CHECK_OK(tide_malloc(mine.t, 3 << 20, s, &q));
    memset(p, 7, 1 << 20); /* the simulated device's memory is the child's own */
    CHECK_OK(tide_record_stream(mine.t, p, s));
    CHECK_OK(tide_free(mine.t, p));
    CHECK_OK(tide_free(mine.t, q));
    CHECK_OK(tide_history_start(mine.t, 64, 0));
    CHECK_OK(tide_check(mine.t));
    /* Its own children, in turn, may not use it. */
    CHECK(in_child("a grandchild", grandchild, &mine));
    tide_release_report r;
    CHECK_OK(tide_empty_cache(mine.t, &r));
    CHECK(r.reserved_bytes == 0);
    fixture_close(&mine);
    return harness_failures;
}

#if defined(__SANITIZE_THREAD__)
#define UNDER_TSAN 1
#elif defined(__has_feature)
#if __has_feature(thread_sanitizer)
#define UNDER_TSAN 1
#endif
#endif

static void test_child_makes_its_own(void)
{
#ifdef UNDER_TSAN
    /* ThreadSanitizer cannot start threads in the child of a process that had several ("starting new
     * threads after multi-threaded fork is not supported"), and a simulated device's streams are
     * threads. The other tests here start none in their children. */
    fprintf(stderr, "skipped under ThreadSanitizer: no new threads after a multi-threaded fork\n");
    return;
#endif
    open_parent();
    in_child("the child's own allocator", child_makes_its_own, NULL);
    close_parent();
}

/* ---- forks while threads allocate -------------------------------------------------------------------- */

#define THREADS 4
#define FORKS 10
static _Atomic(bool) keep_going;

struct worker {
    tide_stream stream;
    unsigned seed;
};

static void *allocate_and_free(void *arg)
{
    struct worker *w = arg;
    void *held[8] = {0};
    while (atomic_load(&keep_going)) {
        w->seed = w->seed * 1103515245u + 12345u;
        unsigned k = (w->seed >> 16) % 8;
        if (held[k]) {
            if (tide_free(parent.t, held[k]) != TIDE_OK)
                harness_failures++;
            held[k] = NULL;
        } else if (tide_malloc(parent.t, 512 + (w->seed >> 8) % (256 << 10), w->stream, &held[k]) != TIDE_OK) {
            harness_failures++;
        }
    }
    for (int k = 0; k < 8; k++)
        if (held[k] && tide_free(parent.t, held[k]) != TIDE_OK)
            harness_failures++;
    return NULL;
}

static int first_calls_refused(void *arg)
{
    (void)arg;
    void *p;
    REFUSED(tide_malloc(parent.t, 4096, 0, &p));
    REFUSED(tide_free(parent.t, live));
    REFUSED(tide_empty_cache(parent.t, NULL));
    CHECK_OK(tide_destroy(parent.t));
    tide_sim_destroy(parent.sim);
    return harness_failures;
}

/* As a DataLoader's workers are forked while the training thread allocates: before, 6 children of 10
 * spun for ever at their first call (the heap's lock was held at the fork). */
static void test_forks_while_threads_allocate(void)
{
    open_parent();
    struct worker w[THREADS];
    pthread_t th[THREADS];
    atomic_store(&keep_going, true);
    for (int i = 0; i < THREADS; i++) {
        w[i].seed = 17u * (unsigned)i + 1;
        w[i].stream = 0; /* two threads on stream 0, with the forking thread's own cached heap */
        if (i >= 2)
            CHECK_OK(tide_sim_stream_create(parent.sim, &w[i].stream));
        pthread_create(&th[i], NULL, allocate_and_free, &w[i]);
    }
    int ok = 0;
    for (int i = 0; i < FORKS; i++) {
        void *p; /* this thread's cached heap is stream 0's, which the others are using */
        CHECK_OK(tide_malloc(parent.t, 4096, 0, &p));
        CHECK_OK(tide_free(parent.t, p));
        sleep_ms(1 + i % 3);
        ok += in_child("a fork while threads allocate", first_calls_refused, NULL);
    }
    atomic_store(&keep_going, false);
    for (int i = 0; i < THREADS; i++)
        pthread_join(th[i], NULL);
    fprintf(stderr, "%d of %d children refused at once\n", ok, FORKS);
    CHECK(ok == FORKS);
    close_parent();
}

int main(void)
{
    RUN(test_every_call_refused_with_every_lock_held);
    RUN(test_every_call_refused);
    RUN(test_child_makes_its_own);
    RUN(test_forks_while_threads_allocate);
    return HARNESS_EXIT();
}

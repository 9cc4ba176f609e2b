/*
 * Private pools under threads: a block tide_malloc_pool returns for pool A is A's, whatever other
 * threads do meanwhile. A released pool's empty heap is handed to the next pool that needs one on its
 * stream (src/pool.c), so each round races the allocations in a new pool A, whose heap for the stream is
 * empty (its first allocation reserves a segment), against another thread that releases A, creates
 * pool B and allocates in B on the same stream: B must not be given A's heap while an allocation in A
 * is on its way into it. Then every block is checked against tide_pool_of and tide_pool_blocks.
 *
 * That moment is short, and this program meets it only by chance against the library; built as
 * test_pool_threads_widened (tests/CMakeLists.txt) against a library that pauses 200 us in it, it meets
 * it in most rounds (205 of 300 rounds put blocks of A in B before the fix). TIDE_POOL_THREAD_ROUNDS
 * sets the rounds (default 1000).
 */
#include "harness.h"

#include <stdbool.h>

#define ALLOCATORS 3 /* threads allocating in A; one more releases A and allocates in B */
#define PER_THREAD 2 /* allocations each in A per round, until A refuses */

struct shared {
    tide_allocator *t;
    tide_stream stream;
    pthread_barrier_t start, done;
    bool stop;
    tide_pool_id a, b;          /* this round's pools (b: set by the releasing thread) */
    void *in_a[ALLOCATORS][PER_THREAD];
    void *in_b;
    int failures;               /* calls that failed where they should not (under the barrier's order) */
};

struct worker {
    struct shared *sh;
    int index;                  /* 0..ALLOCATORS-1 allocate in A; ALLOCATORS releases A */
};

static void allocate_in_a(struct shared *sh, int index)
{
    for (int k = 0; k < PER_THREAD; k++) {
        void *p = NULL;
        tide_status s = tide_malloc_pool(sh->t, 4096 + (size_t)index * 512, sh->stream, sh->a, &p);
        if (s == TIDE_EINVAL)
            break; /* A was released first: refused, as documented */
        if (s != TIDE_OK) {
            __atomic_fetch_add(&sh->failures, 1, __ATOMIC_RELAXED);
            break;
        }
        sh->in_a[index][k] = p;
    }
}

static void release_a_and_use_b(struct shared *sh)
{
    if (tide_pool_release(sh->t, sh->a) != TIDE_OK || tide_pool_create(sh->t, &sh->b) != TIDE_OK ||
        tide_malloc_pool(sh->t, 4096, sh->stream, sh->b, &sh->in_b) != TIDE_OK)
        __atomic_fetch_add(&sh->failures, 1, __ATOMIC_RELAXED);
}

static void *worker_main(void *arg)
{
    struct worker *w = arg;
    struct shared *sh = w->sh;
    for (;;) {
        pthread_barrier_wait(&sh->start);
        if (sh->stop)
            return NULL;
        if (w->index < ALLOCATORS)
            allocate_in_a(sh, w->index);
        else
            release_a_and_use_b(sh);
        pthread_barrier_wait(&sh->done);
    }
}

static bool listed(const tide_pool_block *blocks, size_t n, const void *p)
{
    for (size_t i = 0; i < n; i++)
        if (blocks[i].ptr == (uintptr_t)p)
            return true;
    return false;
}

/* After a round: each block of A is A's (tide_pool_of, and listed by tide_pool_blocks for A), B holds
 * its one block and nothing of A's; then everything is freed and the released pools' memory goes back,
 * so that the next round's pools recycle empty heaps. Returns the number of blocks found in the wrong
 * pool. */
static int check_round(struct shared *sh)
{
    tide_allocator *t = sh->t;
    enum { CAP = ALLOCATORS * PER_THREAD + 1 };
    tide_pool_block of_a[CAP], of_b[CAP];
    size_t na = 0, nb = 0, mine = 0;
    int misplaced = 0;
    CHECK_OK(tide_pool_blocks(t, sh->a, of_a, CAP, &na));
    CHECK_OK(tide_pool_blocks(t, sh->b, of_b, CAP, &nb));
    for (int i = 0; i < ALLOCATORS; i++)
        for (int k = 0; k < PER_THREAD; k++) {
            void *p = sh->in_a[i][k];
            if (!p)
                continue;
            mine++;
            tide_pool_id of = 0;
            CHECK_OK(tide_pool_of(t, p, &of));
            if (of != sh->a || !listed(of_a, na, p) || listed(of_b, nb, p))
                misplaced++;
        }
    if (na != mine)
        misplaced++;
    if (sh->in_b) {
        tide_pool_id of = 0;
        CHECK_OK(tide_pool_of(t, sh->in_b, &of));
        CHECK(of == sh->b);
    }
    if (nb != (sh->in_b ? 1u : 0u) || (sh->in_b && !listed(of_b, nb, sh->in_b)))
        misplaced++; /* B holds memory it did not allocate */
    CHECK_OK(tide_check(t));
    for (int i = 0; i < ALLOCATORS; i++)
        for (int k = 0; k < PER_THREAD; k++)
            if (sh->in_a[i][k])
                CHECK_OK(tide_free(t, sh->in_a[i][k]));
    if (sh->in_b)
        CHECK_OK(tide_free(t, sh->in_b));
    if (sh->b)
        CHECK_OK(tide_pool_release(t, sh->b));
    CHECK_OK(tide_empty_cache(t, NULL));
    return misplaced;
}

static void test_release_and_recycle_race_allocations(void)
{
    const char *env = getenv("TIDE_POOL_THREAD_ROUNDS");
    int rounds = env ? atoi(env) : 1000;
    struct fixture f;
    fixture_open(&f, 0, NULL);
    struct shared sh;
    memset(&sh, 0, sizeof sh);
    sh.t = f.t;
    CHECK_OK(tide_sim_stream_create(f.sim, &sh.stream));
    pthread_barrier_init(&sh.start, NULL, ALLOCATORS + 2);
    pthread_barrier_init(&sh.done, NULL, ALLOCATORS + 2);
    pthread_t threads[ALLOCATORS + 1];
    struct worker workers[ALLOCATORS + 1];
    for (int i = 0; i <= ALLOCATORS; i++) {
        workers[i] = (struct worker){&sh, i};
        CHECK(pthread_create(&threads[i], NULL, worker_main, &workers[i]) == 0);
    }
    int misplaced = 0, rounds_misplaced = 0;
    for (int r = 0; r < rounds; r++) {
        memset(sh.in_a, 0, sizeof sh.in_a);
        sh.in_b = NULL;
        sh.b = 0;
        CHECK_OK(tide_pool_create(f.t, &sh.a));
        pthread_barrier_wait(&sh.start);
        pthread_barrier_wait(&sh.done);
        int m = check_round(&sh);
        misplaced += m;
        rounds_misplaced += m > 0;
    }
    sh.stop = true;
    pthread_barrier_wait(&sh.start);
    for (int i = 0; i <= ALLOCATORS; i++)
        pthread_join(threads[i], NULL);
    pthread_barrier_destroy(&sh.start);
    pthread_barrier_destroy(&sh.done);
    if (rounds_misplaced)
        fprintf(stderr, "%d of %d rounds put blocks in the wrong pool (%d misplaced)\n", rounds_misplaced,
                rounds, misplaced);
    CHECK(misplaced == 0);
    CHECK(sh.failures == 0);
    CHECK(reserved_of(f.t) == 0);
    fixture_close(&f);
}

int main(void)
{
    RUN(test_release_and_recycle_race_allocations);
    return HARNESS_EXIT();
}

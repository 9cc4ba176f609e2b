/*
 * The assertions (src/assertions.h) against a library built with them on (tests/CMakeLists.txt): a
 * correct program runs through them untouched, and a block whose state was broken through the
 * internal headers stops the library at the next state change, with the failed condition on stderr.
 * Each broken case runs in a child of its own, which must die of SIGABRT.
 */
#include "harness.h"
#include "internal.h"
#include "hot_path.h"

#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#if TIDE_ASSERT_LEVEL < TIDE_ASSERT_CHEAP
#error "test_assertions needs a library and a build with TIDE_ASSERT_LEVEL of 1 or more"
#endif

/* Runs body in a child with stderr into a pipe; checks that it aborted, saying `words`. */
static void expect_abort(void (*body)(void), const char *words)
{
    int fds[2];
    if (pipe(fds) != 0) {
        CHECK(!"pipe");
        return;
    }
    fflush(NULL);
    pid_t pid = fork();
    if (pid == 0) {
        close(fds[0]);
        dup2(fds[1], 2);
        body();
        _exit(0); /* the body should not have come back */
    }
    close(fds[1]);
    char said[4096];
    size_t n = 0;
    ssize_t r;
    while (n < sizeof said - 1 && (r = read(fds[0], said + n, sizeof said - 1 - n)) > 0)
        n += (size_t)r;
    said[n] = '\0';
    close(fds[0]);
    int status = 0;
    waitpid(pid, &status, 0);
    CHECK(WIFSIGNALED(status) && WTERMSIG(status) == SIGABRT);
    if (!strstr(said, "tidepool: assertion failed") || !strstr(said, words)) {
        fprintf(stderr, "the child said \"%s\", not an assertion naming \"%s\"\n", said, words);
        harness_failures++;
    }
}

/* A block of the allocator's, found through the internal headers; the heap is left unlocked. */
static struct block *block_of(tide_allocator *t, void *p)
{
    struct heap *h;
    struct block *b;
    if (allocator_locate(t, p, "test", &h, &b) != TIDE_OK)
        _exit(3);
    heap_unlock(h);
    return b;
}

/* An ACTIVE block marked FREE behind the library's back: freeing it must stop at "a block freed is
 * ACTIVE". */
static void free_a_block_marked_free(void)
{
    struct fixture f;
    fixture_open(&f, 0, NULL);
    void *p;
    if (tide_malloc(f.t, 4096, 0, &p) != TIDE_OK)
        _exit(3);
    block_of(f.t, p)->state = BLOCK_FREE;
    tide_free(f.t, p);
}

static void test_freeing_a_block_not_active_aborts(void)
{
    expect_abort(free_a_block_marked_free, "b->state == BLOCK_ACTIVE");
}

/* A FREE block marked ACTIVE: the allocation that would take it must stop at "a block taken is FREE". */
static void take_a_free_block_marked_active(void)
{
    struct fixture f;
    fixture_open(&f, 0, NULL);
    void *p, *q;
    if (tide_malloc(f.t, 4096, 0, &p) != TIDE_OK)
        _exit(3);
    /* p's neighbour, the rest of its segment: FREE, and the block the next allocation takes */
    struct block *rest = block_of(f.t, p)->next;
    rest->state = BLOCK_ACTIVE;
    tide_malloc(f.t, 4096, 0, &q);
}

static void test_taking_a_block_not_free_aborts(void)
{
    expect_abort(take_a_free_block_marked_active, "b->state == BLOCK_FREE");
}

#if TIDE_ASSERT_LEVEL >= TIDE_ASSERT_WALKS
/* A FREE block filed a second time: the walk of its class's list finds it there already. */
static void file_a_block_twice(void)
{
    struct fixture f;
    fixture_open(&f, 0, NULL);
    void *p;
    if (tide_malloc(f.t, 4096, 0, &p) != TIDE_OK)
        _exit(3);
    struct block *rest = block_of(f.t, p)->next;
    struct heap *h = f.t->heaps[0];
    heap_lock(h);
    free_index_insert(&h->free[rest->seg->pool], rest);
}

static void test_filing_a_block_twice_aborts(void)
{
    expect_abort(file_a_block_twice, "filed_in_class");
}
#endif

/* A correct program, with every assertion on: random sizes on two streams, frees, other streams' uses,
 * references and the emptying of the cache, then the validator finds nothing. */
static void test_a_correct_program_passes(void)
{
    struct fixture f;
    fixture_open(&f, 0, "limit:512MiB");
    void *live[64] = {0};
    uint64_t rng = 11;
    for (int step = 0; step < 20000; step++) {
        rng = rng * 6364136223846793005ull + 1442695040888963407ull;
        unsigned k = (unsigned)(rng >> 33) % 64, what = (unsigned)(rng >> 40) % 8;
        if (live[k]) {
            if (what == 0)
                CHECK_OK(tide_record_stream(f.t, live[k], 2));
            if (what == 1) {
                CHECK_OK(tide_retain(f.t, live[k]));
                CHECK_OK(tide_free(f.t, live[k]));
                CHECK_OK(tide_release(f.t, live[k]));
            } else {
                CHECK_OK(tide_free(f.t, live[k]));
            }
            live[k] = NULL;
        } else {
            size_t size = ((size_t)1 << ((rng >> 45) % 24)) + (rng >> 50) % 4096;
            CHECK_OK(tide_malloc(f.t, size, what == 2 ? 1 : 0, &live[k]));
        }
        if (step % 5000 == 4999) {
            CHECK_OK(tide_check(f.t));
            CHECK_OK(tide_empty_cache(f.t, NULL));
        }
    }
    for (int k = 0; k < 64; k++)
        CHECK_OK(tide_free(f.t, live[k]));
    CHECK_OK(tide_check(f.t));
    fixture_close(&f);
}

int main(void)
{
    RUN(test_a_correct_program_passes);
    RUN(test_freeing_a_block_not_active_aborts);
    RUN(test_taking_a_block_not_free_aborts);
#if TIDE_ASSERT_LEVEL >= TIDE_ASSERT_WALKS
    RUN(test_filing_a_block_twice_aborts);
#endif
    return HARNESS_EXIT();
}

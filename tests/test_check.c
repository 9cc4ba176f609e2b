/*
 * The validator catches each invariant when it breaks. Each test corrupts exactly one thing in the
 * allocator's bookkeeping, checks that tide_check reports that problem, then repairs it and checks
 * that tide_check passes again.
 */
#include "harness.h"
#include "internal.h"

#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

struct scene {
    struct fixture f;
    void *a, *b, *c;   /* three ACTIVE blocks at the start of one small segment; then FREE space */
    struct heap *h;
    struct segment *seg;
};

static void scene_open(struct scene *s)
{
    fixture_open(&s->f, 0, NULL);
    CHECK_OK(tide_malloc(s->f.t, 4096, 0, &s->a));
    CHECK_OK(tide_malloc(s->f.t, 4096, 0, &s->b));
    CHECK_OK(tide_malloc(s->f.t, 4096, 0, &s->c));
    s->h = s->f.t->heaps[0];
    s->seg = s->h->segments;
    CHECK_OK(tide_check(s->f.t));
}

static void scene_close(struct scene *s)
{
    CHECK_OK(tide_check(s->f.t));
    CHECK_OK(tide_free(s->f.t, s->a));
    CHECK_OK(tide_free(s->f.t, s->b));
    CHECK_OK(tide_free(s->f.t, s->c));
    fixture_close(&s->f);
}

static void expect_corrupt(struct scene *s, const char *words)
{
    CHECK_STATUS(tide_check(s->f.t), TIDE_ECORRUPT);
    CHECK_MESSAGE(words);
}

static struct block *block_of(struct scene *s, void *p) { return ptr_map_get(&s->h->map, (uintptr_t)p); }

static void test_detects_gap_between_blocks(void)
{
    struct scene s;
    scene_open(&s);
    struct block *b = block_of(&s, s.b);
    b->addr += 512;
    expect_corrupt(&s, "gap");
    b->addr -= 512;
    scene_close(&s);
}

static void test_detects_blocks_not_reaching_segment_end(void)
{
    struct scene s;
    scene_open(&s);
    struct block *last = block_of(&s, s.c)->next; /* the FREE rest of the segment */
    last->size -= 512;
    expect_corrupt(&s, "not at its end");
    last->size += 512;
    scene_close(&s);
}

static void test_detects_unmerged_free_neighbours(void)
{
    struct scene s;
    scene_open(&s);
    /* Cut the FREE rest of the segment into two FREE blocks, both properly indexed. */
    struct block *rest = block_of(&s, s.c)->next;
    struct free_index *fi = &s.h->free[POOL_SMALL];
    free_index_remove(fi, rest);
    struct block *second = block_new(s.h);
    *second = *rest;
    second->addr = rest->addr + 8192;
    second->size = rest->size - 8192;
    second->prev = rest;
    rest->size = 8192;
    rest->next = second;
    free_index_insert(fi, rest);
    free_index_insert(fi, second);
    expect_corrupt(&s, "were not merged");
    /* Repair: merge them back. */
    free_index_remove(fi, rest);
    free_index_remove(fi, second);
    rest->size += second->size;
    rest->next = NULL;
    block_recycle(s.h, second);
    free_index_insert(fi, rest);
    scene_close(&s);
}

static void test_detects_free_block_missing_from_index(void)
{
    struct scene s;
    scene_open(&s);
    struct block *rest = block_of(&s, s.c)->next;
    free_index_remove(&s.h->free[POOL_SMALL], rest);
    expect_corrupt(&s, "not in its pool's free index");
    free_index_insert(&s.h->free[POOL_SMALL], rest);
    scene_close(&s);
}

/* A block filed in the index that no segment holds as FREE (here, a spare block struct). */
static void test_detects_stray_block_in_index(void)
{
    struct scene s;
    scene_open(&s);
    struct block *stray = block_new(s.h);
    CHECK(stray != NULL);
    stray->size = 8192;
    stray->state = BLOCK_FREE;
    free_index_insert(&s.h->free[POOL_SMALL], stray);
    expect_corrupt(&s, "free index holds more than");
    free_index_remove(&s.h->free[POOL_SMALL], stray);
    block_recycle(s.h, stray);
    scene_close(&s);
}

/* A class whose list holds a block but whose bit says it is empty: searches would skip it. */
static void test_detects_free_index_bitmap_out_of_step(void)
{
    struct scene s;
    scene_open(&s);
    struct block *rest = block_of(&s, s.c)->next;
    struct free_index *fi = &s.h->free[POOL_SMALL];
    fi->sl_bitmap[rest->fl] ^= 1u << rest->sl;
    expect_corrupt(&s, "bitmap bit disagrees");
    fi->sl_bitmap[rest->fl] ^= 1u << rest->sl;
    scene_close(&s);
}

static void test_detects_unknown_state(void)
{
    struct scene s;
    scene_open(&s);
    struct block *b = block_of(&s, s.b);
    b->state = 7;
    expect_corrupt(&s, "no known state");
    b->state = BLOCK_ACTIVE;
    scene_close(&s);
}

static void test_detects_active_block_missing_from_pointer_map(void)
{
    struct scene s;
    scene_open(&s);
    struct block *b = block_of(&s, s.b);
    ptr_map_remove(&s.h->map, b);
    expect_corrupt(&s, "not in the pointer map");
    CHECK_OK(ptr_map_insert(&s.h->map, b));
    scene_close(&s);
}

/* Removal goes straight to the slot a block remembers: a wrong one would unmap another block. */
static void test_detects_block_with_wrong_map_slot(void)
{
    struct scene s;
    scene_open(&s);
    struct block *b = block_of(&s, s.b);
    uint32_t slot = b->map_slot;
    b->map_slot = (uint32_t)((slot + 1) & (s.h->map.cap - 1));
    expect_corrupt(&s, "does not know its slot in the pointer map");
    b->map_slot = slot;
    scene_close(&s);
}

static void test_detects_pending_block_without_reason(void)
{
    struct scene s;
    scene_open(&s);
    CHECK_OK(tide_retain(s.f.t, s.b));
    CHECK_OK(tide_free(s.f.t, s.b));
    struct block *b = block_of(&s, s.b);
    CHECK(b->state == BLOCK_PENDING);
    b->refs = 0;
    expect_corrupt(&s, "no reference, fence or synchronize");
    b->refs = 1;
    CHECK_OK(tide_check(s.f.t));
    CHECK_OK(tide_release(s.f.t, s.b));
    CHECK_OK(tide_malloc(s.f.t, 4096, 0, &s.b)); /* scene_close frees it again */
    scene_close(&s);
}

static void test_detects_statistics_that_disagree_with_blocks(void)
{
    struct scene s;
    scene_open(&s);
    s.h->stats.pool[TIDE_POOL_SMALL].allocated.cur += 512;
    expect_corrupt(&s, "allocated_bytes.small_pool");
    s.h->stats.pool[TIDE_POOL_SMALL].allocated.cur -= 512;
    s.h->stats.pool[TIDE_POOL_ALL].pending_blocks.cur += 1;
    expect_corrupt(&s, "pending_free_blocks.all");
    s.h->stats.pool[TIDE_POOL_ALL].pending_blocks.cur -= 1;
    s.f.t->reserved += 2 * MIB;
    expect_corrupt(&s, "reserved_bytes.all is");
    s.f.t->reserved -= 2 * MIB;
    scene_close(&s);
}

static void test_detects_segment_missing_from_segment_map(void)
{
    struct scene s;
    scene_open(&s);
    segment_map_remove(&s.f.t->segmap, s.seg);
    expect_corrupt(&s, "not found by the segment map");
    CHECK_OK(segment_map_add(&s.f.t->segmap, s.seg));
    scene_close(&s);
}

static void test_detects_idle_flag_out_of_step(void)
{
    struct scene s;
    scene_open(&s);
    s.seg->idle = true; /* it holds ACTIVE blocks: it is not wholly free */
    expect_corrupt(&s, "not wholly free but on the idle list");
    s.seg->idle = false;
    scene_close(&s);
}

/* debug:2 runs the validator after every call and aborts on the first broken invariant. */
static void test_debug_level_two_aborts_on_corruption(void)
{
    pid_t pid = fork();
    if (pid == 0) {
        struct fixture f;
        fixture_open(&f, 0, "debug:2");
        void *p;
        if (tide_malloc(f.t, 4096, 0, &p) != TIDE_OK)
            _exit(3);
        f.t->heaps[0]->stats.pool[TIDE_POOL_ALL].requested.cur += 1;
        tide_malloc(f.t, 4096, 0, &p); /* must not return */
        _exit(0);
    }
    int status = 0;
    waitpid(pid, &status, 0);
    CHECK(WIFSIGNALED(status) && WTERMSIG(status) == SIGABRT);
}

/* debug:2 on a correct program: the validator runs after every call (1,500 random ones here, frees and
 * other streams' uses among them) and finds nothing, and a failed call's message survives the check
 * that runs after it. */
static void test_debug_level_two_passes_a_correct_program(void)
{
    struct fixture f;
    fixture_open(&f, 0, "debug:2,limit:256MiB");
    void *live[32] = {0};
    uint64_t rng = 7;
    for (int step = 0; step < 1500; step++) {
        rng = rng * 6364136223846793005ull + 1442695040888963407ull;
        unsigned k = (unsigned)(rng >> 33) % 32, what = (unsigned)(rng >> 40) % 8;
        if (live[k]) {
            if (what == 0)
                CHECK_OK(tide_record_stream(f.t, live[k], 2));
            CHECK_OK(tide_free(f.t, live[k]));
            live[k] = NULL;
        } else {
            size_t size = (size_t)1 << ((rng >> 45) % 24);
            CHECK_OK(tide_malloc(f.t, size, what == 1 ? 1 : 0, &live[k]));
        }
        if (step % 500 == 499)
            CHECK_OK(tide_empty_cache(f.t, NULL));
    }
    void *p;
    CHECK_STATUS(tide_malloc(f.t, 512 * MIB, 0, &p), TIDE_ENOMEM);
    CHECK_MESSAGE("out of memory: asked 512.0 MiB");
    for (int k = 0; k < 32; k++)
        CHECK_OK(tide_free(f.t, live[k]));
    CHECK_OK(tide_empty_cache(f.t, NULL));
    fixture_close(&f);
}

int main(void)
{
    RUN(test_detects_gap_between_blocks);
    RUN(test_detects_blocks_not_reaching_segment_end);
    RUN(test_detects_unmerged_free_neighbours);
    RUN(test_detects_free_block_missing_from_index);
    RUN(test_detects_stray_block_in_index);
    RUN(test_detects_free_index_bitmap_out_of_step);
    RUN(test_detects_unknown_state);
    RUN(test_detects_active_block_missing_from_pointer_map);
    RUN(test_detects_block_with_wrong_map_slot);
    RUN(test_detects_pending_block_without_reason);
    RUN(test_detects_statistics_that_disagree_with_blocks);
    RUN(test_detects_segment_missing_from_segment_map);
    RUN(test_detects_idle_flag_out_of_step);
    RUN(test_debug_level_two_aborts_on_corruption);
    RUN(test_debug_level_two_passes_a_correct_program);
    return HARNESS_EXIT();
}

/*
 * The validator catches each invariant when it breaks. Each test corrupts exactly one thing in the
 * allocator's bookkeeping, checks that tide_check reports that problem, then repairs it and checks
 * that tide_check passes again.
 */
#include "harness.h"
#include "internal.h"
#include "hot_path.h"

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
    if (!stray) {
        scene_close(&s);
        return;
    }
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

/* Sets lvalue to bad, expects tide_check to report `words` first, and puts it back. */
#define EXPECT_CAUGHT(s, lvalue, bad, words)                                                       \
    do {                                                                                           \
        __typeof__(lvalue) kept_ = (lvalue);                                                       \
        (lvalue) = (bad);                                                                          \
        expect_corrupt(s, words);                                                                  \
        (lvalue) = kept_;                                                                          \
        CHECK_OK(tide_check((s)->f.t));                                                            \
    } while (0)

/* Each field of an ACTIVE and of a FREE block that the validator checks, broken one at a time. */
static void test_detects_each_broken_block_field(void)
{
    struct scene s;
    scene_open(&s);
    struct block *b = block_of(&s, s.b), *c = block_of(&s, s.c), *rest = c->next;
    struct segment stranger;
    memset(&stranger, 0, sizeof stranger);
    EXPECT_CAUGHT(&s, b->seg, &stranger, "does not point back to its segment");
    EXPECT_CAUGHT(&s, b->size, b->size + 1, "not a positive multiple of 512");
    EXPECT_CAUGHT(&s, rest->prev, b, "its next neighbour does not link back to it");
    EXPECT_CAUGHT(&s, b->fences, 1, "has fences or a synchronize owed");
    EXPECT_CAUGHT(&s, b->needs_sync, true, "has fences or a synchronize owed");
    EXPECT_CAUGHT(&s, b->requested, 0, "records a request of 0");
    EXPECT_CAUGHT(&s, b->requested, b->size + 1, "records a request of 4097");
    EXPECT_CAUGHT(&s, rest->refs, 2, "still has 2 references");
    EXPECT_CAUGHT(&s, rest->needs_sync, true, "or a synchronize owed");
    EXPECT_CAUGHT(&s, rest->nuses, 1, "still records 1 stream uses");
    EXPECT_CAUGHT(&s, rest->requested, 100, "or a request of 100 bytes");
    CHECK_OK(ptr_map_insert(&s.h->map, rest));
    expect_corrupt(&s, "is still in the pointer map");
    ptr_map_remove(&s.h->map, rest);
    scene_close(&s);
}

/* The states a forged checkpoint once left (tide_pool_restore refuses those now): a block whose size
 * wraps past 2^64 while the blocks still tile their segment modulo 2^64 and the statistics add up
 * modulo 2^64, a block smaller than its guards, and statistics beyond what is reserved. */
static void test_detects_what_a_forged_checkpoint_left(void)
{
    struct scene s;
    scene_open(&s);
    struct block *c = block_of(&s, s.c), *rest = c->next;
    struct free_index *fi = heap_free_index(s.h, s.seg->pool);
    size_t csize = c->size, rsize = rest->size;
    uintptr_t raddr = rest->addr;
    /* c ends 512 bytes before it starts, where rest now starts; the counters follow, as they did. */
    int64_t grown = (int64_t)((size_t)0 - TIDE_UNIT - csize);
    free_index_remove(fi, rest);
    c->size = (size_t)0 - TIDE_UNIT;
    rest->addr = c->addr - TIDE_UNIT;
    rest->size = s.seg->base + s.seg->size - rest->addr;
    free_index_insert(fi, rest);
    s.h->stats.pool[TIDE_POOL_ALL].allocated.cur += grown;
    s.h->stats.pool[TIDE_POOL_SMALL].allocated.cur += grown;
    expect_corrupt(&s, "does not lie inside its segment");
    s.h->stats.pool[TIDE_POOL_ALL].allocated.cur -= grown;
    s.h->stats.pool[TIDE_POOL_SMALL].allocated.cur -= grown;
    free_index_remove(fi, rest);
    c->size = csize;
    rest->addr = raddr;
    rest->size = rsize;
    free_index_insert(fi, rest);
    CHECK_OK(tide_check(s.f.t));
    /* As under guard:True with 4096-byte guards: each 4096-byte block is too small for them. */
    EXPECT_CAUGHT(&s, s.f.t->guard, 4096, "smaller than its two guards of 4096 bytes");
    struct pool_stats *all = &s.h->stats.pool[TIDE_POOL_ALL];
    EXPECT_CAUGHT(&s, all->allocated.cur, all->reserved.cur + 512, "exceed reserved_bytes");
    EXPECT_CAUGHT(&s, all->allocated.cur, INT64_MIN + 4096, "exceed reserved_bytes");
    scene_close(&s);
}

/* The segment's own fields, broken one at a time. */
static void test_detects_each_broken_segment_field(void)
{
    struct scene s;
    scene_open(&s);
    EXPECT_CAUGHT(&s, s.seg->size, s.seg->size + TIDE_UNIT, "not a multiple of 2 MiB");
    EXPECT_CAUGHT(&s, s.seg->first, block_of(&s, s.b), "its first block does not start at its base");
    EXPECT_CAUGHT(&s, s.seg->busy, s.seg->busy + 1, "counts 4 blocks that are not FREE, but holds 3");
    atomic_store(&s.seg->heap, NULL);
    expect_corrupt(&s, "on the list of a heap it does not name");
    atomic_store(&s.seg->heap, s.h);
    scene_close(&s);
}

/* A block list, and a segment list, that loop back on themselves: the walks still end. */
static void test_walks_end_on_looping_lists(void)
{
    struct scene s;
    scene_open(&s);
    struct block *c = block_of(&s, s.c);
    struct block *after = c->next;
    size_t size = c->size;
    c->next = c;
    c->size = 0; /* so the addresses keep agreeing and only the loop guard stops the walk */
    CHECK_STATUS(tide_check(s.f.t), TIDE_ECORRUPT);
    CHECK_MESSAGE("has size 0");
    c->next = after;
    c->size = size;
    CHECK_OK(tide_check(s.f.t));
    /* The segment list too. */
    struct segment *next = s.seg->next;
    s.seg->next = s.seg;
    expect_corrupt(&s, "its segment list holds more than the 1 segments counted (a loop?)");
    s.seg->next = next;
    scene_close(&s);
}

/* Expandable segments: a run that names another heap, and an arena's list of runs that loops. */
static void test_detects_broken_runs(void)
{
    struct fixture f;
    fixture_open(&f, 0, "expandable_segments:True");
    void *p;
    CHECK_OK(tide_malloc(f.t, 3 * MIB, 0, &p));
    struct heap *h = f.t->heaps[0];
    struct arena *a = h->arenas[POOL_LARGE];
    CHECK(a != NULL && a->runs != NULL && a->runs->run_next == NULL);
    if (a && a->runs) {
        struct segment *run = a->runs;
        run->run_next = run;
        CHECK_STATUS(tide_check(f.t), TIDE_ECORRUPT);
        CHECK_MESSAGE("are not linked both ways"); /* the first problem; the walk ends all the same */
        run->run_next = NULL;
        CHECK_OK(tide_check(f.t));
        struct arena stranger = *a;
        run->arena = &stranger;
        CHECK_STATUS(tide_check(f.t), TIDE_ECORRUPT);
        CHECK_MESSAGE("names another arena, pool or heap");
        run->arena = a;
    }
    CHECK_OK(tide_check(f.t));
    CHECK_OK(tide_free(f.t, p));
    fixture_close(&f);
}

/* The heap's lists: pending and idle (each walk ends even where a list loops). */
static void test_detects_broken_heap_lists(void)
{
    struct scene s;
    scene_open(&s);
    /* An ACTIVE block on the pending list. */
    struct block *a = block_of(&s, s.a);
    s.h->pending_head = a;
    expect_corrupt(&s, "is on the pending list but not PENDING");
    s.h->pending_head = NULL;
    a->link_next = NULL;
    a->link_pprev = NULL;
    CHECK_OK(tide_check(s.f.t));

    /* A PENDING block missing from the pending list. */
    CHECK_OK(tide_retain(s.f.t, s.b));
    CHECK_OK(tide_free(s.f.t, s.b));
    struct block *pending = s.h->pending_head;
    CHECK(pending && pending->state == BLOCK_PENDING);
    EXPECT_CAUGHT(&s, s.h->pending_head, NULL, "0 blocks on the pending list, the walk found 1 PENDING");
    CHECK_OK(tide_release(s.f.t, s.b));
    CHECK_OK(tide_malloc(s.f.t, 4096, 0, &s.b));

    /* Segments on the idle list (stand-ins, on no heap's segment list): one not marked idle, and
     * two out of order. */
    struct segment one, two;
    memset(&one, 0, sizeof one);
    memset(&two, 0, sizeof two);
    CHECK(s.h->idle_head == NULL);
    one.idle_next = &two;
    two.idle_prev = &one;
    s.h->idle_head = &one;
    s.h->idle_tail = &two;
    one.idle = false;
    two.idle = true;
    expect_corrupt(&s, "is on the idle list but not marked idle");
    one.idle = true;
    one.idle_since = 5;
    two.idle_since = 1;
    expect_corrupt(&s, "is not oldest first");
    two.idle_since = 5; /* in order now, but strangers: the stream has one segment, not wholly free */
    expect_corrupt(&s, "more than 1 segments on the idle list, the walk found 0 wholly free");
    one.idle_next = &one; /* a loop: the walk still ends */
    expect_corrupt(&s, "more than 1 segments on the idle list, the walk found 0 wholly free");
    s.h->idle_head = s.h->idle_tail = NULL;
    CHECK_OK(tide_check(s.f.t));
    scene_close(&s);
}

/* A fence queued for a block that is not PENDING, and a PENDING block counting a fence no queue has. */
static void test_detects_fences_out_of_step(void)
{
    struct scene s;
    scene_open(&s);
    tide_stream other;
    CHECK_OK(tide_sim_stream_create(s.f.sim, &other));
    struct gate gate;
    gate_init(&gate);
    struct fill_kernel k = {&gate, s.b, 16, 1, NULL};
    CHECK_OK(tide_record_stream(s.f.t, s.b, other));
    CHECK_OK(tide_sim_enqueue(s.f.sim, other, 0, fill_kernel_run, &k));
    CHECK_OK(tide_free(s.f.t, s.b)); /* PENDING until the kernel on `other` is done */
    struct block *pending = s.h->pending_head;
    CHECK(pending && pending->fences == 1 && s.h->nqueues >= 1);
    struct fence_queue *q = NULL;
    for (uint32_t i = 0; i < s.h->nqueues; i++)
        if (s.h->queues[i].count)
            q = &s.h->queues[i];
    CHECK(q != NULL);
    if (q) {
        EXPECT_CAUGHT(&s, q->ring[q->head].block, block_of(&s, s.a), "a fence waits for block");
        EXPECT_CAUGHT(&s, pending->fences, 2, "1 fences queued but PENDING blocks count 2");
    }
    gate_open(&gate);
    CHECK_OK(tide_sim_stream_synchronize(s.f.sim, other));
    CHECK_OK(tide_malloc(s.f.t, 4096, 0, &s.b)); /* drains the freed one; scene_close frees this */
    gate_destroy(&gate);
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
    CHECK_MESSAGE("out of memory. Asked 512.0 MiB");
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
    RUN(test_detects_each_broken_block_field);
    RUN(test_detects_what_a_forged_checkpoint_left);
    RUN(test_detects_each_broken_segment_field);
    RUN(test_walks_end_on_looping_lists);
    RUN(test_detects_broken_runs);
    RUN(test_detects_broken_heap_lists);
    RUN(test_detects_fences_out_of_step);
    RUN(test_debug_level_two_aborts_on_corruption);
    RUN(test_debug_level_two_passes_a_correct_program);
    return HARNESS_EXIT();
}

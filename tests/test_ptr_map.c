/*
 * The pointer map on its own: every block inserted is found at its address and nowhere else, each
 * block's map_slot stays true as removals shift entries back, and the table stays as sparse as
 * ptr_map.c promises: at most a sixteenth full while it is small, an eighth once it holds more slots
 * than SPARSE_SLOTS (4096 live blocks), so that a process with many live blocks does not pay twice the
 * host memory for nothing.
 */
#include "harness.h"
#include "internal.h"

#include <stdlib.h>
#include <string.h>

#define BLOCKS 20000

static uint64_t rng_state = 0x243F6A8885A308D3ull;

/* Whether every mapped block sits in the slot it remembers, and the count is right. */
static bool slots_true(const struct ptr_map *m)
{
    size_t n = 0;
    for (size_t i = 0; i < m->cap; i++)
        if (m->slots[i]) {
            n++;
            if (m->slots[i]->map_slot != i)
                return false;
        }
    return n == m->count;
}

/* The most live blocks the map may hold at its capacity (see ptr_map.c). */
static size_t most_allowed(size_t cap) { return cap < ((size_t)1 << 16) ? cap / 16 : cap / 8; }

static void test_insert_find_remove(void)
{
    struct block *blocks = aligned_alloc(_Alignof(struct block), BLOCKS * sizeof *blocks);
    CHECK(blocks != NULL);
    if (!blocks)
        return;
    memset(blocks, 0, BLOCKS * sizeof *blocks);
    struct ptr_map m = {0};
    unsigned too_full = 0, missing = 0, wrong = 0;
    size_t largest_small_cap = 0;
    for (size_t i = 0; i < BLOCKS; i++) {
        /* Distinct addresses, 512-byte aligned: half of them next to each other, as blocks split from
         * one segment are; half spread far apart (an odd multiplier permutes 32-bit numbers). */
        uint32_t spread = (uint32_t)i * 2654435761u;
        blocks[i].addr = i % 2 ? ((uintptr_t)1 << 40) + i * 512 : ((uintptr_t)1 << 45) + (uintptr_t)spread * 512;
        CHECK_OK(ptr_map_insert(&m, &blocks[i]));
        too_full += m.count > most_allowed(m.cap);
        if (m.cap < ((size_t)1 << 16))
            largest_small_cap = m.cap;
    }
    CHECK(too_full == 0);
    CHECK(largest_small_cap == ((size_t)1 << 15)); /* the last cap that stays a sixteenth full */
    /* past SPARSE_SLOTS, an eighth: 20,000 blocks fit 262,144 slots, not 524,288 */
    CHECK(m.cap == ((size_t)1 << 18));
    CHECK(slots_true(&m));
    for (size_t i = 0; i < BLOCKS; i++)
        missing += ptr_map_get(&m, blocks[i].addr) != &blocks[i];
    CHECK(missing == 0);
    /* Remove every other block, in a shuffled order; the rest are still found, the removed are not. */
    size_t *order = malloc(BLOCKS / 2 * sizeof *order);
    for (size_t i = 0; i < BLOCKS / 2; i++)
        order[i] = 2 * i;
    for (size_t i = BLOCKS / 2 - 1; i > 0; i--) {
        size_t j = rng_next(&rng_state) % (i + 1), x = order[i];
        order[i] = order[j];
        order[j] = x;
    }
    for (size_t i = 0; i < BLOCKS / 2; i++)
        ptr_map_remove(&m, &blocks[order[i]]);
    CHECK(m.count == BLOCKS / 2);
    CHECK(slots_true(&m));
    for (size_t i = 0; i < BLOCKS; i++) {
        struct block *found = ptr_map_get(&m, blocks[i].addr);
        if (i % 2)
            missing += found != &blocks[i];
        else
            wrong += found != NULL;
    }
    CHECK(missing == 0);
    CHECK(wrong == 0);
    CHECK(ptr_map_get(&m, 512) == NULL); /* an address never mapped */
    free(order);
    ptr_map_free(&m);
    free(blocks);
}

int main(void)
{
    RUN(test_insert_find_remove);
    return HARNESS_EXIT();
}

/*
 * The pointer map: device address -> the block users hold there (ACTIVE or PENDING), so that tide_free,
 * tide_retain and tide_release find a block in O(1). Open addressing with linear probing; removal shifts
 * later entries back, so there are no tombstones to slow lookups down over a long run.
 *
 * Every probe loop's exit is a branch the CPU mispredicts when there was a collision, and a lookup, an
 * insert and a removal run on every allocation and free. So the map is kept at most a sixteenth full (at
 * half, those exits were a tenth of all mispredicted branches of a replay; at a quarter, a sixth of
 * those of the random micro-benchmark; a sixteenth instead of an eighth made the small random pattern's
 * alloc+free pairs 3-5% faster on the H200), 128 bytes of slots
 * per live block. Past SPARSE_SLOTS slots (4096 live blocks) an eighth full: there the slots no longer
 * fit a core's caches, and a sparser table would add cache misses and host memory (64 bytes per live
 * block instead of 128) rather than save mispredictions. Each mapped block remembers its slot
 * (map_slot, kept true as entries move), so that removing it needs no search.
 * (Markers left by removals instead of the backward shift were tried: rebuilding the table to clear
 * them cost more mispredictions than the shift.)
 */
#include "internal.h"

#include <stdlib.h>

static inline size_t slot_of(uintptr_t addr, size_t cap)
{
    /* Block addresses are multiples of 512: drop those bits, then spread with a Fibonacci hash. */
    uint64_t h = ((uint64_t)addr >> 9) * 0x9E3779B97F4A7C15ull;
    return (size_t)(h >> 32) & (cap - 1);
}

#define SPARSE_SLOTS ((size_t)1 << 16)

static tide_status grow(struct ptr_map *m)
{
    size_t cap = m->cap ? m->cap * 2 : 256;
    struct block **slots = calloc(cap, sizeof *slots);
    if (!slots)
        return tide__fail(TIDE_EHOSTMEM, "out of host memory growing the pointer map to %zu entries",
                          cap);
    for (size_t i = 0; i < m->cap; i++) {
        struct block *b = m->slots[i];
        if (!b)
            continue;
        size_t j = slot_of(b->addr, cap);
        while (slots[j])
            j = (j + 1) & (cap - 1);
        slots[j] = b;
        b->map_slot = (uint32_t)j;
    }
    free(m->slots);
    m->slots = slots;
    m->cap = cap;
    m->grow_at = cap / (cap < SPARSE_SLOTS ? 16 : 8);
    return TIDE_OK;
}

tide_status ptr_map_insert(struct ptr_map *m, struct block *b)
{
    if (TIDE_UNLIKELY(m->count >= m->grow_at)) {
        tide_status s = grow(m);
        if (s != TIDE_OK)
            return s;
    }
    size_t i = slot_of(b->addr, m->cap);
    while (TIDE_UNLIKELY(m->slots[i] != NULL)) /* the table is sparse: the home slot, mostly */
        i = (i + 1) & (m->cap - 1);
    m->slots[i] = b;
    b->map_slot = (uint32_t)i;
    m->count++;
    return TIDE_OK;
}

struct block *ptr_map_get(const struct ptr_map *m, uintptr_t addr)
{
    if (!m->cap)
        return NULL;
    size_t i = slot_of(addr, m->cap);
    for (struct block *b; (b = m->slots[i]); i = (i + 1) & (m->cap - 1))
        if (TIDE_LIKELY(b->addr == addr)) /* mostly the first slot looked at */
            return b;
    return NULL;
}

void ptr_map_remove(struct ptr_map *m, struct block *b)
{
    size_t mask = m->cap - 1;
    size_t i = b->map_slot;
    /* Backward-shift: move each later entry of the run into the hole if its home slot allows it. */
    size_t hole = i;
    for (size_t j = (i + 1) & mask; TIDE_UNLIKELY(m->slots[j] != NULL); j = (j + 1) & mask) {
        size_t home = slot_of(m->slots[j]->addr, m->cap);
        /* The entry at j may move to hole unless its home lies cyclically in (hole, j]. */
        bool home_after_hole = hole <= j ? (home > hole && home <= j) : (home > hole || home <= j);
        if (!home_after_hole) {
            m->slots[hole] = m->slots[j];
            m->slots[hole]->map_slot = (uint32_t)hole;
            hole = j;
        }
    }
    m->slots[hole] = NULL;
    m->count--;
}

void ptr_map_free(struct ptr_map *m)
{
    free(m->slots);
    m->slots = NULL;
    m->cap = m->count = m->grow_at = 0;
}

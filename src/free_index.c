/*
 * The free index: a two-level segregated fit (TLSF) over one pool's FREE blocks.
 *
 * A size in 512-byte units u maps to a class: below 32 units each unit count is its own class (first
 * level 0); above, the first level is the power of two and the second splits it into 32 equal ranges, so
 * a class is at most 1/32 (3%) wide. Two bitmaps say which classes hold blocks, so the next class that
 * can serve a request is found with two bit scans, whatever the number of blocks.
 *
 * Each class's list ends at the index's own end block rather than at NULL, so linking and unlinking
 * never test for a neighbour: whether a class is empty is data that a branch predictor cannot learn,
 * and these run several times per allocation and free.
 */
#include "internal.h"

#include <string.h>

/* The top set bit's position. Written with ^ rather than 63 - clz: the same value for v != 0, but GCC
 * then emits a bare bsr, where 63 - clz had it compute clz and subtract again at some call sites (8
 * instructions per alloc+free pair of the same-size pattern, under callgrind). */
static inline unsigned msb64(uint64_t v) { return 63u ^ (unsigned)__builtin_clzll(v); }

static void class_of(size_t size, unsigned *fl, unsigned *sl)
{
    /* Without a branch on u < FI_SL_COUNT: small and larger sizes alternate at random in a mixed
     * workload, and that branch was a quarter of the small random pattern's mispredictions. Setting
     * bit FI_SL_BITS - 1 makes the first level 0 below FI_SL_COUNT units; setting bit FI_SL_BITS makes
     * the shift 0 there, and the mask then keeps u itself (above, it drops the leading bit). */
    uint64_t u = size / TIDE_UNIT;
    unsigned f = msb64(u | (FI_SL_COUNT >> 1));
    unsigned shift = msb64(u | FI_SL_COUNT) - FI_SL_BITS;
    *fl = f - (FI_SL_BITS - 1);
    *sl = (unsigned)(u >> shift) & (FI_SL_COUNT - 1); /* *fl < FI_FL_COUNT for any size: types.h */
}

void free_index_init(struct free_index *fi, struct block *end)
{
    memset(fi, 0, sizeof *fi);
    fi->end = end;
    for (unsigned fl = 0; fl < FI_FL_COUNT; fl++)
        for (unsigned sl = 0; sl < FI_SL_COUNT; sl++)
            fi->heads[fl][sl] = end;
}

/* Whether b is on the list of class (fl, sl): for assertions (a walk). */
static bool filed_in_class(const struct free_index *fi, unsigned fl, unsigned sl, const struct block *b)
{
    for (const struct block *x = fi->heads[fl][sl]; x != fi->end; x = x->link_next)
        if (x == b)
            return true;
    return false;
}

void free_index_insert(struct free_index *fi, struct block *b)
{
    TIDE_ASSERT(b->state == BLOCK_FREE && b != fi->end);
    unsigned fl, sl;
    class_of(b->size, &fl, &sl);
    TIDE_ASSERT_EXPENSIVE(!filed_in_class(fi, fl, sl, b) && !filed_in_class(fi, b->fl, b->sl, b));
    b->fl = (uint8_t)fl;
    b->sl = (uint8_t)sl;
    struct block **head = &fi->heads[fl][sl];
    b->link_next = *head;
    b->link_pprev = head;
    (*head)->link_pprev = &b->link_next; /* the end block's is written and never read */
    *head = b;
    fi->sl_bitmap[fl] |= 1u << sl;
    fi->fl_bitmap |= 1ull << fl;
}

void free_index_remove(struct free_index *fi, struct block *b)
{
    unsigned fl = b->fl, sl = b->sl; /* as filed: the size may have changed since (a merge) */
    TIDE_ASSERT(b->state == BLOCK_FREE && b->link_pprev != NULL && *b->link_pprev == b);
    TIDE_ASSERT_EXPENSIVE(filed_in_class(fi, fl, sl, b));
    *b->link_pprev = b->link_next;
    b->link_next->link_pprev = b->link_pprev;
    b->link_next = NULL;
    b->link_pprev = NULL;
    /* Whether the class emptied is data too: clear its bits without branching. */
    uint32_t emptied = fi->heads[fl][sl] == fi->end;
    fi->sl_bitmap[fl] &= ~(emptied << sl);
    fi->fl_bitmap &= ~((uint64_t)(fi->sl_bitmap[fl] == 0) << fl);
}

/* The smallest request a block of a segment reserved for a request of made_for bytes serves with room to
 * spare while the rules hold (docs/design.md, Placement):
 * - A segment made for m bytes serves requests of m >> share_shift bytes or more. A large segment is
 *   given back only when none of its blocks is in use; a small block placed in one of its free blocks
 *   keeps all of it reserved, where a segment of the small block's own size costs only that size. So a
 *   segment reserved for a 1 GiB tensor serves requests of 32 MiB or more, and one reserved for a 2 MiB
 *   request (in a 20 MiB segment) serves every large request.
 * - Under max_split_size_mb, a segment reserved for a request of that size or more serves no smaller one:
 *   PyTorch's rule, by segment rather than by block, so that a block of such a segment may be split among
 *   large requests, and a segment reserved for a request just below the size, which its granules took
 *   above it, still serves that request.
 * Both rules are soft: pressure.c lifts them where keeping to them would raise the program's peak. */
const struct fit_rules fit_any = {.lifted = true};

bool fit_below_share(const struct fit_rules *r, const struct segment *seg, size_t size)
{
    return size < seg->size >> r->share_shift;
}

size_t fit_serves_from(const struct fit_rules *r, size_t made_for)
{
    size_t share = made_for >> r->share_shift;
    size_t oversize = made_for >= r->oversize_min ? r->oversize_min : 0;
    return share > oversize ? share : oversize;
}

/* Whether a block of seg may serve a request of size bytes that it holds with room to spare. The last
 * term is read only where the bound refuses, which the fast path's fits rarely meet. */
static inline bool acceptable_in(const struct segment *seg, size_t size, const struct fit_rules *r)
{
    return r->lifted || size >= seg->serves_from || (r->lifted_in_harbours && seg->harbours_small);
}

/* The first class above (fl, sl) that holds blocks, or false. */
static inline bool next_class_branching(const struct free_index *fi, unsigned fl, unsigned sl, unsigned *ofl,
                                        unsigned *osl)
{
    uint32_t sl_map = fi->sl_bitmap[fl] & ((~0u << sl) << 1);
    if (sl_map) {
        *ofl = fl;
        *osl = (unsigned)__builtin_ctz(sl_map);
        return true;
    }
    uint64_t fl_map = fi->fl_bitmap & ((~0ull << fl) << 1);
    if (!fl_map)
        return false;
    *ofl = (unsigned)__builtin_ctzll(fl_map);
    *osl = (unsigned)__builtin_ctz(fi->sl_bitmap[*ofl]);
    return true;
}

/* The same, without a branch on whether that class lies in the same first level, for the search of
 * every allocation: in a random workload it does about half the time, and that branch was the free
 * index's most mispredicted. Both answers are computed and one kept (on the H200, 3-5% faster alloc+free
 * pairs of the random patterns). The sentinel bits keep each bit
 * scan's input nonzero, and are only ever the answer when the return value says there is none. Where
 * the answer repeats call after call (free_index_would_find, on the parked block's size), the branch
 * is predicted and next_class_branching costs less. */
static inline bool next_class(const struct free_index *fi, unsigned fl, unsigned sl, unsigned *ofl,
                              unsigned *osl)
{
    uint32_t sl_map = fi->sl_bitmap[fl] & ((~0u << sl) << 1);
    uint64_t fl_map = fi->fl_bitmap & ((~0ull << fl) << 1);
    unsigned up_fl = (unsigned)__builtin_ctzll(fl_map | (1ull << (FI_FL_COUNT - 1)));
    unsigned up_sl = (unsigned)__builtin_ctz(fi->sl_bitmap[up_fl] | (1u << (FI_SL_COUNT - 1)));
    unsigned same_sl = (unsigned)__builtin_ctz(sl_map | (1u << (FI_SL_COUNT - 1)));
    unsigned same = -(unsigned)(sl_map != 0); /* all ones or zero: a select GCC leaves without a branch */
    *ofl = (fl & same) | (up_fl & ~same);
    *osl = (same_sl & same) | (up_sl & ~same);
    return (sl_map | fl_map) != 0;
}

/* Classes looked at above the request's own when the first holds no block the rule accepts (a bound on
 * the search; past it the request grows, or pressure.c retries without the rule). */
#define FIND_CLASSES 4

struct block *free_index_find(const struct free_index *fi, size_t size, const struct fit_rules *rules)
{
    unsigned fl, sl;
    class_of(size, &fl, &sl);

    /* The request's own class holds blocks both smaller and larger than it: take the smallest that
     * fits among the first few. */
    struct block *best = NULL;
    unsigned seen = 0;
    for (struct block *b = fi->heads[fl][sl]; b != fi->end && seen < TIDE_FIT_SCAN;
         b = b->link_next, seen++) {
        if (b->size < size)
            continue;
        if (b->size == size)
            return b;
        if (!best || b->size < best->size)
            best = b;
    }
    /* The rules are asked of the winner alone (one segment read); if they refuse it, which is rare,
     * the scan again among the blocks they accept. */
    if (best && !acceptable_in(best->seg, size, rules)) {
        best = NULL;
        seen = 0;
        for (struct block *b = fi->heads[fl][sl]; b != fi->end && seen < TIDE_FIT_SCAN; b = b->link_next, seen++)
            if (b->size > size && (!best || b->size < best->size) && acceptable_in(b->seg, size, rules))
                best = b;
    }
    if (best)
        return best;

    /* Every block of a higher class fits; the lowest such class wastes least. */
    unsigned nfl, nsl;
    if (!next_class(fi, fl, sl, &nfl, &nsl))
        return NULL;
    for (unsigned classes = 0;;) {
        seen = 0;
        for (struct block *b = fi->heads[nfl][nsl]; b != fi->end && seen < TIDE_FIT_SCAN;
             b = b->link_next, seen++)
            if (acceptable_in(b->seg, size, rules))
                return b;
        /* Refused (rare): a few classes more, since a segment reserved for a smaller request may lie
         * higher up than one reserved for a larger. */
        if (++classes == FIND_CLASSES || !next_class_branching(fi, nfl, nsl, &nfl, &nsl))
            return NULL;
    }
}

/* free_index_find's decision, taken on the index as a merge would leave it: the merged block first in
 * its class, `absorbed` gone. Each step mirrors a step of free_index_find. */
bool free_index_would_find(const struct free_index *fi, size_t size, const struct fit_rules *rules,
                           const struct segment *merged_seg, size_t merged_size, const struct block *absorbed)
{
    /* An exact fit is always acceptable, and the search returns the first exact fit it meets in the
     * request's own class, where the merged block would be first: the common case (a block freed and
     * asked for again at its size, with nothing FREE after it) needs no class computed. */
    if (merged_size == size)
        return true;
    unsigned fl, sl, mfl, msl;
    class_of(size, &fl, &sl);
    class_of(merged_size, &mfl, &msl);

    /* The request's own class: the merged block would be its first (and is larger than asked: the
     * exact fit returned above). */
    size_t best = 0;
    bool best_is_merged = false;
    unsigned seen = 0;
    if (mfl == fl && msl == sl) {
        seen = 1;
        if (acceptable_in(merged_seg, size, rules)) {
            best = merged_size;
            best_is_merged = true;
        }
    }
    for (struct block *b = fi->heads[fl][sl]; b != fi->end && seen < TIDE_FIT_SCAN; b = b->link_next) {
        if (b == absorbed)
            continue;
        seen++;
        if (b->size < size)
            continue;
        if (b->size == size)
            return false;
        if ((!best || b->size < best) && acceptable_in(b->seg, size, rules)) {
            best = b->size;
            best_is_merged = false;
        }
    }
    if (best)
        return best_is_merged;

    /* The next class that holds blocks, the absorbed block's class counting as empty if it was its
     * only block; the merged block's class if that comes first. Its first block is then the merged
     * one. */
    bool above = mfl > fl || (mfl == fl && msl > sl);
    if (!above)
        return false;
    unsigned cfl, csl;
    bool found = next_class_branching(fi, fl, sl, &cfl, &csl);
    while (found && fi->heads[cfl][csl] == absorbed && absorbed->link_next == fi->end)
        found = next_class_branching(fi, cfl, csl, &cfl, &csl);
    if (found && (cfl < mfl || (cfl == mfl && csl < msl)))
        return false;
    return acceptable_in(merged_seg, size, rules);
}

void free_index_to_front(struct free_index *fi, struct block *b)
{
    struct block **head = &fi->heads[b->fl][b->sl];
    if (*head == b)
        return;
    *b->link_pprev = b->link_next;
    b->link_next->link_pprev = b->link_pprev;
    b->link_next = *head;
    b->link_pprev = head;
    (*head)->link_pprev = &b->link_next;
    *head = b;
}

bool free_index_contains(const struct free_index *fi, const struct block *b)
{
    unsigned fl, sl;
    class_of(b->size, &fl, &sl);
    for (const struct block *x = fi->heads[fl][sl]; x != fi->end; x = x->link_next)
        if (x == b)
            return true;
    return false;
}

size_t free_index_count(const struct free_index *fi, size_t limit, bool *bitmaps_agree)
{
    /* Which classes hold blocks, read off the heads first (a tight loop over them), then compared with
     * the bitmaps whole, and only the classes that hold blocks walked: tide_check runs this for every
     * pool of every heap, and under debug:2 after every call. */
    size_t n = 0;
    *bitmaps_agree = true;
    for (unsigned fl = 0; fl < FI_FL_COUNT; fl++) {
        uint32_t filled = 0;
        for (unsigned sl = 0; sl < FI_SL_COUNT; sl++)
            filled |= (uint32_t)(fi->heads[fl][sl] != fi->end) << sl;
        if (filled != fi->sl_bitmap[fl] || (filled != 0) != ((fi->fl_bitmap >> fl) & 1u))
            *bitmaps_agree = false;
        for (uint32_t rest = filled; rest; rest &= rest - 1) {
            unsigned sl = (unsigned)__builtin_ctz(rest);
            for (const struct block *b = fi->heads[fl][sl]; b != fi->end && n <= limit; b = b->link_next)
                n++;
        }
    }
    return n;
}

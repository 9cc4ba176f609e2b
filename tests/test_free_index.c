/*
 * The free index on its own: the size classes a block is filed under, and what a search returns.
 *
 * The class of a size is computed without a branch (free_index.c), so these tests pin down what it
 * must be: below FI_SL_COUNT units every unit count is its own class on level 0; above, classes rise
 * with the size, never fall, and each is at most 1/FI_SL_COUNT of its lower bound wide. A search never
 * returns a block smaller than asked, finds a lone block from every size at or below its own, and
 * takes the block of the lowest class that can serve, unless the fit rules keep that block's segment
 * for larger requests.
 */
#include "harness.h"
#include "internal.h"
#include "stats_events.h"

#include <stdlib.h>
#include <string.h>

/* A segment reserved for no request in particular (a run of pages): its blocks serve any. */
static struct segment unmade;
static const struct fit_rules any_fit = {.lifted = true};

static struct block *block_of(size_t size)
{
    struct block *b = aligned_alloc(_Alignof(struct block), sizeof *b);
    memset(b, 0, sizeof *b);
    b->size = size;
    b->state = BLOCK_FREE;
    b->seg = &unmade;
    return b;
}

struct index {
    struct free_index fi;
    struct block *end;
};

static void index_open(struct index *x)
{
    x->end = block_of(0);
    free_index_init(&x->fi, x->end);
}

static void index_close(struct index *x) { free(x->end); }

static bool index_is_empty(const struct index *x)
{
    bool bitmaps_agree;
    return free_index_count(&x->fi, 0, &bitmaps_agree) == 0 && bitmaps_agree && x->fi.fl_bitmap == 0;
}

/* The class a size is filed under, as free_index_insert writes it into the block. One index and one
 * block serve every call (a million of them). */
static struct index probe;
static struct block *probe_block;

static void class_of_size(size_t size, unsigned *fl, unsigned *sl)
{
    if (!probe_block) {
        index_open(&probe);
        probe_block = block_of(0);
    }
    probe_block->size = size;
    free_index_insert(&probe.fi, probe_block);
    *fl = probe_block->fl;
    *sl = probe_block->sl;
    free_index_remove(&probe.fi, probe_block);
}

/* Unit counts from 1 to past 2^20 one by one where classes are narrow, then a spread of larger ones
 * (up to 2^40 units: 512 TiB). */
static uint64_t next_units(uint64_t u)
{
    if (u < (1u << 20))
        return u + 1;
    return u + u / 97 + 1;
}

static void test_small_sizes_are_their_own_class(void)
{
    for (uint64_t u = 1; u < FI_SL_COUNT; u++) {
        unsigned fl, sl;
        class_of_size(u * TIDE_UNIT, &fl, &sl);
        CHECK(fl == 0 && sl == u);
    }
}

static void test_classes_rise_with_size_and_are_narrow(void)
{
    unsigned last_fl = 0, last_sl = 0, bad_order = 0, bad_width = 0;
    uint64_t class_low = 1; /* the smallest unit count seen in the current class */
    for (uint64_t u = 1; u < ((uint64_t)1 << 40); u = next_units(u)) {
        unsigned fl, sl;
        class_of_size(u * TIDE_UNIT, &fl, &sl);
        if (fl < last_fl || (fl == last_fl && sl < last_sl))
            bad_order++;
        if (fl != last_fl || sl != last_sl) {
            last_fl = fl;
            last_sl = sl;
            class_low = u;
        }
        /* On level 0 a class is one unit count; above, at most 1/32 of its lower bound wide. */
        if (fl == 0 ? u != class_low : (u - class_low) * FI_SL_COUNT > class_low)
            bad_width++;
        CHECK(fl < FI_FL_COUNT && sl < FI_SL_COUNT);
    }
    CHECK(bad_order == 0);
    CHECK(bad_width == 0);
}

/* The largest size there can be is filed in the last first level: the table has exactly the levels a
 * size_t needs, and class_of has no bound check to fall back on. */
static void test_the_largest_size_fits_the_table(void)
{
    unsigned fl, sl;
    class_of_size(SIZE_MAX / TIDE_UNIT * TIDE_UNIT, &fl, &sl);
    CHECK(fl == FI_FL_COUNT - 1 && sl == FI_SL_COUNT - 1);
    class_of_size((size_t)1 << 63, &fl, &sl);
    CHECK(fl == FI_FL_COUNT - 1 && sl == 0);
}

static void test_a_lone_block_serves_every_size_up_to_its_own(void)
{
    unsigned missed = 0, too_small = 0;
    for (uint64_t u = 1; u < ((uint64_t)1 << 30); u = next_units(u) + (u >> 4)) {
        struct index x;
        index_open(&x);
        size_t size = u * TIDE_UNIT;
        struct block *b = block_of(size);
        free_index_insert(&x.fi, b);
        CHECK(free_index_contains(&x.fi, b));
        for (uint64_t ask = 1; ask <= u; ask = ask < 64 ? ask + 1 : ask + ask / 7)
            missed += free_index_find(&x.fi, ask * TIDE_UNIT, &any_fit) != b;
        missed += free_index_find(&x.fi, size, &any_fit) != b;
        too_small += free_index_find(&x.fi, size + TIDE_UNIT, &any_fit) != NULL;
        free_index_remove(&x.fi, b);
        CHECK(index_is_empty(&x));
        free(b);
        index_close(&x);
    }
    CHECK(missed == 0);
    CHECK(too_small == 0);
}

static void test_search_takes_the_lowest_class_that_serves(void)
{
    /* Blocks of 40, 100, 1000 and 5000 units: a request is served from the smallest of them that
     * is at least as large. */
    const uint64_t units[] = {5000, 40, 1000, 100};
    struct index x;
    index_open(&x);
    struct block *blocks[4];
    for (int i = 0; i < 4; i++) {
        blocks[i] = block_of(units[i] * TIDE_UNIT);
        free_index_insert(&x.fi, blocks[i]);
    }
    CHECK(free_index_find(&x.fi, 1 * TIDE_UNIT, &any_fit) == blocks[1]);
    CHECK(free_index_find(&x.fi, 40 * TIDE_UNIT, &any_fit) == blocks[1]);
    CHECK(free_index_find(&x.fi, 41 * TIDE_UNIT, &any_fit) == blocks[3]);
    CHECK(free_index_find(&x.fi, 101 * TIDE_UNIT, &any_fit) == blocks[2]);
    CHECK(free_index_find(&x.fi, 4999 * TIDE_UNIT, &any_fit) == blocks[0]);
    CHECK(free_index_find(&x.fi, 5001 * TIDE_UNIT, &any_fit) == NULL);
    for (int i = 0; i < 4; i++) {
        free_index_remove(&x.fi, blocks[i]);
        free(blocks[i]);
    }
    CHECK(index_is_empty(&x));
    index_close(&x);
}

/* Where the request's own class holds nothing, the search takes the most recently filed block of the
 * lowest class above it that holds any (next_class picks that class without a branch on whether it is
 * in the same first level; free_index.c). Checked against a plain scan over the classes, on random
 * indexes with sizes from one unit to near the largest size_t, so that both of next_class's answers
 * and its sentinels (no class above, the last first level) are met. */
static uint64_t oracle_rng = 0x9E3779B97F4A7C15ull;

static size_t random_size(void)
{
    unsigned bits = (unsigned)(rng_next(&oracle_rng) % 55); /* units of up to 2^55 - 1: any size_t */
    uint64_t units = (rng_next(&oracle_rng) & (((uint64_t)1 << bits) - 1)) | ((uint64_t)1 << bits);
    units &= ((uint64_t)1 << 55) - 1;
    return (size_t)(units ? units : 1) * TIDE_UNIT;
}

static void test_search_above_matches_a_plain_scan(void)
{
    enum { MAX_BLOCKS = 24, ROUNDS = 3000, ASKS = 20 };
    unsigned wrong = 0, asked = 0, none_above = 0, same_level = 0, higher_level = 0;
    for (int round = 0; round < ROUNDS; round++) {
        struct index x;
        index_open(&x);
        struct block *blocks[MAX_BLOCKS];
        unsigned fl_of[MAX_BLOCKS], sl_of[MAX_BLOCKS];
        int n = 1 + (int)(rng_next(&oracle_rng) % MAX_BLOCKS);
        for (int i = 0; i < n; i++) {
            blocks[i] = block_of(random_size());
            free_index_insert(&x.fi, blocks[i]);
            fl_of[i] = blocks[i]->fl;
            sl_of[i] = blocks[i]->sl;
        }
        for (int k = 0; k < ASKS; k++) {
            size_t size = random_size();
            unsigned fl, sl;
            class_of_size(size, &fl, &sl);
            /* the plain scan: the lowest class above (fl, sl) holding a block, and its newest block */
            int expect = -1, own_class_filled = 0;
            for (int i = 0; i < n; i++) {
                own_class_filled |= fl_of[i] == fl && sl_of[i] == sl;
                bool above = fl_of[i] > fl || (fl_of[i] == fl && sl_of[i] > sl);
                if (above && (expect < 0 || fl_of[i] < fl_of[expect] ||
                              (fl_of[i] == fl_of[expect] && sl_of[i] <= sl_of[expect])))
                    expect = i; /* later blocks are newer: the <= keeps the newest of a class */
            }
            if (own_class_filled)
                continue;
            asked++;
            none_above += expect < 0;
            if (expect >= 0) {
                same_level += fl_of[expect] == fl;
                higher_level += fl_of[expect] != fl;
            }
            wrong += free_index_find(&x.fi, size, &any_fit) != (expect < 0 ? NULL : blocks[expect]);
        }
        for (int i = 0; i < n; i++) {
            free_index_remove(&x.fi, blocks[i]);
            free(blocks[i]);
        }
        CHECK(index_is_empty(&x));
        index_close(&x);
    }
    CHECK(wrong == 0);
    /* the cases met: each of next_class's answers, many times */
    CHECK(asked > 10000 && none_above > 100 && same_level > 100 && higher_level > 100);
}

/* The fit rule of max_split_size_mb: a segment reserved for a request of that size or more serves no
 * smaller one; a refused block is passed over for one in a class further up; an exact fit is never
 * refused. */
static void test_rules_keep_a_segment_for_the_requests_it_was_made_for(void)
{
    const struct fit_rules rules = {.oversize_min = 4000 * TIDE_UNIT, .share_shift = 63}; /* no sharing rule */
    struct segment made_for_big = {.serves_from = fit_serves_from(&rules, 1000 * TIDE_UNIT)};
    struct segment made_for_huge = {.serves_from = fit_serves_from(&rules, 4000 * TIDE_UNIT)};
    struct index x;
    index_open(&x);
    struct block *big = block_of(1000 * TIDE_UNIT), *huge_rest = block_of(1200 * TIDE_UNIT);
    struct block *any = block_of(3000 * TIDE_UNIT);
    big->seg = &made_for_big;
    huge_rest->seg = &made_for_huge;
    free_index_insert(&x.fi, big);
    free_index_insert(&x.fi, huge_rest);
    free_index_insert(&x.fi, any);
    CHECK(free_index_find(&x.fi, 250 * TIDE_UNIT, &rules) == big);         /* any request */
    CHECK(free_index_find(&x.fi, 1001 * TIDE_UNIT, &rules) == any);        /* the rest passed over */
    CHECK(free_index_find(&x.fi, 1001 * TIDE_UNIT, &any_fit) == huge_rest); /* pressure lifts the rule */
    CHECK(free_index_find(&x.fi, 1200 * TIDE_UNIT, &rules) == huge_rest);  /* exact */
    CHECK(free_index_find(&x.fi, 3001 * TIDE_UNIT, &rules) == NULL);
    struct block *all[] = {big, any, huge_rest};
    for (int i = 0; i < 3; i++) {
        free_index_remove(&x.fi, all[i]);
        free(all[i]);
    }
    CHECK(index_is_empty(&x));
    index_close(&x);
}

/* The sharing rule: a segment made for m bytes serves requests of m >> share_shift or more, and a
 * smaller request passes its blocks over for a block further up, or for none; an exact fit and a segment
 * made for no request serve any. */
static void test_a_large_segment_serves_no_much_smaller_request(void)
{
    const struct fit_rules rules = {.oversize_min = SIZE_MAX, .share_shift = 3}; /* an eighth or more */
    struct segment made_for_huge = {.serves_from = fit_serves_from(&rules, 8000 * TIDE_UNIT)};
    struct index x;
    index_open(&x);
    struct block *huge_rest = block_of(1200 * TIDE_UNIT), *loose = block_of(3000 * TIDE_UNIT);
    huge_rest->seg = &made_for_huge;
    free_index_insert(&x.fi, huge_rest);
    CHECK(free_index_find(&x.fi, 1000 * TIDE_UNIT, &rules) == huge_rest);   /* 1/8 of what it was made for */
    CHECK(free_index_find(&x.fi, 999 * TIDE_UNIT, &rules) == NULL);         /* less: refused */
    CHECK(free_index_find(&x.fi, 999 * TIDE_UNIT, &any_fit) == huge_rest);  /* pressure lifts the rule */
    free_index_insert(&x.fi, loose);
    CHECK(free_index_find(&x.fi, 10 * TIDE_UNIT, &rules) == loose);         /* passed over, for one above */
    CHECK(free_index_find(&x.fi, 1200 * TIDE_UNIT, &rules) == huge_rest);   /* the smallest that fits */
    free_index_remove(&x.fi, loose);
    struct block *exact = block_of(10 * TIDE_UNIT);
    exact->seg = &made_for_huge;
    free_index_insert(&x.fi, exact);
    CHECK(free_index_find(&x.fi, 10 * TIDE_UNIT, &rules) == exact);         /* an exact fit always */
    free_index_remove(&x.fi, exact);
    free_index_remove(&x.fi, huge_rest);
    free(exact);
    free(loose);
    free(huge_rest);
    CHECK(index_is_empty(&x));
    index_close(&x);
}

int main(void)
{
    RUN(test_small_sizes_are_their_own_class);
    RUN(test_classes_rise_with_size_and_are_narrow);
    RUN(test_the_largest_size_fits_the_table);
    RUN(test_a_lone_block_serves_every_size_up_to_its_own);
    RUN(test_search_takes_the_lowest_class_that_serves);
    RUN(test_search_above_matches_a_plain_scan);
    RUN(test_rules_keep_a_segment_for_the_requests_it_was_made_for);
    RUN(test_a_large_segment_serves_no_much_smaller_request);
    free(probe_block);
    index_close(&probe);
    return HARNESS_EXIT();
}

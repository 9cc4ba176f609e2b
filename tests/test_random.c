/*
 * A seeded randomized test: thousands of mixed operations on several streams (malloc, free,
 * record_stream, retain and release from the host and from simulated kernels, empty_cache, trim, limit
 * changes), with tide_check after every one, a check that no two live blocks overlap, and a byte
 * pattern in every block that must be intact when it is freed.
 *
 * TIDE_RANDOM_OPS and TIDE_RANDOM_SEEDS in the environment make it longer (a soak run).
 */
#include "harness.h"

#define MAX_LIVE 256
#define STREAMS 3
#define STAMP 256 /* bytes of pattern at each end of a block */

struct live_block {
    uint8_t *p;
    size_t size;
    uint8_t tag;
    int host_refs;   /* references the test holds */
    tide_stream stream;
};

struct world {
    struct fixture f;
    tide_stream streams[STREAMS];
    struct live_block live[MAX_LIVE];
    int nlive;
    uint64_t rng;
    unsigned long ops, ooms;
};

/* A kernel that holds a reference to a block and lets go when it completes. */
struct ref_kernel {
    tide_allocator *t;
    void *p;
};

static void ref_kernel_run(void *arg)
{
    struct ref_kernel *k = arg;
    if (tide_release(k->t, k->p) != TIDE_OK) {
        fprintf(stderr, "kernel release failed: %s\n", tide_last_error());
        harness_failures++;
    }
    free(k);
}

static size_t random_size(struct world *w)
{
    /* log-uniform from 1 byte to 64 MiB */
    unsigned bits = (unsigned)(rng_next(&w->rng) % 27);
    size_t base = (size_t)1 << bits;
    return base + rng_next(&w->rng) % base;
}

static void stamp(struct live_block *b)
{
    size_t n = b->size < STAMP ? b->size : STAMP;
    memset(b->p, b->tag, n);
    memset(b->p + b->size - n, b->tag, n);
}

static void verify_stamp(const struct live_block *b)
{
    size_t n = b->size < STAMP ? b->size : STAMP;
    if (first_mismatch(b->p, n, b->tag) != n || first_mismatch(b->p + b->size - n, n, b->tag) != n) {
        fprintf(stderr, "block %p (%zu bytes) lost its pattern: another block overlapped it\n",
                (void *)b->p, b->size);
        harness_failures++;
    }
}

static void check_no_overlap(struct world *w, const struct live_block *b)
{
    for (int i = 0; i < w->nlive; i++) {
        const struct live_block *o = &w->live[i];
        if (b->p < o->p + o->size && o->p < b->p + b->size) {
            fprintf(stderr, "block %p (%zu) overlaps live block %p (%zu)\n", (void *)b->p, b->size,
                    (void *)o->p, o->size);
            harness_failures++;
        }
    }
}

static void op_malloc(struct world *w)
{
    if (w->nlive == MAX_LIVE)
        return;
    struct live_block b = {0};
    b.size = random_size(w);
    b.stream = w->streams[rng_next(&w->rng) % STREAMS];
    b.tag = (uint8_t)(rng_next(&w->rng) | 1);
    tide_status s = tide_malloc(w->f.t, b.size, b.stream, (void **)&b.p);
    if (s == TIDE_ENOMEM) {
        w->ooms++;
        return;
    }
    CHECK_OK(s);
    if (s != TIDE_OK)
        return;
    check_no_overlap(w, &b);
    stamp(&b);
    w->live[w->nlive++] = b;
}

static void op_free(struct world *w, int i)
{
    struct live_block *b = &w->live[i];
    verify_stamp(b);
    /* Sometimes the block is still "used" by a kernel on some stream when it is freed. */
    uint64_t r = rng_next(&w->rng);
    if (r % 4 == 0) {
        struct ref_kernel *k = malloc(sizeof *k);
        k->t = w->f.t;
        k->p = b->p;
        CHECK_OK(tide_retain(w->f.t, b->p));
        CHECK_OK(tide_sim_enqueue(w->f.sim, w->streams[r / 4 % STREAMS], (uint32_t)(r % 300), ref_kernel_run, k));
    } else if (r % 4 == 1) {
        CHECK_OK(tide_record_stream(w->f.t, b->p, w->streams[r / 4 % STREAMS]));
        CHECK_OK(tide_sim_enqueue(w->f.sim, w->streams[r / 4 % STREAMS], (uint32_t)(r % 200), NULL, NULL));
    }
    CHECK_OK(tide_free(w->f.t, b->p));
    for (int k = 0; k < b->host_refs; k++)
        CHECK_OK(tide_release(w->f.t, b->p));
    w->live[i] = w->live[--w->nlive];
}

static void one_op(struct world *w)
{
    uint64_t r = rng_next(&w->rng) % 100;
    int i = w->nlive ? (int)(rng_next(&w->rng) % (uint64_t)w->nlive) : -1;
    if (r < 45 || i < 0) {
        op_malloc(w);
    } else if (r < 85) {
        op_free(w, i);
    } else if (r < 90) {
        if (w->live[i].host_refs < 3) {
            CHECK_OK(tide_retain(w->f.t, w->live[i].p));
            w->live[i].host_refs++;
        }
    } else if (r < 93) {
        if (w->live[i].host_refs > 0) {
            CHECK_OK(tide_release(w->f.t, w->live[i].p));
            w->live[i].host_refs--;
        }
    } else if (r < 95) {
        CHECK_OK(tide_empty_cache(w->f.t, NULL));
    } else if (r < 97) {
        tide_status s = tide_trim(w->f.t, (size_t)(rng_next(&w->rng) % (512 * MIB)), NULL);
        CHECK(s == TIDE_OK || s == TIDE_EBUSY);
    } else if (r < 99) {
        size_t limit = 256 * MIB + (size_t)(rng_next(&w->rng) % (2 * GIB));
        CHECK_OK(tide_set_limit(w->f.t, limit));
    } else {
        /* Bad input in the middle of everything changes nothing. */
        CHECK_STATUS(tide_free(w->f.t, w->live[i].p + 512 * (w->live[i].size > 512)),
                     w->live[i].size > 512 ? TIDE_EINVAL : TIDE_OK);
        if (w->live[i].size <= 512) { /* that was a real free */
            for (int k = 0; k < w->live[i].host_refs; k++)
                CHECK_OK(tide_release(w->f.t, w->live[i].p));
            w->live[i] = w->live[--w->nlive];
        }
    }
    w->ops++;
    tide_status s = tide_check(w->f.t);
    if (s != TIDE_OK) {
        fprintf(stderr, "after operation %lu: %s\n", w->ops, tide_last_error());
        harness_failures++;
    }
}

static void run_seed(uint64_t seed, unsigned long ops)
{
    struct world w;
    memset(&w, 0, sizeof w);
    w.rng = seed;
    fixture_open(&w.f, 4 * GIB, "limit:1GiB");
    w.streams[0] = 0;
    for (int i = 1; i < STREAMS; i++)
        CHECK_OK(tide_sim_stream_create(w.f.sim, &w.streams[i]));
    int before = harness_failures;
    for (unsigned long i = 0; i < ops && harness_failures == before; i++)
        one_op(&w);
    while (w.nlive)
        op_free(&w, w.nlive - 1);
    CHECK_OK(tide_sim_synchronize(w.f.sim));
    tide_release_report r;
    CHECK_OK(tide_empty_cache(w.f.t, &r));
    CHECK(r.reserved_bytes == 0 && r.pending_blocks == 0);
    CHECK(held_by_device(w.f.sim) == 0);
    fprintf(stderr, "seed %llu: %lu operations, %lu out-of-memory answers\n", (unsigned long long)seed,
            w.ops, w.ooms);
    fixture_close(&w.f);
}

static unsigned long env_number(const char *name, unsigned long fallback)
{
    const char *v = getenv(name);
    return v && *v ? strtoul(v, NULL, 10) : fallback;
}

static void test_random_operations(void)
{
    unsigned long ops = env_number("TIDE_RANDOM_OPS", 4000);
    unsigned long seeds = env_number("TIDE_RANDOM_SEEDS", 3);
    for (unsigned long s = 1; s <= seeds; s++)
        run_seed(s * 7919, ops);
}

int main(void)
{
    RUN(test_random_operations);
    return HARNESS_EXIT();
}

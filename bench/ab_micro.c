/*
 * Two builds of libtidepool in one process, taking turns: which is faster on the micro patterns?
 *
 *   build/bench/ab_micro A/libtidepool.so B/libtidepool.so [rounds]     (default 31 rounds)
 *
 * Each library is loaded on its own (dlopen, RTLD_LOCAL), with a simulated device of its own. For each
 * pattern of bench/micro_patterns.h (one thread), every round times A and B back to back, a few
 * milliseconds each, in alternating order (AB, BA, AB, ...). A machine that slows down for seconds at a
 * time (bench/results/2026-11-30-run12.md) then slows both builds of a round alike, and the median of
 * the rounds' B/A ratios is steady where medians taken run by run are not. Prints, per pattern, the
 * median ns per alloc+free pair of each build and that median ratio with its interquartile range.
 *
 * The same library given twice shows the method's own spread (its ratio should be 1 within the range).
 */
#define _GNU_SOURCE /* RTLD_LOCAL and dlopen on older C libraries */
#include "micro_patterns.h"
#include "tidepool.h"

#include <dlfcn.h>

/* What the benchmark calls in one loaded library. */
struct library {
    const char *path;
    void *handle;
    tide_status (*sim_create)(const tide_sim_options *, tide_sim **);
    tide_backend (*sim_backend)(tide_sim *);
    void (*sim_destroy)(tide_sim *);
    tide_status (*create)(const tide_backend *, const char *, tide_allocator **);
    tide_status (*destroy)(tide_allocator *);
    tide_status (*malloc_)(tide_allocator *, size_t, tide_stream, void **);
    tide_status (*free_)(tide_allocator *, void *);
    const char *(*last_error)(void);
    tide_sim *sim;
    tide_allocator *t;
};

static void *symbol(struct library *l, const char *name)
{
    void *f = dlsym(l->handle, name);
    if (!f) {
        fprintf(stderr, "ab_micro: %s has no %s: %s\n", l->path, name, dlerror());
        exit(2);
    }
    return f;
}

static void load(struct library *l, const char *path)
{
    l->path = path;
    /* RTLD_LOCAL: the two libraries' symbols stay apart even where their names are the same. A path
     * without a slash would be searched for in the system's directories, which is not what was meant. */
    if (!strchr(path, '/')) {
        fprintf(stderr, "ab_micro: %s: give a path to the library (./%s for one here)\n", path, path);
        exit(2);
    }
    if (!(l->handle = dlopen(path, RTLD_NOW | RTLD_LOCAL))) {
        fprintf(stderr, "ab_micro: cannot load %s: %s\n", path, dlerror());
        exit(2);
    }
    *(void **)&l->sim_create = symbol(l, "tide_sim_create");
    *(void **)&l->sim_backend = symbol(l, "tide_sim_backend");
    *(void **)&l->sim_destroy = symbol(l, "tide_sim_destroy");
    *(void **)&l->create = symbol(l, "tide_create");
    *(void **)&l->destroy = symbol(l, "tide_destroy");
    *(void **)&l->malloc_ = symbol(l, "tide_malloc");
    *(void **)&l->free_ = symbol(l, "tide_free");
    *(void **)&l->last_error = symbol(l, "tide_last_error");
    tide_sim_options o = {sizeof o, 1ull << 40, 0, 0};
    if (l->sim_create(&o, &l->sim) != TIDE_OK) {
        fprintf(stderr, "ab_micro: %s: %s\n", path, l->last_error());
        exit(1);
    }
    tide_backend be = l->sim_backend(l->sim);
    if (l->create(&be, NULL, &l->t) != TIDE_OK) {
        fprintf(stderr, "ab_micro: %s: %s\n", path, l->last_error());
        exit(1);
    }
}

static void unload(struct library *l)
{
    (void)l->destroy(l->t);
    l->sim_destroy(l->sim);
    dlclose(l->handle);
}

static void *lib_alloc(void *ctx, size_t size, uintptr_t stream)
{
    struct library *l = (struct library *)ctx;
    void *p = NULL;
    if (l->malloc_(l->t, size, stream, &p) != TIDE_OK) {
        fprintf(stderr, "ab_micro: %s: tide_malloc(%zu): %s\n", l->path, size, l->last_error());
        exit(1);
    }
    return p;
}

static void lib_free(void *ctx, void *p, size_t size, uintptr_t stream)
{
    (void)size;
    (void)stream;
    struct library *l = (struct library *)ctx;
    if (l->free_(l->t, p) != TIDE_OK) {
        fprintf(stderr, "ab_micro: %s: tide_free: %s\n", l->path, l->last_error());
        exit(1);
    }
}

/* A few milliseconds per run, so that A and B of a round fall in the same phase of the machine. */
static double run_pattern(int pattern, const struct bench_allocator *a)
{
    return bench_one_thread(pattern, a, pattern == BENCH_SAME_SIZE ? 100000 : 50000, 0);
}

int main(int argc, char **argv)
{
    if (argc < 3 || argc > 4) {
        fprintf(stderr, "usage: ab_micro LIB_A LIB_B [rounds]   (two builds of libtidepool.so)\n");
        return 2;
    }
    int rounds = argc > 3 ? atoi(argv[3]) : 31;
    if (rounds < 1 || rounds > 1001) {
        fprintf(stderr, "ab_micro: rounds must be 1 to 1001, not %s\n", argv[3]);
        return 2;
    }
    struct library lib[2];
    memset(lib, 0, sizeof lib);
    load(&lib[0], argv[1]);
    load(&lib[1], argv[2]);
    struct bench_allocator al[2] = {{"A", &lib[0], lib_alloc, lib_free}, {"B", &lib[1], lib_alloc, lib_free}};
    double *ns[2], *ratio;
    ns[0] = malloc((size_t)rounds * sizeof(double));
    ns[1] = malloc((size_t)rounds * sizeof(double));
    ratio = malloc((size_t)rounds * sizeof(double));
    printf("A: %s\nB: %s\n%d rounds, A and B back to back in each, in alternating order\n\n", argv[1], argv[2],
           rounds);
    printf("| pattern | A, ns per pair (median) | B | B / A, median of the rounds [quartiles] |\n"
           "|---|---|---|---|\n");
    for (int p = 0; p < BENCH_ONE_THREAD_PATTERNS; p++) {
        run_pattern(p, &al[0]); /* warm both */
        run_pattern(p, &al[1]);
        for (int r = 0; r < rounds; r++) {
            int first = r & 1;
            ns[first][r] = run_pattern(p, &al[first]);
            ns[!first][r] = run_pattern(p, &al[!first]);
            ratio[r] = ns[1][r] / ns[0][r];
        }
        double q1, q3, med;
        med = bench_median(ratio, rounds); /* sorts: the quartiles are read after */
        q1 = ratio[rounds / 4];
        q3 = ratio[(3 * rounds) / 4];
        printf("| %s | %.1f | %.1f | %.3f [%.3f, %.3f] |\n", bench_one_thread_names[p], bench_median(ns[0], rounds),
               bench_median(ns[1], rounds), med, q1, q3);
    }
    free(ns[0]);
    free(ns[1]);
    free(ratio);
    unload(&lib[1]);
    unload(&lib[0]);
    return 0;
}

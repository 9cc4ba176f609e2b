/*
 * What the history costs on trace replays, on the simulated device (no kernels: the allocator alone),
 * measured as `gpu_bench history` measures it on the GPU: in one process, the history off and on taking
 * turns, each turn replaying once untimed in its state before the timed replay, the order alternating
 * from round to round. What is compared is the steady cost of recording, not the making of a ring.
 *
 *   build/bench/history_replay [--events N] [--rounds R] [--stacks] TRACE...
 *
 * --events: the ring's size (default 65536); --rounds: turns of each (default 15, at most 101);
 * --stacks: record each event's native call stack too. Prints, per trace, the median ns per operation
 * off and on, their ratio, and the median of the rounds' own ratios.
 */
#include "micro_patterns.h"
#include "replay_pass.h"
#include "tidepool.h"
#include "tidepool_sim.h"
#include "tidepool_bench.h"
#include "trace.h"

#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MAX_ROUNDS 101

static void fail(const char *what)
{
    fprintf(stderr, "history_replay: %s: %s\n", what, tide_last_error());
    exit(1);
}

/* One pass over the trace (bench/replay_pass.h, as gpu_bench times it), every stream's operations on
 * the default one, its empty_cache lines skipped; ns per operation. */
static double replay(tide_allocator *t, const struct trace *tr, void **ptr, size_t *size)
{
    struct bench_allocator a = bench_tidepool("tidepool", t);
    return bench_replay_pass(&a, tr, ptr, size, 0, NULL, NULL);
}

/* A turn: the state set, a replay untimed, then one timed. */
static double turn(tide_allocator *t, const struct trace *tr, void **ptr, size_t *size, bool on,
                   size_t events, unsigned flags)
{
    if (on && tide_history_start(t, events, flags) != TIDE_OK)
        fail("tide_history_start");
    replay(t, tr, ptr, size);
    double ns = replay(t, tr, ptr, size);
    if (on && tide_history_stop(t) != TIDE_OK)
        fail("tide_history_stop");
    return ns;
}

static void usage(void)
{
    fprintf(stderr, "usage: history_replay [--events N] [--rounds R (1-%d)] [--stacks] TRACE...\n", MAX_ROUNDS);
    exit(2);
}

int main(int argc, char **argv)
{
    size_t events = 65536;
    int rounds = 15, first = 1;
    unsigned flags = 0;
    for (; first < argc && argv[first][0] == '-'; first++) {
        char *end = NULL;
        if (!strcmp(argv[first], "--stacks")) {
            flags |= TIDE_HISTORY_STACKS;
        } else if (!strcmp(argv[first], "--events") && first + 1 < argc) {
            events = strtoull(argv[++first], &end, 10);
            if (*end || events == 0)
                usage();
        } else if (!strcmp(argv[first], "--rounds") && first + 1 < argc) {
            long r = strtol(argv[++first], &end, 10);
            if (*end || r < 1 || r > MAX_ROUNDS)
                usage();
            rounds = (int)r;
        } else {
            usage();
        }
    }
    if (first == argc)
        usage();

    tide_sim *sim;
    tide_allocator *t;
    if (tide_sim_create(NULL, &sim) != TIDE_OK)
        fail("tide_sim_create");
    tide_backend be = tide_sim_backend(sim);
    if (tide_create(&be, NULL, &t) != TIDE_OK)
        fail("tide_create");
    printf("| trace (history of %zu events%s) | off, ns per op (median of %d) | on | on / off, medians | "
           "median of the rounds' on / off |\n|---|---|---|---|---|\n",
           events, flags ? ", with stacks" : "", rounds);
    for (int a = first; a < argc; a++) {
        struct trace tr;
        char err[512];
        if (trace_load(argv[a], &tr, err, sizeof err) != 0) {
            fprintf(stderr, "history_replay: %s\n", err);
            return 1;
        }
        void **ptr = calloc(tr.nallocs ? tr.nallocs : 1, sizeof *ptr);
        size_t *size = calloc(tr.nallocs ? tr.nallocs : 1, sizeof *size);
        if (!ptr || !size) {
            fprintf(stderr, "history_replay: out of host memory for %zu allocations\n", tr.nallocs);
            return 1;
        }
        double off[MAX_ROUNDS], on[MAX_ROUNDS], ratio[MAX_ROUNDS];
        for (int r = 0; r < rounds; r++) {
            bool on_first = r % 2 == 1;
            if (on_first)
                on[r] = turn(t, &tr, ptr, size, true, events, flags);
            off[r] = turn(t, &tr, ptr, size, false, events, flags);
            if (!on_first)
                on[r] = turn(t, &tr, ptr, size, true, events, flags);
            ratio[r] = on[r] / off[r];
        }
        double m_off = bench_median(off, rounds), m_on = bench_median(on, rounds);
        const char *name = strrchr(argv[a], '/') ? strrchr(argv[a], '/') + 1 : argv[a];
        printf("| %s | %.1f | %.1f | %+.1f%% | %+.1f%% |\n", name, m_off, m_on, 100.0 * (m_on / m_off - 1),
               100.0 * (bench_median(ratio, rounds) - 1));
        fflush(stdout);
        free(ptr);
        free(size);
        trace_free(&tr);
    }
    if (tide_destroy(t) != TIDE_OK)
        fail("tide_destroy");
    tide_sim_destroy(sim);
    return 0;
}

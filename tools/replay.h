/*
 * Replaying a trace through tidepool on the simulated device.
 */
#ifndef TIDE_REPLAY_H
#define TIDE_REPLAY_H

#include "trace.h"

#include "tidepool.h"
#include "tidepool_sim.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

enum replay_device_work {
    REPLAY_WORK_NONE = 0,   /* no kernels: every free is immediately reusable */
    REPLAY_WORK_REFS = 1,   /* each allocation is used by a simulated kernel that holds a reference
                               (tide_retain) until it completes, as Metal's command buffers do; frees
                               that come before the kernel finishes go PENDING. Kernels run on the
                               simulated device's threads, so the timing varies from run to run */
    REPLAY_WORK_LAG = 2,    /* the same, but a kernel completes exactly `lag` allocations after its
                               own, released by the replaying thread: repeatable to the byte */
};

struct replay_options {
    const char *config;             /* tide_create's config string, or NULL */
    unsigned passes;                /* times to replay the trace back to back; 0 means 1 */
    size_t empty_cache_every;       /* call tide_empty_cache every this many operations of the trace,
                                       counted within each pass; 0 = never */
    enum replay_device_work work;
    uint32_t kernel_delay_us;       /* REPLAY_WORK_REFS: a kernel completes this long after launch */
    uint32_t queue_depth;           /* kernels queued per stream before the host waits (0: 1024) */
    uint32_t lag;                   /* REPLAY_WORK_LAG: allocations a kernel runs behind (0: 64) */
    uint64_t device_bytes;          /* simulated device memory (0: 80 GiB) */
    size_t timeline_points;         /* samples of live/reserved memory to keep (0: none) */
    bool check_every_op;            /* tide_check after every operation (slow; for tests) */
    size_t history_capacity;        /* tide_history_start with this many events (0: no history) */
    unsigned history_flags;         /* TIDE_HISTORY_STACKS */
    bool progress;                  /* a progress bar on stderr */
    bool record_calls;              /* keep every driver call that reserved or released memory, with
                                       the operation it came in (replay_result's calls) */
    /* Called after the last pass, before the final tide_empty_cache: to read the history or take a
     * snapshot. A non-zero return fails the replay (with the message the callback put in err). */
    int (*at_end)(tide_allocator *t, void *arg, char *err, size_t errcap);
    void *at_end_arg;
};

enum replay_call_kind { REPLAY_CALL_RESERVE, REPLAY_CALL_RELEASE, REPLAY_CALL_MAP, REPLAY_CALL_UNMAP };
struct replay_call {
    uint64_t op;
    uint64_t bytes;
    enum replay_call_kind kind;
};

struct replay_result {
    uint64_t ops, allocs, frees;
    uint64_t peak_live_bytes;       /* the most bytes the trace held at once: the floor */
    uint64_t peak_reserved_bytes;   /* the most tidepool reserved at once */
    double ratio;                   /* peak reserved / peak live */
    uint64_t peak_in_use_bytes;     /* the most bytes live or still used by kernels after their free:
                                       the floor when the device holds freed blocks */
    double ratio_in_use;            /* peak reserved / peak in use */
    uint64_t device_allocs, device_frees;
    uint64_t device_allocs_first_pass; /* segments reserved during the first pass */
    uint64_t device_allocs_two_passes; /* ... during the first two (the second replays the trace's
                                          one-off start, its set-up, on a cache the loop has shaped) */
    uint64_t pending_drained;       /* blocks that were PENDING and became FREE */
    uint64_t peak_pending_blocks;
    uint64_t empty_cache_calls;
#define REPLAY_FLOORS 64
    uint64_t floors[REPLAY_FLOORS]; /* reserved right after each empty_cache of the trace or of
                                       --empty-cache-every (the first 64) */
    uint64_t reserved_after_empty_cache_bytes;
    uint64_t backend_held_after_empty_cache_bytes;
    uint64_t pending_after_empty_cache_blocks;
    double seconds;                 /* the replay loop, without reading the trace */
    double ns_per_op;
    /* per pass */
    unsigned passes;
    uint64_t *pass_peak_reserved;   /* peak reserved during each pass */
    uint64_t *pass_end_reserved;    /* reserved at the end of each pass, before any empty_cache */
    /* the driver's memory calls, with record_calls: each reservation, release, map and unmap that
       succeeded, in order, and the index of the trace operation it came in (over all passes; the
       end of the run, after the last operation, for the leftovers' frees and the final empty_cache) */
    struct replay_call *calls;
    size_t ncalls, calls_cap;
    bool calls_lost;                /* host memory ran out for the log: some calls are missing */
    /* timeline */
    size_t timeline_n;
    uint64_t *timeline_live, *timeline_reserved, *timeline_op;
};

/* Returns 0, or -1 with a message in err. */
int replay_run(const struct trace *t, const struct replay_options *o, struct replay_result *r,
               char *err, size_t errcap);
void replay_result_free(struct replay_result *r);

#endif

/*
 * tidepool: a caching allocator for GPU device memory.
 *
 * This header is the manual of the allocator. Read it top to bottom. The simulated device is in
 * tidepool_sim.h, the CUDA backend and one allocator per device in tidepool_cuda.h.
 *
 * WHAT IT DOES
 *   tidepool sits between a program (or a framework such as PyTorch or CuPy) and the device driver. It
 *   reserves memory from the device in large segments, carves blocks out of them, and reuses freed blocks
 *   without going back to the driver. It never hands out a block the device may still be using, and it
 *   gives memory back to the driver when asked (tide_empty_cache, tide_trim), all of it.
 *
 * BUILDING AGAINST IT
 *   Once installed (`cmake --install build --prefix DIR`): `pkg-config --cflags --libs tidepool`, or in
 *   CMake find_package(tidepool) and the target tidepool::tidepool (libtidepool.so) or
 *   tidepool::tidepool_static (libtidepool.a, which also needs -lpthread -ldl -lm). Nothing of CUDA is
 *   needed to build or link: the CUDA backend loads the driver when it is asked for.
 *
 * THE LIFECYCLE OF A BLOCK
 *
 *               tide_malloc                 tide_free (no device use left)
 *       FREE ───────────────▶ ACTIVE ─────────────────────────────────▶ FREE (cached on its stream)
 *        ▲                      │ tide_free while the device may still use the block
 *        │  all uses done       ▼
 *        └──────────────────── PENDING ("pending free")
 *
 *   A block belongs to the stream it was allocated on. Work on that stream is ordered, so the block can
 *   be reused on that stream as soon as it is freed. The device may still use a freed block in two ways:
 *
 *   - References (Metal's model). In-flight work holds the block: tide_retain when the work is enqueued,
 *     tide_release when it completes (from any thread, for example a completion callback). A block freed
 *     with references left is PENDING; the last tide_release makes it FREE.
 *   - Stream uses (CUDA's model, PyTorch's record_stream). tide_record_stream says that another stream
 *     uses the block. At tide_free, tidepool records a fence on each such stream; the block stays PENDING
 *     until every fence has signalled.
 *
 *   Every tide_malloc polls PENDING blocks cheaply. tide_empty_cache synchronizes the device, drains every
 *   PENDING block whose uses are done, and releases every segment that is wholly FREE. A block still
 *   referenced after that stays PENDING: it is counted in the statistics and reported, never lost and
 *   never handed out.
 *
 * POOLS AND SIZES
 *   Sizes are rounded up to 512 bytes. Requests up to 1 MiB come from the small pool (2 MiB segments;
 *   once a stream's small pool holds more than 16 MiB, an eighth of it in powers of two, up to 32 MiB),
 *   larger ones from the large pool (20 MiB segments below 10 MiB, else a segment of the size rounded up
 *   to 2 MiB). Each stream has its own blocks; a block is split when the rest is worth keeping and merged
 *   with its free neighbours when freed.
 *
 * HOLDING MEMORY
 *   Freed memory stays cached for reuse, with one exception that keeps the footprint low: before
 *   reserving a segment that would take reserved memory past the most it has ever been, tidepool gives
 *   back wholly free segments, since none of them could serve the request: the smallest one that
 *   covers the overshoot, or if none does, the oldest ones until it is covered. While reserved memory
 *   stays within 2.9% of the most the program has held (allocated and pending bytes, with the
 *   request, at each such growth), the mark rises instead, so a loop whose shapes take turns keeps
 *   what it will want again.
 *   tide_empty_cache resets the mark to what stays reserved. With expandable segments it does not
 *   (coming back up to the mark then maps pages but unmaps none, and each unmap waits for the device);
 *   there tide_reset_peak_stats resets it, as a program starting a new phase would. What the program held
 *   under the old mark is forgotten with it, so the new phase is placed as a new allocator would place
 *   it; a segment the call kept for a block in use lowers the mark when it goes back (tide_empty_cache).
 *   A program that frees every block it holds, on every stream, after a long phase (2,000 allocations
 *   or more per wholly free large segment since it last held nothing) has its phase ended the same way
 *   without the call: those segments go back at the next allocation that cannot be served from the
 *   cache, and the mark restarts. Default segments only. Config key trim_on_growth turns all this off.
 *
 * SEGMENTS THAT GROW (expandable_segments:True)
 *   Each stream reserves, per pool, an address range as large as the device (no memory behind it) and
 *   maps device memory into it in pages (2 MiB on today's GPUs) as it needs them. A segment is then a
 *   run of mapped pages: when nothing cached fits a request, the run whose free tail is largest grows
 *   by just the pages the request lacks, so its free tail is used and no 20 MiB segment is rounded up
 *   to. Memory comes back page by page: any page that lies wholly inside a free block can be unmapped,
 *   even in a run that other blocks still use (the run splits in two), so cached memory never stays
 *   pinned by one small live block. The exception: growing back up to the most ever reserved (as after
 *   tide_empty_cache) maps pages two at a time, since the driver takes as long to map two pages as
 *   one; such a pair is unmapped together, so a live block on one page keeps the other. Pages holding
 *   any part of an ACTIVE or PENDING block stay mapped; a stream's pages are its own, so a page never
 *   holds two streams' blocks. tide_empty_cache and tide_trim unmap every page (or pair) they can;
 *   growing past the most ever reserved first unmaps free pages elsewhere (see HOLDING MEMORY).
 *   Statistics count mapped bytes as reserved, runs as segments, each growth as a device allocation
 *   and each run unmapped as a device free.
 *
 * MEMORY PRESSURE
 *   A limit (config key "limit", or tide_set_limit) that reserved memory never exceeds. Below it, an
 *   optional garbage-collection threshold ("garbage_collection_threshold") at which the oldest cached
 *   segments are released before a new one is reserved. When a segment cannot be reserved, the
 *   out-of-memory ladder runs: (1) drain PENDING blocks whose uses are done and retry, (2) release every
 *   wholly free cached segment and retry, (3) synchronize the device, drain, release and retry; then fail
 *   with TIDE_ENOMEM and a message saying how much was asked, free on the device, cached, releasable and
 *   pending.
 *
 * CONFIGURATION
 *   One string, "key:value,key:value", in the syntax of PYTORCH_CUDA_ALLOC_CONF. It is read from the
 *   environment variable TIDEPOOL_CONF and from tide_create's argument; where both set a key, the argument
 *   wins. Unknown keys and bad values are errors. B is True or False (in any case), or 1 or 0. Numbers
 *   are read exactly from their digits (no sign, no exponent): N and L are whole numbers, sizes are read
 *   as tide_parse_size reads them, and a fraction (F, a limit's "0.9" or "90%") is a decimal with at
 *   most 15 digits after the point (13 for a percentage), checked against its bounds on its digits, so
 *   that "1.0000000000000000001" is more than 1 and refused. Keys:
 *     limit:V                         reserved memory never exceeds V. V is bytes with an optional unit
 *                                     ("8GiB", "512MB", "1073741824", as tide_parse_size reads them), or a
 *                                     fraction of the device's total memory ("0.9" or "90%"). Default: the
 *                                     device's total memory.
 *     garbage_collection_threshold:F  0 < F < 1: when reserving a segment would take reserved memory above
 *                                     F x limit, release the oldest wholly free cached segments first.
 *                                     Default: off.
 *     max_split_size_mb:N             requests below N MiB (N > 20) leave the segments reserved for
 *                                     requests of N MiB or more alone, as long as a segment of their
 *                                     own fits under the most ever reserved; past that they take from
 *                                     them rather than raise the peak. Large requests share such
 *                                     segments. Default: unlimited. No effect with
 *                                     expandable_segments:True, whose runs split at any size.
 *     trim_on_growth:B                True (default): before reserving past the most it has ever
 *                                     reserved, give idle segments back (see HOLDING MEMORY). False:
 *                                     keep every freed segment cached until asked (PyTorch's way).
 *     debug:L                         0: off (default). 1: run tide_check after every call that reserves
 *                                     or releases segments. 2: also, after every call on a block, check
 *                                     the heap of the stream it used. A failed check prints the problem
 *                                     to stderr and aborts.
 *     expandable_segments:B           True: segments that grow and shrink (see SEGMENTS THAT GROW).
 *                                     Needs a backend with virtual memory (sim, cuda). Default False.
 *     scrub:B                         True: zero every block before it is handed out, on its stream
 *                                     and without waiting (the backend's fill), so no owner reads the
 *                                     last owner's data. For devices shared between tenants. Default
 *                                     False.
 *     peer_access:B                   True (with expandable_segments:True): tide_devices, and so
 *                                     tidepool.torch and tidepool.cupy, map every page so that each
 *                                     other GPU able to (cuDeviceCanAccessPeer) can read and write it.
 *                                     A program calling tide_create itself passes the peers to
 *                                     tide_backend_cuda_peers instead. Default False.
 *     leak_report:B                   True: tide_destroy prints tide_leak_report to stderr when
 *                                     allocations are still live. Default False.
 *     guard:B                         True: surround every block with 512 bytes of canary before it
 *                                     and at least 512 after it (from the end of the requested size),
 *                                     checked at tide_free, which waits for the block's stream to do
 *                                     so (on the device: the backend's verify). A broken canary makes
 *                                     tide_free return TIDE_ECORRUPT saying where (the block is freed
 *                                     all the same). For finding out-of-bounds writes; slow. Default
 *                                     False.
 *
 * THREADS
 *   Any thread may call any function at any time, except that tide_destroy must not race with other calls
 *   on the same allocator. Each stream has its own lock, so threads working on different streams do not
 *   wait for each other on the fast path. One allocator serves up to TIDE_MAX_STREAMS streams (those it
 *   has allocated on); an allocation on one more fails with TIDE_EINVAL and changes nothing.
 *   Completion callbacks (work that runs on the device's threads when it completes) may call any of
 *   these, tide_release first of all: tidepool waits for the device (tide_destroy, tide_empty_cache,
 *   the out-of-memory ladder) with no lock held. One exception on CUDA: releasing a segment or
 *   unmapping a page waits for the device inside the lock that reserving and releasing share, so a
 *   callback there should not call what reserves or releases memory (tide_empty_cache, tide_trim, a
 *   tide_malloc that needs a new segment) nor read the whole allocator (tide_get_stats, tide_check).
 *
 * FORK
 *   A child process made by fork() (Python's multiprocessing, PyTorch's DataLoader workers) cannot use
 *   its parent's device memory: a CUDA context does not survive a fork, and the threads that ran the
 *   parent's streams or held its locks do not exist in the child. So in a child, every call on an
 *   allocator, a tide_devices set or a simulated device that its parent (or any ancestor) made fails at
 *   once with TIDE_EINVAL and a message that says so, without taking a lock or waiting for anything;
 *   tide_destroy, tide_devices_destroy and tide_sim_destroy of one free nothing and return (TIDE_OK):
 *   the memory is the parent's, and the child's copy of the bookkeeping goes when the child exits. The
 *   parent is unaffected. What the child creates itself works as in any process: a simulated device
 *   and allocators over it, or on a GPU an allocator over the CUDA driver if the parent never used it
 *   (if it did, the driver refuses the child, and tide_backend_cuda says so in the driver's words). A
 *   child that calls exec (subprocess) is not concerned.
 *
 * ERRORS
 *   Every call returns a tide_status. On failure, tide_last_error() returns a message for this thread
 *   that says what went wrong in words a user can act on. Bad input (a pointer tidepool did not allocate,
 *   a double free, a size of 0, a malformed config string) is an error that changes nothing.
 *
 * BACKENDS
 *   An allocator works over one device through a backend: a table of function pointers (tide_backend,
 *   below). tidepool ships two: a simulated device that runs anywhere (tidepool_sim.h), and a CUDA
 *   backend that loads the driver at run time (tidepool_cuda.h, which also keeps one allocator per
 *   device for frameworks). You may supply your own table.
 *
 * A MINIMAL PROGRAM (with #include <tidepool_sim.h>)
 *     tide_sim *sim;  tide_allocator *t;  void *p;
 *     tide_sim_create(NULL, &sim);
 *     tide_backend backend = tide_sim_backend(sim);
 *     if (tide_create(&backend, "limit:1GiB", &t) != TIDE_OK) { puts(tide_last_error()); return 1; }
 *     tide_malloc(t, 4096, 0, &p);      // 4 KiB on the default stream
 *     tide_free(t, p);
 *     tide_empty_cache(t, NULL);        // everything goes back to the device
 *     tide_destroy(t);
 *     tide_sim_destroy(sim);
 */
#ifndef TIDEPOOL_H
#define TIDEPOOL_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define TIDE_VERSION_MAJOR 0
#define TIDE_VERSION_MINOR 2
#define TIDE_VERSION_PATCH 0

/* Streams one allocator serves (see THREADS). */
#define TIDE_MAX_STREAMS 1024

#if defined(__GNUC__)
#define TIDE_API __attribute__((visibility("default")))
#else
#define TIDE_API
#endif

/* ------------------------------------------------------------------------------------------------ */
/* Status codes                                                                                      */
/* ------------------------------------------------------------------------------------------------ */

typedef enum tide_status {
    TIDE_OK = 0,
    TIDE_EINVAL = 1,      /* bad argument: a pointer tidepool does not own, a double free, size 0, a
                             malformed config string, a release without a retain, ... */
    TIDE_ENOMEM = 2,      /* device memory (or the limit) is exhausted, after the out-of-memory ladder */
    TIDE_EBUSY = 3,       /* the call did what it could, but memory still in use kept it from finishing
                             (tide_trim above its target, tide_destroy with live allocations) */
    TIDE_EDEVICE = 4,     /* the backend (the driver) reported an error; the message carries its words */
    TIDE_ECORRUPT = 5,    /* tide_check found a broken invariant */
    TIDE_ENOTREADY = 6,   /* backends only: a fence has not signalled yet */
    TIDE_EUNSUPPORTED = 7,/* the backend or this build cannot do what was asked */
    TIDE_EHOSTMEM = 8     /* host memory for tidepool's own bookkeeping ran out */
} tide_status;

/* The status's name, e.g. "TIDE_ENOMEM". Never NULL. */
TIDE_API const char *tide_status_name(tide_status status);

/* The message of the last failed call on this thread, or "" if none failed yet. Successful calls leave
 * it as it was. The string stays valid until the next failing call on this thread, or until the
 * thread exits. */
TIDE_API const char *tide_last_error(void);

/* ------------------------------------------------------------------------------------------------ */
/* Streams and backends                                                                              */
/* ------------------------------------------------------------------------------------------------ */

/* A stream handle as the backend knows it: a CUstream / cudaStream_t value for CUDA, a handle from
 * tide_sim_stream_create for the simulated device. 0 is the device's default stream. */
typedef uintptr_t tide_stream;

/* The table a backend fills in. Every function returns TIDE_OK or an error status; a backend may put
 * its own words into the thread's message with tide_backend_error before returning an error, and
 * tidepool adds what it was doing. All functions except fence_wait are required. */
typedef struct tide_backend {
    uint32_t struct_size;     /* sizeof(tide_backend) */
    const char *name;         /* "sim", "cuda", ... for messages and statistics */
    void *ctx;                /* passed to every function */

    /* Device memory, in segments. reserve returns an address aligned to at least 512 bytes. */
    tide_status (*reserve)(void *ctx, size_t size, uintptr_t *out_addr);
    tide_status (*release)(void *ctx, uintptr_t addr, size_t size);

    /* Fences: an event that signals when a stream reaches the point where it was recorded. tidepool
     * creates fences once and reuses them. query returns TIDE_OK once signalled, TIDE_ENOTREADY before. */
    tide_status (*fence_create)(void *ctx, void **out_fence);
    tide_status (*fence_record)(void *ctx, void *fence, tide_stream stream);
    tide_status (*fence_query)(void *ctx, void *fence);
    tide_status (*fence_wait)(void *ctx, void *fence); /* optional: may be NULL */
    void (*fence_destroy)(void *ctx, void *fence);

    /* Wait until all work on all streams of the device is done. */
    tide_status (*synchronize)(void *ctx);

    /* Free and total memory of the device. */
    tide_status (*mem_info)(void *ctx, size_t *free_bytes, size_t *total_bytes);

    /* Optional. If set, the backend owns resources (a driver context, say): a successful tide_create
     * takes them over and tide_destroy calls close last. Before that, tide_backend_close gives them
     * back. */
    void (*close)(void *ctx);

    /* Optional; the config keys scrub and guard need them. fill sets size bytes at addr to value, in
     * order with the work on stream, without waiting for it. verify waits for the work on stream, then
     * checks that size bytes at addr all equal value: TIDE_OK if so, else TIDE_ECORRUPT with
     * *first_bad set to the offset of the first byte that differs. */
    tide_status (*fill)(void *ctx, uintptr_t addr, size_t size, uint8_t value, tide_stream stream);
    tide_status (*verify)(void *ctx, uintptr_t addr, size_t size, uint8_t value, tide_stream stream,
                          size_t *first_bad);

    /* Optional; the config key expandable_segments:True needs them all. Virtual memory: an address
     * range is reserved once (no memory behind it), and physical memory is mapped into it and unmapped
     * again in pages of page_size bytes (a multiple of 2 MiB). va_reserve returns a range aligned to
     * page_size. map puts device memory behind [addr, addr + size) (whole pages, not mapped yet),
     * readable and writable by the device, as one mapping (on CUDA, one handle); TIDE_ENOMEM if the
     * device has too little, and then nothing is mapped. unmap takes a mapping away again: [addr,
     * addr + size) is always exactly what one call of map mapped (a page or two). It first waits for
     * work the device still has queued on it, as releasing a segment does (tidepool unmaps only FREE
     * pages, but a stream may still run work on blocks it freed itself). va_release gives back a range
     * with nothing mapped in it. */
    size_t page_size;
    tide_status (*va_reserve)(void *ctx, size_t size, uintptr_t *out_addr);
    tide_status (*va_release)(void *ctx, uintptr_t addr, size_t size);
    tide_status (*map)(void *ctx, uintptr_t addr, size_t size);
    tide_status (*unmap)(void *ctx, uintptr_t addr, size_t size);

    /* Optional; tide_pool_sleep with TIDE_SLEEP_OFFLOAD needs them all. host_alloc returns size bytes
     * of host memory that the device copies to and from at full speed (on CUDA, pinned: page-locked
     * and mapped for the device); host_free gives it back. copy_to_host and copy_to_device copy size
     * bytes between device memory (mapped pages) and such host memory, and return once the copy is
     * done; tidepool calls them after synchronizing the device, with no work queued on the memory. */
    tide_status (*host_alloc)(void *ctx, size_t size, void **out);
    void (*host_free)(void *ctx, void *ptr, size_t size);
    tide_status (*copy_to_host)(void *ctx, void *dst, uintptr_t src, size_t size);
    tide_status (*copy_to_device)(void *ctx, uintptr_t dst, const void *src, size_t size);

    /* Optional; tide_ipc_open and tide_ipc_close need both. ipc_open maps the memory another
     * process shared (handle, handle_len bytes: on CUDA a CUipcMemHandle) into this one and returns
     * its address; ipc_close unmaps what ipc_open returned. tidepool never asks to open a handle that
     * is open already (it counts the uses of each opening itself), and calls both under a lock of
     * their own. */
    tide_status (*ipc_open)(void *ctx, const void *handle, size_t handle_len, uintptr_t *out_addr);
    tide_status (*ipc_close)(void *ctx, uintptr_t addr);
} tide_backend;

/* Gives back what a backend owns (its close function), if tide_create has not taken it over. */
TIDE_API void tide_backend_close(tide_backend *backend);

/* For backend authors: set this thread's message (printf-style) to explain the error a backend
 * function is about to return. tidepool prefixes it with what it was doing. */
TIDE_API void tide_backend_error(const char *fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 1, 2)))
#endif
    ;

/* ------------------------------------------------------------------------------------------------ */
/* The allocator                                                                                     */
/* ------------------------------------------------------------------------------------------------ */

typedef struct tide_allocator tide_allocator;

/* Creates an allocator over one device. The backend table is copied; its ctx must outlive the
 * allocator. config may be NULL or "" (then only TIDEPOOL_CONF applies). */
TIDE_API tide_status tide_create(const tide_backend *backend, const char *config, tide_allocator **out);

/* The configuration keys (see CONFIGURATION above), for tools and documentation: the index-th key
 * (from 0), or NULL past the last. The strings are static. */
typedef struct tide_config_key {
    const char *name;              /* "limit", "expandable_segments", ... */
    const char *type;              /* "bool", "fraction", "MiB", ... */
    const char *default_value;     /* in words: "False", "off", "the device's memory" */
    const char *doc;               /* one line */
} tide_config_key;
TIDE_API const tide_config_key *tide_config_key_at(size_t index);

/* Checks a configuration string (see CONFIGURATION) without creating anything, with the very
 * decisions tide_create takes (one function takes them for both): TIDE_OK, or the status and message
 * tide_create would give, the message beginning with origin (NULL: "config"). TIDEPOOL_CONF is not
 * read. tide_config_check has no backend, so it takes every decision but those that depend on one:
 * scrub:True and guard:True need the backend's fill (guard its verify too), expandable_segments:True
 * its virtual-memory calls and a page size that is a multiple of 2 MiB. A string it accepts is
 * accepted by tide_create over a backend that has all of these (the simulated device; CUDA where the
 * driver has virtual memory); one it refuses, tide_create refuses too, with the same words.
 * tide_config_check_backend takes those decisions as well, for backend, and checks the backend table
 * as tide_create does: its verdict is tide_create's, short of asking the device for its memory. */
TIDE_API tide_status tide_config_check(const char *config, const char *origin);
TIDE_API tide_status tide_config_check_backend(const tide_backend *backend, const char *config,
                                               const char *origin);

/* PyTorch's allocator configuration (the text of PYTORCH_ALLOC_CONF or PYTORCH_CUDA_ALLOC_CONF, or of
 * torch.cuda.memory._set_allocator_settings) in tidepool's terms, so that a program keeps its settings
 * under tidepool. expandable_segments, garbage_collection_threshold and max_split_size_mb become the
 * tidepool keys of the same names, per_process_memory_fraction becomes limit (a fraction of the
 * device); backend:native says nothing; every other key has no tidepool meaning and is named in
 * *ignored (comma-separated, "" if none) for the caller to warn once. A key that tidepool's own
 * configuration `tidepool` sets (TIDEPOOL_CONF, an explicit config string; may be NULL) is left out:
 * tidepool's wins. *out receives the tidepool configuration ("" if none), checked as
 * tide_config_check checks (a bad value is TIDE_EINVAL, saying "PyTorch's allocator configuration"
 * and the key). Both strings are freed with tide_string_free. */
TIDE_API tide_status tide_config_from_pytorch(const char *pytorch, const char *tidepool, char **out,
                                              char **ignored);

/* Parses a size as the configuration takes it: bytes with an optional unit, B, K/KiB, M/MiB, G/GiB,
 * T/TiB (powers of 1024) or KB, MB, GB, TB (powers of 1000): "8GiB", "1.5MiB", "512MB", "4096". The
 * number is digits with at most one '.' (no sign, no exponent, no space before it; a space may come
 * before the unit), and it is computed exactly, never through a double: every whole number from 0 to
 * 2^64 - 1 is itself ("9007199254740993"), and a decimal with a unit is taken where the product is a
 * whole number of bytes ("4.1GB" is 4100000000, "1.5GiB" 1610612736). Anything else is TIDE_EINVAL
 * with a message saying why ("0.3B": "it is 0.3 bytes, not a whole number"; past 2^64 - 1; an unknown
 * unit), and *out is left alone. */
TIDE_API tide_status tide_parse_size(const char *text, uint64_t *out);

/* Synchronizes the device, releases every segment to the backend, and frees the allocator. Returns
 * TIDE_EBUSY (after freeing everything anyway) if allocations were still live or blocks still
 * referenced: the message says how many and how large; likewise, after closing them, if openings
 * of other processes' memory were still open (tide_ipc_open). Returns TIDE_EDEVICE if the device
 * failed to synchronize or to take memory back (the allocator is freed all the same). NULL is allowed
 * and does nothing, and so is an allocator a forked child got from its parent (see FORK). */
TIDE_API tide_status tide_destroy(tide_allocator *t);

/* Allocates size bytes (1 byte up to the device's total memory) for use on stream. The block is
 * aligned to 512 bytes. On TIDE_ENOMEM, *out is NULL and the message is the out-of-memory report (a
 * size above the device's total memory is TIDE_ENOMEM at once, saying so). Size 0 is TIDE_EINVAL. */
TIDE_API tide_status tide_malloc(tide_allocator *t, size_t size, tide_stream stream, void **out);

/* Frees a block tide_malloc returned. If other streams used it (tide_record_stream) or references are
 * held (tide_retain), it becomes PENDING until those uses are done; otherwise it is FREE at once and
 * may be handed out again on its own stream. NULL is allowed and does nothing. With the guard config
 * key on, returns TIDE_ECORRUPT if something wrote outside the block, or TIDE_EDEVICE if the device
 * could not check (the block is freed in both cases). */
TIDE_API tide_status tide_free(tide_allocator *t, void *ptr);

/* Says that stream uses the ACTIVE block at ptr (PyTorch's tensor.record_stream). At tide_free a fence
 * is recorded on stream, and the block is not reused until that fence signals. Recording the block's
 * own stream does nothing. */
TIDE_API tide_status tide_record_stream(tide_allocator *t, void *ptr, tide_stream stream);

/* References: in-flight work holds the ACTIVE block at ptr (tide_retain) and lets it go
 * (tide_release). tide_release may be called from any thread, including a completion callback, and
 * also after tide_free: the last release of a freed block makes it FREE. */
TIDE_API tide_status tide_retain(tide_allocator *t, void *ptr);
TIDE_API tide_status tide_release(tide_allocator *t, void *ptr);

/* What tide_empty_cache and tide_trim did. */
typedef struct tide_release_report {
    uint64_t released_bytes;        /* returned to the device by this call */
    uint64_t released_segments;
    uint64_t drained_blocks;        /* PENDING blocks that became FREE during this call */
    uint64_t pending_blocks;        /* blocks still PENDING afterwards (references still held) */
    uint64_t pending_bytes;
    uint64_t reserved_bytes;        /* reserved afterwards */
} tide_release_report;

/* Synchronizes the device, drains every PENDING block whose uses are done, and releases every wholly
 * free segment. With nothing allocated and nothing referenced, reserved memory is 0 afterwards. report
 * may be NULL. Blocks still referenced stay PENDING and are counted in report->pending_*.
 * A segment kept for a block in use is asked back (default segments, outside private pools): once
 * wholly free it serves only a request of its free block's exact size, and the next tide_malloc that
 * finds no cached block for its request gives it back first, so a program that frees its last blocks
 * after the call (a finished run's model) starts its next phase as a new allocator would. */
TIDE_API tide_status tide_empty_cache(tide_allocator *t, tide_release_report *report);

/* Releases wholly free cached segments, oldest first, until reserved memory is at most target_bytes.
 * Does not synchronize the device. Returns TIDE_EBUSY if the target could not be reached (the message
 * says what holds the memory). report may be NULL. */
TIDE_API tide_status tide_trim(tide_allocator *t, size_t target_bytes, tide_release_report *report);

/* Sets the limit that reserved memory never exceeds, in bytes or as a fraction (0, 1] of the device's
 * total memory. Cached memory above a new, lower limit is released at once; memory in use stays, and
 * no new segment is reserved until reserved memory is below the limit again. */
TIDE_API tide_status tide_set_limit(tide_allocator *t, size_t bytes);
TIDE_API tide_status tide_set_limit_fraction(tide_allocator *t, double fraction);

/* ------------------------------------------------------------------------------------------------ */
/* Private pools and graph capture                                                                   */
/* ------------------------------------------------------------------------------------------------ */

/* A private pool is memory kept apart: a block allocated in a pool comes from the pool's own segments
 * and goes back to them when freed, so no allocation outside the pool ever reuses it. This is what a
 * captured CUDA graph needs: its replays write the addresses the capture handed out, long after the
 * program freed them (PyTorch's graph pools, MemPool, cudagraph trees).
 *
 * A pool has a use count: 1 at tide_pool_create, up with tide_pool_retain, down with tide_pool_release.
 * While it is above 0 the pool's memory stays reserved, wholly free segments too (tide_empty_cache,
 * tide_trim, the limit and the garbage-collection threshold leave it alone). At 0 the pool is released:
 * no new allocation may be made in it, its blocks still allocated stay valid until freed, and its
 * wholly free segments go back to the device at the next tide_empty_cache (or as cache under pressure).
 * Pool ids are never reused; 0 is not a pool (tide_malloc_pool with pool 0 is tide_malloc). The
 * bookkeeping of a released pool whose memory has all gone back serves later pools, so a program may
 * make and release pools without end. */
typedef uint64_t tide_pool_id;

TIDE_API tide_status tide_pool_create(tide_allocator *t, tide_pool_id *out);
/* A pool whose segments come from backend's reserve and release (copied; its ctx must outlive the
 * allocator), with tidepool's caching on top: PyTorch's MemPool(allocator=...), whose allocator is
 * ncclMemAlloc, symmetric memory or another program's pool. Only the table's name, ctx, reserve and
 * release are used: fences, synchronize and memory information stay the allocator's, so the memory
 * must be the same device's. Each segment goes back through the table that reserved it, whatever
 * releases it (tide_empty_cache, the ladder, tide_destroy). TIDE_EUNSUPPORTED under
 * expandable_segments:True (such a pool reserves whole segments); TIDE_EINVAL for a table without
 * reserve or release. */
TIDE_API tide_status tide_pool_create_with_backend(tide_allocator *t, const tide_backend *backend,
                                                   tide_pool_id *out);
TIDE_API tide_status tide_pool_retain(tide_allocator *t, tide_pool_id pool);
TIDE_API tide_status tide_pool_release(tide_allocator *t, tide_pool_id pool);
/* The pool's use count now (0 once released). TIDE_EINVAL if pool was never created. */
TIDE_API tide_status tide_pool_use_count(tide_allocator *t, tide_pool_id pool, uint32_t *out);
/* Memory the pool holds, in bytes: reserved (its segments) and allocated (its ACTIVE blocks). */
TIDE_API tide_status tide_pool_memory(tide_allocator *t, tide_pool_id pool, size_t *reserved,
                                      size_t *allocated);

/* tide_empty_cache for one pool: synchronizes the device, drains, and releases the pool's wholly free
 * segments, even while the pool is in use (PyTorch's empty_cache of a MemPool): the caller says that
 * no captured graph replays into the pool's free memory any more. Other pools and the memory outside
 * pools stay cached. Pool 0 is tide_empty_cache. TIDE_EBUSY during a graph capture, as
 * tide_empty_cache; TIDE_EINVAL for a pool never created. */
TIDE_API tide_status tide_pool_empty_cache(tide_allocator *t, tide_pool_id pool, tide_release_report *report);

/* tide_malloc from pool's own segments. A released pool (use count 0) refuses with TIDE_EINVAL. */
TIDE_API tide_status tide_malloc_pool(tide_allocator *t, size_t size, tide_stream stream, tide_pool_id pool,
                                      void **out);
/* The segment (one reservation from the device) that holds the ACTIVE or PENDING block at ptr: what
 * CUDA IPC shares (cuIpcGetMemHandle takes a reservation's base). */
TIDE_API tide_status tide_segment_of(tide_allocator *t, void *ptr, uintptr_t *base, size_t *size);

/* The pool the block at ptr belongs to (0: none), for any ACTIVE or PENDING block. */
TIDE_API tide_status tide_pool_of(tide_allocator *t, void *ptr, tide_pool_id *out);

/* Checkpoints of a pool: which of its blocks are allocated, and a way back to exactly that. This is
 * what PyTorch's cudagraph trees need to record a new graph after replaying others: the pool must hold
 * precisely the tensors still alive, at their addresses, whatever was allocated in it since. */
typedef struct {
    uintptr_t ptr;          /* what tide_malloc_pool returned */
    size_t size;            /* the bytes tidepool holds for it (requested, rounded up, or more) */
    size_t requested;       /* what the caller asked for */
    tide_stream stream;     /* the stream it was allocated on */
} tide_pool_block;

/* The pool's ACTIVE blocks, by address: the first min(cap, their number) written to blocks (which may
 * be NULL when cap is 0), their number in *count. PENDING blocks (freed, waiting for the device) are
 * not listed: they are no longer allocated. */
TIDE_API tide_status tide_pool_blocks(tide_allocator *t, tide_pool_id pool, tide_pool_block *blocks,
                                      size_t cap, size_t *count);
/* Puts the pool back to a checkpoint: every block allocated in it now is freed, tidepool waits for
 * the device if any of them waits for it (a synchronize), and then exactly blocks[0..n) are allocated
 * again, each at its own address, in the state tide_pool_blocks reported (their contents are not
 * touched). blocks must be a list tide_pool_blocks gave for this pool, in its order; n may be 0.
 * The caller makes no other allocation in the pool meanwhile. A checkpoint is checked whole before
 * anything changes, and refused with TIDE_EINVAL, changing nothing, unless each block could be one
 * tide_pool_blocks reported: its block (ptr less the 512 guard bytes under guard:True) starts on a
 * 512-byte boundary, its size is a multiple of 512 and at least 512 more than its two guards, 0 <
 * requested <= what lies between the guards, it lies wholly inside one segment of the pool's memory
 * on its stream (no wrap past 2^64), the blocks are in address order without overlap, and n is no
 * more than the pool's memory could hold. A released pool is refused too (TIDE_EINVAL), and any
 * restore during a graph capture (TIDE_EBUSY). If a block's memory is still held once the frees are
 * done (a tide_retain not yet released), the blocks before it stay restored, the rest are not, and
 * TIDE_EBUSY names it. Under guard:True a broken canary found while freeing is reported
 * (TIDE_ECORRUPT) once the restore is done. */
TIDE_API tide_status tide_pool_restore(tide_allocator *t, tide_pool_id pool, const tide_pool_block *blocks,
                                       size_t n);

/* Sleep and wake: a pool gives its device memory back while its blocks keep their addresses.
 *
 * Programs that share a GPU between two phases (reinforcement learning: an inference engine and a
 * trainer on the same GPUs) must hand the engine's weights and KV cache back between phases and
 * later have them again at the same addresses, so that the engine's captured CUDA graphs stay valid.
 * A sleepable pool's segments are always runs of pages mapped into reserved address ranges (as under
 * expandable_segments:True, whatever that key says), so its pages can be unmapped and mapped again
 * at the same addresses. Needs a backend with virtual memory (sim, cuda).
 *
 * tide_pool_make_sleepable: the pool becomes sleepable. Only before it holds any memory (right after
 * tide_pool_create): TIDE_EINVAL otherwise, TIDE_EUNSUPPORTED for a backend without virtual memory or
 * a pool with its own backend.
 *
 * tide_pool_sleep: synchronizes the device and drains the pool's pending frees, then unmaps and
 * releases every page of the pool's segments. Their address ranges stay reserved, and every block
 * keeps its address. flags: TIDE_SLEEP_DISCARD (0), the contents are lost; or TIDE_SLEEP_OFFLOAD, the
 * contents of its ACTIVE and PENDING blocks (not its cached memory) are first copied to host memory
 * taken through the backend (pinned, on CUDA), which the wake copies back. While the pool sleeps:
 *   - tide_malloc_pool and tide_pool_restore in it fail at once (TIDE_EINVAL), saying so;
 *   - its blocks may be freed (tide_free, tide_release); their memory is not touched (under guard:True
 *     the canaries are not checked: they went with the pages);
 *   - its pages count in the statistics as asleep_bytes (and its host copies as offloaded_bytes), not
 *     in reserved_bytes: reserved falls by what was released. Its blocks count as before (allocated,
 *     pending, cached), so for each pool reserved + asleep = allocated + pending_free + cached;
 *   - nothing releases its segments (tide_empty_cache, tide_pool_empty_cache, the limit), even if the
 *     pool is released meanwhile; tide_destroy frees them and their host copies.
 * A pool that sleeps already: the call finishes what an earlier one left undone (after a device error)
 * with its own flags for the pages that were still mapped, and is TIDE_OK if there were none.
 * TIDE_EBUSY during a graph capture; TIDE_EUNSUPPORTED for TIDE_SLEEP_OFFLOAD over a backend without
 * the host-memory calls; TIDE_EINVAL for a pool that is not sleepable, unknown flags or pool 0.
 *
 * tide_pool_wake: maps device memory behind the pool's pages again, at the same addresses, in one map
 * call per stretch of pages (a run of the pool's segments, as large as its blocks need), and copies
 * offloaded contents back; then the pool takes allocations again. Discarded contents are whatever the
 * new pages hold. If the limit or the device has too little room, cached memory outside sleeping
 * pools is released first; if that is not enough, TIDE_ENOMEM says how much the wake needed and how
 * much was free, and the pool stays asleep and whole (what this call mapped is unmapped again).
 * TIDE_OK and nothing done for a pool that is awake; TIDE_EBUSY during a graph capture.
 * The host memory of offloaded contents is kept for the pool's next offload, not given back: pinning
 * host memory costs the driver far more than the copies (about 0.4 s per GiB on CUDA), so a pool that
 * sleeps every cycle pins once. It counts as sleep_host_cached_bytes; the pool keeps at most what its
 * last sleep used; it goes back with tide_pool_empty_cache of the pool, the pool's last release,
 * tide_destroy, or when a sleep of any pool cannot get host memory otherwise.
 * A device error in the middle of either call leaves the pool asleep, its bookkeeping consistent
 * (tide_check accepts it), and the same call can be made again to finish.
 *
 * tide_pool_sleeping: 1 while the pool sleeps (from the start of tide_pool_sleep to the end of a
 * tide_pool_wake that finished), else 0. */
enum { TIDE_SLEEP_DISCARD = 0, TIDE_SLEEP_OFFLOAD = 1 };
TIDE_API tide_status tide_pool_make_sleepable(tide_allocator *t, tide_pool_id pool);
TIDE_API tide_status tide_pool_sleep(tide_allocator *t, tide_pool_id pool, unsigned flags);
TIDE_API tide_status tide_pool_wake(tide_allocator *t, tide_pool_id pool);
TIDE_API tide_status tide_pool_sleeping(tide_allocator *t, tide_pool_id pool, uint32_t *out);

/* Graph capture. Between tide_capture_begin and the matching tide_capture_end (they nest, one pair per
 * capture on the device) the device may not be asked anything that a stream capture forbids: tidepool
 * queries no fence, synchronizes nothing and releases no memory to the device. A block freed meanwhile
 * with uses on other streams waits, PENDING, and its fences are recorded when the last capture ends;
 * tide_empty_cache and tide_trim return TIDE_EBUSY; an allocation that finds no room reserves a new
 * segment (the backend is asked to do so in a way the capture allows) or fails with TIDE_ENOMEM
 * without the steps of the out-of-memory ladder that need the device. */
TIDE_API tide_status tide_capture_begin(tide_allocator *t);
TIDE_API tide_status tide_capture_end(tide_allocator *t);

/* Capture is a property of a stream. tide_capture_begin_stream says that stream captures a graph (until
 * the matching tide_capture_end_stream; they nest per stream; up to 64 streams at once, TIDE_EINVAL
 * past that): the fences of that stream's blocks are not queried, so its pending frees wait for the
 * capture's end, while every other stream's pending frees drain as usual. What acts on the whole
 * device waits for every capture, as tide_capture_begin describes (a capture in CUDA's global mode
 * forbids it from any thread): synchronizing, releasing memory, recording fences at a free, the
 * ladder's device steps, tide_empty_cache and tide_trim (TIDE_EBUSY). Allocating to a private pool is
 * not a capture: a pool routes allocations and nothing else, so a program that only allocates to a
 * pool (PyTorch's use_mem_pool) begins none. tide_capturing gives the depth of the captures that hold
 * stream's polls back (its own and those begun by tide_capture_begin). */
TIDE_API tide_status tide_capture_begin_stream(tide_allocator *t, tide_stream stream);
TIDE_API tide_status tide_capture_end_stream(tide_allocator *t, tide_stream stream);
TIDE_API tide_status tide_capturing(tide_allocator *t, tide_stream stream, uint32_t *out);

/* ------------------------------------------------------------------------------------------------ */
/* Memory of another process (IPC)                                                                   */
/* ------------------------------------------------------------------------------------------------ */

/* A process that receives device memory from another one (PyTorch's tensors sent through
 * torch.multiprocessing) gets a handle of the sender's segment: on CUDA the 64 bytes of a
 * CUipcMemHandle, which cuIpcGetMemHandle gives for the segment tide_segment_of names. Opening the
 * handle maps that segment into this process. The driver opens a handle once per process and device:
 * it must not be asked to open one again before it is closed. So tidepool keeps one opening per
 * handle, counted, as PyTorch's allocator does: the first tide_ipc_open of a handle opens it through
 * the backend, each later one returns the same address and counts one use more, each tide_ipc_close
 * counts one use less, and the last closes it through the backend. The memory stays the sender's: it
 * counts in no statistic, and nothing else (tide_empty_cache, tide_trim, the limit) touches it.
 *
 * tide_ipc_open: handle is handle_len bytes (1 to TIDE_IPC_HANDLE_MAX), compared byte for byte with
 * those open already. *ptr receives the address of the start of the sender's segment in this process
 * (NULL on failure). Needs a backend with the ipc_open and ipc_close calls (cuda, sim; see
 * tide_sim_ipc_handle): TIDE_EUNSUPPORTED otherwise. A handle the device refuses fails with the
 * backend's status and words, and nothing is counted.
 * tide_ipc_close: ptr is an address tide_ipc_open gave. One that is not open (never opened here, or
 * closed as many times as it was opened) is TIDE_EINVAL and changes nothing. If the device fails to
 * close the last use, the opening stays open with one use and the call returns the device's error: a
 * later tide_ipc_close, or tide_destroy, tries again.
 * tide_destroy closes every opening still open, whatever its count, and returns TIDE_EBUSY saying how
 * many there were (unless allocations were live as well, which its message names first).
 * Any thread may open and close. Both hold a lock of their own (no other lock of the allocator) across
 * the backend's call, so two threads opening one handle open it once. */
#define TIDE_IPC_HANDLE_MAX 128
TIDE_API tide_status tide_ipc_open(tide_allocator *t, const void *handle, size_t handle_len, void **ptr);
TIDE_API tide_status tide_ipc_close(tide_allocator *t, void *ptr);

/* ------------------------------------------------------------------------------------------------ */
/* Statistics                                                                                        */
/* ------------------------------------------------------------------------------------------------ */

/* Names follow PyTorch's memory_stats() where the concept is the same. Each statistic is kept for all
 * pools together and for the small and large pool. */
enum { TIDE_POOL_ALL = 0, TIDE_POOL_SMALL = 1, TIDE_POOL_LARGE = 2, TIDE_POOL_COUNT = 3 };

typedef struct tide_stat {
    int64_t current;
    int64_t peak;   /* highest current since creation or tide_reset_peak_stats. With one stream the
                       peak is exact: the highest value between two calls (not one passed through inside
                       a call, such as a new segment wholly cached before the block is taken from it);
                       with several, each stream's peak is kept and the sum is reported, an upper bound
                       (reserved_bytes' peak is always exact) */
} tide_stat;

/* What a statistic gained and lost since creation or tide_reset_accumulated_stats: PyTorch's
 * ".allocated" and ".freed". Each event that changes a statistic counts its change once, in allocated
 * if it raised it, in freed if it lowered it, so that allocated - freed is how far current has moved
 * since then (exactly, with any number of streams). */
typedef struct tide_stat_accumulated {
    int64_t allocated;
    int64_t freed;
} tide_stat_accumulated;

#define TIDE_STATS_VERSION 6

typedef struct tide_stats {
    uint32_t struct_size;          /* set by the caller: sizeof(tide_stats); fields past it are left
                                      alone, so older callers keep working */
    uint32_t version;              /* set by tidepool: TIDE_STATS_VERSION */

    /* Bytes, per pool. Every byte of reserved memory is allocated, pending free or cached:
     *   reserved = allocated + pending_free + cached, and active = allocated + pending_free. */
    tide_stat reserved_bytes[TIDE_POOL_COUNT];      /* in segments held from the device */
    tide_stat allocated_bytes[TIDE_POOL_COUNT];     /* in ACTIVE blocks (sizes rounded to 512) */
    tide_stat requested_bytes[TIDE_POOL_COUNT];     /* in ACTIVE blocks, as requested */
    tide_stat active_bytes[TIDE_POOL_COUNT];        /* ACTIVE or PENDING: not reusable now */
    tide_stat pending_free_bytes[TIDE_POOL_COUNT];  /* freed, waiting for the device */
    tide_stat cached_bytes[TIDE_POOL_COUNT];        /* FREE, ready to reuse */
    tide_stat inactive_split_bytes[TIDE_POOL_COUNT];/* FREE, in segments that are not wholly free (the
                                                        part of the cache that cannot be released) */

    /* Counts, per pool. */
    tide_stat allocation[TIDE_POOL_COUNT];          /* ACTIVE blocks */
    tide_stat segment[TIDE_POOL_COUNT];             /* segments held */
    tide_stat pending_free_blocks[TIDE_POOL_COUNT]; /* PENDING blocks */

    /* Events, since creation or tide_reset_accumulated_stats. */
    uint64_t num_alloc_retries;    /* allocations that went into the out-of-memory ladder */
    uint64_t num_ooms;             /* allocations that failed with TIDE_ENOMEM */
    uint64_t num_device_alloc;     /* segments reserved from the backend */
    uint64_t num_device_free;      /* segments released to the backend */
    uint64_t num_sync_all_streams; /* device synchronizations */
    uint64_t num_pending_drained;  /* PENDING blocks that became FREE */
    uint64_t num_gc_released;      /* segments released by the garbage-collection threshold */
    uint64_t num_fence_errors;     /* fence record/query failures (handled by synchronizing instead) */

    /* Settings and the device, now. */
    uint64_t limit_bytes;
    uint64_t gc_threshold_bytes;   /* 0 if off */
    uint64_t device_total_bytes;   /* as the backend reports it, up to 2^62 (4 EiB): a larger report
                                      counts as that much, so that no size computation can wrap */
    uint64_t num_streams;          /* streams that have allocated */

    /* Since version 2 (fields are only ever added at the end). */
    uint64_t device_call_ns;       /* since creation or tide_reset_accumulated_stats: time in the
                                      backend's calls that reserve and
                                      release device memory (with expandable segments, that map and
                                      unmap pages): what the driver cost the program (a release may
                                      wait for the device) */

    /* Since version 3: sleeping pools (tide_pool_sleep). */
    tide_stat asleep_bytes[TIDE_POOL_COUNT];       /* their pages, unmapped: not in reserved_bytes */
    tide_stat offloaded_bytes[TIDE_POOL_COUNT];    /* their contents, kept in host memory */

    /* Since version 4. */
    uint64_t sleep_host_cached_bytes; /* pinned host memory kept, once an offloaded pool woke, for its
                                         next offload (see tide_pool_wake) */

    /* Since version 5: PyTorch's remaining statistics, and what each gained and lost. */
    tide_stat active[TIDE_POOL_COUNT];   /* ACTIVE or PENDING blocks (PyTorch's "active"). Its peak is
                                            allocation's peak plus pending_free_blocks': exact while no
                                            free has waited for the device, else an upper bound */
    tide_stat oversize_allocations;      /* ACTIVE blocks of max_split_size bytes or more (none without
                                            the config key max_split_size_mb), all pools */
    tide_stat oversize_segments;         /* segments of max_split_size bytes or more held, all pools
                                            (reservations: a run of pages is not one) */
    /* Per statistic of the same name above (oversize: one each). What counts as a gain and a loss:
     *   allocation, active, allocated_bytes, active_bytes, requested_bytes: allocated counts the blocks
     *     (their bytes, as allocated or as requested) made ACTIVE by tide_malloc, tide_malloc_pool and
     *     tide_pool_restore; freed counts them as tide_free lets them go (allocation, allocated_bytes,
     *     requested_bytes) or as they become FREE (active, active_bytes: after their pending uses).
     *   segment, reserved_bytes: segments reserved and released (one the device refused to take
     *     back counts as released and reserved again), and with pages (expandable segments,
     *     sleepable pools) pages mapped and unmapped, a pool's sleep and wake included; a change of
     *     runs of pages counts its net change (a run split in two by an unmap gains a segment, two
     *     runs joined lose one).
     *   inactive_split_bytes: a free gains its block's bytes, unless its segment became wholly free,
     *     when the other free bytes of the segment are lost from it; an allocation loses its block's
     *     bytes, unless it split a wholly free segment, when the rest is gained.
     *   oversize_allocations, oversize_segments: as allocation and segment, for those of
     *     max_split_size bytes or more.
     * For each, current less its value at the reset is allocated - freed. */
    struct {
        tide_stat_accumulated allocation[TIDE_POOL_COUNT], segment[TIDE_POOL_COUNT], active[TIDE_POOL_COUNT];
        tide_stat_accumulated allocated_bytes[TIDE_POOL_COUNT], reserved_bytes[TIDE_POOL_COUNT];
        tide_stat_accumulated active_bytes[TIDE_POOL_COUNT], inactive_split_bytes[TIDE_POOL_COUNT];
        tide_stat_accumulated requested_bytes[TIDE_POOL_COUNT];
        tide_stat_accumulated oversize_allocations, oversize_segments;
    } accumulated;

    /* Since version 6. */
    tide_stat inactive_split[TIDE_POOL_COUNT];  /* FREE blocks in segments that are not wholly free:
                                                   the blocks of inactive_split_bytes (PyTorch's
                                                   "inactive_split"). A block freed and taken back at
                                                   once counts as it would have been merged */
    /* inactive_split's allocated and freed: a free gains one block if it merged with no FREE neighbour
     * and left its segment not wholly free (a neighbour merged with loses one, as does the segment
     * becoming wholly free); an allocation loses its block unless it split a wholly free segment, and
     * gains the rest it split off, if any. */
    tide_stat_accumulated accumulated_inactive_split[TIDE_POOL_COUNT];
} tide_stats;

/* Fills *out. Set out->struct_size = sizeof(*out) first. */
TIDE_API tide_status tide_get_stats(tide_allocator *t, tide_stats *out);

/* Resets every peak to its current value (with expandable segments, the high-water mark too: see
 * HOLDING MEMORY). */
TIDE_API tide_status tide_reset_peak_stats(tide_allocator *t);

/* Resets what is accumulated (PyTorch's reset_accumulated_memory_stats): every statistic's allocated
 * and freed to 0, and the counts of events (num_alloc_retries ... num_fence_errors) and device_call_ns
 * to 0. Current values and peaks stay. */
TIDE_API tide_status tide_reset_accumulated_stats(tide_allocator *t);

/* Writes the statistics as one JSON object with PyTorch's flat key names ("allocated_bytes.all.current",
 * "reserved_bytes.large_pool.peak", "segment.small_pool.allocated", "oversize_allocations.freed",
 * "num_ooms", ...) into buf, NUL-terminated. Every value is a
 * whole number written in its field's own type: the per-pool statistics as int64_t, the counts and
 * settings (num_*, limit_bytes, ...) as uint64_t, up to 2^64 - 1. *len (if not NULL)
 * receives the length the whole text needs, without the NUL; if that is >= cap, the text was cut and
 * the call returns TIDE_EINVAL, so call again with a larger buffer. buf may be NULL when cap is 0. */
TIDE_API tide_status tide_stats_json(tide_allocator *t, char *buf, size_t cap, size_t *len);

/* ------------------------------------------------------------------------------------------------ */
/* Validation                                                                                        */
/* ------------------------------------------------------------------------------------------------ */

/* Walks every segment and block and checks every invariant:
 *  - the blocks of each segment tile it with no gap or overlap; no two adjacent FREE blocks;
 *  - each block is in exactly one state and on exactly the list that state implies;
 *  - each segment's own bookkeeping (whether it is on the idle list, how many of its blocks are not
 *    FREE) agrees with its blocks;
 *  - reserved = allocated + pending + cached, per pool and in total, and every statistic's current
 *    value agrees with the walk;
 *  - a PENDING block has a reason to be pending (references, fences, or a synchronize owed);
 *  - the address lookup finds every segment and every ACTIVE and PENDING block.
 * Returns TIDE_OK, or TIDE_ECORRUPT with the first problem and the number found in the message. */
TIDE_API tide_status tide_check(tide_allocator *t);

/* ------------------------------------------------------------------------------------------------ */
/* Seeing memory: history, snapshots, leak reports                                                   */
/* ------------------------------------------------------------------------------------------------ */
/*
 * The history is a ring buffer of events, off until tide_history_start. Each stream records its own
 * events (allocations and frees) into a ring of its own, under the lock its operation holds anyway, so
 * an event costs two stores; the rare others (segments, out of memory, empty_cache, annotations) go to
 * a shared ring. When a ring is full its oldest events are overwritten and counted as dropped; reading
 * returns the newest `capacity` events of all. While it is on, each allocation also remembers its tag
 * (tide_set_tag) and its call site (the address tide_malloc was called from), which the snapshot and
 * the leak report show.
 */

typedef enum tide_event_kind {
    TIDE_EVENT_ALLOC = 0,          /* addr: the block (the user's pointer), size: bytes requested */
    TIDE_EVENT_FREE_REQUESTED,     /* tide_free; size: the block's bytes */
    TIDE_EVENT_FREE_COMPLETED,     /* a block becomes FREE (at once, or when its pending uses end) */
    TIDE_EVENT_SEGMENT_RESERVED,   /* addr, size: the segment */
    TIDE_EVENT_SEGMENT_RELEASED,
    TIDE_EVENT_OOM,                /* size: bytes requested */
    TIDE_EVENT_EMPTY_CACHE,        /* size: bytes released */
    TIDE_EVENT_ANNOTATION,         /* tag: the text given to tide_annotate */
    TIDE_EVENT_KIND_COUNT
} tide_event_kind;

#define TIDE_HISTORY_MAX_FRAMES 16

typedef struct tide_event {
    uint64_t seq;                  /* increasing from 0 since tide_history_start: the order of events (a
                                      free completed at once shares its request's). Numbers may be
                                      skipped. One stream's allocations and frees are in their exact
                                      order, whatever threads made them; each stream takes numbers 512
                                      at a time, so two streams' events interleave in blocks of up to
                                      512, and so do a stream's with the segment, out-of-memory,
                                      empty_cache and annotation events (TIDE_HISTORY_ORDERED: all
                                      exactly in order) */
    uint64_t time_ns;              /* CLOCK_MONOTONIC; read at the first and last event of each block
                                      of 512 numbers a stream takes, the events between placed by
                                      interpolation in seq order (off by at most the time between two
                                      stamps; in the block being filled, the time of its first event);
                                      events outside streams, and all with TIDE_HISTORY_ORDERED: read at
                                      every event */
    uint32_t kind;                 /* tide_event_kind */
    uint32_t nframes;              /* frames captured (TIDE_HISTORY_STACKS), innermost first */
    tide_stream stream;
    uint64_t addr;
    uint64_t size;
    const char *tag;               /* the allocation's tag or the annotation, or NULL; valid until
                                      tide_destroy */
    void *frames[TIDE_HISTORY_MAX_FRAMES];
} tide_event;

/* The name of an event kind ("alloc", "free_requested", ...). */
TIDE_API const char *tide_event_kind_name(uint32_t kind);

/* flags. TIDE_HISTORY_STACKS: capture the caller's native stack with each event (each call takes it
 * once, before it takes any lock, so that other threads and readers of the history do not wait on it;
 * it costs microseconds per call, and tide_malloc and tide_free leave their fast paths meanwhile).
 * TIDE_HISTORY_ORDERED:
 * number and time every event on its own, so that the events of several streams are in the exact order
 * they happened (the order a trace for replay needs: every free after its allocation, even where a
 * block moves between streams' segments), at the price of an atomic operation and a clock read per
 * event. */
enum { TIDE_HISTORY_STACKS = 1, TIDE_HISTORY_ORDERED = 2 };

/* Starts recording with room for the newest `capacity` events (1 to 2^26, rounded up to a power of
 * two), dropping (and freeing) what an earlier history held. Each stream gets a ring of capacity + 512
 * events of 16 bytes, taken and touched now (a stream that appears later: at its first event); rarer
 * events share a ring of at most 65,536 events of 56 bytes. A free that completes at once takes one
 * place and reads back as two events (requested, completed) with the same seq. */
TIDE_API tide_status tide_history_start(tide_allocator *t, size_t capacity, unsigned flags);
/* Stops recording; the events stay readable until the next start or tide_destroy. */
TIDE_API tide_status tide_history_stop(tide_allocator *t);
/* Copies up to cap events, oldest first, into out; *count receives how many were copied and *dropped
 * (if not NULL) how many older places in the ring were overwritten. */
TIDE_API tide_status tide_history_read(tide_allocator *t, tide_event *out, size_t cap, size_t *count,
                                       uint64_t *dropped);
/* An observer hears, as they happen and whether a history is on or not, the events that change what
 * the device holds: TIDE_EVENT_SEGMENT_RESERVED and TIDE_EVENT_SEGMENT_RELEASED (with expandable
 * segments, a run of pages mapped or unmapped: addr and size are the pages), TIDE_EVENT_OOM and
 * TIDE_EVENT_EMPTY_CACHE. This is what registering memory with a communication library needs
 * (PyTorch's ProcessGroupNCCL registers each segment with NCCL and deregisters it when it goes). A
 * segment is heard reserved once the device has given it, and released before the device takes it
 * back, as PyTorch's allocator tells its trace trackers before cudaFree, so that what the observer
 * deregisters is still there; if the device then refuses to take it back, the segment stays cached and
 * what is still reserved is heard as TIDE_EVENT_SEGMENT_RESERVED again. The
 * event's seq and frames are those of the history if one is on, else 0. It hears frees that wait for
 * the device too: TIDE_EVENT_FREE_REQUESTED for a free that leaves its block PENDING, and
 * TIDE_EVENT_FREE_COMPLETED when a PENDING block becomes FREE (addr: the user's pointer, size: the
 * block's bytes); a free it does not hear about completed at once, in its tide_free call. It is
 * called under the lock that reserving and releasing share, or for a free under its stream's lock,
 * on the thread that did it, so it must be quick and must not call tidepool on this allocator (take
 * a note and act after). One observer per
 * allocator: a call replaces the last; NULL removes it. Once this returns, the old observer is not
 * running and is not called again. */
typedef void (*tide_event_observer)(void *ctx, const tide_event *event);
TIDE_API tide_status tide_observe(tide_allocator *t, tide_event_observer observer, void *ctx);

/* Records a user's annotation (copied) as an event, e.g. "step 12 begins". */
TIDE_API tide_status tide_annotate(tide_allocator *t, const char *text);
/* This thread's tag for its allocations from now on (copied; at most 63 bytes are kept), or NULL for
 * none. Recorded while a history is on. */
TIDE_API void tide_set_tag(const char *tag);

/* Texts tidepool allocates for the caller: JSON or a report, NUL-terminated. Free with
 * tide_string_free. */
TIDE_API void tide_string_free(char *text);
/* The history as JSON: {"dropped": N, "events": [{"seq", "time_ns", "kind", "stream", "addr", "size",
 * "tag", "frames": ["libx.so(f+0x1c)", ...]}, ...]}. */
TIDE_API tide_status tide_history_json(tide_allocator *t, char **out);
/* Every segment and block now, as JSON: {"segments": [{"address", "size", "pool", "stream",
 * "expandable" (a run of pages: expandable_segments:True or a sleepable pool), "asleep" (its pool
 * sleeps: its pages are given back), "blocks":
 * [{"address", "size", "requested", "state": "active" | "pending_free" | "cached", "stream", "tag",
 * "site"}]}], "stats": {...tide_stats_json...}}. A block's address is the user's pointer. */
TIDE_API tide_status tide_snapshot_json(tide_allocator *t, char **out);
/* The same snapshot as structures, for programs that walk it (a framework's own snapshot, the largest
 * cached block): no JSON to print and parse. tide_snapshot_take copies every segment and block under
 * the locks, at one moment; the result belongs to the caller until tide_snapshot_free. Segments are
 * in the order of the JSON snapshot; a segment's blocks are blocks[first_block .. first_block +
 * nblocks), in address order, and tile it. */
enum { TIDE_BLOCK_ACTIVE = 0, TIDE_BLOCK_PENDING_FREE = 1, TIDE_BLOCK_CACHED = 2 };

typedef struct tide_snapshot_block {
    uintptr_t address;             /* the user's pointer (under guard:True, past the canary) for an
                                      ACTIVE or PENDING block; the block's start for a cached one */
    size_t size;                   /* bytes the block holds */
    size_t requested;              /* what the caller asked for (ACTIVE only, else 0) */
    uint32_t state;                /* TIDE_BLOCK_* */
    uint32_t reserved_;
    const char *tag;               /* the allocation's tag (history on), or NULL; valid until tide_destroy */
    void *site;                    /* the address tide_malloc was called from (history on), or NULL */
} tide_snapshot_block;

typedef struct tide_snapshot_segment {
    uintptr_t address;
    size_t size;
    tide_stream stream;
    tide_pool_id private_pool;     /* 0: none */
    uint32_t pool;                 /* TIDE_POOL_SMALL or TIDE_POOL_LARGE */
    uint32_t expandable;           /* 1: a run of pages (expandable_segments:True) */
    size_t first_block, nblocks;
    size_t allocated_bytes;        /* in its ACTIVE blocks */
    size_t active_bytes;           /* ACTIVE and PENDING */
    size_t requested_bytes;        /* asked for, of its ACTIVE blocks */
} tide_snapshot_segment;

typedef struct tide_snapshot {
    size_t nsegments, nblocks;
    const tide_snapshot_segment *segments;
    const tide_snapshot_block *blocks;
    size_t largest_cached;         /* the largest cached block's size, 0 if none */
    size_t guard_bytes;            /* canary before each block (guard:True), else 0 */
} tide_snapshot;

TIDE_API tide_status tide_snapshot_take(tide_allocator *t, tide_snapshot **out);
TIDE_API void tide_snapshot_free(tide_snapshot *snapshot);

/* The allocations still live (and freed blocks still referenced), grouped by tag and call site, largest
 * first, in words. *live (if not NULL) receives the number of live allocations: a test can fail on it.
 * With the config key leak_report:True, tide_destroy prints this report to stderr when anything is
 * live. */
TIDE_API tide_status tide_leak_report(tide_allocator *t, char **out, uint64_t *live);

#ifdef __cplusplus
}
#endif

#endif /* TIDEPOOL_H */

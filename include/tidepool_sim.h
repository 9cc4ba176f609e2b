/*
 * tidepool: the simulated device, a backend that runs anywhere (tests, machines without a GPU).
 * The allocator's manual is tidepool.h.
 */
#ifndef TIDEPOOL_SIM_H
#define TIDEPOOL_SIM_H

#include "tidepool.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ------------------------------------------------------------------------------------------------ */
/* The simulated device                                                                              */
/* ------------------------------------------------------------------------------------------------ */
/*
 * A device that runs anywhere. Its memory is real host memory, reserved sparsely (a simulated 80 GiB
 * device costs nothing until touched), so tests can write and check data in blocks. Its streams are
 * worker threads that run queued work in order, each item no sooner than its delay after it was queued;
 * fences signal when their stream reaches them. Work may retain blocks and release them when done, as
 * Metal's command buffers do. Faults can be injected into any backend call.
 */

typedef struct tide_sim tide_sim;

typedef struct tide_sim_options {
    uint32_t struct_size;      /* sizeof(tide_sim_options) */
    uint64_t total_bytes;      /* device memory; default 80 GiB */
    uint32_t queue_depth;      /* queued items per stream before tide_sim_enqueue waits; default 1024 */
    uint32_t same_addresses;   /* 1: memory is mapped at the same addresses in every run (the lowest
                                  free ones from 32 TiB up), so that two runs, or two builds, can
                                  compare pointers; 0 (default): wherever the kernel puts it (valgrind
                                  is much slower with the former) */
} tide_sim_options;

/* opts may be NULL for the defaults. */
TIDE_API tide_status tide_sim_create(const tide_sim_options *opts, tide_sim **out);

/* Waits for all queued work, then frees the device. Memory still reserved is unmapped. In a child
 * process forked after the device was made, its streams' threads are not there: every call on the
 * device fails at once (TIDE_EINVAL; tide_sim_inject_fault does nothing), tide_sim_get_counters
 * reads the counters as the fork left them, and tide_sim_destroy frees nothing (tidepool.h, FORK). */
TIDE_API void tide_sim_destroy(tide_sim *sim);

/* The backend table of this device, for tide_create. */
TIDE_API tide_backend tide_sim_backend(tide_sim *sim);

/* A new stream (a worker thread). Stream 0 always exists. */
TIDE_API tide_status tide_sim_stream_create(tide_sim *sim, tide_stream *out);

/* Queues work on a stream: run(arg) is called on the stream's thread, in order, no sooner than
 * delay_us microseconds after this call. run may call tidepool (tide_release, for example). */
typedef void (*tide_sim_work_fn)(void *arg);
TIDE_API tide_status tide_sim_enqueue(tide_sim *sim, tide_stream stream, uint32_t delay_us,
                                      tide_sim_work_fn run, void *arg);

/* Waits until all work queued so far on one stream, or on all streams, is done. */
TIDE_API tide_status tide_sim_stream_synchronize(tide_sim *sim, tide_stream stream);
TIDE_API tide_status tide_sim_synchronize(tide_sim *sim);

/* Fault injection: of the next calls of one backend function, let `skip` succeed and make the `count`
 * after them fail (UINT32_MAX: every one after them). A new call replaces the last plan for that op. */
typedef enum tide_sim_op {
    TIDE_SIM_RESERVE = 0,
    TIDE_SIM_RELEASE,
    TIDE_SIM_FENCE_CREATE,
    TIDE_SIM_FENCE_RECORD,
    TIDE_SIM_FENCE_QUERY,
    TIDE_SIM_SYNCHRONIZE,
    TIDE_SIM_MEM_INFO,
    TIDE_SIM_FILL,
    TIDE_SIM_VERIFY,
    TIDE_SIM_VA_RESERVE,
    TIDE_SIM_VA_RELEASE,
    TIDE_SIM_MAP,
    TIDE_SIM_UNMAP,
    TIDE_SIM_HOST_ALLOC,       /* host memory for offloaded contents (tide_pool_sleep) */
    TIDE_SIM_COPY_TO_HOST,
    TIDE_SIM_COPY_TO_DEVICE,
    TIDE_SIM_IPC_OPEN,         /* opening another device's segment (tide_ipc_open) */
    TIDE_SIM_IPC_CLOSE,
    TIDE_SIM_OP_COUNT
} tide_sim_op;
TIDE_API void tide_sim_inject_fault(tide_sim *sim, tide_sim_op op, uint32_t skip, uint32_t count);

/* Device memory is modelled as virtual ranges and physical pages apart: va_reserve takes addresses
 * only; map puts pages behind them (counted in held_bytes and mapped_pages, and the device's free
 * memory falls), unmap takes them away (their contents are gone: the host gets the memory back, and
 * a touch faults) while the range and its addresses stay reserved. host_alloc, host_free,
 * copy_to_host and copy_to_device (tide_pool_sleep's offload) take host memory and copy between it
 * and mapped pages, checking that every page copied is mapped. */

/* What the device saw: calls of each backend function (failed ones included) and what it holds. */
typedef struct tide_sim_counters {
    uint64_t calls[TIDE_SIM_OP_COUNT];
    uint64_t failures[TIDE_SIM_OP_COUNT];
    uint64_t held_bytes;       /* reserved or mapped, and not yet released or unmapped */
    uint64_t held_segments;    /* reserved segments (reserve) */
    uint64_t mapped_pages;     /* pages mapped (map), each page_size bytes; counted in held_bytes */
    uint64_t va_ranges;        /* address ranges reserved (va_reserve) and not yet released */
    uint64_t live_fences;      /* created and not yet destroyed */
    uint64_t host_bytes;       /* host memory taken by host_alloc and not yet freed (the "pinned"
                                  memory of offloaded contents) */
    uint64_t host_buffers;     /* ... in this many buffers */
    uint64_t copied_bytes;     /* by copy_to_host and copy_to_device, since creation */
    uint64_t ipc_openings;     /* other devices' segments this one has open (ipc_open) and not closed */
} tide_sim_counters;
TIDE_API void tide_sim_get_counters(tide_sim *sim, tide_sim_counters *out);

/* Memory shared between processes (CUDA IPC), simulated between devices of one process. Writes into
 * handle the TIDE_SIM_IPC_HANDLE_BYTES bytes that name the segment holding addr (one reserve made; an
 * address anywhere in it will do, as for cuIpcGetMemHandle), for another simulated device to open
 * through its backend's ipc_open (tide_ipc_open on an allocator over that device). The opening device
 * gets the segment's own address, since both live in one address space, and reads and writes what
 * this one does. As the CUDA driver, a device refuses to open a handle of its own memory, a handle it
 * has open already (a second open before the close fails, so a caller that does not count its
 * openings shows), and a handle whose segment is gone. Unlike CUDA, where the memory lasts until the
 * last opening closes, the memory goes when this device releases the segment: keep the block
 * allocated while another device has it open, as PyTorch's reference counts do. Pages mapped into a
 * reserved range (expandable segments) have no such handle: TIDE_EINVAL, as for any address that is
 * not in a reserved segment. */
#define TIDE_SIM_IPC_HANDLE_BYTES 64
TIDE_API tide_status tide_sim_ipc_handle(tide_sim *sim, uintptr_t addr, void *handle);

/* The name of a tide_sim_op ("reserve", "fence_create", ...). */
TIDE_API const char *tide_sim_op_name(tide_sim_op op);

#ifdef __cplusplus
}
#endif

#endif /* TIDEPOOL_SIM_H */

/*
 * The CUDA backend: device memory, fences and synchronization through the CUDA driver API.
 *
 * The driver is loaded at run time with dlopen, so libtidepool builds, links and runs on machines
 * without CUDA, and picks a GPU up where there is one. The types and constants below are the driver
 * API's own (cuda.h); they are declared here so no CUDA header is needed to build.
 *
 * With expandable segments, memory comes from the driver's virtual memory API instead: an address range
 * reserved once (cuMemAddressReserve), and pages of physical memory created (cuMemCreate), mapped into
 * it (cuMemMap) and made accessible (cuMemSetAccess) one page each, so that any page can be unmapped
 * (cuMemUnmap) on its own later. A page's handle is released (cuMemRelease) as soon as it is mapped:
 * the mapping keeps the memory, and unmapping it frees it.
 *
 * Every call works in the device's primary context, the one the CUDA runtime (and so PyTorch and CuPy)
 * uses, made current only for the call if the calling thread has another one current. Fences are
 * events created without timing; tidepool pools and reuses them.
 */
#include "internal.h"
#include "tidepool_cuda.h"

#include "guard_verify_ptx.h"

#include <dlfcn.h>
#include <stdlib.h>
#include <string.h>

typedef int CUresult;
typedef int CUdevice;
typedef struct CUctx_st *CUcontext;
typedef struct CUstream_st *CUstream;
typedef struct CUevent_st *CUevent;
typedef unsigned long long CUdeviceptr;
typedef struct CUmod_st *CUmodule;
typedef struct CUfunc_st *CUfunction;
typedef unsigned long long CUmemGenericAllocationHandle;
typedef struct {
    int type, id;                     /* CUmemLocationType, the device ordinal */
} CUmemLocation;
typedef struct {
    int type;                         /* CUmemAllocationType */
    int requestedHandleTypes;         /* CUmemAllocationHandleType */
    CUmemLocation location;
    void *win32HandleMetaData;
    struct {
        unsigned char compressionType, gpuDirectRDMACapable;
        unsigned short usage;
        unsigned char reserved[4];
    } allocFlags;
} CUmemAllocationProp;
typedef struct {
    CUmemLocation location;
    int flags;                        /* CUmemAccess_flags */
} CUmemAccessDesc;
typedef struct {
    char reserved[64];                /* CU_IPC_HANDLE_SIZE */
} CUipcMemHandle;

enum {
    CUDA_SUCCESS = 0,
    CUDA_ERROR_OUT_OF_MEMORY = 2,
    CUDA_ERROR_DEINITIALIZED = 4,
    CUDA_ERROR_NOT_READY = 600,
    CU_EVENT_DISABLE_TIMING = 2,
    CU_MEM_ALLOCATION_TYPE_PINNED = 1,
    CU_MEM_LOCATION_TYPE_DEVICE = 1,
    CU_MEM_ACCESS_FLAGS_PROT_READWRITE = 3,
    CU_MEM_ALLOC_GRANULARITY_MINIMUM = 0,
    CU_IPC_MEM_LAZY_ENABLE_PEER_ACCESS = 1,
};

/* The driver functions tidepool uses, by the names the driver exports. */
static struct driver {
    CUresult (*Init)(unsigned);
    CUresult (*DeviceGetCount)(int *);
    CUresult (*DeviceGet)(CUdevice *, int);
    CUresult (*DevicePrimaryCtxRetain)(CUcontext *, CUdevice);
    CUresult (*DevicePrimaryCtxRelease)(CUdevice);
    CUresult (*CtxGetCurrent)(CUcontext *);
    CUresult (*CtxPushCurrent)(CUcontext);
    CUresult (*CtxPopCurrent)(CUcontext *);
    CUresult (*CtxSynchronize)(void);
    CUresult (*MemAlloc)(CUdeviceptr *, size_t);
    CUresult (*MemFree)(CUdeviceptr);
    CUresult (*MemGetInfo)(size_t *, size_t *);
    CUresult (*EventCreate)(CUevent *, unsigned);
    CUresult (*EventRecord)(CUevent, CUstream);
    CUresult (*EventQuery)(CUevent);
    CUresult (*EventSynchronize)(CUevent);
    CUresult (*EventDestroy)(CUevent);
    CUresult (*GetErrorName)(CUresult, const char **);
    CUresult (*GetErrorString)(CUresult, const char **);
    /* scrub and guard */
    CUresult (*MemsetD8Async)(CUdeviceptr, unsigned char, size_t, CUstream);
    CUresult (*MemcpyDtoHAsync)(void *, CUdeviceptr, size_t, CUstream);
    CUresult (*StreamSynchronize)(CUstream);
    CUresult (*ModuleLoadData)(CUmodule *, const void *);
    CUresult (*ModuleUnload)(CUmodule);
    CUresult (*ModuleGetFunction)(CUfunction *, CUmodule, const char *);
    CUresult (*LaunchKernel)(CUfunction, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned,
                             unsigned, CUstream, void **, void **);
    /* virtual memory (expandable segments); optional: NULL if the driver lacks them */
    CUresult (*MemGetAllocationGranularity)(size_t *, const CUmemAllocationProp *, int);
    CUresult (*MemAddressReserve)(CUdeviceptr *, size_t, size_t, CUdeviceptr, unsigned long long);
    CUresult (*MemAddressFree)(CUdeviceptr, size_t);
    CUresult (*MemCreate)(CUmemGenericAllocationHandle *, size_t, const CUmemAllocationProp *,
                          unsigned long long);
    CUresult (*MemRelease)(CUmemGenericAllocationHandle);
    CUresult (*MemMap)(CUdeviceptr, size_t, size_t, CUmemGenericAllocationHandle, unsigned long long);
    CUresult (*MemUnmap)(CUdeviceptr, size_t);
    CUresult (*MemSetAccess)(CUdeviceptr, size_t, const CUmemAccessDesc *, size_t);
    CUresult (*DeviceCanAccessPeer)(int *, CUdevice, CUdevice);
    /* graph capture: a reservation made while a stream is capturing (CUDA 10.1 and later) */
    CUresult (*ThreadExchangeStreamCaptureMode)(int *);
    /* sleeping pools' offloaded contents: pinned host memory and copies (optional: the sleep's
     * TIDE_SLEEP_OFFLOAD is unsupported without them) */
    CUresult (*MemHostAlloc)(void **, size_t, unsigned);
    CUresult (*MemFreeHost)(void *);
    CUresult (*MemcpyDtoH)(void *, CUdeviceptr, size_t);
    CUresult (*MemcpyHtoD)(CUdeviceptr, const void *, size_t);
    /* another process's memory (tide_ipc_open); optional: unsupported without them */
    CUresult (*IpcOpenMemHandle)(CUdeviceptr *, CUipcMemHandle, unsigned);
    CUresult (*IpcCloseMemHandle)(CUdeviceptr);
} cu;

static pthread_once_t driver_once = PTHREAD_ONCE_INIT;
static char driver_problem[512]; /* why the driver could not be loaded, or "" */
static CUresult driver_init_result;

static void load_driver(void)
{
    void *lib = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
    if (!lib) {
        /* The reason is libcuda.so.1's, the driver's own name: the unversioned name tried next
         * exists only where CUDA's development files are, and its error would name another file. */
        const char *why = dlerror();
        snprintf(driver_problem, sizeof driver_problem, "the CUDA driver (libcuda.so.1) is not on this "
                 "machine: %s", why ? why : "dlopen failed");
        lib = dlopen("libcuda.so", RTLD_NOW | RTLD_LOCAL);
        if (!lib)
            return;
        driver_problem[0] = '\0';
    }
    /* Every symbol is required, except those marked OPTIONAL: the virtual memory calls (CUDA 10.2 and
     * later), without which expandable segments are unsupported (vm_setup), and the calls of sleeping
     * pools' offload and of IPC, without which those are; all else works. */
    static const struct {
        const char *name;
        size_t offset;
        bool optional;
    } symbols[] = {
#define SYMBOL(field, name) {name, offsetof(struct driver, field), false}
#define OPTIONAL(field, name) {name, offsetof(struct driver, field), true}
        SYMBOL(Init, "cuInit"),
        SYMBOL(DeviceGetCount, "cuDeviceGetCount"),
        SYMBOL(DeviceGet, "cuDeviceGet"),
        SYMBOL(DevicePrimaryCtxRetain, "cuDevicePrimaryCtxRetain"),
        SYMBOL(DevicePrimaryCtxRelease, "cuDevicePrimaryCtxRelease_v2"),
        SYMBOL(CtxGetCurrent, "cuCtxGetCurrent"),
        SYMBOL(CtxPushCurrent, "cuCtxPushCurrent_v2"),
        SYMBOL(CtxPopCurrent, "cuCtxPopCurrent_v2"),
        SYMBOL(CtxSynchronize, "cuCtxSynchronize"),
        SYMBOL(MemAlloc, "cuMemAlloc_v2"),
        SYMBOL(MemFree, "cuMemFree_v2"),
        SYMBOL(MemGetInfo, "cuMemGetInfo_v2"),
        SYMBOL(EventCreate, "cuEventCreate"),
        SYMBOL(EventRecord, "cuEventRecord"),
        SYMBOL(EventQuery, "cuEventQuery"),
        SYMBOL(EventSynchronize, "cuEventSynchronize"),
        SYMBOL(EventDestroy, "cuEventDestroy_v2"),
        SYMBOL(GetErrorName, "cuGetErrorName"),
        SYMBOL(GetErrorString, "cuGetErrorString"),
        SYMBOL(MemsetD8Async, "cuMemsetD8Async"),
        SYMBOL(MemcpyDtoHAsync, "cuMemcpyDtoHAsync_v2"),
        SYMBOL(StreamSynchronize, "cuStreamSynchronize"),
        SYMBOL(ModuleLoadData, "cuModuleLoadData"),
        SYMBOL(ModuleUnload, "cuModuleUnload"),
        SYMBOL(ModuleGetFunction, "cuModuleGetFunction"),
        SYMBOL(LaunchKernel, "cuLaunchKernel"),
        OPTIONAL(MemGetAllocationGranularity, "cuMemGetAllocationGranularity"),
        OPTIONAL(MemAddressReserve, "cuMemAddressReserve"),
        OPTIONAL(MemAddressFree, "cuMemAddressFree"),
        OPTIONAL(MemCreate, "cuMemCreate"),
        OPTIONAL(MemRelease, "cuMemRelease"),
        OPTIONAL(MemMap, "cuMemMap"),
        OPTIONAL(MemUnmap, "cuMemUnmap"),
        OPTIONAL(MemSetAccess, "cuMemSetAccess"),
        OPTIONAL(DeviceCanAccessPeer, "cuDeviceCanAccessPeer"),
        OPTIONAL(ThreadExchangeStreamCaptureMode, "cuThreadExchangeStreamCaptureMode"),
        OPTIONAL(MemHostAlloc, "cuMemHostAlloc"),
        OPTIONAL(MemFreeHost, "cuMemFreeHost"),
        OPTIONAL(MemcpyDtoH, "cuMemcpyDtoH_v2"),
        OPTIONAL(MemcpyHtoD, "cuMemcpyHtoD_v2"),
        OPTIONAL(IpcOpenMemHandle, "cuIpcOpenMemHandle_v2"),
        OPTIONAL(IpcCloseMemHandle, "cuIpcCloseMemHandle"),
#undef SYMBOL
#undef OPTIONAL
    };
    for (size_t i = 0; i < sizeof symbols / sizeof symbols[0]; i++) {
        void *f = dlsym(lib, symbols[i].name);
        if (!f && !symbols[i].optional) {
            snprintf(driver_problem, sizeof driver_problem,
                     "the CUDA driver has no %s: it is too old for tidepool", symbols[i].name);
            return;
        }
        memcpy((char *)&cu + symbols[i].offset, &f, sizeof f);
    }
    driver_init_result = cu.Init(0);
}

/* "CUDA_ERROR_INVALID_VALUE (invalid argument)" */
static const char *error_words(CUresult r, char buf[160])
{
    const char *name = NULL, *text = NULL;
    if (cu.GetErrorName)
        cu.GetErrorName(r, &name);
    if (cu.GetErrorString)
        cu.GetErrorString(r, &text);
    snprintf(buf, 160, "%s (%s)", name ? name : "CUDA error", text ? text : "no description");
    return buf;
}

/* Maps a driver result to a status, with the driver's words in the thread's message. */
static tide_status driver_failed(CUresult r, const char *call)
{
    char words[160];
    tide_backend_error("%s: %s", call, error_words(r, words));
    return r == CUDA_ERROR_OUT_OF_MEMORY ? TIDE_ENOMEM : TIDE_EDEVICE;
}

static tide_status driver_ready(void)
{
    pthread_once(&driver_once, load_driver);
    if (driver_problem[0])
        return tide__fail(TIDE_EUNSUPPORTED, "%s", driver_problem);
    if (driver_init_result != CUDA_SUCCESS) {
        char words[160];
        return tide__fail(TIDE_EUNSUPPORTED, "cuInit: %s", error_words(driver_init_result, words));
    }
    return TIDE_OK;
}

tide_status tide_cuda_device_count(int *out)
{
    if (!out)
        return tide__fail(TIDE_EINVAL, "tide_cuda_device_count: out is NULL");
    *out = 0;
    tide_status s = driver_ready();
    if (s != TIDE_OK)
        return s;
    CUresult r = cu.DeviceGetCount(out);
    if (r != CUDA_SUCCESS)
        return tide__fail_with_context(driver_failed(r, "cuDeviceGetCount"), "counting CUDA devices");
    return TIDE_OK;
}

/* ---- one device ------------------------------------------------------------------------------------ */

struct cuda_device {
    int ordinal;
    CUdevice dev;
    CUcontext ctx;
    /* guard:True, loaded on first use: the verify kernel and the word it reports into (one check at a
     * time per device: it is a debugging mode) */
    pthread_mutex_t verify_lock;
    CUmodule verify_module;
    CUfunction verify_kernel;
    CUdeviceptr verify_result;
    /* expandable segments */
    size_t page;                      /* a multiple of the driver's granularity and of 2 MiB */
    CUmemAllocationProp page_prop;
    CUmemAccessDesc access[TIDE_CUDA_MAX_PEERS + 1]; /* this device, then its peers */
    int naccess;
};

/* Makes the device's context current for one call; undone by leave. */
static CUresult enter(const struct cuda_device *d, bool *pushed)
{
    CUcontext cur = NULL;
    *pushed = false;
    CUresult r = cu.CtxGetCurrent(&cur);
    if (r != CUDA_SUCCESS || cur == d->ctx)
        return r;
    r = cu.CtxPushCurrent(d->ctx);
    *pushed = r == CUDA_SUCCESS;
    return r;
}

static void leave(bool pushed)
{
    CUcontext popped;
    if (pushed)
        cu.CtxPopCurrent(&popped);
}

/* Runs one driver call in the device's context: `call` is an expression using the driver. */
#define IN_CONTEXT(d, result, call)                                                                \
    do {                                                                                           \
        bool pushed_;                                                                              \
        (result) = enter((d), &pushed_);                                                           \
        if ((result) == CUDA_SUCCESS)                                                              \
            (result) = (call);                                                                     \
        leave(pushed_);                                                                            \
    } while (0)

/* CU_STREAM_CAPTURE_MODE_RELAXED: this thread may make calls a capture would otherwise refuse. */
enum { CAPTURE_MODE_RELAXED = 2 };

static tide_status cuda_reserve(void *ctx, size_t size, uintptr_t *out)
{
    CUdeviceptr p = 0;
    CUresult r;
    /* A segment reserved while some stream is capturing a graph (tide_capture_begin): cuMemAlloc is
     * not work on a stream, but a capture in global mode refuses it unless this thread relaxes its
     * mode around the call, as PyTorch's own allocator does. */
    int mode = CAPTURE_MODE_RELAXED;
    bool relaxed = cu.ThreadExchangeStreamCaptureMode && cu.ThreadExchangeStreamCaptureMode(&mode) == CUDA_SUCCESS;
    IN_CONTEXT(ctx, r, cu.MemAlloc(&p, size));
    if (relaxed)
        cu.ThreadExchangeStreamCaptureMode(&mode);
    if (r != CUDA_SUCCESS)
        return driver_failed(r, "cuMemAlloc");
    *out = (uintptr_t)p;
    return TIDE_OK;
}

static tide_status cuda_release(void *ctx, uintptr_t addr, size_t size)
{
    (void)size;
    CUresult r;
    IN_CONTEXT(ctx, r, cu.MemFree((CUdeviceptr)addr));
    /* At process exit the driver may be torn down before the last frees: the memory went with it. */
    if (r == CUDA_ERROR_DEINITIALIZED)
        return TIDE_OK;
    return r == CUDA_SUCCESS ? TIDE_OK : driver_failed(r, "cuMemFree");
}

static tide_status cuda_fence_create(void *ctx, void **out)
{
    CUevent e = NULL;
    CUresult r;
    IN_CONTEXT(ctx, r, cu.EventCreate(&e, CU_EVENT_DISABLE_TIMING));
    if (r != CUDA_SUCCESS)
        return driver_failed(r, "cuEventCreate");
    *out = e;
    return TIDE_OK;
}

static tide_status cuda_fence_record(void *ctx, void *fence, tide_stream stream)
{
    CUresult r;
    IN_CONTEXT(ctx, r, cu.EventRecord((CUevent)fence, (CUstream)stream));
    return r == CUDA_SUCCESS ? TIDE_OK : driver_failed(r, "cuEventRecord");
}

static tide_status cuda_fence_query(void *ctx, void *fence)
{
    CUresult r;
    IN_CONTEXT(ctx, r, cu.EventQuery((CUevent)fence));
    if (r == CUDA_SUCCESS)
        return TIDE_OK;
    if (r == CUDA_ERROR_NOT_READY)
        return TIDE_ENOTREADY;
    return driver_failed(r, "cuEventQuery");
}

static tide_status cuda_fence_wait(void *ctx, void *fence)
{
    CUresult r;
    IN_CONTEXT(ctx, r, cu.EventSynchronize((CUevent)fence));
    return r == CUDA_SUCCESS ? TIDE_OK : driver_failed(r, "cuEventSynchronize");
}

static void cuda_fence_destroy(void *ctx, void *fence)
{
    CUresult r;
    IN_CONTEXT(ctx, r, cu.EventDestroy((CUevent)fence));
    (void)r; /* nothing to do about a failure here, and at exit the driver may be gone */
}

static tide_status cuda_synchronize(void *ctx)
{
    CUresult r;
    IN_CONTEXT(ctx, r, cu.CtxSynchronize());
    return r == CUDA_SUCCESS ? TIDE_OK : driver_failed(r, "cuCtxSynchronize");
}

static tide_status cuda_mem_info(void *ctx, size_t *free_bytes, size_t *total_bytes)
{
    CUresult r;
    IN_CONTEXT(ctx, r, cu.MemGetInfo(free_bytes, total_bytes));
    return r == CUDA_SUCCESS ? TIDE_OK : driver_failed(r, "cuMemGetInfo");
}

static tide_status cuda_fill(void *ctx, uintptr_t addr, size_t size, uint8_t value, tide_stream stream)
{
    CUresult r;
    IN_CONTEXT(ctx, r, cu.MemsetD8Async((CUdeviceptr)addr, value, size, (CUstream)stream));
    return r == CUDA_SUCCESS ? TIDE_OK : driver_failed(r, "cuMemsetD8Async");
}

/* Under verify_lock, in the device's context. */
static CUresult verify_load(struct cuda_device *d)
{
    if (d->verify_kernel)
        return CUDA_SUCCESS;
    CUresult r = cu.ModuleLoadData(&d->verify_module, guard_verify_ptx);
    if (r == CUDA_SUCCESS)
        r = cu.ModuleGetFunction(&d->verify_kernel, d->verify_module, "tide_guard_verify");
    if (r == CUDA_SUCCESS)
        r = cu.MemAlloc(&d->verify_result, sizeof(unsigned long long));
    if (r != CUDA_SUCCESS)
        d->verify_kernel = NULL;
    return r;
}

/* Checks on the device, in order on the stream, then waits for the stream to read the answer. */
static CUresult verify_run(struct cuda_device *d, uintptr_t addr, size_t size, uint8_t value,
                           CUstream stream, unsigned long long *first_bad)
{
    CUresult r = verify_load(d);
    if (r != CUDA_SUCCESS)
        return r;
    CUdeviceptr p = (CUdeviceptr)addr;
    unsigned long long n = size;
    unsigned int v = value;
    void *args[] = {&p, &n, &v, &d->verify_result};
    unsigned threads = 256, blocks = (unsigned)((n + threads - 1) / threads);
    if (blocks > 1024)
        blocks = 1024;
    if (blocks == 0)
        blocks = 1;
    if ((r = cu.MemsetD8Async(d->verify_result, 0xFF, sizeof *first_bad, stream)) != CUDA_SUCCESS ||
        (r = cu.LaunchKernel(d->verify_kernel, blocks, 1, 1, threads, 1, 1, 0, stream, args, NULL)) !=
            CUDA_SUCCESS ||
        (r = cu.MemcpyDtoHAsync(first_bad, d->verify_result, sizeof *first_bad, stream)) != CUDA_SUCCESS)
        return r;
    return cu.StreamSynchronize(stream);
}

static tide_status cuda_verify(void *ctx, uintptr_t addr, size_t size, uint8_t value, tide_stream stream,
                               size_t *first_bad)
{
    struct cuda_device *d = ctx;
    unsigned long long bad = ~0ull;
    CUresult r;
    pthread_mutex_lock(&d->verify_lock);
    IN_CONTEXT(d, r, verify_run(d, addr, size, value, (CUstream)stream, &bad));
    pthread_mutex_unlock(&d->verify_lock);
    if (r != CUDA_SUCCESS)
        return driver_failed(r, "checking bytes on the device (tide_guard_verify)");
    if (bad == ~0ull)
        return TIDE_OK;
    *first_bad = (size_t)bad;
    return TIDE_ECORRUPT;
}

/* ---- virtual memory (expandable segments) --------------------------------------------------------- */

static tide_status cuda_va_reserve(void *ctx, size_t size, uintptr_t *out)
{
    struct cuda_device *d = ctx;
    CUdeviceptr p = 0;
    CUresult r;
    IN_CONTEXT(d, r, cu.MemAddressReserve(&p, size, d->page, 0, 0));
    if (r != CUDA_SUCCESS)
        return driver_failed(r, "cuMemAddressReserve");
    *out = (uintptr_t)p;
    return TIDE_OK;
}

static tide_status cuda_va_release(void *ctx, uintptr_t addr, size_t size)
{
    CUresult r;
    IN_CONTEXT((struct cuda_device *)ctx, r, cu.MemAddressFree((CUdeviceptr)addr, size));
    if (r == CUDA_ERROR_DEINITIALIZED)
        return TIDE_OK;
    return r == CUDA_SUCCESS ? TIDE_OK : driver_failed(r, "cuMemAddressFree");
}

/* In the device's context: one handle for the whole range (tidepool unmaps it whole), then access. A
 * failure leaves nothing mapped. */
static CUresult map_range(const struct cuda_device *d, CUdeviceptr addr, size_t size, const char **call)
{
    CUmemGenericAllocationHandle h;
    CUresult r = cu.MemCreate(&h, size, &d->page_prop, 0);
    if (r != CUDA_SUCCESS) {
        *call = "cuMemCreate";
        return r;
    }
    r = cu.MemMap(addr, size, 0, h, 0);
    cu.MemRelease(h); /* the mapping holds the memory from now on */
    if (r != CUDA_SUCCESS) {
        *call = "cuMemMap";
        return r;
    }
    if ((r = cu.MemSetAccess(addr, size, d->access, (size_t)d->naccess)) != CUDA_SUCCESS) {
        *call = "cuMemSetAccess";
        cu.MemUnmap(addr, size);
    }
    return r;
}

static tide_status cuda_map(void *ctx, uintptr_t addr, size_t size)
{
    struct cuda_device *d = ctx;
    const char *call = "cuMemMap";
    CUresult r;
    IN_CONTEXT(d, r, map_range(d, (CUdeviceptr)addr, size, &call));
    return r == CUDA_SUCCESS ? TIDE_OK : driver_failed(r, call);
}

static tide_status cuda_unmap(void *ctx, uintptr_t addr, size_t size)
{
    struct cuda_device *d = ctx;
    CUresult r;
    /* Work queued on the block's stream may still touch pages tidepool counts as FREE (a stream reuses
     * its own blocks in order); unlike cuMemFree, cuMemUnmap does not wait for it, so wait here. */
    IN_CONTEXT(d, r, cu.CtxSynchronize());
    if (r == CUDA_SUCCESS)
        IN_CONTEXT(d, r, cu.MemUnmap((CUdeviceptr)addr, size)); /* exactly one mapping (map_range) */
    if (r == CUDA_ERROR_DEINITIALIZED)
        return TIDE_OK;
    return r == CUDA_SUCCESS ? TIDE_OK : driver_failed(r, "cuMemUnmap");
}

/* ---- pinned host memory and copies (sleeping pools' offloaded contents) ------------------------------- */

/* Page-locked, so that the copies run at the link's full speed (a copy from pageable memory goes
 * through a staging buffer at about half of it); portable, so any context may copy from it. */
enum { CU_MEMHOSTALLOC_PORTABLE = 1 };

static tide_status cuda_host_alloc(void *ctx, size_t size, void **out)
{
    CUresult r;
    IN_CONTEXT(ctx, r, cu.MemHostAlloc(out, size, CU_MEMHOSTALLOC_PORTABLE));
    return r == CUDA_SUCCESS ? TIDE_OK : driver_failed(r, "cuMemHostAlloc");
}

static void cuda_host_free(void *ctx, void *ptr, size_t size)
{
    (void)size;
    CUresult r;
    IN_CONTEXT(ctx, r, cu.MemFreeHost(ptr));
    (void)r;
}

/* The synchronous copies: tidepool calls them after synchronizing the device, and needs them done
 * before it unmaps the pages (to host) or hands the pool back (to device). */
static tide_status cuda_copy_to_host(void *ctx, void *dst, uintptr_t src, size_t size)
{
    CUresult r;
    IN_CONTEXT(ctx, r, cu.MemcpyDtoH(dst, (CUdeviceptr)src, size));
    return r == CUDA_SUCCESS ? TIDE_OK : driver_failed(r, "cuMemcpyDtoH");
}

static tide_status cuda_copy_to_device(void *ctx, uintptr_t dst, const void *src, size_t size)
{
    CUresult r;
    IN_CONTEXT(ctx, r, cu.MemcpyHtoD((CUdeviceptr)dst, src, size));
    return r == CUDA_SUCCESS ? TIDE_OK : driver_failed(r, "cuMemcpyHtoD");
}

/* ---- another process's memory (tide_ipc_open) ------------------------------------------------------ */

/* Opened with peer access enabled lazily, as PyTorch's allocator opens a handle: the memory may be on
 * another device than this context's. tidepool opens each handle once (ipc.c), which is all the
 * driver allows before it is closed. */
static tide_status cuda_ipc_open(void *ctx, const void *handle, size_t handle_len, uintptr_t *out)
{
    CUipcMemHandle h;
    if (handle_len != sizeof h) {
        tide_backend_error("cuda: ipc_open: a CUDA IPC handle is %zu bytes, not %zu", sizeof h, handle_len);
        return TIDE_EINVAL;
    }
    memcpy(&h, handle, sizeof h);
    CUdeviceptr p = 0;
    CUresult r;
    IN_CONTEXT(ctx, r, cu.IpcOpenMemHandle(&p, h, CU_IPC_MEM_LAZY_ENABLE_PEER_ACCESS));
    if (r != CUDA_SUCCESS)
        return driver_failed(r, "cuIpcOpenMemHandle");
    *out = (uintptr_t)p;
    return TIDE_OK;
}

static tide_status cuda_ipc_close(void *ctx, uintptr_t addr)
{
    CUresult r;
    IN_CONTEXT(ctx, r, cu.IpcCloseMemHandle((CUdeviceptr)addr));
    if (r == CUDA_ERROR_DEINITIALIZED) /* at exit: the mapping went with the driver */
        return TIDE_OK;
    return r == CUDA_SUCCESS ? TIDE_OK : driver_failed(r, "cuIpcCloseMemHandle");
}

/* Fills in the page size and the access list; leaves virtual memory off (NULL functions) if the
 * driver lacks it. */
static void vm_setup(struct cuda_device *d, const int *peers, int npeers, tide_backend *out)
{
    if (!cu.MemGetAllocationGranularity || !cu.MemAddressReserve || !cu.MemAddressFree || !cu.MemCreate ||
        !cu.MemRelease || !cu.MemMap || !cu.MemUnmap || !cu.MemSetAccess)
        return;
    d->page_prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
    d->page_prop.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
    d->page_prop.location.id = d->ordinal;
    size_t granularity = 0;
    if (cu.MemGetAllocationGranularity(&granularity, &d->page_prop, CU_MEM_ALLOC_GRANULARITY_MINIMUM) !=
            CUDA_SUCCESS ||
        granularity == 0)
        return;
    d->page = TIDE_SEGMENT_GRANULE;
    while (d->page % granularity)
        d->page += TIDE_SEGMENT_GRANULE;
    d->access[0] = (CUmemAccessDesc){{CU_MEM_LOCATION_TYPE_DEVICE, d->ordinal}, CU_MEM_ACCESS_FLAGS_PROT_READWRITE};
    d->naccess = 1;
    for (int i = 0; i < npeers; i++)
        d->access[d->naccess++] =
            (CUmemAccessDesc){{CU_MEM_LOCATION_TYPE_DEVICE, peers[i]}, CU_MEM_ACCESS_FLAGS_PROT_READWRITE};
    out->page_size = d->page;
    out->va_reserve = cuda_va_reserve;
    out->va_release = cuda_va_release;
    out->map = cuda_map;
    out->unmap = cuda_unmap;
}

static void cuda_close(void *ctx)
{
    struct cuda_device *d = ctx;
    if (!d)
        return;
    if (d->verify_kernel) {
        CUresult r;
        IN_CONTEXT(d, r, cu.MemFree(d->verify_result));
        IN_CONTEXT(d, r, cu.ModuleUnload(d->verify_module));
        (void)r; /* at exit the driver may be gone already */
    }
    pthread_mutex_destroy(&d->verify_lock);
    cu.DevicePrimaryCtxRelease(d->dev);
    free(d);
}

int cuda_peers_of(int device, int *peers, int cap)
{
    int count = 0, n = 0;
    if (driver_ready() != TIDE_OK || cu.DeviceGetCount(&count) != CUDA_SUCCESS || !cu.DeviceCanAccessPeer)
        return -1;
    CUdevice self, other;
    if (cu.DeviceGet(&self, device) != CUDA_SUCCESS)
        return -1;
    for (int i = 0; i < count && n < cap; i++) {
        int can = 0;
        if (i != device && cu.DeviceGet(&other, i) == CUDA_SUCCESS &&
            cu.DeviceCanAccessPeer(&can, other, self) == CUDA_SUCCESS && can)
            peers[n++] = i;
    }
    return n;
}

tide_status tide_backend_cuda(int device, tide_backend *out)
{
    return tide_backend_cuda_peers(device, NULL, 0, out);
}

tide_status tide_backend_cuda_peers(int device, const int *peers, int npeers, tide_backend *out)
{
    if (!out)
        return tide__fail(TIDE_EINVAL, "tide_backend_cuda: out is NULL");
    memset(out, 0, sizeof *out);
    tide_status s = driver_ready();
    if (s != TIDE_OK)
        return s;
    int count = 0;
    CUresult r = cu.DeviceGetCount(&count);
    if (r != CUDA_SUCCESS)
        return tide__fail_with_context(driver_failed(r, "cuDeviceGetCount"), "tide_backend_cuda");
    if (device < 0 || device >= count)
        return tide__fail(TIDE_EINVAL, "tide_backend_cuda: no CUDA device %d (this machine has %d)",
                          device, count);
    if (npeers < 0 || npeers > TIDE_CUDA_MAX_PEERS || (npeers && !peers))
        return tide__fail(TIDE_EINVAL, "tide_backend_cuda_peers: %d peers (at most %d)", npeers,
                          TIDE_CUDA_MAX_PEERS);
    for (int i = 0; i < npeers; i++) {
        int can = 0;
        CUdevice a, b;
        if (peers[i] < 0 || peers[i] >= count || peers[i] == device)
            return tide__fail(TIDE_EINVAL, "tide_backend_cuda_peers: %d is not another CUDA device of "
                              "this machine (it has %d)", peers[i], count);
        if (!cu.DeviceCanAccessPeer || cu.DeviceGet(&a, peers[i]) != CUDA_SUCCESS ||
            cu.DeviceGet(&b, device) != CUDA_SUCCESS || cu.DeviceCanAccessPeer(&can, a, b) != CUDA_SUCCESS ||
            !can)
            return tide__fail(TIDE_EUNSUPPORTED, "tide_backend_cuda_peers: device %d cannot access the "
                              "memory of device %d (no peer access between them)", peers[i], device);
    }
    struct cuda_device *d = calloc(1, sizeof *d);
    if (!d)
        return tide__fail(TIDE_EHOSTMEM, "tide_backend_cuda: out of host memory");
    d->ordinal = device;
    pthread_mutex_init(&d->verify_lock, NULL);
    if ((r = cu.DeviceGet(&d->dev, device)) != CUDA_SUCCESS ||
        (r = cu.DevicePrimaryCtxRetain(&d->ctx, d->dev)) != CUDA_SUCCESS) {
        pthread_mutex_destroy(&d->verify_lock);
        free(d);
        return tide__fail_with_context(driver_failed(r, "cuDevicePrimaryCtxRetain"),
                                       "tide_backend_cuda(%d)", device);
    }
    out->struct_size = sizeof *out;
    out->name = "cuda";
    out->ctx = d;
    out->reserve = cuda_reserve;
    out->release = cuda_release;
    out->fence_create = cuda_fence_create;
    out->fence_record = cuda_fence_record;
    out->fence_query = cuda_fence_query;
    out->fence_wait = cuda_fence_wait;
    out->fence_destroy = cuda_fence_destroy;
    out->synchronize = cuda_synchronize;
    out->mem_info = cuda_mem_info;
    out->close = cuda_close;
    out->fill = cuda_fill;
    out->verify = cuda_verify;
    vm_setup(d, peers, npeers, out);
    if (cu.MemHostAlloc && cu.MemFreeHost && cu.MemcpyDtoH && cu.MemcpyHtoD) {
        out->host_alloc = cuda_host_alloc;
        out->host_free = cuda_host_free;
        out->copy_to_host = cuda_copy_to_host;
        out->copy_to_device = cuda_copy_to_device;
    }
    if (cu.IpcOpenMemHandle && cu.IpcCloseMemHandle) {
        out->ipc_open = cuda_ipc_open;
        out->ipc_close = cuda_ipc_close;
    }
    return TIDE_OK;
}

/*
 * The Vulkan backend: segments are VkDeviceMemory allocations covered by one VkBuffer each, addressed
 * by buffer device address; submitted work holds its blocks (tide_retain) and tidepool's completion
 * thread lets them go (tide_release) when the submission's timeline-semaphore value is reached.
 *
 * The loader (libvulkan.so.1) is opened at run time with dlopen, as the CUDA backend opens the driver,
 * so libtidepool builds and runs where Vulkan is absent. The API's types are declared in vk_api.h.
 *
 * Locks, in the order they may be taken (never the other way):
 *   an allocator's own locks -> queue_lock -> holds_lock;     segments_lock stands alone.
 * tide_release is never called with holds_lock held: the completion thread takes reached holds off the
 * list under it, lets it go, releases their blocks, and counts itself out (releasing), so that a
 * waiter knows when every reached hold has been released. Otherwise a release of a segment (an
 * allocator lock, then queue_lock to wait for the queue) and a submission (queue_lock, then
 * holds_lock) could close a cycle with it.
 */
#include "internal.h"
#include "hot_path.h"
#include "tidepool_vulkan.h"
#include "vk_api.h"

#include <dlfcn.h>
#include <stdlib.h>
#include <string.h>

_Static_assert(sizeof(void *) == 8, "the Vulkan backend assumes 64-bit handles (vk_api.h)");

/* ---- the loader ------------------------------------------------------------------------------------ */

static pthread_once_t loader_once = PTHREAD_ONCE_INIT;
static char loader_problem[512]; /* why the loader could not be used, or "" */
static PFN_vkGetInstanceProcAddr get_instance_proc;

static void load_loader(void)
{
    void *lib = dlopen("libvulkan.so.1", RTLD_NOW | RTLD_LOCAL);
    if (!lib)
        lib = dlopen("libvulkan.so", RTLD_NOW | RTLD_LOCAL);
    if (!lib) {
        snprintf(loader_problem, sizeof loader_problem,
                 "the Vulkan loader (libvulkan.so.1) is not on this machine: %s", dlerror());
        return;
    }
    void *f = dlsym(lib, "vkGetInstanceProcAddr");
    if (!f) {
        snprintf(loader_problem, sizeof loader_problem, "the Vulkan loader has no vkGetInstanceProcAddr");
        return;
    }
    memcpy(&get_instance_proc, &f, sizeof f);
}

static const char *result_name(VkResult r)
{
    switch (r) {
    case VK_SUCCESS: return "VK_SUCCESS";
    case VK_TIMEOUT: return "VK_TIMEOUT";
    case VK_ERROR_OUT_OF_HOST_MEMORY: return "VK_ERROR_OUT_OF_HOST_MEMORY";
    case VK_ERROR_OUT_OF_DEVICE_MEMORY: return "VK_ERROR_OUT_OF_DEVICE_MEMORY";
    case -3: return "VK_ERROR_INITIALIZATION_FAILED";
    case VK_ERROR_DEVICE_LOST: return "VK_ERROR_DEVICE_LOST";
    case -5: return "VK_ERROR_MEMORY_MAP_FAILED";
    case -7: return "VK_ERROR_EXTENSION_NOT_PRESENT";
    case -8: return "VK_ERROR_FEATURE_NOT_PRESENT";
    case -9: return "VK_ERROR_INCOMPATIBLE_DRIVER";
    case -1000257000: return "VK_ERROR_INVALID_OPAQUE_CAPTURE_ADDRESS";
    default: return "a VkResult tidepool does not name";
    }
}

/* Maps a failed call to a status, with the API's words in the thread's message. */
static tide_status vk_failed(VkResult r, const char *call)
{
    tide_backend_error("%s: %s (%d)", call, result_name(r), (int)r);
    return r == VK_ERROR_OUT_OF_DEVICE_MEMORY ? TIDE_ENOMEM
           : r == VK_ERROR_OUT_OF_HOST_MEMORY ? TIDE_EHOSTMEM
                                              : TIDE_EDEVICE;
}

/* ---- one device ------------------------------------------------------------------------------------ */

/* The functions of the instance and of the device, by the names the API gives them. */
struct vk_functions {
    VkResult (*CreateInstance)(const VkInstanceCreateInfo *, const void *, VkInstance *);
    void (*DestroyInstance)(VkInstance, const void *);
    VkResult (*EnumeratePhysicalDevices)(VkInstance, uint32_t *, VkPhysicalDevice *);
    void (*GetPhysicalDeviceProperties)(VkPhysicalDevice, VkPhysicalDeviceProperties *);
    void (*GetPhysicalDeviceFeatures2)(VkPhysicalDevice, VkPhysicalDeviceFeatures2 *);
    void (*GetPhysicalDeviceQueueFamilyProperties)(VkPhysicalDevice, uint32_t *, VkQueueFamilyProperties *);
    void (*GetPhysicalDeviceMemoryProperties)(VkPhysicalDevice, VkPhysicalDeviceMemoryProperties *);
    VkResult (*CreateDevice)(VkPhysicalDevice, const VkDeviceCreateInfo *, const void *, VkDevice *);
    PFN_vkGetDeviceProcAddr GetDeviceProcAddr;
    /* the device's */
    void (*DestroyDevice)(VkDevice, const void *);
    void (*GetDeviceQueue)(VkDevice, uint32_t, uint32_t, VkQueue *);
    VkResult (*CreateBuffer)(VkDevice, const VkBufferCreateInfo *, const void *, VkBuffer *);
    void (*DestroyBuffer)(VkDevice, VkBuffer, const void *);
    void (*GetBufferMemoryRequirements)(VkDevice, VkBuffer, VkMemoryRequirements *);
    VkResult (*AllocateMemory)(VkDevice, const VkMemoryAllocateInfo *, const void *, VkDeviceMemory *);
    void (*FreeMemory)(VkDevice, VkDeviceMemory, const void *);
    VkResult (*BindBufferMemory)(VkDevice, VkBuffer, VkDeviceMemory, VkDeviceSize);
    VkResult (*MapMemory)(VkDevice, VkDeviceMemory, VkDeviceSize, VkDeviceSize, VkFlags, void **);
    VkDeviceAddress (*GetBufferDeviceAddress)(VkDevice, const VkBufferDeviceAddressInfo *);
    VkResult (*CreateSemaphore)(VkDevice, const VkSemaphoreCreateInfo *, const void *, VkSemaphore *);
    void (*DestroySemaphore)(VkDevice, VkSemaphore, const void *);
    VkResult (*QueueSubmit)(VkQueue, uint32_t, const VkSubmitInfo *, void *);
    VkResult (*QueueWaitIdle)(VkQueue);
    VkResult (*WaitSemaphores)(VkDevice, const VkSemaphoreWaitInfo *, uint64_t);
    VkResult (*SignalSemaphore)(VkDevice, const VkSemaphoreSignalInfo *);
    VkResult (*GetSemaphoreCounterValue)(VkDevice, VkSemaphore, uint64_t *);
};

/* One segment: the memory, the buffer over it, and where tidepool's blocks begin (base: the buffer's
 * device address, moved up to 512 bytes if the device gave a less aligned one). */
struct vk_segment {
    uintptr_t base;
    size_t size;
    VkDeviceAddress buffer_address;
    VkBuffer buffer;
    VkDeviceMemory memory;
    void *host;                       /* the mapping (host_visible), at buffer_address */
    size_t slack;                     /* bytes the buffer has beyond size (alignment) */
};

#define HOLD_INLINE_BLOCKS 8
/* The blocks one submission holds until semaphore reaches value. */
struct hold {
    struct hold *next;
    tide_allocator *t;
    VkSemaphore semaphore;
    uint64_t value;
    size_t n;
    void **blocks;                    /* inline, or its own array when there are more */
    void *inline_blocks[HOLD_INLINE_BLOCKS];
};

#define WAIT_SET_MAX 16               /* semaphores the completion thread waits on at once */

struct tide_vk {
    struct vk_functions f;
    VkInstance instance;
    VkPhysicalDevice physical;
    VkDevice device;
    VkQueue queue;
    uint32_t queue_family;
    uint32_t api_version;
    char device_name[256];
    uint32_t memory_type;
    uint64_t heap_bytes;
    bool host_visible;

    /* the queue and tidepool's timeline on it */
    pthread_mutex_t queue_lock;
    VkSemaphore timeline;
    uint64_t timeline_next;           /* the last value a submission will signal */

    /* segments, by base */
    pthread_mutex_t segments_lock;
    struct vk_segment *segments;
    size_t nsegments, segments_cap;

    /* holds and the completion thread */
    pthread_mutex_t holds_lock;
    pthread_cond_t holds_cv;          /* a hold arrived, or stopping */
    pthread_cond_t released_cv;       /* releasing dropped */
    struct hold *head, *tail, *spare;
    unsigned releasing;               /* threads releasing holds taken off the list */
    bool stopping, waiting;
    VkSemaphore wait_set[WAIT_SET_MAX]; /* what the completion thread waits for now */
    uint64_t wait_values[WAIT_SET_MAX];
    uint32_t wait_set_n;
    VkSemaphore wake;                 /* signalled from the host to end the completion thread's wait */
    uint64_t wake_value;
    pthread_t completion;
    bool completion_started;
    char completion_problem[256];     /* a wait that failed (device lost): holds stay held */

    /* counters */
    _Atomic(uint64_t) memory_allocations, memory_frees, held_bytes, held_segments, submissions,
        completion_wakeups, holds_released, queue_waits;
};

static tide_status vk_reserve(void *ctx, size_t size, uintptr_t *out_addr);

/* ---- segments ------------------------------------------------------------------------------------ */

/* Under segments_lock: the index of the segment whose base is at or below addr, or nsegments. */
static size_t segment_index(const struct tide_vk *vk, uintptr_t addr)
{
    size_t lo = 0, hi = vk->nsegments;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        if (vk->segments[mid].base <= addr)
            lo = mid + 1;
        else
            hi = mid;
    }
    return lo == 0 ? vk->nsegments : lo - 1;
}

static void segment_destroy(struct tide_vk *vk, const struct vk_segment *s)
{
    vk->f.DestroyBuffer(vk->device, s->buffer, NULL);
    vk->f.FreeMemory(vk->device, s->memory, NULL); /* unmaps it too */
}

/* One buffer over one allocation of `bytes`; fills buffer, memory, buffer_address. */
static tide_status segment_make(struct tide_vk *vk, size_t bytes, struct vk_segment *s)
{
    VkBufferCreateInfo bci = {VK_STRUCTURE_TYPE_BUFFER_CREATE_INFO, NULL, 0, bytes,
                              VK_BUFFER_USAGE_STORAGE_BUFFER_BIT | VK_BUFFER_USAGE_UNIFORM_BUFFER_BIT |
                                  VK_BUFFER_USAGE_TRANSFER_SRC_BIT | VK_BUFFER_USAGE_TRANSFER_DST_BIT |
                                  VK_BUFFER_USAGE_INDEX_BUFFER_BIT | VK_BUFFER_USAGE_VERTEX_BUFFER_BIT |
                                  VK_BUFFER_USAGE_INDIRECT_BUFFER_BIT |
                                  VK_BUFFER_USAGE_SHADER_DEVICE_ADDRESS_BIT,
                              VK_SHARING_MODE_EXCLUSIVE, 0, NULL};
    VkResult r = vk->f.CreateBuffer(vk->device, &bci, NULL, &s->buffer);
    if (r != VK_SUCCESS)
        return vk_failed(r, "vkCreateBuffer");
    VkMemoryRequirements req;
    vk->f.GetBufferMemoryRequirements(vk->device, s->buffer, &req);
    if (!(req.memoryTypeBits & (1u << vk->memory_type))) {
        vk->f.DestroyBuffer(vk->device, s->buffer, NULL);
        tide_backend_error("a buffer of %zu bytes cannot live in memory type %u", bytes, vk->memory_type);
        return TIDE_EDEVICE;
    }
    VkMemoryAllocateFlagsInfo flags = {VK_STRUCTURE_TYPE_MEMORY_ALLOCATE_FLAGS_INFO, NULL,
                                       VK_MEMORY_ALLOCATE_DEVICE_ADDRESS_BIT, 0};
    VkMemoryAllocateInfo mai = {VK_STRUCTURE_TYPE_MEMORY_ALLOCATE_INFO, &flags, req.size, vk->memory_type};
    r = vk->f.AllocateMemory(vk->device, &mai, NULL, &s->memory);
    if (r == VK_SUCCESS && (r = vk->f.BindBufferMemory(vk->device, s->buffer, s->memory, 0)) != VK_SUCCESS)
        vk->f.FreeMemory(vk->device, s->memory, NULL);
    if (r != VK_SUCCESS) {
        vk->f.DestroyBuffer(vk->device, s->buffer, NULL);
        return vk_failed(r, "vkAllocateMemory");
    }
    VkBufferDeviceAddressInfo bai = {VK_STRUCTURE_TYPE_BUFFER_DEVICE_ADDRESS_INFO, NULL, s->buffer};
    s->buffer_address = vk->f.GetBufferDeviceAddress(vk->device, &bai);
    s->host = NULL;
    if (vk->host_visible && (r = vk->f.MapMemory(vk->device, s->memory, 0, ~(VkDeviceSize)0, 0, &s->host)) !=
                                VK_SUCCESS) {
        segment_destroy(vk, s);
        return vk_failed(r, "vkMapMemory");
    }
    return TIDE_OK;
}

static tide_status vk_reserve(void *ctx, size_t size, uintptr_t *out_addr)
{
    struct tide_vk *vk = ctx;
    struct vk_segment s;
    tide_status st = segment_make(vk, size, &s);
    if (st != TIDE_OK)
        return st;
    /* tidepool's blocks are 512-aligned. A device that aligns buffers less gets a buffer 512 bytes
     * larger, and the segment begins at its first 512-aligned address. */
    size_t slack = 0;
    if (s.buffer_address % 512) {
        segment_destroy(vk, &s);
        slack = 512;
        if ((st = segment_make(vk, size + slack, &s)) != TIDE_OK)
            return st;
    }
    s.base = (uintptr_t)round_up((size_t)s.buffer_address, 512);
    s.size = size;
    s.slack = slack;
    atomic_fetch_add(&vk->memory_allocations, 1);
    pthread_mutex_lock(&vk->segments_lock);
    if (vk->nsegments == vk->segments_cap) {
        struct vk_segment *grown = grow_table(vk->segments, &vk->segments_cap, sizeof *grown, 64);
        if (!grown) {
            pthread_mutex_unlock(&vk->segments_lock);
            segment_destroy(vk, &s);
            atomic_fetch_add(&vk->memory_frees, 1);
            tide_backend_error("out of host memory for the table of segments");
            return TIDE_EHOSTMEM;
        }
        vk->segments = grown;
    }
    size_t at = 0; /* the first segment above the new one */
    for (size_t hi = vk->nsegments; at < hi;) {
        size_t mid = at + (hi - at) / 2;
        if (vk->segments[mid].base < s.base)
            at = mid + 1;
        else
            hi = mid;
    }
    memmove(&vk->segments[at + 1], &vk->segments[at], (vk->nsegments - at) * sizeof s);
    vk->segments[at] = s;
    vk->nsegments++;
    pthread_mutex_unlock(&vk->segments_lock);
    atomic_fetch_add(&vk->held_bytes, size + slack);
    atomic_fetch_add(&vk->held_segments, 1);
    *out_addr = s.base;
    return TIDE_OK;
}

static tide_status vk_release(void *ctx, uintptr_t addr, size_t size)
{
    struct tide_vk *vk = ctx;
    /* Work on tidepool's queue may still touch blocks it freed without holding them (a stream reuses
     * its own blocks in order); Vulkan frees memory at once, so wait for the queue first. */
    pthread_mutex_lock(&vk->queue_lock);
    VkResult r = vk->f.QueueWaitIdle(vk->queue);
    pthread_mutex_unlock(&vk->queue_lock);
    if (r != VK_SUCCESS)
        return vk_failed(r, "vkQueueWaitIdle (before freeing a segment)");
    pthread_mutex_lock(&vk->segments_lock);
    size_t i = segment_index(vk, addr);
    if (i == vk->nsegments || vk->segments[i].base != addr || vk->segments[i].size != size) {
        pthread_mutex_unlock(&vk->segments_lock);
        tide_backend_error("no segment of %zu bytes at 0x%jx", size, (uintmax_t)addr);
        return TIDE_EINVAL;
    }
    struct vk_segment s = vk->segments[i];
    memmove(&vk->segments[i], &vk->segments[i + 1], (vk->nsegments - i - 1) * sizeof s);
    vk->nsegments--;
    pthread_mutex_unlock(&vk->segments_lock);
    segment_destroy(vk, &s);
    atomic_fetch_add(&vk->memory_frees, 1);
    atomic_fetch_sub(&vk->held_bytes, size + s.slack);
    atomic_fetch_sub(&vk->held_segments, 1);
    return TIDE_OK;
}

/* The segment holding [ptr, ptr + 1) of t's, or NULL with the error set. */
static tide_status lookup(tide_allocator *t, const void *ptr, const char *call, struct tide_vk **vk_out,
                          struct vk_segment *out)
{
    if (!t)
        return tide__fail(TIDE_EINVAL, "%s: the allocator is NULL", call);
    if (t->backend.reserve != vk_reserve)
        return tide__fail(TIDE_EINVAL, "%s: the allocator is over the %s backend, not Vulkan", call,
                          t->backend.name ? t->backend.name : "a user's");
    uintptr_t base;
    size_t size;
    tide_status s = tide_segment_of(t, (void *)ptr, &base, &size);
    if (s != TIDE_OK) {
        char why[512];
        snprintf(why, sizeof why, "%s", tide_last_error());
        return tide__fail(s, "%s: %s", call, why);
    }
    struct tide_vk *vk = t->backend.ctx;
    pthread_mutex_lock(&vk->segments_lock);
    size_t i = segment_index(vk, base);
    bool found = i < vk->nsegments && vk->segments[i].base == base;
    if (found)
        *out = vk->segments[i];
    pthread_mutex_unlock(&vk->segments_lock);
    if (!found)
        return tide__fail(TIDE_ECORRUPT, "%s: tidepool's segment at 0x%jx is not one the Vulkan device "
                          "holds", call, (uintmax_t)base);
    *vk_out = vk;
    return TIDE_OK;
}

tide_status tide_vk_buffer_of(tide_allocator *t, const void *ptr, VkBuffer *buffer, uint64_t *offset)
{
    if (!buffer || !offset)
        return tide__fail(TIDE_EINVAL, "tide_vk_buffer_of: buffer or offset is NULL");
    struct tide_vk *vk;
    struct vk_segment s;
    tide_status st = lookup(t, ptr, "tide_vk_buffer_of", &vk, &s);
    if (st != TIDE_OK)
        return st;
    *buffer = s.buffer;
    *offset = (uint64_t)((uintptr_t)ptr - (uintptr_t)s.buffer_address);
    return TIDE_OK;
}

tide_status tide_vk_host_address(tide_allocator *t, const void *ptr, void **host)
{
    if (!host)
        return tide__fail(TIDE_EINVAL, "tide_vk_host_address: host is NULL");
    struct tide_vk *vk;
    struct vk_segment s;
    tide_status st = lookup(t, ptr, "tide_vk_host_address", &vk, &s);
    if (st != TIDE_OK)
        return st;
    if (!s.host)
        return tide__fail(TIDE_EUNSUPPORTED, "tide_vk_host_address: the device's memory is not mapped "
                          "for the host (create the device with host_visible:1)");
    *host = (char *)s.host + ((uintptr_t)ptr - (uintptr_t)s.buffer_address);
    return TIDE_OK;
}

/* ---- holds and the completion thread ------------------------------------------------------------- */

/* Under holds_lock. */
static struct hold *hold_new(struct tide_vk *vk, size_t n)
{
    struct hold *h = vk->spare;
    if (h)
        vk->spare = h->next;
    else if (!(h = malloc(sizeof *h)))
        return NULL;
    h->blocks = h->inline_blocks;
    if (n > HOLD_INLINE_BLOCKS && !(h->blocks = malloc(n * sizeof *h->blocks))) {
        h->next = vk->spare;
        vk->spare = h;
        return NULL;
    }
    h->next = NULL;
    h->n = 0;
    return h;
}

/* Under holds_lock. */
static void hold_recycle(struct tide_vk *vk, struct hold *h)
{
    if (h->blocks != h->inline_blocks)
        free(h->blocks);
    h->next = vk->spare;
    vk->spare = h;
}

static void hold_discard(struct tide_vk *vk, struct hold *h)
{
    pthread_mutex_lock(&vk->holds_lock);
    hold_recycle(vk, h);
    pthread_mutex_unlock(&vk->holds_lock);
}

/* Whether the completion thread's wait ends by the time sem reaches value. */
static bool waited_for(const struct tide_vk *vk, VkSemaphore sem, uint64_t value)
{
    for (uint32_t i = 0; i < vk->wait_set_n; i++)
        if (vk->wait_set[i] == sem)
            return vk->wait_values[i] <= value;
    return false;
}

/* Under holds_lock: appends h and makes sure the completion thread will look at its semaphore. */
static void hold_push(struct tide_vk *vk, struct hold *h)
{
    if (vk->tail)
        vk->tail->next = h;
    else
        vk->head = h;
    vk->tail = h;
    /* A thread waiting on the device for later values (or other semaphores) is woken through the
     * wake semaphore; one not waiting holds this lock whenever it decides to sleep, so the condition
     * reaches it. */
    if (!vk->waiting)
        pthread_cond_signal(&vk->holds_cv);
    else if (!waited_for(vk, h->semaphore, h->value)) {
        VkSemaphoreSignalInfo si = {VK_STRUCTURE_TYPE_SEMAPHORE_SIGNAL_INFO, NULL, vk->wake, ++vk->wake_value};
        vk->f.SignalSemaphore(vk->device, &si);
    }
}

/* Takes every hold whose value is reached off the list (holds_lock held on entry and on return),
 * then releases their blocks with the lock let go. The semaphores are read with the lock let go too,
 * so that submissions never wait behind the driver. Returns the holds released. */
static uint64_t release_reached(struct tide_vk *vk)
{
    VkSemaphore sems[WAIT_SET_MAX];
    uint64_t reached[WAIT_SET_MAX];
    uint32_t n = 0;
    for (struct hold *h = vk->head; h && n < WAIT_SET_MAX; h = h->next) {
        uint32_t k = 0;
        while (k < n && sems[k] != h->semaphore)
            k++;
        if (k == n)
            sems[n++] = h->semaphore;
    }
    if (n == 0)
        return 0;
    vk->releasing++; /* a waiter's settle waits for this look too */
    pthread_mutex_unlock(&vk->holds_lock);
    for (uint32_t k = 0; k < n; k++)
        if (vk->f.GetSemaphoreCounterValue(vk->device, sems[k], &reached[k]) != VK_SUCCESS)
            reached[k] = 0; /* a semaphore that cannot be read holds its blocks: late, never early */
    pthread_mutex_lock(&vk->holds_lock);
    /* holds listed meanwhile are judged by the values read before: late at worst, never early */
    struct hold *done = NULL, **link = &vk->head, *prev = NULL;
    while (*link) {
        struct hold *h = *link;
        uint32_t k = 0;
        while (k < n && sems[k] != h->semaphore)
            k++;
        if (k < n && h->value <= reached[k]) {
            *link = h->next;
            h->next = done;
            done = h;
        } else {
            prev = h;
            link = &h->next;
        }
    }
    vk->tail = prev;
    if (!done) {
        if (--vk->releasing == 0)
            pthread_cond_broadcast(&vk->released_cv);
        return 0;
    }
    pthread_mutex_unlock(&vk->holds_lock);
    uint64_t released = 0;
    for (struct hold *h = done; h; h = h->next, released++)
        for (size_t i = 0; i < h->n; i++)
            tide_release(h->t, h->blocks[i]); /* retained by this hold, so it cannot fail */
    pthread_mutex_lock(&vk->holds_lock);
    while (done) {
        struct hold *next = done->next;
        hold_recycle(vk, done);
        done = next;
    }
    atomic_fetch_add(&vk->holds_released, released);
    if (--vk->releasing == 0)
        pthread_cond_broadcast(&vk->released_cv);
    return released;
}

/* Under holds_lock: releases what is reached and waits for other threads releasing to finish. */
static void settle(struct tide_vk *vk)
{
    release_reached(vk);
    while (vk->releasing)
        pthread_cond_wait(&vk->released_cv, &vk->holds_lock);
}

static void *completion_main(void *arg)
{
    struct tide_vk *vk = arg;
    pthread_mutex_lock(&vk->holds_lock);
    while (!vk->stopping) {
        if (!vk->head) {
            pthread_cond_wait(&vk->holds_cv, &vk->holds_lock);
            continue;
        }
        /* Wait for the first of: each semaphore with holds at its lowest value held, or the wake. */
        uint64_t *values = vk->wait_values;
        bool truncated = false;
        vk->wait_set_n = 0;
        vk->wait_set[vk->wait_set_n] = vk->wake;
        values[vk->wait_set_n++] = vk->wake_value + 1;
        for (struct hold *h = vk->head; h; h = h->next) {
            uint32_t k = 0;
            while (k < vk->wait_set_n && vk->wait_set[k] != h->semaphore)
                k++;
            if (k < vk->wait_set_n) {
                if (h->value < values[k])
                    values[k] = h->value;
            } else if (k < WAIT_SET_MAX) {
                vk->wait_set[k] = h->semaphore;
                values[k] = h->value;
                vk->wait_set_n++;
            } else
                truncated = true;
        }
        VkSemaphore set[WAIT_SET_MAX];
        uint64_t wait_for[WAIT_SET_MAX];
        uint32_t n = vk->wait_set_n;
        memcpy(set, vk->wait_set, n * sizeof set[0]);
        memcpy(wait_for, values, n * sizeof values[0]);
        vk->waiting = true;
        pthread_mutex_unlock(&vk->holds_lock);
        /* More semaphores than the set holds: the others are looked at every millisecond. */
        VkSemaphoreWaitInfo wi = {VK_STRUCTURE_TYPE_SEMAPHORE_WAIT_INFO, NULL, VK_SEMAPHORE_WAIT_ANY_BIT, n,
                                  set, wait_for};
        VkResult r = vk->f.WaitSemaphores(vk->device, &wi, truncated ? 1000000 : UINT64_MAX);
        pthread_mutex_lock(&vk->holds_lock);
        vk->waiting = false;
        vk->wait_set_n = 0;
        if (r != VK_SUCCESS && r != VK_TIMEOUT) {
            /* The device is lost: nothing it held can be known to be done, so it stays held. */
            snprintf(vk->completion_problem, sizeof vk->completion_problem, "vkWaitSemaphores: %s (%d)",
                     result_name(r), (int)r);
            while (!vk->stopping)
                pthread_cond_wait(&vk->holds_cv, &vk->holds_lock);
            break;
        }
        if (release_reached(vk))
            atomic_fetch_add(&vk->completion_wakeups, 1);
    }
    pthread_mutex_unlock(&vk->holds_lock);
    return NULL;
}

/* Retains every block (undoing them all on a failure). */
static tide_status retain_all(tide_allocator *t, void *const *blocks, size_t n, const char *call)
{
    for (size_t i = 0; i < n; i++) {
        tide_status s = tide_retain(t, blocks[i]);
        if (s != TIDE_OK) {
            char why[512];
            snprintf(why, sizeof why, "%s", tide_last_error());
            tide_status kept = tide__fail(s, "%s: block %zu (%p): %s", call, i, blocks[i], why);
            while (i--)
                tide_release(t, blocks[i]);
            return kept;
        }
    }
    return TIDE_OK;
}

static void release_all(tide_allocator *t, void *const *blocks, size_t n)
{
    for (size_t i = 0; i < n; i++)
        tide_release(t, blocks[i]);
}

/* A hold of blocks by a semaphore's value (set by the caller), each block retained; not yet listed. */
static tide_status hold_make(struct tide_vk *vk, tide_allocator *t, void *const *blocks, size_t nblocks,
                             VkSemaphore semaphore, const char *who, struct hold **out)
{
    pthread_mutex_lock(&vk->holds_lock);
    struct hold *h = hold_new(vk, nblocks);
    pthread_mutex_unlock(&vk->holds_lock);
    if (!h)
        return tide__fail(TIDE_EHOSTMEM, "%s: out of host memory for a hold of %zu blocks", who, nblocks);
    tide_status s = retain_all(t, blocks, nblocks, who);
    if (s != TIDE_OK) {
        hold_discard(vk, h);
        return s;
    }
    memcpy(h->blocks, blocks, nblocks * sizeof *blocks);
    h->n = nblocks;
    h->t = t;
    h->semaphore = semaphore;
    *out = h;
    return TIDE_OK;
}

static tide_status hold_args_check(tide_vk *vk, tide_allocator *t, void *const *blocks, size_t n,
                                   const char *call)
{
    if (!vk)
        return tide__fail(TIDE_EINVAL, "%s: the device is NULL", call);
    if (n && (!t || !blocks))
        return tide__fail(TIDE_EINVAL, "%s: %zu blocks but the allocator or the list is NULL", call, n);
    if (t && (t->backend.reserve != vk_reserve || t->backend.ctx != vk))
        return tide__fail(TIDE_EINVAL, "%s: the allocator is not over this Vulkan device", call);
    return TIDE_OK;
}

tide_status tide_vk_submit(tide_vk *vk, tide_allocator *t, const VkCommandBuffer *cmds, uint32_t ncmds,
                           void *const *blocks, size_t nblocks, uint64_t *value)
{
    tide_status s = hold_args_check(vk, t, blocks, nblocks, "tide_vk_submit");
    if (s != TIDE_OK)
        return s;
    if (ncmds && !cmds)
        return tide__fail(TIDE_EINVAL, "tide_vk_submit: %u command buffers but the list is NULL", ncmds);
    struct hold *h = NULL; /* none for a submission that holds no block */
    if (nblocks && (s = hold_make(vk, t, blocks, nblocks, vk->timeline, "tide_vk_submit", &h)) != TIDE_OK)
        return s;
    /* The value is taken and the hold listed under the queue's lock, so that the list is in the
     * order of the values. */
    pthread_mutex_lock(&vk->queue_lock);
    uint64_t v = vk->timeline_next + 1;
    VkTimelineSemaphoreSubmitInfo ti = {VK_STRUCTURE_TYPE_TIMELINE_SEMAPHORE_SUBMIT_INFO, NULL, 0, NULL, 1, &v};
    VkSubmitInfo si = {VK_STRUCTURE_TYPE_SUBMIT_INFO, &ti, 0, NULL, NULL, ncmds, cmds, 1, &vk->timeline};
    VkResult r = vk->f.QueueSubmit(vk->queue, 1, &si, NULL);
    if (r == VK_SUCCESS) {
        vk->timeline_next = v;
        if (h) {
            h->value = v;
            pthread_mutex_lock(&vk->holds_lock);
            hold_push(vk, h);
            pthread_mutex_unlock(&vk->holds_lock);
        }
    }
    pthread_mutex_unlock(&vk->queue_lock);
    atomic_fetch_add(&vk->submissions, 1);
    if (r != VK_SUCCESS && h) {
        release_all(t, blocks, nblocks);
        hold_discard(vk, h);
    }
    if (r != VK_SUCCESS)
        return tide__fail_with_context(vk_failed(r, "vkQueueSubmit"), "tide_vk_submit");
    if (value)
        *value = v;
    return TIDE_OK;
}

tide_status tide_vk_hold(tide_vk *vk, tide_allocator *t, VkSemaphore semaphore, uint64_t value,
                         void *const *blocks, size_t nblocks)
{
    tide_status s = hold_args_check(vk, t, blocks, nblocks, "tide_vk_hold");
    if (s != TIDE_OK)
        return s;
    if (!semaphore)
        return tide__fail(TIDE_EINVAL, "tide_vk_hold: the semaphore is VK_NULL_HANDLE");
    if (nblocks == 0)
        return TIDE_OK;
    struct hold *h;
    if ((s = hold_make(vk, t, blocks, nblocks, semaphore, "tide_vk_hold", &h)) != TIDE_OK)
        return s;
    h->value = value;
    pthread_mutex_lock(&vk->holds_lock);
    hold_push(vk, h);
    pthread_mutex_unlock(&vk->holds_lock);
    return TIDE_OK;
}

tide_status tide_vk_wait(tide_vk *vk, uint64_t value)
{
    if (!vk)
        return tide__fail(TIDE_EINVAL, "tide_vk_wait: the device is NULL");
    pthread_mutex_lock(&vk->queue_lock);
    uint64_t last = vk->timeline_next;
    pthread_mutex_unlock(&vk->queue_lock);
    if (value > last)
        return tide__fail(TIDE_EINVAL, "tide_vk_wait: value %ju was never submitted (the last is %ju)",
                          (uintmax_t)value, (uintmax_t)last);
    VkSemaphoreWaitInfo wi = {VK_STRUCTURE_TYPE_SEMAPHORE_WAIT_INFO, NULL, 0, 1, &vk->timeline, &value};
    VkResult r = vk->f.WaitSemaphores(vk->device, &wi, UINT64_MAX);
    if (r != VK_SUCCESS)
        return tide__fail_with_context(vk_failed(r, "vkWaitSemaphores"), "tide_vk_wait");
    pthread_mutex_lock(&vk->holds_lock);
    settle(vk);
    pthread_mutex_unlock(&vk->holds_lock);
    return TIDE_OK;
}

/* ---- fences and synchronization ------------------------------------------------------------------- */

/* A fence is a value on tidepool's timeline, signalled by an empty submission to its queue. */
struct vk_fence {
    uint64_t value;
};

static tide_status vk_fence_create(void *ctx, void **out)
{
    (void)ctx;
    struct vk_fence *f = calloc(1, sizeof *f);
    if (!f) {
        tide_backend_error("out of host memory for a fence");
        return TIDE_EHOSTMEM;
    }
    *out = f;
    return TIDE_OK;
}

static tide_status vk_fence_record(void *ctx, void *fence, tide_stream stream)
{
    struct tide_vk *vk = ctx;
    if (stream != 0) {
        tide_backend_error("stream %ju is not a queue of tidepool's Vulkan device (only 0 is)",
                           (uintmax_t)stream);
        return TIDE_EUNSUPPORTED;
    }
    pthread_mutex_lock(&vk->queue_lock);
    uint64_t v = vk->timeline_next + 1;
    VkTimelineSemaphoreSubmitInfo ti = {VK_STRUCTURE_TYPE_TIMELINE_SEMAPHORE_SUBMIT_INFO, NULL, 0, NULL, 1, &v};
    VkSubmitInfo si = {VK_STRUCTURE_TYPE_SUBMIT_INFO, &ti, 0, NULL, NULL, 0, NULL, 1, &vk->timeline};
    VkResult r = vk->f.QueueSubmit(vk->queue, 1, &si, NULL);
    if (r == VK_SUCCESS)
        vk->timeline_next = v;
    pthread_mutex_unlock(&vk->queue_lock);
    atomic_fetch_add(&vk->submissions, 1);
    if (r != VK_SUCCESS)
        return vk_failed(r, "vkQueueSubmit (a fence)");
    ((struct vk_fence *)fence)->value = v;
    return TIDE_OK;
}

static tide_status vk_fence_query(void *ctx, void *fence)
{
    struct tide_vk *vk = ctx;
    uint64_t now = 0;
    VkResult r = vk->f.GetSemaphoreCounterValue(vk->device, vk->timeline, &now);
    if (r != VK_SUCCESS)
        return vk_failed(r, "vkGetSemaphoreCounterValue");
    return now >= ((struct vk_fence *)fence)->value ? TIDE_OK : TIDE_ENOTREADY;
}

static tide_status vk_fence_wait(void *ctx, void *fence)
{
    struct tide_vk *vk = ctx;
    uint64_t value = ((struct vk_fence *)fence)->value;
    VkSemaphoreWaitInfo wi = {VK_STRUCTURE_TYPE_SEMAPHORE_WAIT_INFO, NULL, 0, 1, &vk->timeline, &value};
    VkResult r = vk->f.WaitSemaphores(vk->device, &wi, UINT64_MAX);
    return r == VK_SUCCESS ? TIDE_OK : vk_failed(r, "vkWaitSemaphores");
}

static void vk_fence_destroy(void *ctx, void *fence)
{
    (void)ctx;
    free(fence);
}

/* Waits for tidepool's queue and for every semaphore value that holds blocks, then releases what they
 * held: after it, a block is still referenced only if the program retained it itself. */
static tide_status vk_synchronize(void *ctx)
{
    struct tide_vk *vk = ctx;
    atomic_fetch_add(&vk->queue_waits, 1);
    pthread_mutex_lock(&vk->queue_lock);
    VkResult r = vk->f.QueueWaitIdle(vk->queue);
    pthread_mutex_unlock(&vk->queue_lock);
    if (r != VK_SUCCESS)
        return vk_failed(r, "vkQueueWaitIdle");
    /* The program's own semaphores, each at the highest value that holds blocks now. */
    for (;;) {
        VkSemaphore set[WAIT_SET_MAX];
        uint64_t values[WAIT_SET_MAX];
        uint32_t n = 0;
        pthread_mutex_lock(&vk->holds_lock);
        for (struct hold *h = vk->head; h; h = h->next) {
            if (h->semaphore == vk->timeline)
                continue;
            uint32_t k = 0;
            while (k < n && set[k] != h->semaphore)
                k++;
            if (k < n) {
                if (h->value > values[k])
                    values[k] = h->value;
            } else if (n < WAIT_SET_MAX) {
                set[n] = h->semaphore;
                values[n++] = h->value;
            }
        }
        pthread_mutex_unlock(&vk->holds_lock);
        if (n == 0)
            break;
        VkSemaphoreWaitInfo wi = {VK_STRUCTURE_TYPE_SEMAPHORE_WAIT_INFO, NULL, 0, n, set, values};
        if ((r = vk->f.WaitSemaphores(vk->device, &wi, UINT64_MAX)) != VK_SUCCESS)
            return vk_failed(r, "vkWaitSemaphores (the program's submissions)");
        pthread_mutex_lock(&vk->holds_lock);
        settle(vk);
        bool more = false; /* more semaphores than one wait takes */
        for (struct hold *h = vk->head; h && !more; h = h->next)
            more = h->semaphore != vk->timeline;
        pthread_mutex_unlock(&vk->holds_lock);
        if (!more)
            break;
    }
    pthread_mutex_lock(&vk->holds_lock);
    settle(vk);
    pthread_mutex_unlock(&vk->holds_lock);
    return TIDE_OK;
}

static tide_status vk_mem_info(void *ctx, size_t *free_bytes, size_t *total_bytes)
{
    struct tide_vk *vk = ctx;
    uint64_t held = atomic_load(&vk->held_bytes);
    *total_bytes = (size_t)vk->heap_bytes;
    *free_bytes = held < vk->heap_bytes ? (size_t)(vk->heap_bytes - held) : 0;
    return TIDE_OK;
}

/* ---- making the device ------------------------------------------------------------------------------ */

static bool load_function(void *field, PFN_vkVoidFunction f)
{
    memcpy(field, &f, sizeof f);
    return f != NULL;
}
#define LOAD(vk, getter, handle, field, name) load_function(&(vk)->f.field, (getter)((handle), (name)))

static int type_rank(int32_t type)
{
    switch (type) {
    case VK_PHYSICAL_DEVICE_TYPE_DISCRETE_GPU: return 0;
    case VK_PHYSICAL_DEVICE_TYPE_INTEGRATED_GPU: return 1;
    case VK_PHYSICAL_DEVICE_TYPE_VIRTUAL_GPU: return 2;
    case VK_PHYSICAL_DEVICE_TYPE_CPU: return 4;
    default: return 3;
    }
}

/* Whether pd can serve tidepool; if not, why, appended to why. Fills the queue family. */
static bool device_suits(struct tide_vk *vk, VkPhysicalDevice pd, uint32_t *family, struct text *why)
{
    VkPhysicalDeviceProperties p;
    vk->f.GetPhysicalDeviceProperties(pd, &p);
    if (VK_API_VERSION_MAJOR(p.apiVersion) == 1 && VK_API_VERSION_MINOR(p.apiVersion) < 2) {
        text_printf(why, "; %s: Vulkan %u.%u, tidepool needs 1.2", p.deviceName,
                    VK_API_VERSION_MAJOR(p.apiVersion), VK_API_VERSION_MINOR(p.apiVersion));
        return false;
    }
    VkPhysicalDeviceBufferDeviceAddressFeatures bda = {VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_BUFFER_DEVICE_ADDRESS_FEATURES};
    VkPhysicalDeviceTimelineSemaphoreFeatures tl = {VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_TIMELINE_SEMAPHORE_FEATURES, &bda};
    VkPhysicalDeviceFeatures2 f2 = {VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_FEATURES_2, &tl};
    vk->f.GetPhysicalDeviceFeatures2(pd, &f2);
    if (!bda.bufferDeviceAddress || !tl.timelineSemaphore) {
        text_printf(why, "; %s: no %s", p.deviceName, !bda.bufferDeviceAddress ? "bufferDeviceAddress" : "timelineSemaphore");
        return false;
    }
    VkQueueFamilyProperties q[32];
    uint32_t nq = 32;
    vk->f.GetPhysicalDeviceQueueFamilyProperties(pd, &nq, q);
    for (uint32_t i = 0; i < nq; i++)
        if ((q[i].queueFlags & VK_QUEUE_COMPUTE_BIT) && q[i].queueCount) {
            *family = i;
            return true;
        }
    text_printf(why, "; %s: no compute queue", p.deviceName);
    return false;
}

/* The memory type for segments: required flags, preferring DEVICE_LOCAL, among those buffers allow. */
static bool choose_memory(struct tide_vk *vk)
{
    VkPhysicalDeviceMemoryProperties mp;
    vk->f.GetPhysicalDeviceMemoryProperties(vk->physical, &mp);
    /* which types a buffer like a segment's may use */
    struct vk_segment probe;
    VkBufferCreateInfo bci = {VK_STRUCTURE_TYPE_BUFFER_CREATE_INFO, NULL, 0, 4096,
                              VK_BUFFER_USAGE_STORAGE_BUFFER_BIT | VK_BUFFER_USAGE_SHADER_DEVICE_ADDRESS_BIT,
                              VK_SHARING_MODE_EXCLUSIVE, 0, NULL};
    if (vk->f.CreateBuffer(vk->device, &bci, NULL, &probe.buffer) != VK_SUCCESS)
        return false;
    VkMemoryRequirements req;
    vk->f.GetBufferMemoryRequirements(vk->device, probe.buffer, &req);
    vk->f.DestroyBuffer(vk->device, probe.buffer, NULL);
    VkFlags need = vk->host_visible ? VK_MEMORY_PROPERTY_HOST_VISIBLE_BIT | VK_MEMORY_PROPERTY_HOST_COHERENT_BIT : 0;
    int best = -1, best_score = -1;
    for (uint32_t i = 0; i < mp.memoryTypeCount; i++) {
        VkFlags fl = mp.memoryTypes[i].propertyFlags;
        if (!(req.memoryTypeBits & (1u << i)) || (fl & need) != need || (fl & VK_MEMORY_PROPERTY_PROTECTED_BIT))
            continue;
        /* device-local first; without host_visible, types the host cannot see (the device's own) */
        int score = (fl & VK_MEMORY_PROPERTY_DEVICE_LOCAL_BIT ? 2 : 0) +
                    (!vk->host_visible && !(fl & VK_MEMORY_PROPERTY_HOST_VISIBLE_BIT) ? 1 : 0);
        if (score > best_score) {
            best = (int)i;
            best_score = score;
        }
    }
    if (best < 0)
        return false;
    vk->memory_type = (uint32_t)best;
    vk->heap_bytes = mp.memoryHeaps[mp.memoryTypes[best].heapIndex].size;
    return true;
}

static void vk_teardown(struct tide_vk *vk)
{
    if (vk->completion_started) {
        pthread_mutex_lock(&vk->holds_lock);
        vk->stopping = true;
        pthread_cond_broadcast(&vk->holds_cv);
        if (vk->waiting) {
            VkSemaphoreSignalInfo si = {VK_STRUCTURE_TYPE_SEMAPHORE_SIGNAL_INFO, NULL, vk->wake, ++vk->wake_value};
            vk->f.SignalSemaphore(vk->device, &si);
        }
        pthread_mutex_unlock(&vk->holds_lock);
        pthread_join(vk->completion, NULL);
    }
    /* Holds left are of allocators already destroyed (or of work that never completed): their
     * blocks went with them. */
    for (struct hold *h = vk->head, *next; h; h = next) {
        next = h->next;
        hold_recycle(vk, h);
    }
    for (struct hold *h = vk->spare, *next; h; h = next) {
        next = h->next;
        free(h);
    }
    if (vk->device) {
        for (size_t i = 0; i < vk->nsegments; i++)
            segment_destroy(vk, &vk->segments[i]);
        if (vk->timeline)
            vk->f.DestroySemaphore(vk->device, vk->timeline, NULL);
        if (vk->wake)
            vk->f.DestroySemaphore(vk->device, vk->wake, NULL);
        vk->f.DestroyDevice(vk->device, NULL);
    }
    if (vk->instance)
        vk->f.DestroyInstance(vk->instance, NULL);
    free(vk->segments);
    pthread_mutex_destroy(&vk->queue_lock);
    pthread_mutex_destroy(&vk->segments_lock);
    pthread_mutex_destroy(&vk->holds_lock);
    pthread_cond_destroy(&vk->holds_cv);
    pthread_cond_destroy(&vk->released_cv);
    free(vk);
}

void tide_vk_destroy(tide_vk *vk)
{
    if (!vk)
        return;
    if (vk->queue) {
        pthread_mutex_lock(&vk->queue_lock);
        vk->f.QueueWaitIdle(vk->queue);
        pthread_mutex_unlock(&vk->queue_lock);
        pthread_mutex_lock(&vk->holds_lock);
        settle(vk);
        pthread_mutex_unlock(&vk->holds_lock);
    }
    vk_teardown(vk);
}

static tide_status make_timeline(struct tide_vk *vk, VkSemaphore *out)
{
    VkSemaphoreTypeCreateInfo type = {VK_STRUCTURE_TYPE_SEMAPHORE_TYPE_CREATE_INFO, NULL, VK_SEMAPHORE_TYPE_TIMELINE, 0};
    VkSemaphoreCreateInfo sci = {VK_STRUCTURE_TYPE_SEMAPHORE_CREATE_INFO, &type, 0};
    VkResult r = vk->f.CreateSemaphore(vk->device, &sci, NULL, out);
    return r == VK_SUCCESS ? TIDE_OK : tide__fail_with_context(vk_failed(r, "vkCreateSemaphore"), "tide_vk_create");
}

/* Everything after the loader: instance, device, functions, memory type, semaphores, thread. */
static tide_status vk_open(struct tide_vk *vk, const tide_vk_options *o)
{
    if (!LOAD(vk, get_instance_proc, NULL, CreateInstance, "vkCreateInstance"))
        return tide__fail(TIDE_EUNSUPPORTED, "tide_vk_create: the Vulkan loader has no vkCreateInstance");
    VkApplicationInfo app = {VK_STRUCTURE_TYPE_APPLICATION_INFO, NULL, "tidepool", 1, "tidepool", 1, VK_API_VERSION_1_2};
    VkInstanceCreateInfo ici = {VK_STRUCTURE_TYPE_INSTANCE_CREATE_INFO, NULL, 0, &app, 0, NULL, 0, NULL};
    VkResult r = vk->f.CreateInstance(&ici, NULL, &vk->instance);
    if (r != VK_SUCCESS) {
        vk->instance = NULL;
        return tide__fail(TIDE_EUNSUPPORTED, "tide_vk_create: vkCreateInstance: %s (%d): no Vulkan driver "
                          "here (on Debian, mesa-vulkan-drivers has one for the CPU)", result_name(r), (int)r);
    }
    bool ok = LOAD(vk, get_instance_proc, vk->instance, DestroyInstance, "vkDestroyInstance") &&
              LOAD(vk, get_instance_proc, vk->instance, EnumeratePhysicalDevices, "vkEnumeratePhysicalDevices") &&
              LOAD(vk, get_instance_proc, vk->instance, GetPhysicalDeviceProperties, "vkGetPhysicalDeviceProperties") &&
              LOAD(vk, get_instance_proc, vk->instance, GetPhysicalDeviceFeatures2, "vkGetPhysicalDeviceFeatures2") &&
              LOAD(vk, get_instance_proc, vk->instance, GetPhysicalDeviceQueueFamilyProperties,
                   "vkGetPhysicalDeviceQueueFamilyProperties") &&
              LOAD(vk, get_instance_proc, vk->instance, GetPhysicalDeviceMemoryProperties,
                   "vkGetPhysicalDeviceMemoryProperties") &&
              LOAD(vk, get_instance_proc, vk->instance, CreateDevice, "vkCreateDevice") &&
              LOAD(vk, get_instance_proc, vk->instance, GetDeviceProcAddr, "vkGetDeviceProcAddr");
    if (!ok)
        return tide__fail(TIDE_EUNSUPPORTED, "tide_vk_create: the Vulkan loader lacks Vulkan 1.1 instance functions");

    VkPhysicalDevice all[16];
    uint32_t n = 16;
    r = vk->f.EnumeratePhysicalDevices(vk->instance, &n, all);
    if (r != VK_SUCCESS && r != 5 /* VK_INCOMPLETE */)
        return tide__fail(TIDE_EUNSUPPORTED, "tide_vk_create: vkEnumeratePhysicalDevices: %s", result_name(r));
    /* the suitable ones, GPUs first, in the loader's order otherwise */
    VkPhysicalDevice suit[16];
    uint32_t fam[16], ns = 0;
    int rank[16];
    struct text why = {0};
    for (uint32_t i = 0; i < n; i++) {
        uint32_t family;
        if (!device_suits(vk, all[i], &family, &why))
            continue;
        VkPhysicalDeviceProperties p;
        vk->f.GetPhysicalDeviceProperties(all[i], &p);
        uint32_t at = ns++;
        while (at > 0 && rank[at - 1] > type_rank(p.deviceType)) {
            suit[at] = suit[at - 1], fam[at] = fam[at - 1], rank[at] = rank[at - 1];
            at--;
        }
        suit[at] = all[i], fam[at] = family, rank[at] = type_rank(p.deviceType);
    }
    if (o->device_index < 0 || (uint32_t)o->device_index >= ns) {
        tide_status s = tide__fail(TIDE_EUNSUPPORTED, "tide_vk_create: %s (of %u Vulkan devices, %u have Vulkan "
                                   "1.2 with bufferDeviceAddress, timelineSemaphore and a compute queue%s)",
                                   ns ? "no such device index" : "no Vulkan device tidepool can use", n, ns,
                                   why.p ? why.p : "");
        free(why.p);
        return s;
    }
    free(why.p);
    vk->physical = suit[o->device_index];
    vk->queue_family = fam[o->device_index];
    VkPhysicalDeviceProperties p;
    vk->f.GetPhysicalDeviceProperties(vk->physical, &p);
    vk->api_version = p.apiVersion;
    memcpy(vk->device_name, p.deviceName, sizeof vk->device_name);
    vk->device_name[sizeof vk->device_name - 1] = 0;

    float priority = 1.0f;
    VkDeviceQueueCreateInfo qci = {VK_STRUCTURE_TYPE_DEVICE_QUEUE_CREATE_INFO, NULL, 0, vk->queue_family, 1, &priority};
    VkPhysicalDeviceBufferDeviceAddressFeatures bda = {VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_BUFFER_DEVICE_ADDRESS_FEATURES,
                                                       NULL, 1, 0, 0};
    VkPhysicalDeviceTimelineSemaphoreFeatures tl = {VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_TIMELINE_SEMAPHORE_FEATURES, &bda, 1};
    VkDeviceCreateInfo dci = {VK_STRUCTURE_TYPE_DEVICE_CREATE_INFO, &tl, 0, 1, &qci, 0, NULL, 0, NULL, NULL};
    if ((r = vk->f.CreateDevice(vk->physical, &dci, NULL, &vk->device)) != VK_SUCCESS) {
        vk->device = NULL;
        return tide__fail_with_context(vk_failed(r, "vkCreateDevice"), "tide_vk_create (%s)", vk->device_name);
    }
    PFN_vkGetDeviceProcAddr gd = vk->f.GetDeviceProcAddr;
    ok = LOAD(vk, gd, vk->device, DestroyDevice, "vkDestroyDevice") &&
         LOAD(vk, gd, vk->device, GetDeviceQueue, "vkGetDeviceQueue") &&
         LOAD(vk, gd, vk->device, CreateBuffer, "vkCreateBuffer") &&
         LOAD(vk, gd, vk->device, DestroyBuffer, "vkDestroyBuffer") &&
         LOAD(vk, gd, vk->device, GetBufferMemoryRequirements, "vkGetBufferMemoryRequirements") &&
         LOAD(vk, gd, vk->device, AllocateMemory, "vkAllocateMemory") &&
         LOAD(vk, gd, vk->device, FreeMemory, "vkFreeMemory") &&
         LOAD(vk, gd, vk->device, BindBufferMemory, "vkBindBufferMemory") &&
         LOAD(vk, gd, vk->device, MapMemory, "vkMapMemory") &&
         LOAD(vk, gd, vk->device, GetBufferDeviceAddress, "vkGetBufferDeviceAddress") &&
         LOAD(vk, gd, vk->device, CreateSemaphore, "vkCreateSemaphore") &&
         LOAD(vk, gd, vk->device, DestroySemaphore, "vkDestroySemaphore") &&
         LOAD(vk, gd, vk->device, QueueSubmit, "vkQueueSubmit") &&
         LOAD(vk, gd, vk->device, QueueWaitIdle, "vkQueueWaitIdle") &&
         LOAD(vk, gd, vk->device, WaitSemaphores, "vkWaitSemaphores") &&
         LOAD(vk, gd, vk->device, SignalSemaphore, "vkSignalSemaphore") &&
         LOAD(vk, gd, vk->device, GetSemaphoreCounterValue, "vkGetSemaphoreCounterValue");
    if (!ok) {
        if (!vk->f.DestroyDevice)
            vk->device = NULL; /* cannot be destroyed: leaked, and said */
        return tide__fail(TIDE_EUNSUPPORTED, "tide_vk_create: %s lacks a Vulkan 1.2 device function",
                          vk->device_name);
    }
    vk->f.GetDeviceQueue(vk->device, vk->queue_family, 0, &vk->queue);
    if (!choose_memory(vk))
        return tide__fail(TIDE_EUNSUPPORTED, "tide_vk_create: %s has no memory type for buffers%s",
                          vk->device_name, vk->host_visible ? " that the host can see" : "");
    tide_status s;
    if ((s = make_timeline(vk, &vk->timeline)) != TIDE_OK || (s = make_timeline(vk, &vk->wake)) != TIDE_OK)
        return s;
    if (pthread_create(&vk->completion, NULL, completion_main, vk) != 0)
        return tide__fail(TIDE_EHOSTMEM, "tide_vk_create: could not start the completion thread");
    vk->completion_started = true;
    return TIDE_OK;
}

tide_status tide_vk_create(const tide_vk_options *opts, tide_vk **out)
{
    if (!out)
        return tide__fail(TIDE_EINVAL, "tide_vk_create: out is NULL");
    *out = NULL;
    tide_vk_options o = {sizeof o, 0, 0};
    if (opts) {
        if (opts->struct_size < sizeof(uint32_t) || opts->struct_size > sizeof o)
            return tide__fail(TIDE_EINVAL, "tide_vk_create: options.struct_size is %u (set it to "
                              "sizeof(tide_vk_options), %zu)", opts->struct_size, sizeof o);
        memcpy(&o, opts, opts->struct_size);
        if (o.host_visible > 1)
            return tide__fail(TIDE_EINVAL, "tide_vk_create: host_visible is %u (0 or 1)", o.host_visible);
    }
    pthread_once(&loader_once, load_loader);
    if (loader_problem[0])
        return tide__fail(TIDE_EUNSUPPORTED, "tide_vk_create: %s", loader_problem);
    struct tide_vk *vk = calloc(1, sizeof *vk);
    if (!vk)
        return tide__fail(TIDE_EHOSTMEM, "tide_vk_create: out of host memory");
    vk->host_visible = o.host_visible;
    pthread_mutex_init(&vk->queue_lock, NULL);
    pthread_mutex_init(&vk->segments_lock, NULL);
    pthread_mutex_init(&vk->holds_lock, NULL);
    pthread_cond_init(&vk->holds_cv, NULL);
    pthread_cond_init(&vk->released_cv, NULL);
    tide_status s = vk_open(vk, &o);
    if (s != TIDE_OK) {
        vk_teardown(vk);
        return s;
    }
    *out = vk;
    return TIDE_OK;
}

tide_backend tide_vk_backend(tide_vk *vk)
{
    tide_backend b;
    memset(&b, 0, sizeof b);
    b.struct_size = sizeof b;
    b.name = "vulkan";
    b.ctx = vk;
    b.reserve = vk_reserve;
    b.release = vk_release;
    b.fence_create = vk_fence_create;
    b.fence_record = vk_fence_record;
    b.fence_query = vk_fence_query;
    b.fence_wait = vk_fence_wait;
    b.fence_destroy = vk_fence_destroy;
    b.synchronize = vk_synchronize;
    b.mem_info = vk_mem_info;
    return b;
}

tide_status tide_vk_get_handles(tide_vk *vk, tide_vk_handles *out)
{
    if (!vk || !out)
        return tide__fail(TIDE_EINVAL, "tide_vk_get_handles: the device or out is NULL");
    out->instance = vk->instance;
    out->physical_device = vk->physical;
    out->device = vk->device;
    out->queue = vk->queue;
    out->queue_family = vk->queue_family;
    out->timeline = vk->timeline;
    out->api_version = vk->api_version;
    out->get_instance_proc_addr = get_instance_proc;
    out->device_name = vk->device_name;
    return TIDE_OK;
}

void tide_vk_get_counters(tide_vk *vk, tide_vk_counters *out)
{
    if (!out)
        return;
    memset(out, 0, sizeof *out);
    if (!vk)
        return;
    out->memory_allocations = atomic_load(&vk->memory_allocations);
    out->memory_frees = atomic_load(&vk->memory_frees);
    out->held_bytes = atomic_load(&vk->held_bytes);
    out->held_segments = atomic_load(&vk->held_segments);
    out->submissions = atomic_load(&vk->submissions);
    out->completion_wakeups = atomic_load(&vk->completion_wakeups);
    out->holds_released = atomic_load(&vk->holds_released);
    out->queue_waits = atomic_load(&vk->queue_waits);
}

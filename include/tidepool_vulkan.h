/*
 * tidepool: the Vulkan backend, where submitted work holds the blocks it uses. The allocator's manual
 * is tidepool.h.
 */
#ifndef TIDEPOOL_VULKAN_H
#define TIDEPOOL_VULKAN_H

#include "tidepool.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ------------------------------------------------------------------------------------------------ */
/* Vulkan                                                                                            */
/* ------------------------------------------------------------------------------------------------ */
/*
 * The Vulkan loader (libvulkan.so.1) is opened at run time: libtidepool needs no Vulkan to build or
 * link, and tide_vk_create returns TIDE_EUNSUPPORTED, saying why, where there is no loader, no driver,
 * or no device with what tidepool needs (Vulkan 1.2 with bufferDeviceAddress and timelineSemaphore:
 * NVIDIA's and AMD's drivers, Mesa's lavapipe on the CPU).
 *
 * MEMORY. A segment is one VkDeviceMemory allocation (VK_MEMORY_ALLOCATE_DEVICE_ADDRESS_BIT) covered
 * by one VkBuffer. A block's pointer, as tide_malloc returns it, is its buffer device address: a
 * shader reaches it through GL_EXT_buffer_reference. tide_vk_buffer_of gives the (VkBuffer, offset)
 * that a descriptor or a copy needs instead.
 *
 * SUBMITTED WORK HOLDS ITS BLOCKS (Metal's model). tide_vk_submit submits command buffers to
 * tidepool's queue and retains (tide_retain) each block they use; tidepool's completion thread
 * releases them (tide_release) once the submission's value on tidepool's timeline semaphore is
 * reached. A block freed meanwhile is PENDING and is not handed out again until then: there is no
 * deletion queue to write. Work submitted to a queue of the program's own, signalling a timeline
 * semaphore of its own, holds its blocks through tide_vk_hold.
 *
 * STREAMS. Stream 0 is tidepool's queue (tide_record_stream on it is accepted and does nothing, as
 * on a block's own stream); other stream values are not Vulkan queues tidepool knows, and a fence
 * on one fails (tidepool then synchronizes instead). Hold blocks with submissions, not streams.
 *
 * WAITING. tide_empty_cache (and tide_destroy, and the out-of-memory ladder) waits for tidepool's
 * queue and for every semaphore value that holds a block, releases what those held, and only then
 * drains and releases segments: after it, with nothing allocated, reserved memory is 0.
 *
 * Not supported: expandable_segments (Vulkan's sparse binding is another design), scrub and guard.
 * This header declares the few Vulkan handle types it names, as vulkan.h does on 64-bit platforms, so
 * it may be included before or after vulkan.h.
 */
#if !defined(VK_VERSION_1_0)
typedef struct VkInstance_T *VkInstance;
typedef struct VkPhysicalDevice_T *VkPhysicalDevice;
typedef struct VkDevice_T *VkDevice;
typedef struct VkQueue_T *VkQueue;
typedef struct VkCommandBuffer_T *VkCommandBuffer;
typedef struct VkBuffer_T *VkBuffer;
typedef struct VkDeviceMemory_T *VkDeviceMemory;
typedef struct VkSemaphore_T *VkSemaphore;
#endif

typedef struct tide_vk tide_vk;

typedef struct tide_vk_options {
    uint32_t struct_size;      /* sizeof(tide_vk_options) */
    int32_t device_index;      /* among the devices able to serve tidepool, GPUs first then CPU
                                  implementations, in the loader's order: 0 (default) the first */
    uint32_t host_visible;     /* 1: memory the host can read and write too (HOST_VISIBLE and
                                  HOST_COHERENT, device-local where the device has such a type),
                                  mapped once per segment: tide_vk_host_address. 0 (default): the
                                  device's own memory (DEVICE_LOCAL where it has any) */
} tide_vk_options;

/* Opens the loader, makes an instance and a device (one compute queue, bufferDeviceAddress and
 * timelineSemaphore on) and starts the completion thread. opts may be NULL for the defaults. */
TIDE_API tide_status tide_vk_create(const tide_vk_options *opts, tide_vk **out);

/* Waits for the queue, stops the completion thread (it releases what the finished work held), and
 * destroys the device and instance. Destroy every allocator over it first. NULL does nothing. */
TIDE_API void tide_vk_destroy(tide_vk *vk);

/* The backend table for tide_create. It does not own the device: tide_vk_destroy does. */
TIDE_API tide_backend tide_vk_backend(tide_vk *vk);

/* What a program records its work with: the device tidepool made, its queue (submit to it only with
 * tide_vk_submit, which serializes submissions as Vulkan requires), and the loader's
 * vkGetInstanceProcAddr (as a function pointer: cast it to PFN_vkGetInstanceProcAddr). */
typedef struct tide_vk_handles {
    VkInstance instance;
    VkPhysicalDevice physical_device;
    VkDevice device;
    VkQueue queue;
    uint32_t queue_family;
    VkSemaphore timeline;          /* tidepool's timeline semaphore on the queue: tide_vk_submit's
                                      values (a submission of the program's may wait on it) */
    uint32_t api_version;          /* the device's, as VK_MAKE_API_VERSION packs it */
    void (*(*get_instance_proc_addr)(VkInstance, const char *))(void);
    const char *device_name;       /* "llvmpipe (LLVM 15.0.6, 256 bits)", "NVIDIA H100 80GB HBM3", ... */
} tide_vk_handles;
TIDE_API tide_status tide_vk_get_handles(tide_vk *vk, tide_vk_handles *out);

/* Submits ncmds command buffers (recorded on the device of tide_vk_get_handles) to tidepool's queue,
 * and holds the nblocks blocks at blocks[] (each ACTIVE in t, an allocator over this device) until they
 * complete: each is retained now and released by tidepool's completion thread then. *value (if not
 * NULL) receives the submission's value on tidepool's timeline semaphore, for tide_vk_wait. The same
 * block may be listed more than once (it is retained that many times). If a block cannot be retained
 * or the queue refuses the submission, nothing is submitted, nothing stays retained, and the error
 * says which. ncmds may be 0 (a submission that only marks a point on the queue). */
TIDE_API tide_status tide_vk_submit(tide_vk *vk, tide_allocator *t, const VkCommandBuffer *cmds,
                                    uint32_t ncmds, void *const *blocks, size_t nblocks, uint64_t *value);

/* For work the program submits itself: holds the nblocks blocks at blocks[] (retained now) until
 * semaphore, a timeline semaphore of this device, reaches value; then the completion thread releases
 * them. Call it before freeing the blocks. Values on one semaphore need not come in order: each hold
 * is released no sooner than its own value. On failure nothing stays retained. */
TIDE_API tide_status tide_vk_hold(tide_vk *vk, tide_allocator *t, VkSemaphore semaphore, uint64_t value,
                                  void *const *blocks, size_t nblocks);

/* Waits until tidepool's timeline semaphore reaches value and the completion thread has released
 * what every submission up to it held. */
TIDE_API tide_status tide_vk_wait(tide_vk *vk, uint64_t value);

/* The buffer and offset of the ACTIVE or PENDING block at ptr of t, an allocator over a tide_vk:
 * what a descriptor (VkDescriptorBufferInfo) or a copy names. */
TIDE_API tide_status tide_vk_buffer_of(tide_allocator *t, const void *ptr, VkBuffer *buffer,
                                       uint64_t *offset);

/* Where the host sees the block at ptr (host_visible:1 only; TIDE_EUNSUPPORTED otherwise). */
TIDE_API tide_status tide_vk_host_address(tide_allocator *t, const void *ptr, void **host);

/* What the device was asked, since tide_vk_create: for tests and benchmarks that count driver calls. */
typedef struct tide_vk_counters {
    uint64_t memory_allocations;   /* vkAllocateMemory (each with its vkCreateBuffer) */
    uint64_t memory_frees;         /* vkFreeMemory */
    uint64_t held_bytes;           /* allocated and not yet freed */
    uint64_t held_segments;
    uint64_t submissions;          /* vkQueueSubmit by tidepool (tide_vk_submit, fences) */
    uint64_t completion_wakeups;   /* times the completion thread found work done */
    uint64_t holds_released;       /* holds whose blocks were released */
    uint64_t queue_waits;          /* synchronizations (tide_empty_cache, ...) */
} tide_vk_counters;
TIDE_API void tide_vk_get_counters(tide_vk *vk, tide_vk_counters *out);

#ifdef __cplusplus
}
#endif

#endif /* TIDEPOOL_VULKAN_H */

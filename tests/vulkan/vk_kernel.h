/*
 * The fill kernel (fill.comp) on tidepool's Vulkan device, for the Vulkan tests and benchmark: a
 * compute pipeline, a ring of command buffers, and the device functions that record them.
 */
#ifndef TIDE_VK_KERNEL_H
#define TIDE_VK_KERNEL_H

#include "tidepool_vulkan.h"
#include "backend/vk_api.h"

#include <stdio.h>
#include <string.h>

#include "fill_spv.h"

#define KERNEL_RING 16          /* command buffers: submissions in flight at most */
#define KERNEL_WORKGROUP 64     /* fill.comp's local_size_x */

struct vk_kernel {
    tide_vk *vk;
    tide_vk_handles h;
    VkShaderModule module;
    VkPipelineLayout layout;
    VkPipeline pipeline;
    VkCommandPool pool;
    VkCommandBuffer ring[KERNEL_RING];
    uint64_t ring_value[KERNEL_RING]; /* the submission each last went into (0: none) */
    unsigned next;
    struct {
        VkResult (*CreateShaderModule)(VkDevice, const VkShaderModuleCreateInfo *, const void *, VkShaderModule *);
        void (*DestroyShaderModule)(VkDevice, VkShaderModule, const void *);
        VkResult (*CreatePipelineLayout)(VkDevice, const VkPipelineLayoutCreateInfo *, const void *, VkPipelineLayout *);
        void (*DestroyPipelineLayout)(VkDevice, VkPipelineLayout, const void *);
        VkResult (*CreateComputePipelines)(VkDevice, void *, uint32_t, const VkComputePipelineCreateInfo *,
                                           const void *, VkPipeline *);
        void (*DestroyPipeline)(VkDevice, VkPipeline, const void *);
        VkResult (*CreateCommandPool)(VkDevice, const VkCommandPoolCreateInfo *, const void *, VkCommandPool *);
        void (*DestroyCommandPool)(VkDevice, VkCommandPool, const void *);
        VkResult (*AllocateCommandBuffers)(VkDevice, const VkCommandBufferAllocateInfo *, VkCommandBuffer *);
        VkResult (*BeginCommandBuffer)(VkCommandBuffer, const VkCommandBufferBeginInfo *);
        VkResult (*EndCommandBuffer)(VkCommandBuffer);
        VkResult (*ResetCommandBuffer)(VkCommandBuffer, VkFlags);
        void (*CmdBindPipeline)(VkCommandBuffer, int32_t, VkPipeline);
        void (*CmdPushConstants)(VkCommandBuffer, VkPipelineLayout, VkFlags, uint32_t, uint32_t, const void *);
        void (*CmdDispatch)(VkCommandBuffer, uint32_t, uint32_t, uint32_t);
        void (*CmdPipelineBarrier)(VkCommandBuffer, VkFlags, VkFlags, VkFlags, uint32_t, const VkMemoryBarrier *,
                                   uint32_t, const void *, uint32_t, const void *);
        VkResult (*CreateSemaphore)(VkDevice, const VkSemaphoreCreateInfo *, const void *, VkSemaphore *);
        void (*DestroySemaphore)(VkDevice, VkSemaphore, const void *);
        VkResult (*SignalSemaphore)(VkDevice, const VkSemaphoreSignalInfo *);
        VkResult (*GetSemaphoreCounterValue)(VkDevice, VkSemaphore, uint64_t *);
    } f;
};

/* fill.comp's push constants */
struct fill_args {
    uint64_t target, gate;
    uint32_t count, pattern, spin_limit, pad;
};

static int kernel_load(struct vk_kernel *k, const char *name, void *field)
{
    PFN_vkGetDeviceProcAddr gd;
    PFN_vkVoidFunction f = k->h.get_instance_proc_addr(k->h.instance, "vkGetDeviceProcAddr");
    memcpy(&gd, &f, sizeof f);
    f = gd(k->h.device, name);
    memcpy(field, &f, sizeof f);
    if (!f)
        fprintf(stderr, "the device has no %s\n", name);
    return f ? 0 : -1;
}

/* 0, or -1 having said why. */
static int kernel_open(struct vk_kernel *k, tide_vk *vk)
{
    memset(k, 0, sizeof *k);
    k->vk = vk;
    if (tide_vk_get_handles(vk, &k->h) != TIDE_OK)
        return -1;
#define K(name) kernel_load(k, "vk" #name, &k->f.name)
    if (K(CreateShaderModule) || K(DestroyShaderModule) || K(CreatePipelineLayout) || K(DestroyPipelineLayout) ||
        K(CreateComputePipelines) || K(DestroyPipeline) || K(CreateCommandPool) || K(DestroyCommandPool) ||
        K(AllocateCommandBuffers) || K(BeginCommandBuffer) || K(EndCommandBuffer) || K(ResetCommandBuffer) ||
        K(CmdBindPipeline) || K(CmdPushConstants) || K(CmdDispatch) || K(CmdPipelineBarrier) ||
        K(CreateSemaphore) || K(DestroySemaphore) || K(SignalSemaphore) || K(GetSemaphoreCounterValue))
        return -1;
#undef K
    VkShaderModuleCreateInfo smci = {VK_STRUCTURE_TYPE_SHADER_MODULE_CREATE_INFO, NULL, 0, sizeof fill_spv, fill_spv};
    VkPushConstantRange range = {VK_SHADER_STAGE_COMPUTE_BIT, 0, sizeof(struct fill_args)};
    VkPipelineLayoutCreateInfo plci = {VK_STRUCTURE_TYPE_PIPELINE_LAYOUT_CREATE_INFO, NULL, 0, 0, NULL, 1, &range};
    VkCommandPoolCreateInfo cpci = {VK_STRUCTURE_TYPE_COMMAND_POOL_CREATE_INFO, NULL,
                                    VK_COMMAND_POOL_CREATE_RESET_COMMAND_BUFFER_BIT, k->h.queue_family};
    if (k->f.CreateShaderModule(k->h.device, &smci, NULL, &k->module) != VK_SUCCESS ||
        k->f.CreatePipelineLayout(k->h.device, &plci, NULL, &k->layout) != VK_SUCCESS) {
        fprintf(stderr, "could not make the fill kernel's shader module or layout\n");
        return -1;
    }
    VkComputePipelineCreateInfo cci = {VK_STRUCTURE_TYPE_COMPUTE_PIPELINE_CREATE_INFO, NULL, 0,
                                       {VK_STRUCTURE_TYPE_PIPELINE_SHADER_STAGE_CREATE_INFO, NULL, 0,
                                        VK_SHADER_STAGE_COMPUTE_BIT, k->module, "main", NULL},
                                       k->layout, NULL, -1};
    VkCommandBufferAllocateInfo cbai = {VK_STRUCTURE_TYPE_COMMAND_BUFFER_ALLOCATE_INFO, NULL, NULL,
                                        VK_COMMAND_BUFFER_LEVEL_PRIMARY, KERNEL_RING};
    if (k->f.CreateComputePipelines(k->h.device, NULL, 1, &cci, NULL, &k->pipeline) != VK_SUCCESS ||
        k->f.CreateCommandPool(k->h.device, &cpci, NULL, &k->pool) != VK_SUCCESS ||
        (cbai.commandPool = k->pool, k->f.AllocateCommandBuffers(k->h.device, &cbai, k->ring)) != VK_SUCCESS) {
        fprintf(stderr, "could not make the fill kernel's pipeline or command buffers\n");
        return -1;
    }
    return 0;
}

static void kernel_close(struct vk_kernel *k)
{
    if (k->pool)
        k->f.DestroyCommandPool(k->h.device, k->pool, NULL); /* frees the ring */
    if (k->pipeline)
        k->f.DestroyPipeline(k->h.device, k->pipeline, NULL);
    if (k->layout)
        k->f.DestroyPipelineLayout(k->h.device, k->layout, NULL);
    if (k->module)
        k->f.DestroyShaderModule(k->h.device, k->module, NULL);
}

/* The next command buffer of the ring, begun, once the submission it was last in has completed. */
static VkCommandBuffer kernel_begin(struct vk_kernel *k, unsigned *slot)
{
    *slot = k->next++ % KERNEL_RING;
    if (k->ring_value[*slot])
        tide_vk_wait(k->vk, k->ring_value[*slot]);
    VkCommandBuffer cb = k->ring[*slot];
    k->f.ResetCommandBuffer(cb, 0);
    VkCommandBufferBeginInfo bi = {VK_STRUCTURE_TYPE_COMMAND_BUFFER_BEGIN_INFO, NULL,
                                   VK_COMMAND_BUFFER_USAGE_ONE_TIME_SUBMIT_BIT, NULL};
    k->f.BeginCommandBuffer(cb, &bi);
    k->f.CmdBindPipeline(cb, VK_PIPELINE_BIND_POINT_COMPUTE, k->pipeline);
    return cb;
}

/* Records one fill: count words of pattern at target, after the gate word at gate is nonzero. */
static void kernel_fill(struct vk_kernel *k, VkCommandBuffer cb, const void *target, uint32_t count,
                        uint32_t pattern, const void *gate, uint32_t spin_limit)
{
    struct fill_args a = {(uint64_t)(uintptr_t)target, (uint64_t)(uintptr_t)gate, count, pattern, spin_limit, 0};
    k->f.CmdPushConstants(cb, k->layout, VK_SHADER_STAGE_COMPUTE_BIT, 0, sizeof a, &a);
    k->f.CmdDispatch(cb, (count + KERNEL_WORKGROUP - 1) / KERNEL_WORKGROUP, 1, 1);
}

/* Ends the command buffer and submits it through tidepool, holding blocks[0..n) (none: n = 0).
 * Returns the submission's value, or 0 having said why. */
static uint64_t kernel_submit(struct vk_kernel *k, unsigned slot, tide_allocator *t, void *const *blocks, size_t n)
{
    VkCommandBuffer cb = k->ring[slot];
    k->f.EndCommandBuffer(cb);
    uint64_t v = 0;
    tide_status s = tide_vk_submit(k->vk, t, &cb, 1, blocks, n, &v);
    if (s != TIDE_OK) {
        fprintf(stderr, "tide_vk_submit: %s\n", tide_last_error());
        return 0;
    }
    k->ring_value[slot] = v;
    return v;
}

/* The value tidepool's timeline has reached. */
static uint64_t kernel_timeline_now(struct vk_kernel *k)
{
    uint64_t v = 0;
    k->f.GetSemaphoreCounterValue(k->h.device, k->h.timeline, &v);
    return v;
}

#endif /* TIDE_VK_KERNEL_H */

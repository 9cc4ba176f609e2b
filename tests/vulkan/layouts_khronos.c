/* declarations_match.c's table of the Khronos headers' layouts (vulkan/vulkan.h). */
#include <vulkan/vulkan.h>

#include <stddef.h>

#include "layouts.h"

#define SIZE(s) {#s, sizeof(s)},
#define FIELD(s, f) {#s "." #f, offsetof(s, f)},
const struct layout khronos_layouts[] = {
#include "vk_layouts.def"
    {0, 0}};
const size_t khronos_properties_size = sizeof(VkPhysicalDeviceProperties);

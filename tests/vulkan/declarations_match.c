/*
 * src/backend/vk_api.h declares the part of the Vulkan API that the backend uses, so that no Vulkan
 * header is needed to build it. This test, built where the Khronos headers are installed
 * (libvulkan-dev), compares every struct's size and fields there with the Khronos headers'
 * (layouts_khronos.c): a wrong declaration would pass garbage to the driver. VkPhysicalDeviceProperties
 * is declared with its leading fields and room for the rest, so only those and its room are compared.
 */
#include "backend/vk_api.h"

#include <stdio.h>
#include <string.h>

#include "layouts.h"

#define SIZE(s) {#s, sizeof(s)},
#define FIELD(s, f) {#s "." #f, offsetof(s, f)},
const struct layout tidepool_layouts[] = {
#include "vk_layouts.def"
    {0, 0}};
const size_t tidepool_properties_size = sizeof(VkPhysicalDeviceProperties);

int main(void)
{
    int bad = 0, n = 0;
    for (; tidepool_layouts[n].what; n++)
        if (strcmp(tidepool_layouts[n].what, khronos_layouts[n].what) ||
            tidepool_layouts[n].value != khronos_layouts[n].value) {
            printf("%s: %zu in vk_api.h, %zu in the Khronos headers\n", tidepool_layouts[n].what,
                   tidepool_layouts[n].value, khronos_layouts[n].value);
            bad++;
        }
    if (tidepool_properties_size < khronos_properties_size) {
        printf("VkPhysicalDeviceProperties: %zu bytes of room, the driver writes %zu\n", tidepool_properties_size,
               khronos_properties_size);
        bad++;
    }
    printf("%d sizes and offsets compared, %d differ\n", n, bad);
    return bad != 0;
}

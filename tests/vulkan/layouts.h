/* One size or field offset of a Vulkan struct (declarations_match.c). */
#include <stddef.h>
struct layout {
    const char *what;
    size_t value;
};
extern const struct layout khronos_layouts[], tidepool_layouts[];
extern const size_t khronos_properties_size, tidepool_properties_size;

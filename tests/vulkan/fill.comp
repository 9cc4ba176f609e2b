// The kernel of the Vulkan tests and benchmark: waits at a gate (a word the host sets), then writes
// `pattern` into the first `count` words of the block at `target`. Both are buffer device addresses:
// tidepool's pointers on Vulkan. The gate lets a test free the block and hand its memory to a new
// owner while this kernel is known to be still running, so that a reuse too early is seen every
// time; a gate that never opens is waited on at most spin_limit rounds.
// scripts/gen-spirv.sh compiles it into tests/vulkan/fill_spv.h.
#version 460
#extension GL_EXT_buffer_reference : require
#extension GL_EXT_buffer_reference_uvec2 : require
layout(local_size_x = 64) in;
layout(buffer_reference, std430, buffer_reference_align = 4) coherent volatile buffer Words { uint w[]; };
layout(push_constant) uniform Args {
    uvec2 target;
    uvec2 gate;
    uint count;
    uint pattern;
    uint spin_limit;
} args;
void main()
{
    uint n = 0u;
    while (Words(args.gate).w[0] == 0u && n < args.spin_limit)
        n++;
    uint i = gl_GlobalInvocationID.x;
    if (i < args.count)
        Words(args.target).w[i] = args.pattern;
}

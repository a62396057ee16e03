/* runtime/vulkan/shaders/moe_mv_q8_0.comp: expert products of Q8_0 weights by expert id (see moe_vec.glsl). */
#version 450
#extension GL_GOOGLE_include_directive : require

#define WT_Q8_0
#include "moe_vec.glsl"

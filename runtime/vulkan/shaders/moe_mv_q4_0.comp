/* runtime/vulkan/shaders/moe_mv_q4_0.comp: expert products of Q4_0 weights by expert id (see moe_vec.glsl). */
#version 450
#extension GL_GOOGLE_include_directive : require

#define WT_Q4_0
#include "moe_vec.glsl"

/* runtime/vulkan/shaders/moe_mv_q4_k.comp: expert products of Q4_K weights by expert id (see moe_vec.glsl). */
#version 450
#extension GL_GOOGLE_include_directive : require

#define WT_Q4_K
#include "moe_vec.glsl"

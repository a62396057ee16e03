/* runtime/vulkan/shaders/moe_mv_q6_k.comp: expert products of Q6_K weights by expert id (see moe_vec.glsl). */
#version 450
#extension GL_GOOGLE_include_directive : require

#define WT_Q6_K
#include "moe_vec.glsl"

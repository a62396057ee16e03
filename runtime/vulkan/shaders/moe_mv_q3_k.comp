/* runtime/vulkan/shaders/moe_mv_q3_k.comp: expert products of Q3_K weights by expert id (see moe_vec.glsl). */
#version 450
#extension GL_GOOGLE_include_directive : require

#define WT_Q3_K
#include "moe_vec.glsl"

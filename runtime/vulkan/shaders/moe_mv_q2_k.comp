/* runtime/vulkan/shaders/moe_mv_q2_k.comp: expert products of Q2_K weights by expert id (see moe_vec.glsl). */
#version 450
#extension GL_GOOGLE_include_directive : require

#define WT_Q2_K
#include "moe_vec.glsl"

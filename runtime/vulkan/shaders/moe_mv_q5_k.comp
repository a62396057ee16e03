/* runtime/vulkan/shaders/moe_mv_q5_k.comp: expert products of Q5_K weights by expert id (see moe_vec.glsl). */
#version 450
#extension GL_GOOGLE_include_directive : require

#define WT_Q5_K
#include "moe_vec.glsl"

/* runtime/vulkan/shaders/moe_mv_iq1_m.comp: expert products of IQ1_M weights by expert id (see moe_vec.glsl). */
#version 450
#extension GL_GOOGLE_include_directive : require

#define WT_IQ1_M
#include "moe_vec.glsl"

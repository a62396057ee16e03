/* runtime/vulkan/shaders/moe_mv_iq1_s.comp: expert products of IQ1_S weights by expert id (see moe_vec.glsl). */
#version 450
#extension GL_GOOGLE_include_directive : require

#define WT_IQ1_S
#include "moe_vec.glsl"

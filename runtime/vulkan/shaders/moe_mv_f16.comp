/* runtime/vulkan/shaders/moe_mv_f16.comp: expert products of F16 weights by expert id (see moe_vec.glsl). */
#version 450
#extension GL_GOOGLE_include_directive : require

#define WT_F16
#include "moe_vec.glsl"

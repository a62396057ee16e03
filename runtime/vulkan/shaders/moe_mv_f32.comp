/* runtime/vulkan/shaders/moe_mv_f32.comp: expert products of F32 weights by expert id (see moe_vec.glsl). */
#version 450
#extension GL_GOOGLE_include_directive : require

#define WT_F32
#include "moe_vec.glsl"

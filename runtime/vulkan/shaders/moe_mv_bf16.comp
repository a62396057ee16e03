/* runtime/vulkan/shaders/moe_mv_bf16.comp: expert products of BF16 weights by expert id (see moe_vec.glsl). */
#version 450
#extension GL_GOOGLE_include_directive : require

#define WT_BF16
#include "moe_vec.glsl"

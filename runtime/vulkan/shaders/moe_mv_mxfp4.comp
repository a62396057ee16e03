/* runtime/vulkan/shaders/moe_mv_mxfp4.comp: expert products of MXFP4 weights by expert id (see moe_vec.glsl). */
#version 450
#extension GL_GOOGLE_include_directive : require

#define WT_MXFP4
#include "moe_vec.glsl"

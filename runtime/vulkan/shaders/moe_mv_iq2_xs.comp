/* runtime/vulkan/shaders/moe_mv_iq2_xs.comp: expert products of IQ2_XS weights by expert id (see moe_vec.glsl). */
#version 450
#extension GL_GOOGLE_include_directive : require

#define WT_IQ2_XS
#include "moe_vec.glsl"

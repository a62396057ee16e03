/* runtime/vulkan/shaders/moe_mv_iq3_s.comp: expert products of IQ3_S weights by expert id (see moe_vec.glsl). */
#version 450
#extension GL_GOOGLE_include_directive : require

#define WT_IQ3_S
#include "moe_vec.glsl"

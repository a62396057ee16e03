/* runtime/vulkan/shaders/moe_mv_iq4_nl.comp: expert products of IQ4_NL weights by expert id (see moe_vec.glsl). */
#version 450
#extension GL_GOOGLE_include_directive : require

#define WT_IQ4_NL
#include "moe_vec.glsl"

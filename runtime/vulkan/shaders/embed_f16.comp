/* runtime/vulkan/shaders/embed_f16.comp: embedding rows of F16 weights (see mm_embed.glsl). */
#version 450
#extension GL_GOOGLE_include_directive : require

#define WT_F16
#include "mm_embed.glsl"

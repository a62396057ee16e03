/* runtime/vulkan/shaders/embed_q8_0.comp: embedding rows of Q8_0 weights (see mm_embed.glsl). */
#version 450
#extension GL_GOOGLE_include_directive : require

#define WT_Q8_0
#include "mm_embed.glsl"

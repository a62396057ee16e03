/* runtime/vulkan/shaders/embed_q4_0.comp: embedding rows of Q4_0 weights (see mm_embed.glsl). */
#version 450
#extension GL_GOOGLE_include_directive : require

#define WT_Q4_0
#include "mm_embed.glsl"

/* runtime/vulkan/shaders/embed_q3_k.comp: embedding rows of Q3_K weights (see mm_embed.glsl). */
#version 450
#extension GL_GOOGLE_include_directive : require

#define WT_Q3_K
#include "mm_embed.glsl"

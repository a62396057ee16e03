/* runtime/vulkan/shaders/embed_q4_k.comp: embedding rows of Q4_K weights (see mm_embed.glsl). */
#version 450
#extension GL_GOOGLE_include_directive : require

#define WT_Q4_K
#include "mm_embed.glsl"

/* runtime/vulkan/shaders/embed_q6_k.comp: embedding rows of Q6_K weights (see mm_embed.glsl). */
#version 450
#extension GL_GOOGLE_include_directive : require

#define WT_Q6_K
#include "mm_embed.glsl"

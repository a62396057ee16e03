/* runtime/vulkan/shaders/embed_q2_k.comp: embedding rows of Q2_K weights (see mm_embed.glsl). */
#version 450
#extension GL_GOOGLE_include_directive : require

#define WT_Q2_K
#include "mm_embed.glsl"

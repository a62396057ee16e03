/* runtime/vulkan/shaders/embed_q5_k.comp: embedding rows of Q5_K weights (see mm_embed.glsl). */
#version 450
#extension GL_GOOGLE_include_directive : require

#define WT_Q5_K
#include "mm_embed.glsl"

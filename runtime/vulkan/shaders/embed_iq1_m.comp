/* runtime/vulkan/shaders/embed_iq1_m.comp: embedding rows of IQ1_M weights (see mm_embed.glsl). */
#version 450
#extension GL_GOOGLE_include_directive : require

#define WT_IQ1_M
#include "mm_embed.glsl"

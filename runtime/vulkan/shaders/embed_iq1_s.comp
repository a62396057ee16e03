/* runtime/vulkan/shaders/embed_iq1_s.comp: embedding rows of IQ1_S weights (see mm_embed.glsl). */
#version 450
#extension GL_GOOGLE_include_directive : require

#define WT_IQ1_S
#include "mm_embed.glsl"

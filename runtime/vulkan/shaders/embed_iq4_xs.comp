/* runtime/vulkan/shaders/embed_iq4_xs.comp: embedding rows of IQ4_XS weights (see mm_embed.glsl). */
#version 450
#extension GL_GOOGLE_include_directive : require

#define WT_IQ4_XS
#include "mm_embed.glsl"

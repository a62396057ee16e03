/* runtime/vulkan/shaders/embed_iq2_xs.comp: embedding rows of IQ2_XS weights (see mm_embed.glsl). */
#version 450
#extension GL_GOOGLE_include_directive : require

#define WT_IQ2_XS
#include "mm_embed.glsl"

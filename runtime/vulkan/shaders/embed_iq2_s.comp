/* runtime/vulkan/shaders/embed_iq2_s.comp: embedding rows of IQ2_S weights (see mm_embed.glsl). */
#version 450
#extension GL_GOOGLE_include_directive : require

#define WT_IQ2_S
#include "mm_embed.glsl"

/* runtime/vulkan/shaders/embed_iq3_s.comp: embedding rows of IQ3_S weights (see mm_embed.glsl). */
#version 450
#extension GL_GOOGLE_include_directive : require

#define WT_IQ3_S
#include "mm_embed.glsl"

/* runtime/vulkan/shaders/embed_iq4_nl.comp: embedding rows of IQ4_NL weights (see mm_embed.glsl). */
#version 450
#extension GL_GOOGLE_include_directive : require

#define WT_IQ4_NL
#include "mm_embed.glsl"

/* runtime/vulkan/shaders/embed_iq2_xxs.comp: embedding rows of IQ2_XXS weights (see mm_embed.glsl). */
#version 450
#extension GL_GOOGLE_include_directive : require

#define WT_IQ2_XXS
#include "mm_embed.glsl"

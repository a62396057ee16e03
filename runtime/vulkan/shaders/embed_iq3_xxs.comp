/* runtime/vulkan/shaders/embed_iq3_xxs.comp: embedding rows of IQ3_XXS weights (see mm_embed.glsl). */
#version 450
#extension GL_GOOGLE_include_directive : require

#define WT_IQ3_XXS
#include "mm_embed.glsl"

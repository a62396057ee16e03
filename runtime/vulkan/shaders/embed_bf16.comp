/* runtime/vulkan/shaders/embed_bf16.comp: embedding rows of BF16 weights (see mm_embed.glsl). */
#version 450
#extension GL_GOOGLE_include_directive : require

#define WT_BF16
#include "mm_embed.glsl"

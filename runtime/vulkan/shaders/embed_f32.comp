/* runtime/vulkan/shaders/embed_f32.comp: embedding rows of F32 weights (see mm_embed.glsl). */
#version 450
#extension GL_GOOGLE_include_directive : require

#define WT_F32
#include "mm_embed.glsl"

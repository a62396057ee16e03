/* runtime/vulkan/shaders/embed_mxfp4.comp: embedding rows of MXFP4 weights (see mm_embed.glsl). */
#version 450
#extension GL_GOOGLE_include_directive : require

#define WT_MXFP4
#include "mm_embed.glsl"

/* runtime/vulkan/shaders/mm_mxfp4.comp: tiled mat-mul (prefill) of MXFP4 weights (see mm_tile.glsl). */
#version 450
#extension GL_GOOGLE_include_directive : require

#define WT_MXFP4
#include "mm_tile.glsl"

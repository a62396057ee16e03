/* runtime/vulkan/shaders/mm_f16.comp: tiled mat-mul (prefill) of F16 weights (see mm_tile.glsl). */
#version 450
#extension GL_GOOGLE_include_directive : require

#define WT_F16
#include "mm_tile.glsl"

/* runtime/vulkan/shaders/mm_q8_0.comp: tiled mat-mul (prefill) of Q8_0 weights (see mm_tile.glsl). */
#version 450
#extension GL_GOOGLE_include_directive : require

#define WT_Q8_0
#include "mm_tile.glsl"

/* runtime/vulkan/shaders/mm_q4_0.comp: tiled mat-mul (prefill) of Q4_0 weights (see mm_tile.glsl). */
#version 450
#extension GL_GOOGLE_include_directive : require

#define WT_Q4_0
#include "mm_tile.glsl"

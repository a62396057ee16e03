/* runtime/vulkan/shaders/mm_q3_k.comp: tiled mat-mul (prefill) of Q3_K weights (see mm_tile.glsl). */
#version 450
#extension GL_GOOGLE_include_directive : require

#define WT_Q3_K
#include "mm_tile.glsl"

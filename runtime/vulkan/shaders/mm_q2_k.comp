/* runtime/vulkan/shaders/mm_q2_k.comp: tiled mat-mul (prefill) of Q2_K weights (see mm_tile.glsl). */
#version 450
#extension GL_GOOGLE_include_directive : require

#define WT_Q2_K
#include "mm_tile.glsl"

/* runtime/vulkan/shaders/mm_iq1_s.comp: tiled mat-mul (prefill) of IQ1_S weights (see mm_tile.glsl). */
#version 450
#extension GL_GOOGLE_include_directive : require

#define WT_IQ1_S
#include "mm_tile.glsl"

/* runtime/vulkan/shaders/mm_f32.comp: tiled mat-mul (prefill) of F32 weights (see mm_tile.glsl). */
#version 450
#extension GL_GOOGLE_include_directive : require

#define WT_F32
#include "mm_tile.glsl"

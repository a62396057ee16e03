/* runtime/vulkan/shaders/mm_bf16.comp: tiled mat-mul (prefill) of BF16 weights (see mm_tile.glsl). */
#version 450
#extension GL_GOOGLE_include_directive : require

#define WT_BF16
#include "mm_tile.glsl"

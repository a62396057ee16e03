/* runtime/vulkan/shaders/mv_bf16.comp: mat-vec (1..8 rows of x) of BF16 weights (see mm_vec.glsl). */
#version 450
#extension GL_GOOGLE_include_directive : require

#define WT_BF16
#include "mm_vec.glsl"

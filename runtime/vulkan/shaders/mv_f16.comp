/* runtime/vulkan/shaders/mv_f16.comp: mat-vec (1..8 rows of x) of F16 weights (see mm_vec.glsl). */
#version 450
#extension GL_GOOGLE_include_directive : require

#define WT_F16
#include "mm_vec.glsl"

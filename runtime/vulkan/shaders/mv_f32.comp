/* runtime/vulkan/shaders/mv_f32.comp: mat-vec (1..8 rows of x) of F32 weights (see mm_vec.glsl). */
#version 450
#extension GL_GOOGLE_include_directive : require

#define WT_F32
#include "mm_vec.glsl"

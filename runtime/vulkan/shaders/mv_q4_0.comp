/* runtime/vulkan/shaders/mv_q4_0.comp: mat-vec (1..8 rows of x) of Q4_0 weights (see mm_vec.glsl). */
#version 450
#extension GL_GOOGLE_include_directive : require

#define WT_Q4_0
#include "mm_vec.glsl"

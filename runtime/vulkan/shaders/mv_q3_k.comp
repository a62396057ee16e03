/* runtime/vulkan/shaders/mv_q3_k.comp: mat-vec (1..8 rows of x) of Q3_K weights (see mm_vec.glsl). */
#version 450
#extension GL_GOOGLE_include_directive : require

#define WT_Q3_K
#include "mm_vec.glsl"

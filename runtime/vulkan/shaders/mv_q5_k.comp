/* runtime/vulkan/shaders/mv_q5_k.comp: mat-vec (1..8 rows of x) of Q5_K weights (see mm_vec.glsl). */
#version 450
#extension GL_GOOGLE_include_directive : require

#define WT_Q5_K
#include "mm_vec.glsl"

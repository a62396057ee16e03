/* runtime/vulkan/shaders/mv_iq1_m.comp: mat-vec (1..8 rows of x) of IQ1_M weights (see mm_vec.glsl). */
#version 450
#extension GL_GOOGLE_include_directive : require

#define WT_IQ1_M
#include "mm_vec.glsl"

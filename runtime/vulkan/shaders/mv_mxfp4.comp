/* runtime/vulkan/shaders/mv_mxfp4.comp: mat-vec (1..8 rows of x) of MXFP4 weights (see mm_vec.glsl). */
#version 450
#extension GL_GOOGLE_include_directive : require

#define WT_MXFP4
#include "mm_vec.glsl"

/* runtime/vulkan/shaders/mv_iq2_xs.comp: mat-vec (1..8 rows of x) of IQ2_XS weights (see mm_vec.glsl). */
#version 450
#extension GL_GOOGLE_include_directive : require

#define WT_IQ2_XS
#include "mm_vec.glsl"

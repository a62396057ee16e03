/* runtime/vulkan/shaders/mv_iq4_xs.comp: mat-vec (1..8 rows of x) of IQ4_XS weights (see mm_vec.glsl). */
#version 450
#extension GL_GOOGLE_include_directive : require

#define WT_IQ4_XS
#include "mm_vec.glsl"

/* runtime/vulkan/shaders/mv_iq3_xxs.comp: mat-vec (1..8 rows of x) of IQ3_XXS weights (see mm_vec.glsl). */
#version 450
#extension GL_GOOGLE_include_directive : require

#define WT_IQ3_XXS
#include "mm_vec.glsl"

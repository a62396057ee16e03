/* runtime/vulkan/shaders/mm_iq3_xxs.comp: tiled mat-mul (prefill) of IQ3_XXS weights (see mm_tile.glsl). */
#version 450
#extension GL_GOOGLE_include_directive : require

#define WT_IQ3_XXS
#include "mm_tile.glsl"

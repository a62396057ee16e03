/* runtime/vulkan/shaders/mm_iq2_xxs.comp: tiled mat-mul (prefill) of IQ2_XXS weights (see mm_tile.glsl). */
#version 450
#extension GL_GOOGLE_include_directive : require

#define WT_IQ2_XXS
#include "mm_tile.glsl"

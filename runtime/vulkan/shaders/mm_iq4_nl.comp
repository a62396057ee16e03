/* runtime/vulkan/shaders/mm_iq4_nl.comp: tiled mat-mul (prefill) of IQ4_NL weights (see mm_tile.glsl). */
#version 450
#extension GL_GOOGLE_include_directive : require

#define WT_IQ4_NL
#include "mm_tile.glsl"

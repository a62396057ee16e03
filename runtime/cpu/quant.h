/*
 * runtime/cpu/quant.h: scalar conversions between F32 and the stored types:
 * half and bfloat16 floats, and the block quantizations of models/dtype.h.
 *
 * Part: runtime/, room cpu/. These are the reference definitions that the
 * SIMD kernels are tested against; they are also what the test-fixture
 * generator uses to write quantized GGUF files.
 */
#ifndef SHOAL_RUNTIME_QUANT_H
#define SHOAL_RUNTIME_QUANT_H

#include <stdbool.h>
#include <stdint.h>

#include "models/dtype.h"

float shoal_fp16_to_f32(uint16_t h);
uint16_t shoal_f32_to_fp16(float f); /* round to nearest even */
float shoal_bf16_to_f32(uint16_t h);
uint16_t shoal_f32_to_bf16(float f); /* round to nearest even; NaN stays NaN */

/* dst[n] = the values of a row of n elements of type t (F32, F16, BF16,
 * Q8_0, Q4_0, Q5_0, Q5_1, IQ4_NL, MXFP4, Q2_K, Q3_K, Q4_K, Q5_K, Q6_K,
 * IQ4_XS, IQ2_XXS, IQ2_XS, IQ2_S, IQ3_XXS, IQ3_S, IQ1_S, IQ1_M, Q8_K). n must be a multiple of the
 * block size. */
void shoal_dequantize_row(shoal_dtype t, const void *src, float *dst, int64_t n);

/* Quantize src[n] into a row of type t (the same types). Weight types use
 * a simple round-to-nearest quantizer (good enough for fixtures); Q8_0 and
 * Q8_K are also the activation formats of the quantized dot products. */
void shoal_quantize_row(shoal_dtype t, const float *src, void *dst, int64_t n);

/* Whether shoal_quantize_row / shoal_dequantize_row handle type t. */
bool shoal_quant_supported(shoal_dtype t);

#endif

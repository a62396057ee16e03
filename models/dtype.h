/*
 * models/dtype.h: tensor element types as GGUF numbers them, with their block
 * layout (elements per block, bytes per block).
 *
 * Part: models/ (what a model is). The numbering is GGUF's on-disk
 * `ggml_type`, so a value read from a file is used as is after
 * shoal_dtype_known() says it is one we can size. Types we can size but not
 * compute (e.g. Q4_1) are readable: the engine refuses them by name.
 */
#ifndef SHOAL_MODELS_DTYPE_H
#define SHOAL_MODELS_DTYPE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

typedef enum shoal_dtype {
	SHOAL_DTYPE_F32 = 0,
	SHOAL_DTYPE_F16 = 1,
	SHOAL_DTYPE_Q4_0 = 2,
	SHOAL_DTYPE_Q4_1 = 3,
	SHOAL_DTYPE_Q5_0 = 6,
	SHOAL_DTYPE_Q5_1 = 7,
	SHOAL_DTYPE_Q8_0 = 8,
	SHOAL_DTYPE_Q8_1 = 9,
	SHOAL_DTYPE_Q2_K = 10,
	SHOAL_DTYPE_Q3_K = 11,
	SHOAL_DTYPE_Q4_K = 12,
	SHOAL_DTYPE_Q5_K = 13,
	SHOAL_DTYPE_Q6_K = 14,
	SHOAL_DTYPE_Q8_K = 15,
	SHOAL_DTYPE_IQ2_XXS = 16,
	SHOAL_DTYPE_IQ2_XS = 17,
	SHOAL_DTYPE_IQ3_XXS = 18,
	SHOAL_DTYPE_IQ1_S = 19,
	SHOAL_DTYPE_IQ4_NL = 20,
	SHOAL_DTYPE_IQ3_S = 21,
	SHOAL_DTYPE_IQ2_S = 22,
	SHOAL_DTYPE_IQ4_XS = 23,
	SHOAL_DTYPE_I8 = 24,
	SHOAL_DTYPE_I16 = 25,
	SHOAL_DTYPE_I32 = 26,
	SHOAL_DTYPE_I64 = 27,
	SHOAL_DTYPE_F64 = 28,
	SHOAL_DTYPE_IQ1_M = 29,
	SHOAL_DTYPE_BF16 = 30,
	SHOAL_DTYPE_MXFP4 = 39,
	SHOAL_DTYPE__MAX = 40,
} shoal_dtype;

/* Block layouts (bytes), as stored in GGUF files:
 *   Q8_0: { f16 d; int8 qs[32]; }                            34 B / 32
 *   Q4_0: { f16 d; uint8 qs[16]; }  x = d * (nibble - 8)     18 B / 32
 *   Q5_0: { f16 d; uint8 qh[4], qs[16]; } x = d * (q5 - 16)  22 B / 32
 *   Q5_1: { f16 d, m; uint8 qh[4], qs[16]; } x = d q5 + m    24 B / 32
 *   IQ4_NL: { f16 d; uint8 qs[16]; } x = d * table[nibble]   18 B / 32
 *   MXFP4: { uint8 e; uint8 qs[16]; } x = 2^(e-128) * fp4x2  17 B / 32
 *   Q2_K: { uint8 scales[16], qs[64]; f16 d, dmin; }         84 B / 256
 *   Q3_K: { uint8 hmask[32], qs[64], scales[12]; f16 d; }   110 B / 256
 *   Q4_K: { f16 d, dmin; uint8 scales[12]; uint8 qs[128]; } 144 B / 256
 *   Q5_K: { f16 d, dmin; uint8 scales[12], qh[32], qs[128]; } 176 B / 256
 *   Q6_K: { uint8 ql[128], qh[64]; int8 scales[16]; f16 d; } 210 B / 256
 *   IQ4_XS: { f16 d; uint16 scales_h; uint8 scales_l[4], qs[128]; } 136 B / 256
 *   IQ2_XXS: { f16 d; uint16 qs[32]; }                        66 B / 256
 *   IQ2_XS: { f16 d; uint16 qs[32]; uint8 scales[8]; }        74 B / 256
 *   IQ2_S: { f16 d; uint8 qs[64], qh[8], scales[8]; }         82 B / 256
 *   IQ3_XXS: { f16 d; uint8 qs[96]; }                         98 B / 256
 *   IQ3_S: { f16 d; uint8 qs[64], qh[8], signs[32], scales[4]; } 110 B / 256
 *   IQ1_S: { f16 d; uint8 qs[32]; uint16 qh[8]; }             50 B / 256
 *   IQ1_M: { uint8 qs[32], qh[16], scales[8]; }               56 B / 256
 *         (the IQ types index grids: runtime/cpu/kernels_iq.h)
 *   Q8_K: { f32 d; int8 qs[256]; int16 bsums[16]; }         292 B / 256
 *         (activations only: the dot-product partner of the K-quants) */

/* True if t is a type we know the block layout of. */
bool shoal_dtype_known(uint32_t t);
/* True if the engine computes with weights of this type. */
bool shoal_dtype_computable(shoal_dtype t);
/* Elements per block (1 for plain types); 0 for unknown types. */
uint32_t shoal_dtype_block_elems(shoal_dtype t);
/* Bytes per block; 0 for unknown types. */
uint32_t shoal_dtype_block_bytes(shoal_dtype t);
/* "Q4_K", "F16", ...; "?" for unknown. */
const char *shoal_dtype_name(shoal_dtype t);
/* Bytes of a row of n elements: SIZE_MAX if n is not a whole number of
 * blocks or the type is unknown. */
size_t shoal_dtype_row_bytes(shoal_dtype t, uint64_t n);

#endif

/*
 * models/dtype.c: the block-layout table of the tensor types (see dtype.h).
 */
#include "models/dtype.h"

typedef struct shoal_dtype_traits {
	const char *name;
	uint32_t block_elems;
	uint32_t block_bytes;
	bool computable;
} shoal_dtype_traits;

static const shoal_dtype_traits dtype_table[SHOAL_DTYPE__MAX] = {
    [SHOAL_DTYPE_F32] = {"F32", 1, 4, true},
    [SHOAL_DTYPE_F16] = {"F16", 1, 2, true},
    [SHOAL_DTYPE_Q4_0] = {"Q4_0", 32, 18, true},
    [SHOAL_DTYPE_Q4_1] = {"Q4_1", 32, 20, false},
    [SHOAL_DTYPE_Q5_0] = {"Q5_0", 32, 22, true},
    [SHOAL_DTYPE_Q5_1] = {"Q5_1", 32, 24, true},
    [SHOAL_DTYPE_Q8_0] = {"Q8_0", 32, 34, true},
    [SHOAL_DTYPE_Q8_1] = {"Q8_1", 32, 36, false},
    [SHOAL_DTYPE_Q2_K] = {"Q2_K", 256, 84, true},
    [SHOAL_DTYPE_Q3_K] = {"Q3_K", 256, 110, true},
    [SHOAL_DTYPE_Q4_K] = {"Q4_K", 256, 144, true},
    [SHOAL_DTYPE_Q5_K] = {"Q5_K", 256, 176, true},
    [SHOAL_DTYPE_Q6_K] = {"Q6_K", 256, 210, true},
    [SHOAL_DTYPE_Q8_K] = {"Q8_K", 256, 292, false},
    [SHOAL_DTYPE_IQ2_XXS] = {"IQ2_XXS", 256, 66, true},
    [SHOAL_DTYPE_IQ2_XS] = {"IQ2_XS", 256, 74, true},
    [SHOAL_DTYPE_IQ3_XXS] = {"IQ3_XXS", 256, 98, true},
    [SHOAL_DTYPE_IQ1_S] = {"IQ1_S", 256, 50, true},
    [SHOAL_DTYPE_IQ4_NL] = {"IQ4_NL", 32, 18, true},
    [SHOAL_DTYPE_IQ3_S] = {"IQ3_S", 256, 110, true},
    [SHOAL_DTYPE_IQ2_S] = {"IQ2_S", 256, 82, true},
    [SHOAL_DTYPE_IQ4_XS] = {"IQ4_XS", 256, 136, true},
    [SHOAL_DTYPE_I8] = {"I8", 1, 1, false},
    [SHOAL_DTYPE_I16] = {"I16", 1, 2, false},
    [SHOAL_DTYPE_I32] = {"I32", 1, 4, false},
    [SHOAL_DTYPE_I64] = {"I64", 1, 8, false},
    [SHOAL_DTYPE_F64] = {"F64", 1, 8, false},
    [SHOAL_DTYPE_IQ1_M] = {"IQ1_M", 256, 56, true},
    [SHOAL_DTYPE_BF16] = {"BF16", 1, 2, true},
    [SHOAL_DTYPE_MXFP4] = {"MXFP4", 32, 17, true},
};

bool shoal_dtype_known(uint32_t t)
{
	return t < SHOAL_DTYPE__MAX && dtype_table[t].name != NULL;
}

bool shoal_dtype_computable(shoal_dtype t)
{
	return shoal_dtype_known(t) && dtype_table[t].computable;
}

uint32_t shoal_dtype_block_elems(shoal_dtype t)
{
	return shoal_dtype_known(t) ? dtype_table[t].block_elems : 0;
}

uint32_t shoal_dtype_block_bytes(shoal_dtype t)
{
	return shoal_dtype_known(t) ? dtype_table[t].block_bytes : 0;
}

const char *shoal_dtype_name(shoal_dtype t)
{
	return shoal_dtype_known(t) ? dtype_table[t].name : "?";
}

size_t shoal_dtype_row_bytes(shoal_dtype t, uint64_t n)
{
	if (!shoal_dtype_known(t))
		return SIZE_MAX;
	uint64_t be = dtype_table[t].block_elems;
	if (n % be)
		return SIZE_MAX;
	uint64_t blocks = n / be;
	if (blocks > SIZE_MAX / dtype_table[t].block_bytes)
		return SIZE_MAX;
	return (size_t)(blocks * dtype_table[t].block_bytes);
}

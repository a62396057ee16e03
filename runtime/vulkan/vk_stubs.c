/*
 * runtime/vulkan/vk_stubs.c: the ops of vk_impl.h that other files will
 * implement (vk_matmul.c: matmul, embed, supports_type), until it is
 * merged: each says what is missing and aborts; supports_type says no to
 * every type, so an engine refuses the model with a clear message instead
 * of reaching them.
 *
 * Part: runtime/ (the room vulkan/).
 */
#include "runtime/vulkan/vk_impl.h"

#include <stdio.h>
#include <stdlib.h>

static void missing(const char *op)
{
	fprintf(stderr, "shoal: vulkan: %s is not implemented in this build yet\n", op);
	abort();
}

bool vk__supports_type(shoal_backend_op op, shoal_dtype t)
{
	(void)op;
	(void)t;
	return false;
}

void vk__matmul(shoal_backend *b, uint32_t n_mat, const shoal_backend_mat *w, const float *x,
                size_t ldx, uint32_t n_rows, float *const *y, const size_t *ldy)
{
	missing("matmul");
}

void vk__embed(shoal_backend *b, shoal_dtype t, const void *table, size_t row_bytes,
               uint32_t n_embd, const int32_t *ids, uint32_t n_rows, float *out)
{
	missing("embed");
}

/*
 * runtime/vulkan/vk_stubs.c: the ops of vk_impl.h that other files will
 * implement (vk_attn.c: attention), until they are merged: each says what
 * is missing and aborts.
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

void vk__attention(shoal_backend *b, const shoal_backend_attn *a)
{
	missing("attention");
}

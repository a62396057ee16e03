/*
 * base/assert.c: the failure path of SHOAL_ASSERT (see assert.h).
 */
#include "base/assert.h"

#include <stdio.h>
#include <stdlib.h>

void shoal_assert_fail(const char *file, int line, const char *expr)
{
	fprintf(stderr, "%s:%d: assertion failed: %s\n", file, line, expr);
	fflush(stderr);
	abort();
}

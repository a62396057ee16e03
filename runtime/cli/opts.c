/*
 * runtime/cli/opts.c: option parsers that more than one command of the
 * CLI uses (cli_impl.h): numbers in a range, the KV cache's element type,
 * the compute backend.
 * They live apart from every command so that the commands call them and
 * never each other.
 *
 * Part: runtime/ (CLI).
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "runtime/cli/cli_impl.h"

bool cli__kv_type(const char *s, shoal_dtype *out)
{
	if (!strcmp(s, "f16"))
		*out = SHOAL_DTYPE_F16;
	else if (!strcmp(s, "f32"))
		*out = SHOAL_DTYPE_F32;
	else
		return false;
	return true;
}

bool cli__num(const char *s, double lo, double hi, double *out)
{
	char *end;
	errno = 0;
	double v = strtod(s, &end);
	if (errno || end == s || *end || !(v >= lo && v <= hi))
		return false;
	*out = v;
	return true;
}

bool cli__backend(const char *cmd, const char *name, const shoal_backend_ops **out)
{
	char why[SHOAL_WHY_LEN] = "";
	shoal_err err =
	    shoal_backend_pick(&(shoal_backend_opts){.name = name}, out, why, sizeof why);
	if (err)
		fprintf(stderr, "%s: --backend: %s\n", cmd, why[0] ? why : shoal_strerror(err));
	return !err;
}

void cli__backend_usage(FILE *f, int width)
{
	char names[128];
	fprintf(f, "  %-*scompute backend: auto (default: the best here) or %s\n", width - 2,
	        "--backend B", shoal_backend_names(names, sizeof names));
}

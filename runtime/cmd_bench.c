/* runtime/cmd_bench.c: placeholder until this subcommand is built. */
#include <stdio.h>
#include "runtime/cli.h"
int shoal_cmd_bench(int argc, char **argv)
{
	(void)argc;
	fprintf(stderr, "shoal bench: not implemented yet\n");
	(void)argv;
	return 1;
}

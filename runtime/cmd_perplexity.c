/* runtime/cmd_perplexity.c: placeholder until this subcommand is built. */
#include <stdio.h>
#include "runtime/cli.h"
int shoal_cmd_perplexity(int argc, char **argv)
{
	(void)argc;
	fprintf(stderr, "shoal perplexity: not implemented yet\n");
	(void)argv;
	return 1;
}

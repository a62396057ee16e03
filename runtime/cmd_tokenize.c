/* runtime/cmd_tokenize.c: placeholder until this subcommand is built. */
#include <stdio.h>
#include "runtime/cli.h"
int shoal_cmd_tokenize(int argc, char **argv)
{
	(void)argc;
	fprintf(stderr, "shoal tokenize: not implemented yet\n");
	(void)argv;
	return 1;
}
int shoal_cmd_detokenize(int argc, char **argv)
{
	(void)argc;
	fprintf(stderr, "shoal detokenize: not implemented yet\n");
	(void)argv;
	return 1;
}

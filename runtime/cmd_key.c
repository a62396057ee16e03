/* runtime/cmd_key.c: placeholder until this subcommand is built. */
#include <stdio.h>
#include "runtime/cli.h"
int shoal_cmd_key(int argc, char **argv)
{
	(void)argc;
	fprintf(stderr, "shoal key: not implemented yet\n");
	(void)argv;
	return 1;
}

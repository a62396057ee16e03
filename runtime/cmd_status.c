/* runtime/cmd_status.c: placeholder until this subcommand is built. */
#include <stdio.h>
#include "runtime/cli.h"
int shoal_cmd_status(int argc, char **argv)
{
	(void)argc;
	fprintf(stderr, "shoal status: not implemented yet\n");
	(void)argv;
	return 1;
}

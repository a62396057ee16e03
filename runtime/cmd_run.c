/* runtime/cmd_run.c: placeholder until this subcommand is built. */
#include <stdio.h>
#include "runtime/cli.h"
int shoal_cmd_run(int argc, char **argv)
{
	(void)argc;
	fprintf(stderr, "shoal run: not implemented yet\n");
	(void)argv;
	return 1;
}

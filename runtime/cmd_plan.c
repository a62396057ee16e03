/* runtime/cmd_plan.c: placeholder until this subcommand is built. */
#include <stdio.h>
#include "runtime/cli.h"
int shoal_cmd_plan(int argc, char **argv)
{
	(void)argc;
	fprintf(stderr, "shoal plan: not implemented yet\n");
	(void)argv;
	return 1;
}

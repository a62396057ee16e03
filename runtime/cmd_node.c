/* runtime/cmd_node.c: placeholder until this subcommand is built. */
#include <stdio.h>
#include "runtime/cli.h"
int shoal_cmd_node(int argc, char **argv)
{
	(void)argc;
	fprintf(stderr, "shoal node: not implemented yet\n");
	(void)argv;
	return 1;
}

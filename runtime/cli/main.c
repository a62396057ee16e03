/*
 * runtime/cli/main.c: the `shoal` binary: one program, several subcommands.
 *
 * Part: runtime/ (the node). This file only dispatches; each subcommand
 * lives in its own runtime/cmd_*.c.
 */
#include "config.h"

#include <stdio.h>
#include <string.h>

#include "runtime/cli/cli.h"

typedef struct shoal_command {
	const char *name;
	int (*fn)(int argc, char **argv);
	const char *summary;
} shoal_command;

static const shoal_command commands[] = {
    {"run", shoal_cmd_run, "run a model on a prompt and stream the text"},
    {"tokenize", shoal_cmd_tokenize, "print the token ids of a text"},
    {"detokenize", shoal_cmd_detokenize, "print the text of token ids"},
    {"perplexity", shoal_cmd_perplexity, "perplexity of a model on a text file"},
    {"bench", shoal_cmd_bench, "prefill/decode speed and the memory-bandwidth bound"},
    {"node", shoal_cmd_node, "run a peer of the cluster in the foreground"},
    {"status", shoal_cmd_status, "print the cluster view (peers, links, plan)"},
    {"key", shoal_cmd_key, "make a cluster key (shoal key new FILE)"},
    {"plan", shoal_cmd_plan, "plan a model on a cluster description"},
    {"chat", shoal_cmd_chat, "chat with a peer's HTTP API in the terminal"},
};

static void print_usage(FILE *f)
{
	fprintf(f, "usage: shoal COMMAND [ARGS...]\n\ncommands:\n");
	for (size_t i = 0; i < sizeof commands / sizeof commands[0]; i++)
		fprintf(f, "  %-11s %s\n", commands[i].name, commands[i].summary);
	fprintf(f, "\n`shoal COMMAND --help` describes each command.\n");
}

int main(int argc, char **argv)
{
	if (argc < 2) {
		print_usage(stderr);
		return 2;
	}
	if (!strcmp(argv[1], "--help") || !strcmp(argv[1], "-h") || !strcmp(argv[1], "help")) {
		print_usage(stdout);
		return 0;
	}
	if (!strcmp(argv[1], "--version")) {
		printf("shoal %s\n", PACKAGE_VERSION);
		/* The tests that need the hooks ask here (tests/sh/weights_fetch.sh). */
#ifdef SHOAL_TEST_HOOKS
		printf("test hooks: yes (SHOAL_TEST_FAULT, SHOAL_TEST_CORRUPT_CHUNK, "
		       "SHOAL_TEST_FETCH_DIE_AFTER, SHOAL_TEST_TP_PREFER: ./configure "
		       "--enable-test-hooks)\n");
#else
		printf("test hooks: no\n");
#endif
		return 0;
	}
	for (size_t i = 0; i < sizeof commands / sizeof commands[0]; i++)
		if (!strcmp(argv[1], commands[i].name))
			return commands[i].fn(argc - 1, argv + 1);
	fprintf(stderr, "shoal: unknown command '%s'\n", argv[1]);
	print_usage(stderr);
	return 2;
}

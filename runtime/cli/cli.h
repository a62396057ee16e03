/*
 * runtime/cli/cli.h: the subcommands of the `shoal` binary. Each takes the
 * arguments after its name (argv[0] is the subcommand) and returns the
 * process exit status (0 ok, 1 error, 2 usage).
 */
#ifndef SHOAL_RUNTIME_CLI_H
#define SHOAL_RUNTIME_CLI_H

#include <stdbool.h>
#include <stdio.h>

#include "models/dtype.h"

int shoal_cmd_run(int argc, char **argv);        /* runtime/cli/cmd_run.c */
int shoal_cmd_run_remote(int argc, char **argv); /* runtime/cli/cmd_run_remote.c (--peer) */
void shoal_run_remote_usage(FILE *f);             /* its options, for `shoal run --help` */
int shoal_cmd_tokenize(int argc, char **argv);   /* runtime/cli/cmd_tokenize.c */
int shoal_cmd_detokenize(int argc, char **argv); /* runtime/cli/cmd_tokenize.c */
int shoal_cmd_perplexity(int argc, char **argv); /* runtime/cli/cmd_perplexity.c */
int shoal_cmd_bench(int argc, char **argv);      /* runtime/cli/cmd_bench.c */
int shoal_cmd_node(int argc, char **argv);       /* runtime/cli/cmd_node.c */
int shoal_cmd_status(int argc, char **argv);     /* runtime/cli/cmd_status.c */
int shoal_cmd_key(int argc, char **argv);        /* runtime/cli/cmd_key.c */
int shoal_cmd_plan(int argc, char **argv);       /* runtime/cli/cmd_plan.c */
int shoal_cmd_chat(int argc, char **argv);       /* runtime/cli/cmd_chat.c */

/* A number option: s is all of a number in [lo, hi] (strtod's syntax);
 * false otherwise, *out untouched. (runtime/cli/cmd_run.c) */
bool shoal_cli_num(const char *s, double lo, double hi, double *out);

/* A --kv-type value: "f16" or "f32" (the engine's KV cache element type,
 * shoal_engine_config.kv_type); false otherwise, *out untouched.
 * (runtime/cli/cmd_run.c) */
bool shoal_cli_kv_type(const char *s, shoal_dtype *out);
#define SHOAL_CLI_KV_TYPE_HELP                                                                     \
	"  --kv-type f16|f32      KV cache elements (default f16, half the memory; f32\n"          \
	"                         as the reference outputs in tests/data were made)\n"

#endif

/*
 * runtime/cli/cli.h: the subcommands of the `shoal` binary. Each takes the
 * arguments after its name (argv[0] is the subcommand) and returns the
 * process exit status (0 ok, 1 error, 2 usage).
 *
 * Part: runtime/ (CLI): main.c's table of commands. What the command
 * files share among themselves is in cli_impl.h.
 */
#ifndef SHOAL_RUNTIME_CLI_H
#define SHOAL_RUNTIME_CLI_H

int shoal_cmd_run(int argc, char **argv);        /* runtime/cli/cmd_run.c */
int shoal_cmd_tokenize(int argc, char **argv);   /* runtime/cli/cmd_tokenize.c */
int shoal_cmd_detokenize(int argc, char **argv); /* runtime/cli/cmd_tokenize.c */
int shoal_cmd_perplexity(int argc, char **argv); /* runtime/cli/cmd_perplexity.c */
int shoal_cmd_bench(int argc, char **argv);      /* runtime/cli/cmd_bench.c */
int shoal_cmd_node(int argc, char **argv);       /* runtime/cli/cmd_node.c */
int shoal_cmd_status(int argc, char **argv);     /* runtime/cli/cmd_status.c */
int shoal_cmd_key(int argc, char **argv);        /* runtime/cli/cmd_key.c */
int shoal_cmd_plan(int argc, char **argv);       /* runtime/cli/cmd_plan.c */
int shoal_cmd_chat(int argc, char **argv);       /* runtime/cli/cmd_chat.c */

#endif

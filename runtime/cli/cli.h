/*
 * runtime/cli/cli.h: the subcommands of the `shoal` binary. Each takes the
 * arguments after its name (argv[0] is the subcommand) and returns the
 * process exit status (0 ok, 1 error, 2 usage).
 */
#ifndef SHOAL_RUNTIME_CLI_H
#define SHOAL_RUNTIME_CLI_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "base/err.h"

int shoal_cmd_run(int argc, char **argv);        /* runtime/cli/cmd_run.c */
int shoal_cmd_run_remote(int argc, char **argv); /* runtime/cli/cmd_run_remote.c (--peer) */
int shoal_cmd_tokenize(int argc, char **argv);   /* runtime/cli/cmd_tokenize.c */
int shoal_cmd_detokenize(int argc, char **argv); /* runtime/cli/cmd_tokenize.c */
int shoal_cmd_perplexity(int argc, char **argv); /* runtime/cli/cmd_perplexity.c */
int shoal_cmd_bench(int argc, char **argv);      /* runtime/cli/cmd_bench.c */
int shoal_cmd_node(int argc, char **argv);       /* runtime/cli/cmd_node.c */
int shoal_cmd_status(int argc, char **argv);     /* runtime/cli/cmd_status.c */
int shoal_cmd_key(int argc, char **argv);        /* runtime/cli/cmd_key.c */
int shoal_cmd_plan(int argc, char **argv);       /* runtime/cli/cmd_plan.c */

/* runtime/cli/cmd_run.c: the token ids of a `shoal run` prompt, shared by the
 * local run and the owner of a --peer run (runtime/node/cluster.c) so both feed
 * the model the same ids. chat: the prompt becomes a user message, after
 * system (NULL: none; ignored without chat), rendered with the model's
 * chat template (tokenizer.chat_template; PLAIN without one) and tokenized
 * with special tokens parsed. *ids is malloc'd, the caller's to free. m, tok
 * and the strings are borrowed. Errors (unknown template, render failure,
 * out of memory) come with a reason in why. */
struct shoal_model;
struct shoal_tokenizer;
shoal_err shoal_run_prompt_ids(const struct shoal_model *m, const struct shoal_tokenizer *tok,
                               const char *prompt, bool chat, const char *system, int32_t **ids,
                               size_t *n_ids, char *why, size_t why_len);

#endif

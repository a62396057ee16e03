/*
 * runtime/cli/cli_impl.h: what the command files of the CLI share: the
 * option parsers that several commands use (runtime/cli/opts.c) and
 * `shoal run --peer` (runtime/cli/cmd_run_remote.c), which `shoal run`
 * hands its arguments to. main.c sees only cli.h.
 *
 * Part: runtime/ (CLI). Calls go one way: a cmd_*.c file may call opts.c
 * and cli_peer.c, and cmd_run.c calls cmd_run_remote.c; nothing calls
 * back.
 */
#ifndef SHOAL_RUNTIME_CLI_IMPL_H
#define SHOAL_RUNTIME_CLI_IMPL_H

#include <stdbool.h>
#include <stdio.h>

#include <jansson.h>

#include "models/dtype.h"
#include "net/key.h"
#include "runtime/backends.h"
#include "runtime/cli/cli.h"

/* A number option: s is all of a number in [lo, hi] (strtod's syntax);
 * false otherwise, *out untouched. */
bool cli__num(const char *s, double lo, double hi, double *out);

/* A --kv-type value: "f16" or "f32" (the engine's KV cache element type,
 * shoal_engine_config.kv_type); false otherwise, *out untouched. */
bool cli__kv_type(const char *s, shoal_dtype *out);
/* How long a client waits for the key check's answer after a refusal. */
#define SHOAL_CLI_KEYCHECK_MS 1500

#define CLI__KV_TYPE_HELP                                                                          \
	"  --kv-type f16|f32      KV cache elements (default f16, half the memory; f32\n"          \
	"                         as the reference outputs in tests/data were made)\n"

/* A --backend value (NULL when not given: "auto") to the ops table of
 * that kind (runtime/backends.h, static). false after printing
 * "CMD: --backend: REASON" on stderr (an unknown name lists the known). */
bool cli__backend(const char *cmd, const char *name, const shoal_backend_ops **out);

/* The --backend line of a command's help, its option column `width`
 * characters wide (the two leading spaces included): names this build's
 * kinds. */
void cli__backend_usage(FILE *f, int width);

/* The cluster key a client command talks to a peer with: --key FILE, else
 * <state-dir>/cluster.key (state_dir NULL: the default) when it exists,
 * else none when insecure; *keys points at curve, or is NULL for none;
 * fp: the key's fingerprint (SHOAL_KEYCHECK_NOKEY without one), for the
 * key check. false after printing "shoal CMD: REASON" on stderr.
 * (runtime/cli/cli_peer.c) */
bool cli__client_key(const char *cmd, const char *key_file, bool insecure, const char *state_dir,
                     shoal_key_curve *curve, shoal_key_curve **keys, char fp[17]);

/* After the peer at ep refused us: ask it with the key check
 * (net/keycheck.h) and print "shoal CMD: ..." with both fingerprints, or
 * that the keys agree; fp is ours. (runtime/cli/cli_peer.c) */
void cli__key_hint(const char *cmd, const char *ep, const char *fp);

/* The status JSON of the peer at control endpoint ep ("tcp://HOST:PORT"),
 * within timeout_ms; NULL after printing "shoal CMD: ..." on stderr (and
 * the key check's finding when the peer refused our key, fp).
 * (runtime/cli/cli_peer.c) */
json_t *cli__status_fetch(const char *cmd, const char *ep, const shoal_key_curve *keys,
                          const char *fp, int timeout_ms);

/* `shoal run --peer ADDR ...` (argv as shoal_cmd_run got it) and its
 * options, for `shoal run --help`. (runtime/cli/cmd_run_remote.c) */
int cli__run_remote(int argc, char **argv);
void cli__run_remote_usage(FILE *f);

#endif

/*
 * runtime/cli/cmd_tokenize.c: `shoal tokenize` and `shoal detokenize`, text
 * to token ids and back with a model's (or a vocabulary-only GGUF's)
 * tokenizer.
 *
 * Part: runtime/ (the CLI). The file is opened with the GGUF reader and
 * the tokenizer alone, not the model loader, so vocabulary files without
 * tensors work. Exit status: 0 ok, 1 a bad file or id (one line on
 * stderr), 2 a usage error.
 */
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "models/gguf.h"
#include "models/tokenizer.h"
#include "runtime/cli/cli.h"

static const char tok_usage[] = "usage: shoal tokenize MODEL TEXT|- [--no-bos] [--special]\n";
static const char detok_usage[] = "usage: shoal detokenize MODEL ID... [--special]\n";

/* Open `path` and build its tokenizer; on failure print the one line. */
static int cmd_tok_open(const char *cmd, const char *path, shoal_gguf **g, shoal_tokenizer **t)
{
	char why[SHOAL_WHY_LEN] = "";
	shoal_err err = shoal_gguf_open(path, g, why, sizeof why);
	if (!err)
		err = shoal_tokenizer_from_gguf(*g, t, why, sizeof why);
	if (err) {
		fprintf(stderr, "shoal %s: %s: %s\n", cmd, path,
		        why[0] ? why : shoal_strerror(err));
		shoal_gguf_free(*g);
		*g = NULL;
		return 1;
	}
	return 0;
}

/* All of f into a malloc'd buffer, or NULL on a read error. */
static char *cmd_tok_read_all(FILE *f, size_t *len)
{
	size_t cap = 4096, n = 0;
	char *buf = malloc(cap);
	while (buf) {
		n += fread(buf + n, 1, cap - n, f);
		if (n < cap)
			break;
		char *p = cap <= SIZE_MAX / 2 ? realloc(buf, cap * 2) : NULL;
		if (!p) {
			free(buf);
			return NULL;
		}
		buf = p;
		cap *= 2;
	}
	if (buf && ferror(f)) {
		free(buf);
		return NULL;
	}
	*len = n;
	return buf;
}

int shoal_cmd_tokenize(int argc, char **argv)
{
	const char *model = NULL, *text = NULL;
	bool add_bos = true, special = false;
	for (int i = 1; i < argc; i++) {
		if (!strcmp(argv[i], "--help") || !strcmp(argv[i], "-h")) {
			fputs(tok_usage, stdout);
			printf(
			    "Prints the token ids of TEXT (-: standard input), space-separated.\n"
			    "BOS is added when the vocabulary says so (--no-bos: never);\n"
			    "--special: the text of control tokens such as <|im_end|> becomes\n"
			    "those tokens.\n");
			return 0;
		} else if (!strcmp(argv[i], "--no-bos")) {
			add_bos = false;
		} else if (!strcmp(argv[i], "--special")) {
			special = true;
		} else if (argv[i][0] == '-' && argv[i][1] == '-' && argv[i][2]) {
			fprintf(stderr, "shoal tokenize: unknown option '%s'\n", argv[i]);
			fputs(tok_usage, stderr);
			return 2;
		} else if (!model) {
			model = argv[i];
		} else if (!text) {
			text = argv[i];
		} else {
			fputs(tok_usage, stderr);
			return 2;
		}
	}
	if (!model || !text) {
		fputs(tok_usage, stderr);
		return 2;
	}

	char *input = NULL;
	size_t text_len = strlen(text);
	if (!strcmp(text, "-")) {
		input = cmd_tok_read_all(stdin, &text_len);
		if (!input) {
			fprintf(stderr, "shoal tokenize: cannot read standard input\n");
			return 1;
		}
		text = input;
	}
	shoal_gguf *g = NULL;
	shoal_tokenizer *t = NULL;
	if (cmd_tok_open("tokenize", model, &g, &t)) {
		free(input);
		return 1;
	}
	int32_t *ids = NULL;
	size_t n = 0;
	shoal_err err = shoal_tokenizer_encode(t, text, text_len, add_bos, special, &ids, &n);
	free(input);
	int rc = 0;
	if (err) {
		fprintf(stderr, "shoal tokenize: %s\n", shoal_strerror(err));
		rc = 1;
	} else {
		for (size_t i = 0; i < n; i++)
			printf(i ? " %d" : "%d", (int)ids[i]);
		putchar('\n');
	}
	free(ids);
	shoal_tokenizer_free(t);
	shoal_gguf_free(g);
	return rc;
}

int shoal_cmd_detokenize(int argc, char **argv)
{
	const char *model = NULL;
	bool special = false;
	int n_ids = 0;
	int32_t *ids = calloc((size_t)(argc > 0 ? argc : 1), sizeof *ids);
	if (!ids) {
		fprintf(stderr, "shoal detokenize: out of memory\n");
		return 1;
	}
	for (int i = 1; i < argc; i++) {
		if (!strcmp(argv[i], "--help") || !strcmp(argv[i], "-h")) {
			fputs(detok_usage, stdout);
			printf("Prints the text of the token ids (--special: with the text of\n"
			       "control tokens such as <s>).\n");
			free(ids);
			return 0;
		} else if (!strcmp(argv[i], "--special")) {
			special = true;
		} else if (!model) {
			model = argv[i];
		} else {
			char *end;
			errno = 0;
			long v = strtol(argv[i], &end, 10);
			if (errno || end == argv[i] || *end || v < 0 || v > INT32_MAX) {
				fprintf(stderr, "shoal detokenize: '%s' is not a token id\n",
				        argv[i]);
				fputs(detok_usage, stderr);
				free(ids);
				return 2;
			}
			ids[n_ids++] = (int32_t)v;
		}
	}
	if (!model || n_ids == 0) {
		fputs(detok_usage, stderr);
		free(ids);
		return 2;
	}

	shoal_gguf *g = NULL;
	shoal_tokenizer *t = NULL;
	if (cmd_tok_open("detokenize", model, &g, &t)) {
		free(ids);
		return 1;
	}
	int rc = 0;
	uint32_t nv = shoal_tokenizer_n_vocab(t);
	for (int i = 0; i < n_ids && !rc; i++) {
		if ((uint32_t)ids[i] >= nv) {
			fprintf(
			    stderr,
			    "shoal detokenize: %s: id %d is outside the vocabulary (%u tokens)\n",
			    model, (int)ids[i], nv);
			rc = 1;
		}
	}
	char *text = NULL;
	size_t len = 0;
	if (!rc) {
		shoal_err err = shoal_tokenizer_decode(t, ids, (size_t)n_ids, special, &text, &len);
		if (err) {
			fprintf(stderr, "shoal detokenize: %s\n", shoal_strerror(err));
			rc = 1;
		} else {
			fwrite(text, 1, len, stdout);
			putchar('\n');
		}
	}
	free(text);
	free(ids);
	shoal_tokenizer_free(t);
	shoal_gguf_free(g);
	return rc;
}

/*
 * tests/unit/test_tokenizer.c: the tokenizers against the reference engine's
 * vectors, the models' expected prompt ids, round trips, the streaming
 * detokenizer, special tokens, and vocabularies we must refuse.
 *
 * Part: tests of models/ (tokenizer). The vocab vectors (X.gguf.inp/.out)
 * were made with no BOS and parse_special off (llama.cpp's
 * test-tokenizer-0: common_tokenize(ctx, text, add_special=false)), so
 * they are checked with add_special = parse_special = false.
 */
#include <dirent.h>
#include <jansson.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "models/gguf.h"
#include "models/tokenizer.h"
#include "tests/helpers/gguf_writer.h"
#include "tests/unit/test.h"

/* ---- helpers ---------------------------------------------------------- */

static char *read_file(const char *path, size_t *len)
{
	FILE *f = fopen(path, "rb");
	if (!f)
		return NULL;
	fseek(f, 0, SEEK_END);
	long n = ftell(f);
	fseek(f, 0, SEEK_SET);
	char *buf = malloc((size_t)n + 1);
	if (buf && fread(buf, 1, (size_t)n, f) != (size_t)n) {
		free(buf);
		buf = NULL;
	}
	fclose(f);
	if (buf) {
		buf[n] = '\0';
		*len = (size_t)n;
	}
	return buf;
}

static shoal_tokenizer *open_tok(const char *rel, shoal_gguf **g)
{
	char path[1024], why[SHOAL_WHY_LEN] = "";
	shoal_tokenizer *t = NULL;
	snprintf(path, sizeof path, "%s/%s", test_data_dir(), rel);
	if (shoal_gguf_open(path, g, why, sizeof why)) {
		fprintf(stderr, "%s: %s\n", path, why);
		return NULL;
	}
	if (shoal_tokenizer_from_gguf(*g, &t, why, sizeof why)) {
		fprintf(stderr, "%s: %s\n", path, why);
		shoal_gguf_free(*g);
		*g = NULL;
		return NULL;
	}
	return t;
}

/* Stream ids through the detokenizer into a malloc'd buffer. */
static char *detok_all(const shoal_tokenizer *t, const int32_t *ids, size_t n, size_t *len)
{
	shoal_detok d;
	size_t cap = 64, o = 0;
	char *buf = malloc(cap);
	shoal_detok_init(&d, t, false);
	for (size_t i = 0; i <= n && buf; i++) {
		char piece[1024];
		size_t k = i < n ? shoal_detok_push(&d, ids[i], piece, sizeof piece)
		                 : shoal_detok_flush(&d, piece, sizeof piece);
		if (o + k > cap) {
			while (o + k > cap)
				cap *= 2;
			char *p = realloc(buf, cap);
			if (!p) {
				free(buf);
				return NULL;
			}
			buf = p;
		}
		memcpy(buf + o, piece, k);
		o += k;
	}
	*len = o;
	return buf;
}

static void print_ids(const char *what, const int32_t *ids, size_t n)
{
	fprintf(stderr, "  %s:", what);
	for (size_t i = 0; i < n && i < 64; i++)
		fprintf(stderr, " %d", (int)ids[i]);
	fprintf(stderr, n > 64 ? " ...\n" : "\n");
}

/* ---- the reference vectors ------------------------------------------- */

/* Check every text of X.gguf.inp against its line of X.gguf.out, then
 * decode(encode(text)) == text and streaming == decode for each. */
static void check_vectors(const char *name, int *n_checked)
{
	char rel[256], path[1024];
	size_t inp_len, out_len;
	snprintf(rel, sizeof rel, "vocab/%s", name);
	shoal_gguf *g = NULL;
	shoal_tokenizer *t = open_tok(rel, &g);
	ASSERT_TRUE(t != NULL);
	snprintf(path, sizeof path, "%s/vocab/%s.inp", test_data_dir(), name);
	char *inp = read_file(path, &inp_len);
	snprintf(path, sizeof path, "%s/vocab/%s.out", test_data_dir(), name);
	char *out = read_file(path, &out_len);
	ASSERT_TRUE(inp && out);

	static const char sep[] = "\n__ggml_vocab_test__\n";
	const size_t sep_len = sizeof sep - 1;
	char *p = inp, *line = out;
	int bad = 0, n = 0;
	for (;;) {
		char *end = memmem(p, inp_len - (size_t)(p - inp), sep, sep_len);
		if (!end)
			break; /* the empty piece after the last separator */
		size_t tlen = (size_t)(end - p);
		char *eol = strchr(line, '\n');
		if (!eol)
			eol = line + strlen(line);
		/* expected ids */
		int32_t want[1024];
		size_t n_want = 0;
		for (char *q = line; q < eol;) {
			char *e;
			long v = strtol(q, &e, 10);
			if (e == q)
				break;
			want[n_want++] = (int32_t)v;
			q = e;
		}
		int32_t *got = NULL;
		size_t n_got = 0;
		shoal_err err = shoal_tokenizer_encode(t, p, tlen, false, false, &got, &n_got);
		if (err || n_got != n_want || memcmp(got, want, n_want * sizeof *got)) {
			fprintf(stderr, "%s: text %d \"%.*s\" (err %d)\n", name, n, (int)tlen, p,
			        (int)err);
			print_ids("want", want, n_want);
			print_ids("got ", got, n_got);
			bad++;
		}
		/* round trip and streaming */
		char *text = NULL, *streamed = NULL;
		size_t text_len = 0, s_len = 0;
		if (!err && !shoal_tokenizer_decode(t, got, n_got, false, &text, &text_len)) {
			if (text_len != tlen || memcmp(text, p, tlen)) {
				fprintf(stderr, "%s: text %d decodes to \"%s\"\n", name, n, text);
				bad++;
			}
			streamed = detok_all(t, got, n_got, &s_len);
			if (!streamed || s_len != text_len || memcmp(streamed, text, s_len)) {
				fprintf(stderr, "%s: text %d streams differently\n", name, n);
				bad++;
			}
		} else {
			bad++;
		}
		free(text);
		free(streamed);
		free(got);
		n++;
		p = end + sep_len;
		line = *eol ? eol + 1 : eol;
	}
	/* every line of .out was used, and the .inp ended with a separator */
	bool all_lines = *line == '\0';
	bool ends = (size_t)(p - inp) == inp_len;
	free(inp);
	free(out);
	shoal_tokenizer_free(t);
	shoal_gguf_free(g);
	*n_checked = n;
	printf("  %s: %d texts\n", name, n);
	ASSERT_EQ(bad, 0);
	ASSERT_TRUE(all_lines);
	ASSERT_TRUE(ends);
}

static void test_vectors_llama_spm(void)
{
	int n = 0;
	char probe[1024];
	snprintf(probe, sizeof probe, "%s/vocab/ggml-vocab-llama-spm.gguf", test_data_dir());
	if (access(probe, R_OK))
		TEST_SKIP("no test data: set SHOAL_DATA to tests/data");
	check_vectors("ggml-vocab-llama-spm.gguf", &n);
	ASSERT_GT(n, 30);
}

static void test_vectors_llama_bpe(void)
{
	int n = 0;
	check_vectors("ggml-vocab-llama-bpe.gguf", &n);
	ASSERT_GT(n, 30);
}

static void test_vectors_gpt2(void)
{
	int n = 0;
	check_vectors("ggml-vocab-gpt-2.gguf", &n);
	ASSERT_GT(n, 30);
}

/* ---- the models' expected prompt ids ----------------------------------- */

static void test_expected_prompts(void)
{
	char dir[1024];
	snprintf(dir, sizeof dir, "%s/models/expected", test_data_dir());
	DIR *d = opendir(dir);
	ASSERT_TRUE(d != NULL);
	int files = 0, cases = 0, bad = 0;
	struct dirent *e;
	while ((e = readdir(d))) {
		size_t nl = strlen(e->d_name);
		if (nl < 6 || strcmp(e->d_name + nl - 5, ".json"))
			continue;
		char path[2048], rel[1024];
		json_error_t jerr;
		snprintf(path, sizeof path, "%s/%s", dir, e->d_name);
		json_t *root = json_load_file(path, 0, &jerr);
		const char *model = json_string_value(json_object_get(root, "model"));
		if (!root || !model) {
			fprintf(stderr, "%s: unreadable\n", path);
			bad++;
			json_decref(root);
			continue;
		}
		snprintf(rel, sizeof rel, "models/%s", model);
		shoal_gguf *g = NULL;
		shoal_tokenizer *t = open_tok(rel, &g);
		if (!t) {
			bad++;
			json_decref(root);
			continue;
		}
		files++;
		json_t *cs = json_object_get(root, "cases"), *c;
		size_t i;
		json_array_foreach(cs, i, c)
		{
			const char *prompt = json_string_value(json_object_get(c, "prompt"));
			json_t *want = json_object_get(c, "prompt_ids");
			int32_t *got = NULL;
			size_t n_got = 0;
			if (!prompt || !json_is_array(want) ||
			    shoal_tokenizer_encode(t, prompt, strlen(prompt), true, false, &got,
			                           &n_got)) {
				bad++;
				continue;
			}
			bool same = n_got == json_array_size(want);
			for (size_t k = 0; same && k < n_got; k++)
				same = json_integer_value(json_array_get(want, k)) == got[k];
			if (!same) {
				fprintf(stderr, "%s: \"%s\" tokenizes differently\n", model,
				        prompt);
				print_ids("got", got, n_got);
				bad++;
			}
			cases++;
			free(got);
		}
		shoal_tokenizer_free(t);
		shoal_gguf_free(g);
		json_decref(root);
	}
	closedir(d);
	printf("  expected prompts: %d files, %d cases\n", files, cases);
	ASSERT_GE(files, 5);
	ASSERT_GE(cases, 10);
	ASSERT_EQ(bad, 0);
}

/* ---- the streaming detokenizer ----------------------------------------- */

static void test_detok_split_character(void)
{
	shoal_gguf *g = NULL;
	shoal_tokenizer *t = open_tok("vocab/ggml-vocab-llama-spm.gguf", &g);
	ASSERT_TRUE(t != NULL);
	/* Llama 2 keeps <0x00>..<0xFF> at ids 3..258: U+1D11E (F0 9D 84 9E)
	 * is 243 160 135 161; 15043 is "▁Hello". */
	const int32_t ids[] = {15043, 243, 160, 135, 161};
	char buf[16];
	ASSERT_EQ(shoal_tokenizer_piece(t, 243, false, buf, sizeof buf), 1);
	ASSERT_EQ((unsigned char)buf[0], 0xF0);
	ASSERT_EQ(shoal_tokenizer_piece(t, 161, false, buf, sizeof buf), 1);
	ASSERT_EQ((unsigned char)buf[0], 0x9E);

	shoal_detok d;
	char out[64];
	shoal_detok_init(&d, t, false);
	ASSERT_EQ(shoal_detok_push(&d, ids[0], out, sizeof out), 5);
	ASSERT_MEM_EQ(out, "Hello", 5); /* the first word's space is dropped */
	ASSERT_EQ(shoal_detok_push(&d, ids[1], out, sizeof out), 0);
	ASSERT_EQ(shoal_detok_push(&d, ids[2], out, sizeof out), 0);
	ASSERT_EQ(shoal_detok_push(&d, ids[3], out, sizeof out), 0);
	ASSERT_EQ(shoal_detok_push(&d, ids[4], out, sizeof out), 4);
	ASSERT_MEM_EQ(out, "\xF0\x9D\x84\x9E", 4);
	ASSERT_EQ(shoal_detok_flush(&d, out, sizeof out), 0);

	/* A character cut short by a normal token: U+FFFD, then the token. */
	ASSERT_EQ(shoal_detok_push(&d, 243, out, sizeof out), 0);
	ASSERT_EQ(shoal_detok_push(&d, 160, out, sizeof out), 0);
	ASSERT_EQ(shoal_detok_push(&d, 15043, out, sizeof out), 9);
	ASSERT_MEM_EQ(out, "\xEF\xBF\xBD Hello", 9);
	/* ...and left pending at the end: U+FFFD on flush. */
	ASSERT_EQ(shoal_detok_push(&d, 243, out, sizeof out), 0);
	ASSERT_EQ(shoal_detok_flush(&d, out, sizeof out), 3);
	ASSERT_MEM_EQ(out, "\xEF\xBF\xBD", 3);
	ASSERT_EQ(shoal_detok_flush(&d, out, sizeof out), 0);
	/* A stray continuation byte is invalid at once. */
	ASSERT_EQ(shoal_detok_push(&d, 0x84 + 3, out, sizeof out), 3);
	ASSERT_MEM_EQ(out, "\xEF\xBF\xBD", 3);
	/* Output is cut at cap, never mid-character. */
	ASSERT_EQ(shoal_detok_push(&d, 15043, out, 3), 3);
	ASSERT_MEM_EQ(out, " He", 3);

	/* piece() reports the full length even when cap is short. */
	memset(buf, 'x', sizeof buf);
	ASSERT_EQ(shoal_tokenizer_piece(t, 15043, false, buf, 2), 6);
	ASSERT_MEM_EQ(buf, " Hx", 3);
	ASSERT_EQ(shoal_tokenizer_piece(t, 99999, false, buf, sizeof buf), 0);
	ASSERT_EQ(shoal_tokenizer_piece(t, 1, false, buf, sizeof buf), 0); /* <s> */
	ASSERT_EQ(shoal_tokenizer_piece(t, 1, true, buf, sizeof buf), 3);
	ASSERT_MEM_EQ(buf, "<s>", 3);
	shoal_tokenizer_free(t);
	shoal_gguf_free(g);
}

/* ---- special tokens ---------------------------------------------------- */

static void test_special_tokens(void)
{
	shoal_gguf *g = NULL;
	shoal_tokenizer *t = open_tok("vocab/ggml-vocab-llama-bpe.gguf", &g);
	ASSERT_TRUE(t != NULL);
	ASSERT_EQ(shoal_tokenizer_n_vocab(t), 128256);
	ASSERT_EQ(shoal_tokenizer_bos(t), 128000);      /* <|begin_of_text|> */
	ASSERT_TRUE(shoal_tokenizer_is_eog(t, 128009)); /* <|eot_id|> */
	ASSERT_TRUE(shoal_tokenizer_is_eog(t, 128001)); /* <|end_of_text|> */
	ASSERT_FALSE(shoal_tokenizer_is_eog(t, 128000));
	ASSERT_FALSE(shoal_tokenizer_is_eog(t, 9906));
	ASSERT_FALSE(shoal_tokenizer_is_eog(t, -1));
	ASSERT_EQ(shoal_tokenizer_find(t, "<|eot_id|>", 10), 128009);
	ASSERT_EQ(shoal_tokenizer_find(t, "<|no such token|>", 17), -1);

	static const char s[] = "<|start_header_id|>user<|end_header_id|>\n\nHi<|eot_id|>";
	int32_t *ids = NULL;
	size_t n = 0;
	ASSERT_EQ(shoal_tokenizer_encode(t, s, strlen(s), false, true, &ids, &n), SHOAL_OK);
	ASSERT_GE(n, 5);
	ASSERT_EQ(ids[0], 128006);
	ASSERT_EQ(ids[2], 128007);
	ASSERT_EQ(ids[n - 1], 128009);
	/* Decoding with `special` gives the text back; without, drops them. */
	char *text = NULL;
	size_t len = 0;
	ASSERT_EQ(shoal_tokenizer_decode(t, ids, n, true, &text, &len), SHOAL_OK);
	ASSERT_STR_EQ(text, s);
	free(text);
	ASSERT_EQ(shoal_tokenizer_decode(t, ids, n, false, &text, &len), SHOAL_OK);
	ASSERT_STR_EQ(text, "user\n\nHi");
	free(text);
	free(ids);
	/* Without parse_special the markers are plain text. */
	ASSERT_EQ(shoal_tokenizer_encode(t, s, strlen(s), false, false, &ids, &n), SHOAL_OK);
	for (size_t i = 0; i < n; i++)
		ASSERT_LT(ids[i], 128000);
	free(ids);
	shoal_tokenizer_free(t);
	shoal_gguf_free(g);

	/* SentencePiece: "<s>" is BOS with parse_special; the text after a
	 * special token gets its own leading space, as in the reference. */
	t = open_tok("vocab/ggml-vocab-llama-spm.gguf", &g);
	ASSERT_TRUE(t != NULL);
	ASSERT_TRUE(shoal_tokenizer_adds_bos(t));
	ASSERT_EQ(shoal_tokenizer_bos(t), 1);
	ASSERT_EQ(shoal_tokenizer_eos(t), 2);
	ASSERT_TRUE(shoal_tokenizer_is_eog(t, 2));
	ASSERT_EQ(shoal_tokenizer_encode(t, "<s>Hello</s>", 12, true, true, &ids, &n), SHOAL_OK);
	ASSERT_EQ(n, 4);
	ASSERT_EQ(ids[0], 1);
	ASSERT_EQ(ids[1], 1);
	ASSERT_EQ(ids[2], 15043);
	ASSERT_EQ(ids[3], 2);
	free(ids);
	ASSERT_EQ(shoal_tokenizer_encode(t, "", 0, true, false, &ids, &n), SHOAL_OK);
	ASSERT_EQ(n, 1);
	ASSERT_EQ(ids[0], 1);
	free(ids);
	shoal_tokenizer_free(t);
	shoal_gguf_free(g);
}

/* ---- vocabularies we refuse ------------------------------------------- */

typedef enum { BAD_MODEL, BAD_PRE, BAD_SCORES, BAD_TYPES, BAD_MERGE, NO_TOKENS } bad_kind;

/* A four-token vocabulary with one defect; returns the error and why. */
static shoal_err try_bad_vocab(bad_kind kind, char *why, size_t why_len)
{
	char path[] = "/tmp/shoal-test-tokenizer-XXXXXX";
	int fd = mkstemp(path);
	if (fd < 0)
		return SHOAL_ERR_IO;
	close(fd);
	static const char *const toks[] = {"a", "b", "ab", "\xc4\xa0"};
	static const char *const merges[] = {"a b"};
	static const char *const bad_merges[] = {"ab"};
	const float scores[4] = {0, 0, 1, 0};
	const int32_t types[4] = {1, 1, 1, 1};
	shoal_gguf_writer *w = NULL;
	if (shoal_gguf_writer_new(path, &w))
		return SHOAL_ERR_IO;
	bool bpe = kind == BAD_PRE || kind == BAD_MERGE;
	shoal_gguf_writer_kv_str(w, "general.architecture", "llama");
	shoal_gguf_writer_kv_str(w, "tokenizer.ggml.model",
	                         kind == BAD_MODEL ? "wordpiece-9"
	                         : bpe             ? "gpt2"
	                                           : "llama");
	if (kind == BAD_PRE)
		shoal_gguf_writer_kv_str(w, "tokenizer.ggml.pre", "no-such-pre");
	if (kind != NO_TOKENS)
		shoal_gguf_writer_kv_arr_str(w, "tokenizer.ggml.tokens", toks, 4);
	shoal_gguf_writer_kv_arr(w, "tokenizer.ggml.scores", SHOAL_GGUF_FLOAT32, scores,
	                         kind == BAD_SCORES ? 3 : 4);
	shoal_gguf_writer_kv_arr(w, "tokenizer.ggml.token_type",
	                         kind == BAD_TYPES ? SHOAL_GGUF_FLOAT32 : SHOAL_GGUF_INT32, types,
	                         4);
	if (bpe)
		shoal_gguf_writer_kv_arr_str(w, "tokenizer.ggml.merges",
		                             kind == BAD_MERGE ? bad_merges : merges, 1);
	shoal_err err = shoal_gguf_writer_begin_data(w);
	if (!err)
		err = shoal_gguf_writer_finish(w);
	shoal_gguf_writer_free(w);
	if (err) {
		unlink(path);
		return SHOAL_ERR_IO;
	}
	shoal_gguf *g = NULL;
	shoal_tokenizer *t = NULL;
	err = shoal_gguf_open(path, &g, why, why_len);
	unlink(path);
	if (err)
		return SHOAL_ERR_IO;
	why[0] = '\0';
	err = shoal_tokenizer_from_gguf(g, &t, why, why_len);
	shoal_tokenizer_free(t);
	shoal_gguf_free(g);
	return err;
}

static void test_bad_vocabularies(void)
{
	char why[SHOAL_WHY_LEN];
	ASSERT_EQ(try_bad_vocab(BAD_MODEL, why, sizeof why), SHOAL_ERR_UNSUPPORTED);
	ASSERT_TRUE(strstr(why, "wordpiece-9") != NULL);
	ASSERT_EQ(try_bad_vocab(BAD_PRE, why, sizeof why), SHOAL_ERR_UNSUPPORTED);
	ASSERT_TRUE(strstr(why, "no-such-pre") != NULL);
	ASSERT_EQ(try_bad_vocab(BAD_SCORES, why, sizeof why), SHOAL_ERR_FORMAT);
	ASSERT_TRUE(strstr(why, "scores") != NULL);
	ASSERT_EQ(try_bad_vocab(BAD_TYPES, why, sizeof why), SHOAL_ERR_FORMAT);
	ASSERT_TRUE(strstr(why, "token_type") != NULL);
	ASSERT_EQ(try_bad_vocab(BAD_MERGE, why, sizeof why), SHOAL_ERR_FORMAT);
	ASSERT_TRUE(strstr(why, "merges") != NULL);
	ASSERT_EQ(try_bad_vocab(NO_TOKENS, why, sizeof why), SHOAL_ERR_FORMAT);
	ASSERT_TRUE(strstr(why, "tokens") != NULL);
}

/* A tiny SentencePiece vocabulary built here: merge order follows the
 * scores (highest first, ties leftmost), unknown bytes fall back. */
static void test_spm_merge_order(void)
{
	char path[] = "/tmp/shoal-test-tokenizer-XXXXXX", why[SHOAL_WHY_LEN] = "";
	int fd = mkstemp(path);
	ASSERT_TRUE(fd >= 0);
	close(fd);
	/* ids: 0 <unk> 1 <s> 2 </s> 3 <0x21> ("!") 4 U+2581 5 a 6 b 7 ab 8 ba
	 * 9 U+2581 a; scores below. No "?" and no <0x3F>. */
	static const char *const toks[] = {"<unk>",
	                                   "<s>",
	                                   "</s>",
	                                   "<0x21>",
	                                   "\xe2\x96\x81",
	                                   "a",
	                                   "b",
	                                   "ab",
	                                   "ba",
	                                   "\xe2\x96\x81"
	                                   "a"};
	const float scores[10] = {0, 0, 0, 0, -3, -4, -4, -1, -2, -0.5f};
	const int32_t types[10] = {2, 3, 3, 6, 1, 1, 1, 1, 1, 1};
	shoal_gguf_writer *w = NULL;
	ASSERT_EQ(shoal_gguf_writer_new(path, &w), SHOAL_OK);
	shoal_gguf_writer_kv_str(w, "tokenizer.ggml.model", "llama");
	shoal_gguf_writer_kv_arr_str(w, "tokenizer.ggml.tokens", toks, 10);
	shoal_gguf_writer_kv_arr(w, "tokenizer.ggml.scores", SHOAL_GGUF_FLOAT32, scores, 10);
	shoal_gguf_writer_kv_arr(w, "tokenizer.ggml.token_type", SHOAL_GGUF_INT32, types, 10);
	shoal_gguf_writer_kv_bool(w, "tokenizer.ggml.add_bos_token", false);
	ASSERT_EQ(shoal_gguf_writer_begin_data(w), SHOAL_OK);
	ASSERT_EQ(shoal_gguf_writer_finish(w), SHOAL_OK);
	shoal_gguf_writer_free(w);
	shoal_gguf *g = NULL;
	shoal_tokenizer *t = NULL;
	shoal_err err = shoal_gguf_open(path, &g, why, sizeof why);
	unlink(path);
	ASSERT_EQ(err, SHOAL_OK);
	ASSERT_EQ(shoal_tokenizer_from_gguf(g, &t, why, sizeof why), SHOAL_OK);
	ASSERT_FALSE(shoal_tokenizer_adds_bos(t));

	int32_t *ids = NULL;
	size_t n = 0;
	/* "▁aba": ▁a (-0.5) beats ab (-1): ▁a + b + a, then ba -> [9, 8] */
	ASSERT_EQ(shoal_tokenizer_encode(t, "aba", 3, true, false, &ids, &n), SHOAL_OK);
	ASSERT_EQ(n, 2);
	ASSERT_EQ(ids[0], 9);
	ASSERT_EQ(ids[1], 8);
	free(ids);
	/* "▁bab": b a b; ba (-2) vs ab (-1): ab (right) first -> ▁ b ab;
	 * ▁b is no token -> [4, 6, 7] */
	ASSERT_EQ(shoal_tokenizer_encode(t, "bab", 3, true, false, &ids, &n), SHOAL_OK);
	ASSERT_EQ(n, 3);
	ASSERT_EQ(ids[0], 4);
	ASSERT_EQ(ids[1], 6);
	ASSERT_EQ(ids[2], 7);
	free(ids);
	/* "▁bb": no pair merges; "!" falls back to <0x21>; "?" has no byte
	 * token, so it becomes <unk>. */
	ASSERT_EQ(shoal_tokenizer_encode(t, "b!?", 3, true, false, &ids, &n), SHOAL_OK);
	ASSERT_EQ(n, 4);
	ASSERT_EQ(ids[0], 4);
	ASSERT_EQ(ids[1], 6);
	ASSERT_EQ(ids[2], 3);
	ASSERT_EQ(ids[3], 0);
	free(ids);
	shoal_tokenizer_free(t);
	shoal_gguf_free(g);
}

/* Odd but well-formed metadata is survived: an empty token text, a
 * duplicate text (the later id wins, as in the reference), an unknown
 * token type (read as normal), a BOS id outside the vocabulary (ignored:
 * the default stays), EOS given as an int32. */
static void test_odd_metadata(void)
{
	char path[] = "/tmp/shoal-test-tokenizer-XXXXXX", why[SHOAL_WHY_LEN] = "";
	int fd = mkstemp(path);
	ASSERT_TRUE(fd >= 0);
	close(fd);
	static const char *const toks[] = {"<unk>", "<s>", "</s>", "", "x", "x", "\xe2\x96\x81x"};
	const int32_t types[7] = {2, 3, 3, 1, 99, 1, -5};
	shoal_gguf_writer *w = NULL;
	ASSERT_EQ(shoal_gguf_writer_new(path, &w), SHOAL_OK);
	shoal_gguf_writer_kv_str(w, "tokenizer.ggml.model", "llama");
	shoal_gguf_writer_kv_arr_str(w, "tokenizer.ggml.tokens", toks, 7);
	shoal_gguf_writer_kv_arr(w, "tokenizer.ggml.token_type", SHOAL_GGUF_INT32, types, 7);
	shoal_gguf_writer_kv_u32(w, "tokenizer.ggml.bos_token_id", 1000);
	shoal_gguf_writer_kv_i32(w, "tokenizer.ggml.eos_token_id", 5);
	ASSERT_EQ(shoal_gguf_writer_begin_data(w), SHOAL_OK);
	ASSERT_EQ(shoal_gguf_writer_finish(w), SHOAL_OK);
	shoal_gguf_writer_free(w);
	shoal_gguf *g = NULL;
	shoal_tokenizer *t = NULL;
	shoal_err err = shoal_gguf_open(path, &g, why, sizeof why);
	unlink(path);
	ASSERT_EQ(err, SHOAL_OK);
	ASSERT_EQ(shoal_tokenizer_from_gguf(g, &t, why, sizeof why), SHOAL_OK);
	ASSERT_EQ(shoal_tokenizer_bos(t), 1);
	ASSERT_EQ(shoal_tokenizer_eos(t), 5);
	ASSERT_TRUE(shoal_tokenizer_is_eog(t, 5));
	ASSERT_EQ(shoal_tokenizer_find(t, "x", 1), 5);
	int32_t *ids = NULL;
	size_t n = 0;
	/* "▁x▁x" -> ▁x ▁x (6 6). After <s>, "▁xx▁" -> ▁x, x (the later
	 * of the two "x", 5), and a lone "▁" is no token: byte fallback finds
	 * no <0xE2> <0x96> <0x81>, so each byte becomes <unk>. */
	ASSERT_EQ(shoal_tokenizer_encode(t, "x x", 3, true, false, &ids, &n), SHOAL_OK);
	ASSERT_EQ(n, 3);
	ASSERT_EQ(ids[0], 1);
	ASSERT_EQ(ids[1], 6);
	ASSERT_EQ(ids[2], 6);
	free(ids);
	ASSERT_EQ(shoal_tokenizer_encode(t, "<s>xx ", 6, false, true, &ids, &n), SHOAL_OK);
	ASSERT_EQ(n, 6);
	ASSERT_EQ(ids[0], 1);
	ASSERT_EQ(ids[1], 6);
	ASSERT_EQ(ids[2], 5);
	ASSERT_EQ(ids[3], 0);
	ASSERT_EQ(ids[4], 0);
	ASSERT_EQ(ids[5], 0);
	free(ids);
	shoal_tokenizer_free(t);
	shoal_gguf_free(g);
}

/* A byte-level vocabulary built here, under each pre-tokenizer: the
 * 256 byte characters (ids 0..255), then "12" "123" "'R" "'RE" "ab" "aB"
 * (256..261) with merges "1 2", "12 3", "' R", "'R E", "a B" (no "a b"). */
static char bpe_vocab_why[SHOAL_WHY_LEN]; /* the last bpe_vocab's error */

/* bpe_vocab with "<s>" (id 262) as BOS and add_bos_token set when bos. */
static shoal_tokenizer *bpe_vocab_bos(const char *pre, bool bos, shoal_gguf **g)
{
	char path[] = "/tmp/shoal-test-tokenizer-XXXXXX", *why = bpe_vocab_why;
	why[0] = '\0';
	int fd = mkstemp(path);
	if (fd < 0)
		return NULL;
	close(fd);
	static char chars[256][3];
	const char *toks[263];
	int k = 0;
	for (int b = 0; b < 256; b++) {
		/* GPT-2: printable Latin-1 stands for itself, the other 68
		 * bytes take U+0100.. in order. */
		bool printable = (b >= 33 && b <= 126) || (b >= 161 && b <= 172) || b >= 174;
		unsigned cp = printable ? (unsigned)b : 256u + (unsigned)k++;
		if (cp < 0x80) {
			chars[b][0] = (char)cp;
			chars[b][1] = 0;
		} else {
			chars[b][0] = (char)(0xc0 | (cp >> 6));
			chars[b][1] = (char)(0x80 | (cp & 0x3f));
			chars[b][2] = 0;
		}
		toks[b] = chars[b];
	}
	toks[256] = "12";
	toks[257] = "123";
	toks[258] = "'R";
	toks[259] = "'RE";
	toks[260] = "ab";
	toks[261] = "aB";
	toks[262] = "<s>";
	static const char *const merges[] = {"1 2", "12 3", "' R", "'R E", "a B"};
	shoal_gguf_writer *w = NULL;
	if (shoal_gguf_writer_new(path, &w))
		return NULL;
	shoal_gguf_writer_kv_str(w, "tokenizer.ggml.model", "gpt2");
	shoal_gguf_writer_kv_str(w, "tokenizer.ggml.pre", pre);
	shoal_gguf_writer_kv_arr_str(w, "tokenizer.ggml.tokens", toks, bos ? 263 : 262);
	shoal_gguf_writer_kv_arr_str(w, "tokenizer.ggml.merges", merges, 5);
	if (bos) {
		shoal_gguf_writer_kv_u32(w, "tokenizer.ggml.bos_token_id", 262);
		shoal_gguf_writer_kv_bool(w, "tokenizer.ggml.add_bos_token", true);
	}
	shoal_err err = shoal_gguf_writer_begin_data(w);
	if (!err)
		err = shoal_gguf_writer_finish(w);
	shoal_gguf_writer_free(w);
	shoal_tokenizer *t = NULL;
	if (!err)
		err = shoal_gguf_open(path, g, why, sizeof bpe_vocab_why);
	unlink(path);
	if (!err && shoal_tokenizer_from_gguf(*g, &t, why, sizeof bpe_vocab_why)) {
		shoal_gguf_free(*g);
		*g = NULL;
	}
	return t;
}

static shoal_tokenizer *bpe_vocab(const char *pre, shoal_gguf **g)
{
	return bpe_vocab_bos(pre, false, g);
}

static bool encodes_to(const shoal_tokenizer *t, const char *text, const int32_t *want,
                       size_t n_want)
{
	int32_t *ids = NULL;
	size_t n = 0;
	bool ok = !shoal_tokenizer_encode(t, text, strlen(text), true, false, &ids, &n) &&
	          n == n_want && !memcmp(ids, want, n * sizeof *ids);
	if (!ok) {
		fprintf(stderr, "\"%s\":\n", text);
		print_ids("want", want, n_want);
		print_ids("got ", ids, n);
	}
	free(ids);
	return ok;
}

static void test_bpe_pre_tokenizers(void)
{
	shoal_gguf *g = NULL;
	shoal_tokenizer *t;
	/* GPT-2: digits stay one word and merge; "'RE" is no contraction, so
	 * "'" and "RE" are separate words; no whole-word lookup. */
	t = bpe_vocab("gpt-2", &g);
	ASSERT_TRUE(t != NULL);
	ASSERT_FALSE(shoal_tokenizer_adds_bos(t));
	ASSERT_TRUE(encodes_to(t, "12345", (const int32_t[]){257, '4', '5'}, 3));
	ASSERT_TRUE(encodes_to(t, "x'RE", (const int32_t[]){'x', '\'', 'R', 'E'}, 4));
	ASSERT_TRUE(encodes_to(t, "ab", (const int32_t[]){'a', 'b'}, 2));
	/* An invalid UTF-8 byte is still spelled, by its byte token. */
	ASSERT_TRUE(encodes_to(t, "a\xff", (const int32_t[]){'a', 0xff}, 2));
	shoal_tokenizer_free(t);
	shoal_gguf_free(g);

	/* Llama 3: digits in threes, case-insensitive contractions, and a
	 * word that is a token wins over the merges (ignore_merges). */
	t = bpe_vocab("llama-bpe", &g);
	ASSERT_TRUE(t != NULL);
	ASSERT_TRUE(encodes_to(t, "12345", (const int32_t[]){257, '4', '5'}, 3));
	ASSERT_TRUE(encodes_to(t, "1234", (const int32_t[]){257, '4'}, 2));
	ASSERT_TRUE(encodes_to(t, "x'RE", (const int32_t[]){'x', 259}, 2));
	ASSERT_TRUE(encodes_to(t, "ab", (const int32_t[]){260}, 1));
	shoal_tokenizer_free(t);
	shoal_gguf_free(g);

	/* Qwen2: one digit per word, so "12" never merges. */
	t = bpe_vocab("qwen2", &g);
	ASSERT_TRUE(t != NULL);
	ASSERT_TRUE(encodes_to(t, "12345", (const int32_t[]){'1', '2', '3', '4', '5'}, 5));
	ASSERT_TRUE(encodes_to(t, "x'RE", (const int32_t[]){'x', 259}, 2));
	ASSERT_TRUE(encodes_to(t, "ab", (const int32_t[]){'a', 'b'}, 2));
	shoal_tokenizer_free(t);
	shoal_gguf_free(g);
}

/* The multi-regex pre-tokenizers, each by what sets it apart on the
 * vocabulary above. */
static void check_pre(const char *pre, const char *text, const int32_t *want, size_t n)
{
	shoal_gguf *g = NULL;
	shoal_tokenizer *t = bpe_vocab(pre, &g);
	if (!t)
		fprintf(stderr, "%s: %s\n", pre, bpe_vocab_why);
	ASSERT_TRUE(t != NULL);
	if (!encodes_to(t, text, want, n))
		fprintf(stderr, "under pre-tokenizer %s\n", pre);
	ASSERT_TRUE(encodes_to(t, text, want, n));
	shoal_tokenizer_free(t);
	shoal_gguf_free(g);
}

static void test_bpe_pre_tokenizers_more(void)
{
	/* DeepSeek V3: digits by three; an ASCII mark takes the letters
	 * after it ("'RE" one word, merged) */
	check_pre("deepseek-v3", "12345", (const int32_t[]){257, '4', '5'}, 3);
	check_pre("deepseek-v3", "x'RE", (const int32_t[]){'x', 259}, 2);
	/* DeepSeek Coder: digits alone, punctuation apart from letters */
	check_pre("deepseek-coder", "12345", (const int32_t[]){'1', '2', '3', '4', '5'}, 5);
	check_pre("deepseek-coder", "x'RE", (const int32_t[]){'x', '\'', 'R', 'E'}, 4);
	/* DeepSeek LLM: a digit run is one word */
	check_pre("deepseek-llm", "12345", (const int32_t[]){257, '4', '5'}, 3);
	check_pre("deepseek-llm", "x'RE", (const int32_t[]){'x', '\'', 'R', 'E'}, 4);
	/* Falcon: GPT-2's digit run, then cut in threes from its start
	 * ("412" "3", where GPT-2 merges "123") */
	check_pre("falcon", "4123", (const int32_t[]){'4', 256, '3'}, 3);
	check_pre("gpt-2", "4123", (const int32_t[]){'4', 257}, 2);
	/* StarCoder and its aliases: every digit alone */
	check_pre("starcoder", "12345", (const int32_t[]){'1', '2', '3', '4', '5'}, 5);
	check_pre("refact", "123", (const int32_t[]){'1', '2', '3'}, 3);
	check_pre("command-r", "123", (const int32_t[]){'1', '2', '3'}, 3);
	check_pre("mpt", "4123", (const int32_t[]){'4', 257}, 2);
	/* Kimi K2: a word carries its contraction; digits by three; no
	 * whole-word lookup */
	check_pre("kimi-k2", "x'RE", (const int32_t[]){'x', 259}, 2);
	check_pre("kimi-k2", "12345", (const int32_t[]){257, '4', '5'}, 3);
	check_pre("kimi-k2", "ab", (const int32_t[]){'a', 'b'}, 2);
	/* GPT-4o (o200k): a capital after small letters starts a word ("a"
	 * "B", where Llama 3's one word "aB" merges); a word carries its
	 * contraction; digits by three; no whole-word lookup */
	check_pre("gpt-4o", "aB", (const int32_t[]){'a', 'B'}, 2);
	check_pre("llama-bpe", "aB", (const int32_t[]){261}, 1);
	check_pre("gpt-4o", "x'RE", (const int32_t[]){'x', 259}, 2);
	check_pre("gpt-4o", "12345", (const int32_t[]){257, '4', '5'}, 3);
	check_pre("gpt-4o", "ab", (const int32_t[]){'a', 'b'}, 2);
	/* GLM-4.5 ("glm4", "chatglm-bpe"): Llama 3's split ("aB" one word,
	 * merged; "'RE" a contraction; digits by three) without its
	 * whole-word lookup ("ab" is a token no merge makes) */
	check_pre("glm4", "aB", (const int32_t[]){261}, 1);
	check_pre("glm4", "x'RE", (const int32_t[]){'x', 259}, 2);
	check_pre("glm4", "12345", (const int32_t[]){257, '4', '5'}, 3);
	check_pre("glm4", "ab", (const int32_t[]){'a', 'b'}, 2);
	check_pre("chatglm-bpe", "ab", (const int32_t[]){'a', 'b'}, 2);
	check_pre("llama-bpe", "ab", (const int32_t[]){260}, 1);
	/* no BOS for GLM even where the file asks for one; Llama 3 adds it */
	shoal_gguf *g = NULL;
	shoal_tokenizer *t = bpe_vocab_bos("glm4", true, &g);
	ASSERT_TRUE(t != NULL);
	ASSERT_TRUE(encodes_to(t, "ab", (const int32_t[]){'a', 'b'}, 2));
	shoal_tokenizer_free(t);
	shoal_gguf_free(g);
	t = bpe_vocab_bos("llama-bpe", true, &g);
	ASSERT_TRUE(t != NULL);
	ASSERT_TRUE(encodes_to(t, "ab", (const int32_t[]){262, 260}, 2));
	shoal_tokenizer_free(t);
	shoal_gguf_free(g);
}

/* An unknown or hostile tokenizer.ggml.pre: refused with one printable
 * line that names it, never a fallback. */
static void test_bpe_pre_unknown(void)
{
	shoal_gguf *g = NULL;
	ASSERT_TRUE(bpe_vocab("deepseek-v4", &g) == NULL);
	ASSERT_TRUE(strstr(bpe_vocab_why, "pre-tokenizer 'deepseek-v4' is not supported") != NULL);
	ASSERT_TRUE(bpe_vocab("evil\n\x1b[31mname\r", &g) == NULL);
	ASSERT_TRUE(strstr(bpe_vocab_why, "'evil??[31mname?'") != NULL);
	ASSERT_TRUE(strchr(bpe_vocab_why, '\n') == NULL);
	ASSERT_TRUE(strchr(bpe_vocab_why, '\x1b') == NULL);
	char long_name[200];
	memset(long_name, 'q', sizeof long_name - 1);
	long_name[sizeof long_name - 1] = '\0';
	ASSERT_TRUE(bpe_vocab(long_name, &g) == NULL);
	ASSERT_TRUE(strstr(bpe_vocab_why, "qqq...' is not supported") != NULL);
	ASSERT_TRUE(strlen(bpe_vocab_why) < 250);
	/* a near miss is no match: names are exact */
	ASSERT_TRUE(bpe_vocab("Deepseek-V3", &g) == NULL);
	ASSERT_TRUE(bpe_vocab("", &g) == NULL);
}

/* ---- hostile text ------------------------------------------------------ */

static bool valid_utf8(const unsigned char *s, size_t n)
{
	for (size_t i = 0; i < n;) {
		unsigned char c = s[i];
		size_t k = c < 0x80                   ? 1
		           : (c >= 0xc2 && c <= 0xdf) ? 2
		           : (c >= 0xe0 && c <= 0xef) ? 3
		           : (c >= 0xf0 && c <= 0xf4) ? 4
		                                      : 0;
		if (!k || i + k > n)
			return false;
		for (size_t j = 1; j < k; j++)
			if ((s[i + j] & 0xc0) != 0x80)
				return false;
		if ((c == 0xe0 && s[i + 1] < 0xa0) || (c == 0xed && s[i + 1] > 0x9f) ||
		    (c == 0xf0 && s[i + 1] < 0x90) || (c == 0xf4 && s[i + 1] > 0x8f))
			return false;
		i += k;
	}
	return true;
}

/* Random text from pieces that stress the tokenizers (broken UTF-8,
 * special-token texts, runs of spaces and digits): every vocabulary must
 * encode it without error, every id must be in range, decoding without
 * special tokens must give the bytes back, and the streaming detokenizer
 * must give valid UTF-8 (equal to decode when decode's output is valid). */
static void test_random_text(void)
{
	static const char *const parts[] = {
	    " ",
	    "  ",
	    "\n",
	    "\t",
	    "a",
	    "Hello",
	    "'s",
	    "'RE",
	    "123456",
	    "\xc3\xa9",
	    "\xe4\xbd\xa0",
	    "\xf0\x9f\x98\x81",
	    "\xff",
	    "\xc3",
	    "\x80",
	    "\xed\xa0\x80",
	    "<s>",
	    "</s>",
	    "<|eot_id|>",
	    "<|begin_of_text|>",
	    "<|endoftext|>",
	    "\r\n",
	    "!!",
	    "\xe2\x96",
	};
	static const char *const vocabs[] = {
	    "vocab/ggml-vocab-llama-spm.gguf",
	    "vocab/ggml-vocab-llama-bpe.gguf",
	    "vocab/ggml-vocab-gpt-2.gguf",
	};
	uint64_t rng = 0x5eed;
	int bad = 0, checked = 0;
	for (size_t v = 0; v < 3; v++) {
		shoal_gguf *g = NULL;
		shoal_tokenizer *t = open_tok(vocabs[v], &g);
		ASSERT_TRUE(t != NULL);
		uint32_t nv = shoal_tokenizer_n_vocab(t);
		for (int round = 0; round < 150; round++) {
			char text[512];
			size_t len = 0;
			int n_parts = (int)((rng >> 33) % 24);
			for (int k = 0; k < n_parts; k++) {
				rng = rng * 6364136223846793005ull + 1442695040888963407ull;
				const char *p =
				    parts[(rng >> 33) % (sizeof parts / sizeof parts[0])];
				size_t pl = strlen(p);
				memcpy(text + len, p, pl);
				len += pl;
			}
			rng = rng * 6364136223846793005ull + 1442695040888963407ull;
			for (int special = 0; special < 2; special++) {
				int32_t *ids = NULL;
				size_t n = 0;
				if (shoal_tokenizer_encode(t, text, len, true, special, &ids, &n)) {
					bad++;
					continue;
				}
				for (size_t i = 0; i < n; i++)
					if (ids[i] < 0 || (uint32_t)ids[i] >= nv)
						bad++;
				char *back = NULL, *streamed = NULL;
				size_t back_len = 0, s_len = 0;
				/* Skip the BOS for the comparison of bytes. */
				size_t skip = shoal_tokenizer_adds_bos(t) ? 1 : 0;
				if (shoal_tokenizer_decode(t, ids + skip, n - skip, false, &back,
				                           &back_len)) {
					bad++;
				} else if (!special &&
				           (back_len != len || memcmp(back, text, len))) {
					fprintf(stderr, "%s: round %d does not round-trip\n",
					        vocabs[v], round);
					for (size_t i = 0; i < len; i++)
						fprintf(stderr, "%02x", (unsigned char)text[i]);
					fprintf(stderr, "\n");
					for (size_t i = 0; i < back_len; i++)
						fprintf(stderr, "%02x", (unsigned char)back[i]);
					fprintf(stderr, "\n");
					bad++;
				}
				streamed = detok_all(t, ids + skip, n - skip, &s_len);
				if (!streamed || !valid_utf8((unsigned char *)streamed, s_len) ||
				    (back && valid_utf8((unsigned char *)back, back_len) &&
				     (s_len != back_len || memcmp(streamed, back, s_len)))) {
					fprintf(stderr, "%s: round %d streams wrongly\n", vocabs[v],
					        round);
					bad++;
				}
				checked++;
				free(back);
				free(streamed);
				free(ids);
			}
		}
		shoal_tokenizer_free(t);
		shoal_gguf_free(g);
	}
	ASSERT_EQ(checked, 900);
	ASSERT_EQ(bad, 0);
}

/* ---- speed ------------------------------------------------------------- */

static void test_persuasion_speed(void)
{
	char path[1024];
	size_t len;
	snprintf(path, sizeof path, "%s/models/persuasion.txt", test_data_dir());
	char *text = read_file(path, &len);
	ASSERT_TRUE(text != NULL);
	shoal_gguf *g = NULL;
	shoal_tokenizer *t = open_tok("models/austen-dense-q8_0.gguf", &g);
	ASSERT_TRUE(t != NULL);
	struct timespec a, b;
	int32_t *ids = NULL;
	size_t n = 0;
	clock_gettime(CLOCK_MONOTONIC, &a);
	shoal_err err = shoal_tokenizer_encode(t, text, len, true, false, &ids, &n);
	clock_gettime(CLOCK_MONOTONIC, &b);
	double s = (double)(b.tv_sec - a.tv_sec) + 1e-9 * (double)(b.tv_nsec - a.tv_nsec);
	printf("  persuasion.txt: %zu bytes -> %zu tokens in %.3f s\n", len, n, s);
	ASSERT_EQ(err, SHOAL_OK);
	/* models/README.md: 111,744 tokens with this tokenizer (with BOS). */
	ASSERT_EQ(n, 111744);
	char *back = NULL;
	size_t back_len = 0;
	ASSERT_EQ(shoal_tokenizer_decode(t, ids, n, false, &back, &back_len), SHOAL_OK);
	ASSERT_EQ(back_len, len);
	ASSERT_MEM_EQ(back, text, len);
	/* The goal is well under a second; 5 s leaves room for a loaded CI box. */
	ASSERT_LT(s, 5.0);
	free(back);
	free(ids);
	free(text);
	shoal_tokenizer_free(t);
	shoal_gguf_free(g);
}

TEST_MAIN(TEST_CASE(test_vectors_llama_spm), TEST_CASE(test_vectors_llama_bpe),
          TEST_CASE(test_vectors_gpt2), TEST_CASE(test_expected_prompts),
          TEST_CASE(test_detok_split_character), TEST_CASE(test_special_tokens),
          TEST_CASE(test_bad_vocabularies), TEST_CASE(test_spm_merge_order),
          TEST_CASE(test_odd_metadata), TEST_CASE(test_bpe_pre_tokenizers),
          TEST_CASE(test_bpe_pre_tokenizers_more), TEST_CASE(test_bpe_pre_unknown),
          TEST_CASE(test_random_text), TEST_CASE(test_persuasion_speed))

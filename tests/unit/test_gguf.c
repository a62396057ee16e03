/*
 * tests/unit/test_gguf.c: the GGUF reader against the bundled files, a writer
 * round trip of every value type, and hostile files (truncated, wrong
 * magic/version, absurd counts, wild lengths and offsets, bad tensors).
 *
 * Part: models/ tests. Hostile files are built in a temporary directory by
 * mutating a valid file or by writing odd headers with tests/helpers/gguf_writer.
 * Every bad file must give a non-OK code and a one-line, non-empty reason.
 */
#include <dirent.h>
#include <errno.h>
#include <stdint.h>
#include <unistd.h>

#include "models/gguf.h"
#include "tests/helpers/gguf_writer.h"
#include "tests/unit/test.h"

static char tmpdir[256];

static const char *tmp_path(const char *name)
{
	/* A ring of buffers: callers hold a few paths at once. */
	static char p[8][512];
	static unsigned k;
	char *r = p[k++ % 8];
	snprintf(r, sizeof p[0], "%s/%s", tmpdir, name);
	return r;
}

static void data_path(char *buf, size_t cap, const char *rel)
{
	snprintf(buf, cap, "%s/%s", test_data_dir(), rel);
}

/* ---- the bundled files -------------------------------------------------- */

static void test_reads_every_bundled_file(void)
{
	const char *dirs[] = {"models", "vocab"};
	int opened = 0;
	for (int d = 0; d < 2; d++) {
		char dir[512];
		data_path(dir, sizeof dir, dirs[d]);
		DIR *dp = opendir(dir);
		ASSERT_TRUE(dp != NULL);
		struct dirent *de;
		while ((de = readdir(dp))) {
			size_t n = strlen(de->d_name);
			if (n < 5 || strcmp(de->d_name + n - 5, ".gguf"))
				continue;
			char p[1024], why[SHOAL_WHY_LEN] = "";
			snprintf(p, sizeof p, "%s/%s", dir, de->d_name);
			shoal_gguf *g;
			shoal_err e = shoal_gguf_open(p, &g, why, sizeof why);
			if (e) {
				closedir(dp);
				TEST_FAIL_("%s: %s", p, why);
			}
			ASSERT_EQ(shoal_gguf_version(g), 3);
			ASSERT_EQ(shoal_gguf_n_shards(g), 1);
			/* Every tensor lies inside the file, after the header. */
			uint64_t size = shoal_gguf_shard_size(g, 0);
			const uint8_t *base = shoal_gguf_shard_base(g, 0);
			for (size_t i = 0; i < shoal_gguf_n_tensors(g); i++) {
				const shoal_gguf_tensor *t = shoal_gguf_tensor_at(g, i);
				ASSERT_GE(t->file_offset, shoal_gguf_shard_header_bytes(g, 0));
				ASSERT_LE(t->file_offset + t->nbytes, size);
				ASSERT_TRUE((const uint8_t *)t->data == base + t->file_offset);
				ASSERT_TRUE(shoal_gguf_tensor_find(g, t->name) == t);
			}
			shoal_gguf_free(g);
			opened++;
		}
		closedir(dp);
	}
	ASSERT_GE(opened, 8); /* 5 models + 3 vocabularies today */
}

static void test_austen_figures(void)
{
	char p[512], why[SHOAL_WHY_LEN];
	data_path(p, sizeof p, "models/austen-dense-f32.gguf");
	shoal_gguf *g;
	ASSERT_EQ(shoal_gguf_open(p, &g, why, sizeof why), SHOAL_OK);
	/* 6 layers x 9 tensors + token_embd + output_norm, tied head. */
	ASSERT_EQ(shoal_gguf_n_tensors(g), 6 * 9 + 2);
	ASSERT_EQ(shoal_gguf_shard_size(g, 0), 52383136);
	uint32_t u;
	ASSERT_TRUE(shoal_gguf_get_u32(g, "llama.block_count", &u));
	ASSERT_EQ(u, 6);
	ASSERT_TRUE(shoal_gguf_get_u32(g, "llama.embedding_length", &u));
	ASSERT_EQ(u, 256);
	ASSERT_TRUE(shoal_gguf_get_u32(g, "llama.attention.head_count_kv", &u));
	ASSERT_EQ(u, 4);
	int64_t i64;
	ASSERT_TRUE(shoal_gguf_get_i64(g, "llama.feed_forward_length", &i64));
	ASSERT_EQ(i64, 768);
	float f;
	ASSERT_TRUE(shoal_gguf_get_f32(g, "llama.attention.layer_norm_rms_epsilon", &f));
	ASSERT_NEAR(f, 1e-5, 1e-9);
	ASSERT_FALSE(shoal_gguf_get_u32(g, "llama.attention.layer_norm_rms_epsilon", &u));
	ASSERT_FALSE(shoal_gguf_get_f32(g, "llama.block_count", &f));
	ASSERT_FALSE(shoal_gguf_get_u32(g, "no.such.key", &u));
	const char *s;
	size_t sl;
	ASSERT_TRUE(shoal_gguf_get_str(g, "general.architecture", &s, &sl));
	ASSERT_EQ(sl, 5);
	ASSERT_TRUE(!memcmp(s, "llama", 5));
	bool b;
	ASSERT_TRUE(shoal_gguf_get_bool(g, "tokenizer.ggml.add_bos_token", &b));
	ASSERT_TRUE(b);
	shoal_gguf_type et;
	uint64_t n;
	const void *d;
	ASSERT_TRUE(shoal_gguf_get_arr(g, "tokenizer.ggml.tokens", &et, &n, &d));
	ASSERT_EQ(et, SHOAL_GGUF_STRING);
	ASSERT_EQ(n, 32000);
	/* SentencePiece: 0 <unk>, 1 <s>, 2 </s>, 3.. byte tokens. */
	ASSERT_TRUE(shoal_gguf_arr_str(g, "tokenizer.ggml.tokens", 1, &s, &sl));
	ASSERT_TRUE(sl == 3 && !memcmp(s, "<s>", 3));
	ASSERT_TRUE(shoal_gguf_arr_str(g, "tokenizer.ggml.tokens", 3, &s, &sl));
	ASSERT_TRUE(sl == 6 && !memcmp(s, "<0x00>", 6));
	ASSERT_FALSE(shoal_gguf_arr_str(g, "tokenizer.ggml.tokens", 32000, &s, &sl));
	ASSERT_TRUE(shoal_gguf_get_arr(g, "tokenizer.ggml.scores", &et, &n, &d));
	ASSERT_EQ(et, SHOAL_GGUF_FLOAT32);
	ASSERT_EQ(n, 32000);
	const shoal_gguf_tensor *t = shoal_gguf_tensor_find(g, "token_embd.weight");
	ASSERT_TRUE(t != NULL);
	ASSERT_EQ(t->n_dims, 2);
	ASSERT_EQ(t->ne[0], 256);
	ASSERT_EQ(t->ne[1], 32000);
	ASSERT_EQ(t->type, SHOAL_DTYPE_F32);
	ASSERT_U64_EQ(t->nbytes, 256ull * 32000 * 4);
	t = shoal_gguf_tensor_find(g, "blk.5.ffn_down.weight");
	ASSERT_TRUE(t != NULL);
	ASSERT_EQ(t->ne[0], 768);
	ASSERT_EQ(t->ne[1], 256);
	ASSERT_TRUE(shoal_gguf_tensor_find(g, "output.weight") == NULL);
	/* 12.9 M parameters at 4 bytes, all inside the 52.4 MB file. */
	uint64_t total = 0;
	for (size_t i = 0; i < shoal_gguf_n_tensors(g); i++)
		total += shoal_gguf_tensor_at(g, i)->nbytes;
	ASSERT_GT(total, 12850000ull * 4);
	ASSERT_LT(total, 12950000ull * 4);
	ASSERT_LE(total + shoal_gguf_shard_header_bytes(g, 0), 52383136);
	shoal_gguf_free(g);

	/* The vocabularies: counts from tests/data/vocab/README.md. */
	const char *vocabs[] = {"vocab/ggml-vocab-llama-spm.gguf",
	                        "vocab/ggml-vocab-llama-bpe.gguf", "vocab/ggml-vocab-gpt-2.gguf"};
	const uint64_t counts[] = {32000, 128256, 50257};
	for (int i = 0; i < 3; i++) {
		data_path(p, sizeof p, vocabs[i]);
		ASSERT_EQ(shoal_gguf_open(p, &g, why, sizeof why), SHOAL_OK);
		ASSERT_EQ(shoal_gguf_n_tensors(g), 0);
		ASSERT_TRUE(shoal_gguf_get_arr(g, "tokenizer.ggml.tokens", &et, &n, &d));
		ASSERT_U64_EQ(n, counts[i]);
		uint64_t last = n - 1;
		ASSERT_TRUE(shoal_gguf_arr_str(g, "tokenizer.ggml.tokens", last, &s, &sl));
		shoal_gguf_free(g);
	}
}

/* ---- writer round trip -------------------------------------------------- */

static void test_writer_roundtrip(void)
{
	const char *p = tmp_path("all.gguf");
	shoal_gguf_writer *w;
	ASSERT_EQ(shoal_gguf_writer_new(p, &w), SHOAL_OK);
	shoal_gguf_writer_set_alignment(w, 64, true);
	shoal_gguf_writer_kv_u8(w, "u8", 200);
	shoal_gguf_writer_kv_i8(w, "i8", -5);
	shoal_gguf_writer_kv_u16(w, "u16", 65000);
	shoal_gguf_writer_kv_i16(w, "i16", -30000);
	shoal_gguf_writer_kv_u32(w, "u32", 4000000000u);
	shoal_gguf_writer_kv_i32(w, "i32", -7);
	shoal_gguf_writer_kv_u64(w, "u64", 1ull << 40);
	shoal_gguf_writer_kv_i64(w, "i64", -(1ll << 40));
	shoal_gguf_writer_kv_f32(w, "f32", 0.25f);
	shoal_gguf_writer_kv_f64(w, "f64", 1.5);
	shoal_gguf_writer_kv_bool(w, "bool", true);
	shoal_gguf_writer_kv_str(w, "str", "hello");
	const int32_t ia[3] = {1, -2, 3};
	shoal_gguf_writer_kv_arr(w, "arr.i32", SHOAL_GGUF_INT32, ia, 3);
	const char *sa[] = {"a", "", "ccc"};
	shoal_gguf_writer_kv_arr_str(w, "arr.str", sa, 3);
	shoal_gguf_writer_kv_arr_str(w, "arr.empty", sa, 0);
	const uint64_t ne1[] = {64, 3}, ne2[] = {32, 2, 2};
	shoal_gguf_writer_add_tensor(w, "a", SHOAL_DTYPE_F32, 2, ne1);
	shoal_gguf_writer_add_tensor(w, "b", SHOAL_DTYPE_Q8_0, 3, ne2);
	ASSERT_EQ(shoal_gguf_writer_tensor_bytes(w, 1), 4 * 34);
	ASSERT_EQ(shoal_gguf_writer_begin_data(w), SHOAL_OK);
	float fa[192];
	for (int i = 0; i < 192; i++)
		fa[i] = (float)i;
	ASSERT_EQ(shoal_gguf_writer_write(w, fa, 100), SHOAL_OK); /* in two pieces */
	ASSERT_EQ(shoal_gguf_writer_write(w, (uint8_t *)fa + 100, sizeof fa - 100), SHOAL_OK);
	uint8_t qb[4 * 34];
	for (int i = 0; i < (int)sizeof qb; i++)
		qb[i] = (uint8_t)i;
	ASSERT_EQ(shoal_gguf_writer_write(w, qb, sizeof qb), SHOAL_OK);
	ASSERT_EQ(shoal_gguf_writer_write(w, qb, 1), SHOAL_ERR_RANGE);
	ASSERT_EQ(shoal_gguf_writer_finish(w), SHOAL_OK);
	shoal_gguf_writer_free(w);

	shoal_gguf *g;
	char why[SHOAL_WHY_LEN];
	ASSERT_EQ(shoal_gguf_open(p, &g, why, sizeof why), SHOAL_OK);
	ASSERT_EQ(shoal_gguf_n_kv(g), 16);
	size_t kl;
	const char *k1 = shoal_gguf_key(g, 1, &kl);
	ASSERT_TRUE(kl == 2 && !memcmp(k1, "u8", 2));
	ASSERT_EQ(shoal_gguf_kv_type(g, 1), SHOAL_GGUF_UINT8);
	uint32_t u;
	uint64_t u64;
	int64_t i64;
	float f;
	bool b;
	ASSERT_TRUE(shoal_gguf_get_u32(g, "u8", &u) && u == 200);
	ASSERT_FALSE(shoal_gguf_get_u32(g, "i8", &u));
	ASSERT_TRUE(shoal_gguf_get_i64(g, "i8", &i64) && i64 == -5);
	ASSERT_TRUE(shoal_gguf_get_u32(g, "u16", &u) && u == 65000);
	ASSERT_TRUE(shoal_gguf_get_i64(g, "i16", &i64) && i64 == -30000);
	ASSERT_TRUE(shoal_gguf_get_u32(g, "u32", &u) && u == 4000000000u);
	ASSERT_TRUE(shoal_gguf_get_i64(g, "i32", &i64) && i64 == -7);
	ASSERT_FALSE(shoal_gguf_get_u32(g, "u64", &u)); /* 2^40 does not fit */
	ASSERT_TRUE(shoal_gguf_get_u64(g, "u64", &u64) && u64 == 1ull << 40);
	ASSERT_TRUE(shoal_gguf_get_i64(g, "i64", &i64) && i64 == -(1ll << 40));
	ASSERT_FALSE(shoal_gguf_get_u64(g, "i64", &u64));
	ASSERT_TRUE(shoal_gguf_get_f32(g, "f32", &f) && f == 0.25f);
	ASSERT_TRUE(shoal_gguf_get_f32(g, "f64", &f) && f == 1.5f);
	ASSERT_TRUE(shoal_gguf_get_bool(g, "bool", &b) && b);
	ASSERT_FALSE(shoal_gguf_get_bool(g, "u8", &b));
	const char *s;
	size_t sl;
	ASSERT_TRUE(shoal_gguf_get_str(g, "str", &s, &sl) && sl == 5 && !memcmp(s, "hello", 5));
	shoal_gguf_type et;
	uint64_t n;
	const void *d;
	ASSERT_TRUE(shoal_gguf_get_arr(g, "arr.i32", &et, &n, &d));
	ASSERT_TRUE(et == SHOAL_GGUF_INT32 && n == 3);
	int32_t got[3];
	memcpy(got, d, sizeof got);
	ASSERT_TRUE(got[0] == 1 && got[1] == -2 && got[2] == 3);
	ASSERT_TRUE(shoal_gguf_arr_str(g, "arr.str", 2, &s, &sl) && sl == 3 &&
	            !memcmp(s, "ccc", 3));
	ASSERT_TRUE(shoal_gguf_arr_str(g, "arr.str", 1, &s, &sl) && sl == 0);
	ASSERT_FALSE(shoal_gguf_arr_str(g, "arr.i32", 0, &s, &sl));
	ASSERT_TRUE(shoal_gguf_get_arr(g, "arr.empty", &et, &n, &d) && n == 0);
	ASSERT_EQ(shoal_gguf_n_tensors(g), 2);
	const shoal_gguf_tensor *ta = shoal_gguf_tensor_find(g, "a"), *tb;
	tb = shoal_gguf_tensor_find(g, "b");
	ASSERT_TRUE(ta && tb);
	ASSERT_EQ(ta->file_offset % 64, 0);
	ASSERT_EQ(tb->file_offset % 64, 0);
	ASSERT_EQ(tb->n_dims, 3);
	ASSERT_EQ(tb->ne[2], 2);
	ASSERT_EQ(tb->ne[3], 1);
	ASSERT_MEM_EQ(ta->data, fa, sizeof fa);
	ASSERT_MEM_EQ(tb->data, qb, sizeof qb);
	shoal_gguf_free(g);
}

/* ---- hostile files ------------------------------------------------------ */

/* Open p; expect failure with a one-line reason. Returns the code. */
static shoal_err open_bad(const char *p, char *why, size_t cap)
{
	shoal_gguf *g = NULL;
	why[0] = '\0';
	shoal_err e = shoal_gguf_open(p, &g, why, cap);
	if (e == SHOAL_OK)
		shoal_gguf_free(g);
	return e;
}

#define ASSERT_BAD(path, want_substr)                                                              \
	do {                                                                                       \
		char why_[SHOAL_WHY_LEN];                                                          \
		shoal_err e_ = open_bad(path, why_, sizeof why_);                                  \
		printf("  %-40s -> %s\n", want_substr, why_);                                      \
		if (e_ == SHOAL_OK)                                                                \
			TEST_FAIL_("%s opened but should not", #want_substr);                      \
		if (!why_[0] || strchr(why_, '\n'))                                                \
			TEST_FAIL_("bad reason for %s: '%s'", #want_substr, why_);                 \
		if (!strstr(why_, want_substr))                                                    \
			TEST_FAIL_("reason '%s' does not mention '%s'", why_, want_substr);        \
	} while (0)

/* A small valid file: a few keys (a string array too) and three tensors. */
static void write_small(const char *p, uint64_t *header_bytes)
{
	shoal_gguf_writer *w;
	if (shoal_gguf_writer_new(p, &w))
		return;
	shoal_gguf_writer_kv_str(w, "general.architecture", "llama");
	shoal_gguf_writer_kv_u32(w, "llama.block_count", 1);
	const char *toks[] = {"<unk>", "<s>", "</s>", "hello"};
	shoal_gguf_writer_kv_arr_str(w, "tokenizer.ggml.tokens", toks, 4);
	const float sc[4] = {0, 0, 0, -1};
	shoal_gguf_writer_kv_arr(w, "tokenizer.ggml.scores", SHOAL_GGUF_FLOAT32, sc, 4);
	const uint64_t ne[] = {32, 4};
	shoal_gguf_writer_add_tensor(w, "x.weight", SHOAL_DTYPE_F32, 2, ne);
	shoal_gguf_writer_add_tensor(w, "y.weight", SHOAL_DTYPE_Q8_0, 2, ne);
	shoal_gguf_writer_add_tensor(w, "z.weight", SHOAL_DTYPE_F16, 1, ne);
	shoal_gguf_writer_begin_data(w);
	uint8_t buf[512];
	memset(buf, 0x11, sizeof buf);
	shoal_gguf_writer_write(w, buf, 32 * 4 * 4);
	shoal_gguf_writer_write(w, buf, 4 * 34);
	shoal_gguf_writer_write(w, buf, 64);
	shoal_gguf_writer_finish(w);
	shoal_gguf_writer_free(w);
	shoal_gguf *g;
	char why[SHOAL_WHY_LEN];
	*header_bytes = 0;
	if (shoal_gguf_open(p, &g, why, sizeof why) == SHOAL_OK) {
		*header_bytes = shoal_gguf_shard_header_bytes(g, 0);
		shoal_gguf_free(g);
	}
}

static uint8_t *slurp(const char *p, size_t *n)
{
	FILE *f = fopen(p, "rb");
	if (!f)
		return NULL;
	fseek(f, 0, SEEK_END);
	long sz = ftell(f);
	fseek(f, 0, SEEK_SET);
	uint8_t *b = malloc((size_t)sz + 1);
	*n = fread(b, 1, (size_t)sz, f);
	fclose(f);
	return b;
}

static void spit(const char *p, const void *b, size_t n)
{
	FILE *f = fopen(p, "wb");
	if (!f)
		return;
	fwrite(b, 1, n, f);
	fclose(f);
}

static void test_truncated_everywhere(void)
{
	const char *p = tmp_path("small.gguf");
	uint64_t hb;
	write_small(p, &hb);
	ASSERT_GT(hb, 100);
	size_t n;
	uint8_t *b = slurp(p, &n);
	ASSERT_TRUE(b != NULL);
	const char *q = tmp_path("trunc.gguf");
	int fails = 0;
	/* Every prefix of the header, then every 7th byte inside the data. */
	for (size_t len = 0; len < n; len += (len < hb ? 1 : 7)) {
		spit(q, b, len);
		char why[SHOAL_WHY_LEN];
		shoal_err e = open_bad(q, why, sizeof why);
		if (e == SHOAL_OK || !why[0] || strchr(why, '\n')) {
			fprintf(stderr, "truncated at %zu of %zu: code %d why '%s'\n", len, n, e,
			        why);
			fails++;
		}
	}
	spit(q, b, n);
	char why[SHOAL_WHY_LEN];
	ASSERT_EQ(open_bad(q, why, sizeof why), SHOAL_OK);
	free(b);
	ASSERT_EQ(fails, 0);

	/* A real file: every 13th prefix of its 24,960-byte header (vocabulary
	 * arrays included), then a few cuts inside the data. */
	char real[512];
	data_path(real, sizeof real, "models/tiny-kq-q6_k.gguf");
	b = slurp(real, &n);
	ASSERT_TRUE(b != NULL);
	spit(q, b, n);
	/* Cut from the end down (truncate is cheaper than rewriting). */
	for (size_t len = n - 1; len > 0; len -= (len > 25000 ? 99991 : 13)) {
		if (len > n)
			break;
		if (truncate(q, (off_t)len) != 0)
			TEST_FAIL_("truncate %s: %s", q, strerror(errno));
		shoal_err e = open_bad(q, why, sizeof why);
		if (e == SHOAL_OK || !why[0] || strchr(why, '\n')) {
			fprintf(stderr, "tiny-kq truncated at %zu: code %d why '%s'\n", len, e,
			        why);
			fails++;
		}
	}
	free(b);
	ASSERT_EQ(fails, 0);
}

/* Patch the small file at off with n bytes and expect a reason. */
static void patched(const void *patch, size_t off, size_t n, const char *out)
{
	size_t len;
	uint8_t *b = slurp(tmp_path("small.gguf"), &len);
	if (!b)
		return;
	memcpy(b + off, patch, n);
	spit(out, b, len);
	free(b);
}

static void test_bad_magic_version_counts(void)
{
	uint64_t hb;
	write_small(tmp_path("small.gguf"), &hb);
	const char *q = tmp_path("bad.gguf");
	patched("GGUG", 0, 4, q);
	ASSERT_BAD(q, "not a GGUF file");
	uint32_t v = 1;
	patched(&v, 4, 4, q);
	ASSERT_BAD(q, "version 1");
	v = 99;
	patched(&v, 4, 4, q);
	ASSERT_BAD(q, "version 99");
	uint64_t big = 1ull << 60;
	patched(&big, 8, 8, q); /* tensor count */
	ASSERT_BAD(q, "tensors cannot fit");
	patched(&big, 16, 8, q); /* kv count */
	ASSERT_BAD(q, "key/value pairs cannot fit");
	uint64_t huge = UINT64_MAX;
	patched(&huge, 8, 8, q);
	ASSERT_BAD(q, "cannot fit");
	/* The first key's name length (at offset 24) past the end of file. */
	big = 1ull << 40;
	patched(&big, 24, 8, q);
	ASSERT_BAD(q, "past end of file");
	/* A second version-2 file reads the same. */
	v = 2;
	patched(&v, 4, 4, q);
	shoal_gguf *g;
	char why[SHOAL_WHY_LEN];
	ASSERT_EQ(shoal_gguf_open(q, &g, why, sizeof why), SHOAL_OK);
	ASSERT_EQ(shoal_gguf_version(g), 2);
	shoal_gguf_free(g);
	/* Too short for a header at all; empty; a directory; missing. */
	spit(q, "GGUF", 4);
	ASSERT_BAD(q, "too short");
	spit(q, "", 0);
	ASSERT_BAD(q, "too short");
	ASSERT_BAD(tmpdir, "not a regular file");
	ASSERT_BAD(tmp_path("does-not-exist.gguf"), "cannot open");
}

/* Write a file with whatever the callback declares. */
typedef void (*decl_fn)(shoal_gguf_writer *w);

static void write_with(const char *p, decl_fn fn, size_t data_bytes)
{
	shoal_gguf_writer *w;
	if (shoal_gguf_writer_new(p, &w))
		return;
	shoal_gguf_writer_kv_str(w, "general.name", "hostile");
	fn(w);
	shoal_gguf_writer_begin_data(w);
	static uint8_t zeros[4096];
	while (data_bytes) {
		size_t k = data_bytes < sizeof zeros ? data_bytes : sizeof zeros;
		shoal_gguf_writer_write_raw(w, zeros, k);
		data_bytes -= k;
	}
	shoal_gguf_writer_finish(w);
	shoal_gguf_writer_free(w);
}

static void d_str_len(shoal_gguf_writer *w)
{
	uint64_t len = 1ull << 50;
	shoal_gguf_writer_kv_raw(w, "s", SHOAL_GGUF_STRING, &len, 8);
}
static void d_arr_overflow(shoal_gguf_writer *w)
{
	/* 2^62 four-byte elements: the byte count would wrap to 0. */
	uint8_t v[12];
	uint32_t et = SHOAL_GGUF_UINT32;
	uint64_t n = 1ull << 62;
	memcpy(v, &et, 4);
	memcpy(v + 4, &n, 8);
	shoal_gguf_writer_kv_raw(w, "a", SHOAL_GGUF_ARRAY, v, 12);
}
static void d_arr_str_count(shoal_gguf_writer *w)
{
	uint8_t v[12];
	uint32_t et = SHOAL_GGUF_STRING;
	uint64_t n = 1ull << 61;
	memcpy(v, &et, 4);
	memcpy(v + 4, &n, 8);
	shoal_gguf_writer_kv_raw(w, "a", SHOAL_GGUF_ARRAY, v, 12);
}
static void d_arr_of_arr(shoal_gguf_writer *w)
{
	uint8_t v[24];
	uint32_t et = SHOAL_GGUF_ARRAY, et2 = SHOAL_GGUF_UINT8;
	uint64_t n = 1, n2 = 0;
	memcpy(v, &et, 4);
	memcpy(v + 4, &n, 8);
	memcpy(v + 12, &et2, 4);
	memcpy(v + 16, &n2, 8);
	shoal_gguf_writer_kv_raw(w, "nested", SHOAL_GGUF_ARRAY, v, 24);
}
static void d_bad_vtype(shoal_gguf_writer *w)
{
	shoal_gguf_writer_kv_raw(w, "odd", 13, "\0\0\0\0", 4);
}
static void d_dup_key(shoal_gguf_writer *w)
{
	shoal_gguf_writer_kv_str(w, "general.name", "again");
}
static void d_key_newline(shoal_gguf_writer *w)
{
	shoal_gguf_writer_kv_str(w, "x\ny", "v");
	shoal_gguf_writer_kv_str(w, "x\ny", "v");
}
static void d_bad_align(shoal_gguf_writer *w)
{
	shoal_gguf_writer_kv_u32(w, "general.alignment", 48);
}
static const uint64_t ne_64[] = {64, 1, 1, 1, 1};
static void d_past_eof(shoal_gguf_writer *w)
{
	shoal_gguf_writer_add_tensor_raw(w, "blk.3.attn_q.weight", SHOAL_DTYPE_F32, 1, ne_64, 64);
}
static void d_offset_wrap(shoal_gguf_writer *w)
{
	shoal_gguf_writer_add_tensor_raw(w, "t", SHOAL_DTYPE_F32, 1, ne_64, UINT64_MAX - 31);
}
static void d_unknown_type(shoal_gguf_writer *w)
{
	shoal_gguf_writer_add_tensor_raw(w, "t", 42, 1, ne_64, 0);
}
static void d_block_multiple(shoal_gguf_writer *w)
{
	const uint64_t ne[] = {33, 2};
	shoal_gguf_writer_add_tensor_raw(w, "t", SHOAL_DTYPE_Q8_0, 2, ne, 0);
}
static void d_dims0(shoal_gguf_writer *w)
{
	shoal_gguf_writer_add_tensor_raw(w, "t", SHOAL_DTYPE_F32, 0, ne_64, 0);
}
static void d_dims5(shoal_gguf_writer *w)
{
	shoal_gguf_writer_add_tensor_raw(w, "t", SHOAL_DTYPE_F32, 5, ne_64, 0);
}
static void d_ne_zero(shoal_gguf_writer *w)
{
	const uint64_t ne[] = {64, 0};
	shoal_gguf_writer_add_tensor_raw(w, "t", SHOAL_DTYPE_F32, 2, ne, 0);
}
static void d_ne_overflow(shoal_gguf_writer *w)
{
	const uint64_t ne[] = {1ull << 32, 1ull << 32};
	shoal_gguf_writer_add_tensor_raw(w, "t", SHOAL_DTYPE_F32, 2, ne, 0);
}
static void d_overlap(shoal_gguf_writer *w)
{
	shoal_gguf_writer_add_tensor_raw(w, "a", SHOAL_DTYPE_F32, 1, ne_64, 0); /* [0, 256) */
	shoal_gguf_writer_add_tensor_raw(w, "b", SHOAL_DTYPE_F32, 1, ne_64, 224);
}
static void d_dup_tensor(shoal_gguf_writer *w)
{
	shoal_gguf_writer_add_tensor_raw(w, "a", SHOAL_DTYPE_F32, 1, ne_64, 0);
	shoal_gguf_writer_add_tensor_raw(w, "a", SHOAL_DTYPE_F32, 1, ne_64, 256);
}
static void d_misaligned(shoal_gguf_writer *w)
{
	shoal_gguf_writer_add_tensor_raw(w, "a", SHOAL_DTYPE_F32, 1, ne_64, 8);
}
static void d_split_no_name(shoal_gguf_writer *w)
{
	shoal_gguf_writer_kv_u16(w, "split.no", 0);
	shoal_gguf_writer_kv_u16(w, "split.count", 3);
}

static void d_split_no_missing(shoal_gguf_writer *w)
{
	shoal_gguf_writer_kv_u16(w, "split.count", 3);
}

static void test_hostile_headers(void)
{
	const char *q = tmp_path("hostile.gguf");
	write_with(q, d_str_len, 0);
	ASSERT_BAD(q, "key 's': string of");
	write_with(q, d_arr_overflow, 0);
	ASSERT_BAD(q, "key 'a': array of");
	write_with(q, d_arr_str_count, 0);
	ASSERT_BAD(q, "strings cannot fit");
	write_with(q, d_arr_of_arr, 0);
	ASSERT_BAD(q, "arrays of arrays");
	write_with(q, d_bad_vtype, 0);
	ASSERT_BAD(q, "unknown value type 13");
	write_with(q, d_dup_key, 0);
	ASSERT_BAD(q, "duplicate key 'general.name'");
	write_with(q, d_key_newline, 0);
	ASSERT_BAD(q, "duplicate key 'x?y'");
	write_with(q, d_bad_align, 0);
	ASSERT_BAD(q, "not a power of two");
	write_with(q, d_past_eof, 128);
	ASSERT_BAD(q, "blk.3.attn_q.weight: data [");
	write_with(q, d_offset_wrap, 128);
	ASSERT_BAD(q, "past end of file");
	write_with(q, d_unknown_type, 256);
	ASSERT_BAD(q, "tensor 't': unknown type 42");
	write_with(q, d_block_multiple, 256);
	ASSERT_BAD(q, "not a multiple of the Q8_0 block size 32");
	write_with(q, d_dims0, 256);
	ASSERT_BAD(q, "0 dimensions");
	write_with(q, d_dims5, 256);
	ASSERT_BAD(q, "5 dimensions");
	write_with(q, d_ne_zero, 256);
	ASSERT_BAD(q, "dimension 1 is 0");
	write_with(q, d_ne_overflow, 256);
	ASSERT_BAD(q, "overflow");
	write_with(q, d_overlap, 512);
	ASSERT_BAD(q, "overlap");
	write_with(q, d_dup_tensor, 512);
	ASSERT_BAD(q, "duplicate tensor name 'a'");
	write_with(q, d_misaligned, 512);
	ASSERT_BAD(q, "alignment");
	write_with(q, d_split_no_name, 0);
	ASSERT_BAD(q, "split.count is 3 but the file name does not follow");
	write_with(q, d_split_no_missing, 0);
	ASSERT_BAD(q, "split.no is missing");
}

/* Random byte flips in the header: any code is fine, a crash is not. */
static void test_header_fuzz(void)
{
	uint64_t hb;
	write_small(tmp_path("small.gguf"), &hb);
	size_t n;
	uint8_t *orig = slurp(tmp_path("small.gguf"), &n);
	ASSERT_TRUE(orig != NULL);
	uint8_t *b = malloc(n);
	const char *q = tmp_path("fuzz.gguf");
	uint64_t x = 0x9e3779b97f4a7c15ull;
	int bad_reasons = 0;
	for (int iter = 0; iter < 400; iter++) {
		memcpy(b, orig, n);
		for (int k = 0; k < 3; k++) {
			x ^= x << 13, x ^= x >> 7, x ^= x << 17;
			b[x % hb] = (uint8_t)(x >> 32);
		}
		spit(q, b, n);
		char why[SHOAL_WHY_LEN];
		shoal_err e = open_bad(q, why, sizeof why);
		if (e != SHOAL_OK && (!why[0] || strchr(why, '\n')))
			bad_reasons++;
	}
	free(b);
	free(orig);
	ASSERT_EQ(bad_reasons, 0);
}

static void setup(void)
{
	snprintf(tmpdir, sizeof tmpdir, "/tmp/shoal-test-gguf-XXXXXX");
	if (!mkdtemp(tmpdir)) {
		perror("mkdtemp");
		exit(1);
	}
}

static void teardown(void)
{
	DIR *dp = opendir(tmpdir);
	struct dirent *de;
	while (dp && (de = readdir(dp))) {
		if (de->d_name[0] == '.')
			continue;
		unlink(tmp_path(de->d_name));
	}
	if (dp)
		closedir(dp);
	rmdir(tmpdir);
}

static void test_setup(void)
{
	setup();
	ASSERT_TRUE(tmpdir[0] != '\0');
}

static void test_teardown(void)
{
	teardown();
}

TEST_MAIN(TEST_CASE(test_setup), TEST_CASE(test_reads_every_bundled_file),
          TEST_CASE(test_austen_figures), TEST_CASE(test_writer_roundtrip),
          TEST_CASE(test_truncated_everywhere), TEST_CASE(test_bad_magic_version_counts),
          TEST_CASE(test_hostile_headers), TEST_CASE(test_header_fuzz), TEST_CASE(test_teardown))

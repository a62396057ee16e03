/*
 * tests/unit/test_model.c: models from GGUF files: architectures and
 * hyper-parameters of the bundled models, every architecture through
 * gen_fixture, shape errors, the manifest against hand-computed figures,
 * model ids and their cache, and split files.
 *
 * Part: models/ tests. Small models are written here with tests/helpers/gguf_writer;
 * the generator (tests/helpers/gen_fixture, from $SHOAL_BUILDDIR) makes the
 * architecture and split fixtures.
 */
#include <dirent.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include "models/manifest.h"
#include "models/model.h"
#include "models/model_id.h"
#include "tests/helpers/gguf_writer.h"
#include "tests/unit/test.h"

static char tmpdir[256];

static const char *tmp_path(const char *name)
{
	static char p[8][512];
	static unsigned k;
	char *r = p[k++ % 8];
	snprintf(r, sizeof p[0], "%s/%s", tmpdir, name);
	return r;
}

static const char *data_file(const char *rel)
{
	static char p[4][512];
	static unsigned k;
	char *r = p[k++ % 4];
	snprintf(r, sizeof p[0], "%s/%s", test_data_dir(), rel);
	return r;
}

/* ---- the bundled models ------------------------------------------------- */

static void test_austen_hparams(void)
{
	const char *files[] = {"models/austen-dense-f32.gguf", "models/austen-dense-f16.gguf",
	                       "models/austen-dense-q8_0.gguf"};
	for (int f = 0; f < 3; f++) {
		shoal_model *m;
		char why[SHOAL_WHY_LEN];
		shoal_err e = shoal_model_open(data_file(files[f]), &m, why, sizeof why);
		if (e)
			TEST_FAIL_("%s: %s", files[f], why);
		const shoal_hparams *hp = &m->hp;
		ASSERT_EQ(hp->arch, SHOAL_ARCH_LLAMA);
		ASSERT_STR_EQ(shoal_arch_name(hp->arch), "llama");
		ASSERT_EQ(hp->n_layer, 6);
		ASSERT_EQ(hp->n_embd, 256);
		ASSERT_EQ(hp->n_head, 8);
		ASSERT_EQ(hp->n_head_kv, 4);
		ASSERT_EQ(hp->head_dim, 32);
		ASSERT_EQ(hp->n_ff, 768);
		ASSERT_EQ(hp->n_vocab, 32000);
		ASSERT_EQ(hp->n_ctx_train, 256);
		ASSERT_EQ(hp->n_rot, 32);
		ASSERT_NEAR(hp->rms_eps, 1e-5, 1e-10);
		ASSERT_NEAR(hp->rope_freq_base, 10000, 0);
		ASSERT_NEAR(hp->rope_freq_scale, 1, 0);
		ASSERT_EQ(hp->rope_type, SHOAL_ROPE_NORM);
		ASSERT_EQ(hp->n_expert, 0);
		ASSERT_TRUE(hp->tied_head);
		ASSERT_TRUE(m->output == m->tok_embd);
		for (uint32_t l = 0; l < hp->n_layer; l++) {
			const shoal_layer *L = &m->layers[l];
			ASSERT_TRUE(L->attn_norm && L->wq && L->wk && L->wv && L->wo);
			ASSERT_TRUE(L->ffn_norm && L->ffn_gate && L->ffn_up && L->ffn_down);
			ASSERT_TRUE(!L->bq && !L->q_norm && !L->ffn_gate_inp && !L->ffn_gate_exps);
			ASSERT_EQ(L->wk->ne[1], 128);
		}
		shoal_model_free(m);
	}

	const char *kq[] = {"models/tiny-kq-q4_k_m.gguf", "models/tiny-kq-q6_k.gguf"};
	for (int f = 0; f < 2; f++) {
		shoal_model *m;
		char why[SHOAL_WHY_LEN];
		ASSERT_EQ(shoal_model_open(data_file(kq[f]), &m, why, sizeof why), SHOAL_OK);
		ASSERT_EQ(m->hp.n_layer, 4);
		ASSERT_EQ(m->hp.n_embd, 256);
		ASSERT_EQ(m->hp.n_head_kv, 2);
		ASSERT_EQ(m->hp.n_vocab, 1024);
		ASSERT_FALSE(m->hp.tied_head);
		ASSERT_TRUE(m->output != m->tok_embd);
		ASSERT_EQ(m->output->type, SHOAL_DTYPE_Q6_K);
		shoal_model_free(m);
	}
}

static void test_vocab_files_are_not_models(void)
{
	shoal_model *m;
	char why[SHOAL_WHY_LEN];
	ASSERT_EQ(shoal_model_open(data_file("vocab/ggml-vocab-gpt-2.gguf"), &m, why, sizeof why),
	          SHOAL_ERR_UNSUPPORTED);
	ASSERT_STR_EQ(why, "architecture 'gpt2' is not supported (supported: llama, qwen2, qwen3, "
	                   "qwen3moe, deepseek2, gpt-oss, glm4moe)");
	ASSERT_EQ(
	    shoal_model_open(data_file("vocab/ggml-vocab-llama-spm.gguf"), &m, why, sizeof why),
	    SHOAL_ERR_FORMAT);
	ASSERT_STR_EQ(why, "missing tensor 'token_embd.weight'");
}

/* ---- small hand-written models ------------------------------------------ */

/* A 2-layer llama of dim 32 (4 heads of 8, 2 KV heads), ff 64, vocab 16,
 * with one mutation: a different arch, a tensor left out, a tensor with a
 * different ne[1], or an extra bool key. */
typedef struct mut {
	const char *arch;
	const char *skip;
	const char *reshape;
	uint64_t reshape_ne1;
	const char *bool_key;
	bool bool_val;
	uint32_t experts;   /* llama MoE with 4 experts, 2 used, if set */
	const char *ov_key; /* this <arch>.* key gets ov_val (an i64) instead */
	int64_t ov_val;
	bool drop_key;       /* leave ov_key out instead */
	uint64_t rope_freqs; /* add rope_freqs.weight of this length if set */
} mut;

static void write_model(const char *p, const mut *mu)
{
	shoal_gguf_writer *w;
	if (shoal_gguf_writer_new(p, &w))
		return;
	const char *a = mu->arch ? mu->arch : "llama";
	char k[128];
#define KEY(s) (snprintf(k, sizeof k, "%s.%s", a, s), k)
#define OV(s)  (mu->ov_key && !strcmp(mu->ov_key, s))
	shoal_gguf_writer_kv_str(w, "general.architecture", a);
	if (!OV("block_count"))
		shoal_gguf_writer_kv_u32(w, KEY("block_count"), 2);
	if (mu->ov_key && !mu->drop_key)
		shoal_gguf_writer_kv_i64(w, KEY(mu->ov_key), mu->ov_val);
	if (!OV("context_length"))
		shoal_gguf_writer_kv_u64(w, KEY("context_length"), 64);
	if (!OV("embedding_length"))
		shoal_gguf_writer_kv_u16(w, KEY("embedding_length"), 32);
	if (!OV("feed_forward_length"))
		shoal_gguf_writer_kv_i32(w, KEY("feed_forward_length"), 64);
	if (!OV("attention.head_count"))
		shoal_gguf_writer_kv_u32(w, KEY("attention.head_count"), 4);
	if (!OV("attention.head_count_kv"))
		shoal_gguf_writer_kv_u8(w, KEY("attention.head_count_kv"), 2);
	if (!OV("attention.layer_norm_rms_epsilon"))
		shoal_gguf_writer_kv_f64(w, KEY("attention.layer_norm_rms_epsilon"), 1e-6);
	if (mu->experts) {
		shoal_gguf_writer_kv_u32(w, KEY("expert_count"), mu->experts);
		shoal_gguf_writer_kv_u32(w, KEY("expert_used_count"), 2);
	}
	if (mu->bool_key)
		shoal_gguf_writer_kv_bool(w, KEY(mu->bool_key), mu->bool_val);
#undef KEY
#undef OV
	struct {
		const char *name;
		uint32_t nd;
		uint64_t ne[3];
	} ts[32];
	int n = 0;
#define T(nm, d, a0, a1, a2)                                                                       \
	do {                                                                                       \
		ts[n].name = nm;                                                                   \
		ts[n].nd = d;                                                                      \
		ts[n].ne[0] = a0;                                                                  \
		ts[n].ne[1] = a1;                                                                  \
		ts[n].ne[2] = a2;                                                                  \
		n++;                                                                               \
	} while (0)
	T("token_embd.weight", 2, 32, 16, 1);
	T("output_norm.weight", 1, 32, 1, 1);
	T("output.weight", 2, 32, 16, 1);
	if (mu->rope_freqs)
		T("rope_freqs.weight", 1, mu->rope_freqs, 1, 1);
	static char names[2][12][48];
	const char *parts[] = {"attn_norm", "attn_q",   "attn_k", "attn_v",  "attn_output",
	                       "ffn_norm",  "ffn_gate", "ffn_up", "ffn_down"};
	const char *moe_parts[] = {"ffn_gate_inp", "ffn_gate_exps", "ffn_up_exps", "ffn_down_exps"};
	for (int l = 0; l < 2; l++) {
		for (int i = 0; i < 9; i++) {
			if (mu->experts && i >= 6)
				break;
			snprintf(names[l][i], 48, "blk.%d.%s.weight", l, parts[i]);
		}
		T(names[l][0], 1, 32, 1, 1);
		T(names[l][1], 2, 32, 32, 1);
		T(names[l][2], 2, 32, 16, 1);
		T(names[l][3], 2, 32, 16, 1);
		T(names[l][4], 2, 32, 32, 1);
		T(names[l][5], 1, 32, 1, 1);
		if (mu->experts) {
			for (int i = 0; i < 4; i++)
				snprintf(names[l][6 + i], 48, "blk.%d.%s.weight", l, moe_parts[i]);
			T(names[l][6], 2, 32, mu->experts, 1);
			T(names[l][7], 3, 32, 64, mu->experts);
			T(names[l][8], 3, 32, 64, mu->experts);
			T(names[l][9], 3, 64, 32, mu->experts);
		} else {
			T(names[l][6], 2, 32, 64, 1);
			T(names[l][7], 2, 32, 64, 1);
			T(names[l][8], 2, 64, 32, 1);
		}
	}
#undef T
	int kept[32], nk = 0;
	for (int i = 0; i < n; i++) {
		if (mu->skip && !strcmp(ts[i].name, mu->skip))
			continue;
		if (mu->reshape && !strcmp(ts[i].name, mu->reshape))
			ts[i].ne[1] = mu->reshape_ne1;
		shoal_gguf_writer_add_tensor(w, ts[i].name, SHOAL_DTYPE_F32, ts[i].nd, ts[i].ne);
		kept[nk++] = i;
	}
	shoal_gguf_writer_begin_data(w);
	for (int j = 0; j < nk; j++) {
		const uint64_t *ne = ts[kept[j]].ne;
		uint64_t cnt = ne[0] * ne[1] * ne[2];
		for (uint64_t e = 0; e < cnt; e++) {
			float v = (float)((e * 7 + (uint64_t)j) % 13) / 13.0f;
			shoal_gguf_writer_write(w, &v, 4);
		}
	}
	shoal_gguf_writer_finish(w);
	shoal_gguf_writer_free(w);
}

static shoal_err open_mut(const mut *mu, char *why, size_t cap, shoal_model **out)
{
	const char *p = tmp_path("mut.gguf");
	write_model(p, mu);
	why[0] = '\0';
	shoal_model *m = NULL;
	shoal_err e = shoal_model_open(p, &m, why, cap);
	if (out)
		*out = m;
	else
		shoal_model_free(m);
	return e;
}

#define ASSERT_REASON(why, text)                                                                   \
	do {                                                                                       \
		if (!strstr(why, text) || strchr(why, '\n'))                                       \
			TEST_FAIL_("reason '%s' does not say '%s'", why, text);                    \
	} while (0)

static void test_shape_errors(void)
{
	char why[SHOAL_WHY_LEN];
	shoal_model *m;
	ASSERT_EQ(open_mut(&(mut){0}, why, sizeof why, &m), SHOAL_OK);
	ASSERT_TRUE(m != NULL);
	ASSERT_EQ(m->hp.n_head_kv, 2); /* from a u8 key */
	ASSERT_EQ(m->hp.n_embd, 32);   /* from a u16 key */
	ASSERT_EQ(m->hp.head_dim, 8);
	ASSERT_NEAR(m->hp.rms_eps, 1e-6, 1e-12); /* from an f64 key */
	ASSERT_FALSE(m->hp.tied_head);
	shoal_model_free(m);

	ASSERT_EQ(open_mut(&(mut){.reshape = "blk.1.attn_q.weight", .reshape_ne1 = 24}, why,
	                   sizeof why, NULL),
	          SHOAL_ERR_FORMAT);
	ASSERT_STR_EQ(why, "tensor 'blk.1.attn_q.weight': shape {32, 24}, expected {32, 32}");
	ASSERT_EQ(open_mut(&(mut){.skip = "blk.0.ffn_up.weight"}, why, sizeof why, NULL),
	          SHOAL_ERR_FORMAT);
	ASSERT_STR_EQ(why, "missing tensor 'blk.0.ffn_up.weight'");
	ASSERT_EQ(open_mut(&(mut){.arch = "foo"}, why, sizeof why, NULL), SHOAL_ERR_UNSUPPORTED);
	ASSERT_STR_EQ(
	    why, "architecture 'foo' is not supported (supported: llama, qwen2, qwen3, qwen3moe, "
	         "deepseek2, gpt-oss, glm4moe)");
	ASSERT_EQ(open_mut(&(mut){.arch = "qwen2"}, why, sizeof why, NULL), SHOAL_ERR_FORMAT);
	ASSERT_STR_EQ(why, "missing tensor 'blk.0.attn_q.bias'");
	ASSERT_EQ(open_mut(&(mut){.arch = "qwen3"}, why, sizeof why, NULL), SHOAL_ERR_FORMAT);
	ASSERT_STR_EQ(why, "missing tensor 'blk.0.attn_q_norm.weight'");
	ASSERT_EQ(
	    open_mut(
	        &(mut){.skip = "output.weight", .reshape = "token_embd.weight", .reshape_ne1 = 20},
	        why, sizeof why, &m),
	    SHOAL_OK);
	ASSERT_TRUE(m->hp.tied_head);
	ASSERT_EQ(m->hp.n_vocab, 20);
	shoal_model_free(m);
	ASSERT_EQ(
	    open_mut(&(mut){.reshape = "output.weight", .reshape_ne1 = 17}, why, sizeof why, NULL),
	    SHOAL_ERR_FORMAT);
	ASSERT_REASON(why, "tensor 'output.weight': shape {32, 17}, expected {32, 16}");
	ASSERT_EQ(open_mut(&(mut){.bool_key = "expert_weights_norm"}, why, sizeof why, NULL),
	          SHOAL_OK);

	/* Mixtral-style llama: experts, norm on by default, off when the file
	 * says so; a router of the wrong width is named. */
	ASSERT_EQ(open_mut(&(mut){.experts = 4}, why, sizeof why, &m), SHOAL_OK);
	ASSERT_EQ(m->hp.n_expert, 4);
	ASSERT_EQ(m->hp.n_expert_used, 2);
	ASSERT_EQ(m->hp.n_ff_exp, 64);
	ASSERT_EQ(m->hp.n_ff, 0);
	ASSERT_TRUE(m->hp.expert_weights_norm);
	ASSERT_TRUE(m->layers[1].ffn_down_exps && !m->layers[1].ffn_down);
	shoal_model_free(m);
	ASSERT_EQ(
	    open_mut(&(mut){.experts = 4, .bool_key = "expert_weights_norm"}, why, sizeof why, &m),
	    SHOAL_OK);
	ASSERT_FALSE(m->hp.expert_weights_norm);
	shoal_model_free(m);
	ASSERT_EQ(
	    open_mut(&(mut){.experts = 4, .reshape = "blk.0.ffn_gate_inp.weight", .reshape_ne1 = 3},
	             why, sizeof why, NULL),
	    SHOAL_ERR_FORMAT);
	ASSERT_REASON(why, "blk.0.ffn_gate_inp.weight");

	/* Llama 3.1 rope factors: one per rotated pair (head_dim 8 -> 4). */
	ASSERT_EQ(open_mut(&(mut){.rope_freqs = 4}, why, sizeof why, &m), SHOAL_OK);
	ASSERT_TRUE(m->rope_freqs != NULL && m->rope_freqs->ne[0] == 4);
	shoal_model_free(m);
	ASSERT_EQ(open_mut(&(mut){0}, why, sizeof why, &m), SHOAL_OK);
	ASSERT_TRUE(m->rope_freqs == NULL);
	shoal_model_free(m);
	ASSERT_EQ(open_mut(&(mut){.rope_freqs = 8}, why, sizeof why, NULL), SHOAL_ERR_FORMAT);
	ASSERT_STR_EQ(why, "tensor 'rope_freqs.weight': shape {8}, expected {4}");

	/* Bad hyper-parameters, each named. */
	static const struct {
		const char *key;
		int64_t val;
		bool drop;
		const char *reason;
	} bad[] = {
	    {"block_count", 0, false, "key 'llama.block_count' = 0 out of range"},
	    {"block_count", -3, false, "key 'llama.block_count' is not a non-negative integer"},
	    {"block_count", 1 << 20, false, "out of range [1, 4096]"},
	    {"block_count", 0, true, "missing key 'llama.block_count'"},
	    {"attention.head_count_kv", 3, false, "4 attention heads are not a multiple of 3 KV"},
	    {"attention.head_count", 0, false, "key 'llama.attention.head_count' = 0"},
	    {"embedding_length", 0, true, "missing key 'llama.embedding_length'"},
	    {"context_length", 0, true, "missing key 'llama.context_length'"},
	    {"feed_forward_length", 0, true, "missing key 'llama.feed_forward_length'"},
	    {"attention.layer_norm_rms_epsilon", 1, false, "is not a float"},
	    {"attention.layer_norm_rms_epsilon", 0, true, "missing key"},
	    {"attention.key_length", 7, false, "head dimension 7 is odd"},
	    {"rope.dimension_count", 64, false, "out of range [2, 8]"},
	    {"attention.value_length", 16, false, "key length 8 != value length 16"},
	    {"embedding_length", 48, false,
	     "tensor 'token_embd.weight': shape {32, 16}, "
	     "expected {48, 16}"},
	};
	for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
		shoal_err e = open_mut(
		    &(mut){.ov_key = bad[i].key, .ov_val = bad[i].val, .drop_key = bad[i].drop},
		    why, sizeof why, NULL);
		if (e == SHOAL_OK)
			TEST_FAIL_("%s = %lld opened", bad[i].key, (long long)bad[i].val);
		ASSERT_REASON(why, bad[i].reason);
	}
	/* Without head_count_kv the default (= head_count) shows in the shapes. */
	ASSERT_EQ(open_mut(&(mut){.ov_key = "attention.head_count_kv", .drop_key = true}, why,
	                   sizeof why, NULL),
	          SHOAL_ERR_FORMAT);
	ASSERT_REASON(why, "tensor 'blk.0.attn_k.weight': shape {32, 16}, expected {32, 32}");
}

/* ---- gen_fixture: every architecture -------------------------------------- */

static const char *gen_bin(void)
{
	static char p[512];
	const char *b = getenv("SHOAL_BUILDDIR");
	snprintf(p, sizeof p, "%s/tests/helpers/gen_fixture", b ? b : ".");
	return access(p, X_OK) == 0 ? p : NULL;
}

static int gen(const char *args, const char *out)
{
	char cmd[1024];
	snprintf(cmd, sizeof cmd, "'%s' %s '%s'", gen_bin(), args, out);
	return system(cmd);
}

static void test_gen_fixture_archs(void)
{
	if (!gen_bin())
		TEST_SKIP("tests/helpers/gen_fixture not built (set SHOAL_BUILDDIR)");
	shoal_model *m;
	char why[SHOAL_WHY_LEN];
	const char *p = tmp_path("g.gguf");

	ASSERT_EQ(gen("--arch qwen2 --type F16 --layers 2 --dim 64 --ff 128 --heads 4 "
	              "--kv-heads 2 --vocab 300 --tied",
	              p),
	          0);
	ASSERT_EQ(shoal_model_open(p, &m, why, sizeof why), SHOAL_OK);
	ASSERT_EQ(m->hp.arch, SHOAL_ARCH_QWEN2);
	ASSERT_EQ(m->hp.rope_type, SHOAL_ROPE_NEOX);
	ASSERT_TRUE(m->layers[1].bq && m->layers[1].bk && m->layers[1].bv);
	ASSERT_EQ(m->layers[1].bk->ne[0], 2 * 16);
	ASSERT_TRUE(m->hp.tied_head);
	ASSERT_EQ(m->tok_embd->type, SHOAL_DTYPE_F16);
	ASSERT_EQ(m->layers[0].attn_norm->type, SHOAL_DTYPE_F32);
	shoal_model_free(m);

	/* qwen3: head_dim 32 from key_length, not dim / heads = 16. */
	ASSERT_EQ(gen("--arch qwen3 --type Q8_0 --layers 2 --dim 64 --ff 128 --heads 4 "
	              "--kv-heads 2 --head-dim 32 --vocab 300",
	              p),
	          0);
	ASSERT_EQ(shoal_model_open(p, &m, why, sizeof why), SHOAL_OK);
	ASSERT_EQ(m->hp.arch, SHOAL_ARCH_QWEN3);
	ASSERT_EQ(m->hp.head_dim, 32);
	ASSERT_EQ(m->layers[0].wq->ne[1], 4 * 32);
	ASSERT_EQ(m->layers[0].q_norm->ne[0], 32);
	ASSERT_EQ(m->layers[0].wq->type, SHOAL_DTYPE_Q8_0);
	shoal_model_free(m);

	ASSERT_EQ(gen("--arch qwen3moe --type Q4_0 --layers 2 --dim 64 --ff 128 --heads 4 "
	              "--kv-heads 2 --experts 8 --experts-used 2 --ff-exp 32 --vocab 300",
	              p),
	          0);
	ASSERT_EQ(shoal_model_open(p, &m, why, sizeof why), SHOAL_OK);
	ASSERT_EQ(m->hp.arch, SHOAL_ARCH_QWEN3MOE);
	ASSERT_EQ(m->hp.n_expert, 8);
	ASSERT_EQ(m->hp.n_expert_used, 2);
	ASSERT_EQ(m->hp.n_ff_exp, 32);
	ASSERT_TRUE(m->hp.expert_weights_norm);
	ASSERT_EQ(m->layers[1].ffn_down_exps->ne[2], 8);
	ASSERT_EQ(m->layers[1].ffn_gate_inp->type, SHOAL_DTYPE_F32);

	/* Its manifest: experts counted apart from the layer. */
	shoal_manifest mf;
	ASSERT_EQ(shoal_model_manifest(m, &mf), SHOAL_OK);
	ASSERT_EQ(mf.layers[0].n_expert, 8);
	/* one expert: 3 Q4_0 matrices of 64 x 32 = 3 * 64 * 32 / 32 * 18 bytes */
	ASSERT_U64_EQ(mf.layers[0].expert_bytes, 3 * 64 * 32 / 32 * 18);
	ASSERT_U64_EQ(mf.layers[0].expert_flops, 2 * 3 * 64 * 32);
	/* router 64 x 8 F32 = 2048 bytes is in the layer's bytes. */
	ASSERT_U64_EQ(mf.layers[0].flops, 2 * (64 * 64 + 2 * 64 * 32 + 64 * 64 + 64 * 8));
	shoal_manifest_fini(&mf);
	shoal_model_free(m);

	ASSERT_EQ(gen("--arch llama --type Q4_K --layers 1 --dim 256 --ff 512 --heads 4 "
	              "--vocab 300",
	              p),
	          0);
	ASSERT_EQ(shoal_model_open(p, &m, why, sizeof why), SHOAL_OK);
	ASSERT_EQ(m->layers[0].ffn_down->type, SHOAL_DTYPE_Q4_K);
	shoal_model_free(m);
	/* Deterministic for a seed; another seed gives other weights. */
	const char *d = "--arch llama --type Q8_0 --layers 1 --dim 64 --ff 128 --heads 4 "
	                "--vocab 300";
	char d1[256], d2[256];
	snprintf(d1, sizeof d1, "%s --seed 3", d);
	snprintf(d2, sizeof d2, "%s --seed 4", d);
	ASSERT_EQ(gen(d1, tmp_path("s3a.gguf")), 0);
	ASSERT_EQ(gen(d1, tmp_path("s3b.gguf")), 0);
	ASSERT_EQ(gen(d2, tmp_path("s4.gguf")), 0);
	shoal_gguf *ga, *gb, *gc;
	ASSERT_EQ(shoal_gguf_open(tmp_path("s3a.gguf"), &ga, why, sizeof why), SHOAL_OK);
	ASSERT_EQ(shoal_gguf_open(tmp_path("s3b.gguf"), &gb, why, sizeof why), SHOAL_OK);
	ASSERT_EQ(shoal_gguf_open(tmp_path("s4.gguf"), &gc, why, sizeof why), SHOAL_OK);
	ASSERT_U64_EQ(shoal_gguf_shard_size(ga, 0), shoal_gguf_shard_size(gb, 0));
	ASSERT_MEM_EQ(shoal_gguf_shard_base(ga, 0), shoal_gguf_shard_base(gb, 0),
	              shoal_gguf_shard_size(ga, 0));
	const shoal_gguf_tensor *wa = shoal_gguf_tensor_find(ga, "blk.0.attn_q.weight");
	const shoal_gguf_tensor *wc = shoal_gguf_tensor_find(gc, "blk.0.attn_q.weight");
	ASSERT_TRUE(wa && wc && wa->nbytes == wc->nbytes);
	ASSERT_TRUE(memcmp(wa->data, wc->data, wa->nbytes) != 0);
	shoal_gguf_free(ga);
	shoal_gguf_free(gb);
	shoal_gguf_free(gc);

	/* Bad arguments: usage errors, no file. */
	ASSERT_NE(gen("--arch gpt2 --type F32 --layers 1 --dim 64 --ff 128 --heads 4 --vocab 300 "
	              "2>/dev/null",
	              tmp_path("x.gguf")),
	          0);
	ASSERT_NE(gen("--arch llama --type Q4_1 --layers 1 --dim 256 --ff 256 --heads 4 "
	              "--vocab 300 2>/dev/null",
	              tmp_path("x.gguf")),
	          0);
	ASSERT_NE(access(tmp_path("x.gguf"), F_OK), 0);

	/* dim 64 is not a whole number of 256-element K blocks. */
	ASSERT_NE(gen("--arch llama --type Q6_K --layers 1 --dim 64 --ff 256 --heads 4 "
	              "--vocab 300 2>/dev/null",
	              p),
	          0);
}

/* ---- the manifest --------------------------------------------------------- */

static void test_manifest_austen(void)
{
	shoal_model *m;
	char why[SHOAL_WHY_LEN];
	ASSERT_EQ(shoal_model_open(data_file("models/austen-dense-f32.gguf"), &m, why, sizeof why),
	          SHOAL_OK);
	shoal_manifest mf;
	ASSERT_EQ(shoal_model_manifest(m, &mf), SHOAL_OK);
	ASSERT_STR_EQ(mf.name, "austen-dense");
	ASSERT_EQ(mf.n_layer, 6);
	ASSERT_EQ(mf.n_embd, 256);
	ASSERT_EQ(mf.n_vocab, 32000);
	/* Per layer, F32: two norms 2 * 256 * 4 = 2,048; wq, wo 256 * 256 * 4
	 * = 262,144 each; wk, wv 256 * 128 * 4 = 131,072 each; gate, up, down
	 * 256 * 768 * 4 = 786,432 each: 2,048 + 524,288 + 262,144 + 2,359,296
	 * = 3,147,776 bytes. */
	for (int l = 0; l < 6; l++) {
		ASSERT_U64_EQ(mf.layers[l].bytes, 3147776);
		/* 2 * (65,536 + 2 * 32,768 + 65,536 + 3 * 196,608) = 1,572,864 */
		ASSERT_U64_EQ(mf.layers[l].flops, 1572864);
		/* K and V: 2 * 4 heads * 32 F16 elements, 2 bytes each */
		ASSERT_U64_EQ(mf.layers[l].kv_bytes_per_token, 512);
		/* QK^T and AV per cached token: 4 * 8 heads * 32 */
		ASSERT_U64_EQ(mf.layers[l].attn_flops_per_ctx, 1024);
		ASSERT_EQ(mf.layers[l].n_expert, 0);
		ASSERT_U64_EQ(mf.layers[l].expert_bytes, 0);
	}
	ASSERT_U64_EQ(mf.embd_bytes, 256ull * 32000 * 4);        /* 32,768,000 */
	ASSERT_U64_EQ(mf.head_bytes, 1024 + 256ull * 32000 * 4); /* norm + tied matrix */
	ASSERT_U64_EQ(mf.head_flops, 2ull * 256 * 32000);
	ASSERT_TRUE(mf.tied_head);
	ASSERT_U64_EQ(mf.act_bytes_per_token, 1024);
	uint8_t zero[32] = {0};
	ASSERT_MEM_EQ(mf.model_id, zero, 32);
	shoal_manifest_fini(&mf);
	ASSERT_TRUE(mf.layers == NULL);
	shoal_manifest_fini(&mf); /* twice is fine */
	shoal_model_free(m);

	/* Q8_0: matrices at 34 bytes per 32 weights, norms still F32:
	 * 2,048 + 786,432 / 32 * 34 = 2,048 + 835,584 = 837,632 bytes. */
	ASSERT_EQ(shoal_model_open(data_file("models/austen-dense-q8_0.gguf"), &m, why, sizeof why),
	          SHOAL_OK);
	ASSERT_EQ(shoal_model_manifest(m, &mf), SHOAL_OK);
	ASSERT_U64_EQ(mf.layers[3].bytes, 837632);
	ASSERT_U64_EQ(mf.layers[3].flops, 1572864);
	ASSERT_U64_EQ(mf.embd_bytes, 8192000ull / 32 * 34);
	shoal_manifest_fini(&mf);
	shoal_model_free(m);
}

/* ---- model ids -------------------------------------------------------------- */

static void copy_file(const char *from, const char *to)
{
	FILE *a = fopen(from, "rb"), *b = fopen(to, "wb");
	char buf[65536];
	size_t n;
	while (a && b && (n = fread(buf, 1, sizeof buf, a)) > 0)
		fwrite(buf, 1, n, b);
	if (a)
		fclose(a);
	if (b)
		fclose(b);
}

static void find_cache_file(const char *state, char *out, size_t cap)
{
	char dir[600];
	snprintf(dir, sizeof dir, "%s/model-ids", state);
	out[0] = '\0';
	DIR *dp = opendir(dir);
	struct dirent *de;
	while (dp && (de = readdir(dp)))
		if (de->d_name[0] != '.')
			snprintf(out, cap, "%s/%s", dir, de->d_name);
	if (dp)
		closedir(dp);
}

static void test_model_id_cache(void)
{
	const char *p = tmp_path("id.gguf");
	const char *state = tmp_path("state");
	char st[512];
	snprintf(st, sizeof st, "%s", state);
	copy_file(data_file("models/tiny-kq-q6_k.gguf"), p);
	shoal_gguf *g;
	char why[SHOAL_WHY_LEN];
	ASSERT_EQ(shoal_gguf_open(p, &g, why, sizeof why), SHOAL_OK);

	shoal_model_id *a, *b, *c;
	ASSERT_EQ(shoal_model_id_compute(g, &a, why, sizeof why), SHOAL_OK);
	ASSERT_FALSE(shoal_model_id_cached(a));
	/* Every tensor byte and the header were read. */
	uint64_t all = shoal_gguf_shard_header_bytes(g, 0);
	for (size_t i = 0; i < shoal_gguf_n_tensors(g); i++)
		all += shoal_gguf_tensor_at(g, i)->nbytes;
	ASSERT_U64_EQ(shoal_model_id_bytes_hashed(a), all);
	ASSERT_EQ(shoal_model_id_n_tensors(a), 39);

	/* Miss, then hit without reading. */
	ASSERT_EQ(shoal_model_id_load(g, st, &b, why, sizeof why), SHOAL_OK);
	ASSERT_FALSE(shoal_model_id_cached(b));
	ASSERT_MEM_EQ(shoal_model_id_digest(a), shoal_model_id_digest(b), 32);
	shoal_model_id_free(b);
	ASSERT_EQ(shoal_model_id_load(g, st, &b, why, sizeof why), SHOAL_OK);
	ASSERT_TRUE(shoal_model_id_cached(b));
	ASSERT_U64_EQ(shoal_model_id_bytes_hashed(b), 0);
	ASSERT_MEM_EQ(shoal_model_id_digest(a), shoal_model_id_digest(b), 32);
	ASSERT_MEM_EQ(shoal_model_id_tensor_digest(a, 7), shoal_model_id_tensor_digest(b, 7), 32);
	shoal_model_id_free(b);

	/* A corrupt cache file is noticed, recomputed and rewritten. */
	char cf[1024];
	find_cache_file(st, cf, sizeof cf);
	ASSERT_TRUE(cf[0] != '\0');
	int fd = open(cf, O_RDWR);
	ASSERT_GE(fd, 0);
	uint8_t byte;
	ASSERT_EQ(pread(fd, &byte, 1, 100), 1);
	byte ^= 0x40;
	ASSERT_EQ(pwrite(fd, &byte, 1, 100), 1);
	close(fd);
	ASSERT_EQ(shoal_model_id_load(g, st, &b, why, sizeof why), SHOAL_OK);
	ASSERT_FALSE(shoal_model_id_cached(b));
	ASSERT_MEM_EQ(shoal_model_id_digest(a), shoal_model_id_digest(b), 32);
	shoal_model_id_free(b);
	ASSERT_EQ(truncate(cf, 50), 0);
	ASSERT_EQ(shoal_model_id_load(g, st, &b, why, sizeof why), SHOAL_OK);
	ASSERT_FALSE(shoal_model_id_cached(b));
	shoal_model_id_free(b);
	ASSERT_EQ(shoal_model_id_load(g, st, &b, why, sizeof why), SHOAL_OK);
	ASSERT_TRUE(shoal_model_id_cached(b)); /* rewritten whole */
	shoal_model_id_free(b);

	/* Touching the file's mtime invalidates the entry. */
	struct timespec ts[2] = {{.tv_sec = 1000000000, .tv_nsec = 0},
	                         {.tv_sec = 1000000000, .tv_nsec = 0}};
	ASSERT_EQ(utimensat(AT_FDCWD, p, ts, 0), 0);
	ASSERT_EQ(shoal_model_id_load(g, st, &b, why, sizeof why), SHOAL_OK);
	ASSERT_FALSE(shoal_model_id_cached(b));
	ASSERT_GT(shoal_model_id_bytes_hashed(b), 0);
	ASSERT_MEM_EQ(shoal_model_id_digest(a), shoal_model_id_digest(b), 32);
	shoal_model_id_free(b);

	/* Verifying tensors as a peer would. */
	const shoal_gguf_tensor *t = shoal_gguf_tensor_at(g, 5);
	ASSERT_EQ(shoal_model_id_find(a, t->name), 5);
	ASSERT_EQ(shoal_model_id_find(a, "nope"), -1);
	ASSERT_EQ(shoal_model_id_verify_tensor(a, 5, t->data, t->nbytes), SHOAL_OK);
	ASSERT_EQ(shoal_model_id_verify_tensor(a, 5, t->data, t->nbytes - 1), SHOAL_ERR_MISMATCH);
	ASSERT_EQ(shoal_model_id_verify_tensor(a, 6, t->data, t->nbytes), SHOAL_ERR_MISMATCH);
	ASSERT_EQ(shoal_model_id_verify_tensor(a, 39, t->data, t->nbytes), SHOAL_ERR_RANGE);
	uint8_t *copy = malloc(t->nbytes);
	memcpy(copy, t->data, t->nbytes);
	copy[t->nbytes / 2] ^= 1;
	ASSERT_EQ(shoal_model_id_verify_tensor(a, 5, copy, t->nbytes), SHOAL_ERR_MISMATCH);
	free(copy);
	uint64_t off = t->file_offset + t->nbytes / 2;
	shoal_gguf_free(g);

	/* One byte changed in tensor 5: its digest and the id change, no
	 * other tensor's does. */
	fd = open(p, O_RDWR);
	ASSERT_GE(fd, 0);
	ASSERT_EQ(pread(fd, &byte, 1, (off_t)off), 1);
	byte ^= 1;
	ASSERT_EQ(pwrite(fd, &byte, 1, (off_t)off), 1);
	close(fd);
	ASSERT_EQ(shoal_gguf_open(p, &g, why, sizeof why), SHOAL_OK);
	ASSERT_EQ(shoal_model_id_load(g, st, &c, why, sizeof why), SHOAL_OK);
	ASSERT_FALSE(shoal_model_id_cached(c)); /* the write moved mtime */
	ASSERT_TRUE(
	    memcmp(shoal_model_id_digest(a), shoal_model_id_digest(c), SHOAL_MODEL_ID_BYTES) != 0);
	for (size_t i = 0; i < 39; i++) {
		bool same = !memcmp(shoal_model_id_tensor_digest(a, i),
		                    shoal_model_id_tensor_digest(c, i), 32);
		ASSERT_EQ(same, i != 5);
	}
	ASSERT_MEM_EQ(shoal_model_id_header_digest(a, 0), shoal_model_id_header_digest(c, 0), 32);
	char hex[65];
	shoal_model_id_hex(shoal_model_id_digest(c), hex);
	ASSERT_EQ(strlen(hex), 64);
	ASSERT_EQ(strspn(hex, "0123456789abcdef"), 64);
	shoal_model_id_free(c);
	shoal_model_id_free(a);
	shoal_gguf_free(g);
}

/* ---- split files -------------------------------------------------------------- */

static void test_split(void)
{
	if (!gen_bin())
		TEST_SKIP("tests/helpers/gen_fixture not built (set SHOAL_BUILDDIR)");
	const char *args = "--arch llama --type Q8_0 --layers 3 --dim 64 --ff 128 --heads 4 "
	                   "--kv-heads 2 --vocab 300 --seed 7";
	char a2[256];
	snprintf(a2, sizeof a2, "%s --split 3", args);
	ASSERT_EQ(gen(args, tmp_path("one.gguf")), 0);
	ASSERT_EQ(gen(a2, tmp_path("sp.gguf")), 0);
	shoal_gguf *one, *sp;
	char why[SHOAL_WHY_LEN];
	ASSERT_EQ(shoal_gguf_open(tmp_path("one.gguf"), &one, why, sizeof why), SHOAL_OK);
	shoal_err e = shoal_gguf_open(tmp_path("sp-00002-of-00003.gguf"), &sp, why, sizeof why);
	if (e)
		TEST_FAIL_("split open: %s", why);
	ASSERT_EQ(shoal_gguf_n_shards(sp), 3);
	ASSERT_EQ(shoal_gguf_n_tensors(sp), shoal_gguf_n_tensors(one));
	ASSERT_EQ(shoal_gguf_n_kv(sp), shoal_gguf_n_kv(one) + 3); /* + split.* */
	uint32_t seen[3] = {0};
	for (size_t i = 0; i < shoal_gguf_n_tensors(one); i++) {
		const shoal_gguf_tensor *a = shoal_gguf_tensor_at(one, i);
		const shoal_gguf_tensor *b = shoal_gguf_tensor_at(sp, i);
		ASSERT_STR_EQ(a->name, b->name);
		ASSERT_TRUE(shoal_gguf_tensor_find(sp, a->name) == b);
		ASSERT_EQ(a->type, b->type);
		ASSERT_U64_EQ(a->nbytes, b->nbytes);
		ASSERT_MEM_EQ(a->data, b->data, a->nbytes);
		ASSERT_LT(b->shard, 3);
		seen[b->shard]++;
		ASSERT_TRUE((const uint8_t *)b->data ==
		            (const uint8_t *)shoal_gguf_shard_base(sp, b->shard) + b->file_offset);
	}
	ASSERT_TRUE(seen[0] && seen[1] && seen[2]);
	uint32_t u;
	ASSERT_TRUE(shoal_gguf_get_u32(sp, "llama.block_count", &u) && u == 3);

	/* The model opens from a shard; its tensor digests equal the unsplit
	 * file's (the headers, and so the ids, differ). */
	shoal_model *m;
	ASSERT_EQ(shoal_model_from_gguf(sp, &m, why, sizeof why), SHOAL_OK);
	shoal_model_id *ia, *ib;
	ASSERT_EQ(shoal_model_id_compute(one, &ia, why, sizeof why), SHOAL_OK);
	ASSERT_EQ(shoal_model_id_compute(m->gguf, &ib, why, sizeof why), SHOAL_OK);
	ASSERT_EQ(shoal_model_id_n_shards(ib), 3);
	for (size_t i = 0; i < shoal_model_id_n_tensors(ia); i++)
		ASSERT_MEM_EQ(shoal_model_id_tensor_digest(ia, i),
		              shoal_model_id_tensor_digest(ib, i), 32);
	shoal_model_id_free(ia);
	shoal_model_id_free(ib);
	shoal_model_free(m);
	shoal_gguf_free(one);

	/* A shard in the wrong place, then a missing shard. */
	ASSERT_EQ(rename(tmp_path("sp-00003-of-00003.gguf"), tmp_path("sp-00002-of-00003.gguf")),
	          0);
	ASSERT_NE(shoal_gguf_open(tmp_path("sp-00001-of-00003.gguf"), &sp, why, sizeof why),
	          SHOAL_OK);
	ASSERT_REASON(why, "shard 2 of 3 (sp-00002-of-00003.gguf): says split.no 2");
	ASSERT_EQ(shoal_gguf_open(tmp_path("sp-00001-of-00003.gguf"), &sp, why, sizeof why),
	          SHOAL_ERR_FORMAT);
	ASSERT_EQ(shoal_gguf_open(tmp_path("sp-00002-of-00003.gguf"), &sp, why, sizeof why),
	          SHOAL_ERR_FORMAT);
	ASSERT_REASON(why, "file name does not follow");
	ASSERT_EQ(shoal_gguf_open(tmp_path("sp-00001-of-00003.gguf"), &sp, why, sizeof why),
	          SHOAL_ERR_FORMAT);
	unlink(tmp_path("sp-00002-of-00003.gguf"));
	ASSERT_EQ(shoal_gguf_open(tmp_path("sp-00001-of-00003.gguf"), &sp, why, sizeof why),
	          SHOAL_ERR_NOTFOUND);
	ASSERT_REASON(why, "shard 2 of 3 (sp-00002-of-00003.gguf): missing:");
}

/* ---- setup ------------------------------------------------------------------ */

static void rm_tree(const char *dir)
{
	DIR *dp = opendir(dir);
	struct dirent *de;
	while (dp && (de = readdir(dp))) {
		if (!strcmp(de->d_name, ".") || !strcmp(de->d_name, ".."))
			continue;
		char p[1024];
		snprintf(p, sizeof p, "%s/%s", dir, de->d_name);
		struct stat sb;
		if (lstat(p, &sb) == 0 && S_ISDIR(sb.st_mode))
			rm_tree(p);
		else
			unlink(p);
	}
	if (dp)
		closedir(dp);
	rmdir(dir);
}

static void test_setup(void)
{
	snprintf(tmpdir, sizeof tmpdir, "/tmp/shoal-test-model-XXXXXX");
	ASSERT_TRUE(mkdtemp(tmpdir) != NULL);
}

static void test_teardown(void)
{
	rm_tree(tmpdir);
}

TEST_MAIN(TEST_CASE(test_setup), TEST_CASE(test_austen_hparams),
          TEST_CASE(test_vocab_files_are_not_models), TEST_CASE(test_shape_errors),
          TEST_CASE(test_gen_fixture_archs), TEST_CASE(test_manifest_austen),
          TEST_CASE(test_model_id_cache), TEST_CASE(test_split), TEST_CASE(test_teardown))

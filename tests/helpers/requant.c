/*
 * tests/helpers/requant.c: re-encode the weights of a GGUF model into other
 * stored types, with the quantizers of runtime/cpu/quant.c, to make test
 * models of types no bundled fixture has. Every key/value and every tensor's
 * name, shape and order is kept; only the matrices' types change.
 *
 *   requant IN.gguf OUT.gguf --type T     every matrix (2-D or more) whose
 *                                        rows are whole blocks of T becomes T
 *   requant IN.gguf OUT.gguf --mix q4_k_m a Q4_K_M-like mix (see mix_type)
 *   requant IN.gguf OUT.gguf --mix iq     a "dynamic" low-bit mix of every
 *                                        K-quant and IQ type below Q4_K
 *                                        (see mix_iq_type)
 *   ... --layers N                       also keep only layers [0, N) (and
 *                                        the embedding, output norm and
 *                                        head): a cheap draft model with
 *                                        the target's vocabulary
 *
 * Part: tests (models/). Prints the tensor count per stored type on stdout.
 * The quantizers are round-to-nearest (not the reference's searches), so a
 * model made here is somewhat less accurate than the reference's of the
 * same type.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "models/dtype.h"
#include "models/gguf.h"
#include "runtime/cpu/quant.h"
#include "tests/helpers/gguf_writer.h"

/* ---- the types --------------------------------------------------------- */

/* The layers that a Q4_K_M mix gives more bits (the reference's rule): the
 * first and last eighth, and every third layer in between. */
static int mix_more_bits(int layer, int n_layer)
{
	return layer < n_layer / 8 || layer >= 7 * n_layer / 8 || (layer - n_layer / 8) % 3 == 2;
}

/* A Q4_K_M-like mix: the output head and the embedding (tied or not) Q6_K;
 * attn_output Q5_K (what the reference's mix writes for MoE models); attn_v
 * and ffn_down Q6_K on the more-bits layers; every other matrix Q4_K. */
static shoal_dtype mix_type(const char *name, int n_layer)
{
	if (!strcmp(name, "token_embd.weight") || !strcmp(name, "output.weight"))
		return SHOAL_DTYPE_Q6_K;
	int layer = -1;
	if (sscanf(name, "blk.%d.", &layer) != 1)
		return SHOAL_DTYPE_Q4_K;
	if (strstr(name, ".attn_output."))
		return SHOAL_DTYPE_Q5_K;
	if ((strstr(name, ".attn_v.") || strstr(name, ".ffn_down.")) &&
	    mix_more_bits(layer, n_layer))
		return SHOAL_DTYPE_Q6_K;
	return SHOAL_DTYPE_Q4_K;
}

/* A mix in the manner of the DeepSeek / Kimi "dynamic" files, to put every
 * type from Q2_K to IQ4_XS and every IQ grid type in one model: the FFN's
 * gate and up of layer L the IQ grid types in turn (IQ2_XXS, IQ2_XS, IQ2_S,
 * IQ3_XXS, IQ3_S, IQ1_S, IQ1_M from index 2 L), the other matrices of a
 * layer Q2_K, Q3_K, IQ4_NL, IQ4_XS in turn (from index 5 L), the
 * embedding and output head IQ4_XS. */
static shoal_dtype mix_iq_type(const char *name)
{
	static const shoal_dtype grid[7] = {
	    SHOAL_DTYPE_IQ2_XXS, SHOAL_DTYPE_IQ2_XS, SHOAL_DTYPE_IQ2_S, SHOAL_DTYPE_IQ3_XXS,
	    SHOAL_DTYPE_IQ3_S,   SHOAL_DTYPE_IQ1_S,  SHOAL_DTYPE_IQ1_M};
	static const shoal_dtype rest[4] = {SHOAL_DTYPE_Q2_K, SHOAL_DTYPE_Q3_K, SHOAL_DTYPE_IQ4_NL,
	                                    SHOAL_DTYPE_IQ4_XS};
	static const char *const other[5] = {".attn_q.", ".attn_k.", ".attn_v.", ".attn_output.",
	                                     ".ffn_down."};
	int layer = -1;
	if (sscanf(name, "blk.%d.", &layer) != 1)
		return SHOAL_DTYPE_IQ4_XS;
	if (strstr(name, ".ffn_gate."))
		return grid[(2 * layer) % 7];
	if (strstr(name, ".ffn_up."))
		return grid[(2 * layer + 1) % 7];
	int m = 0;
	while (m < 5 && !strstr(name, other[m]))
		m++;
	return rest[(5 * layer + m) % 4];
}

enum { MIX_NONE, MIX_Q4_K_M, MIX_IQ };

/* The type tensor t becomes: `type`, or the mix's when mix is set; vectors
 * and matrices whose rows are not whole blocks keep their type. */
static shoal_dtype target_type(const shoal_gguf_tensor *t, int mix, shoal_dtype type, int n_layer)
{
	if (t->n_dims < 2)
		return t->type;
	shoal_dtype want = mix == MIX_Q4_K_M ? mix_type(t->name, n_layer)
	                   : mix == MIX_IQ   ? mix_iq_type(t->name)
	                                     : type;
	if (t->ne[0] % shoal_dtype_block_elems(want))
		return t->type;
	return want;
}

/* ---- key/values ----------------------------------------------------------- */

/* Copy key/value i of g into w, keeping its type. Returns 0, or -1 for a
 * type this copier does not handle. */
static int copy_kv(const shoal_gguf *g, size_t i, shoal_gguf_writer *w, uint32_t keep_layers)
{
	size_t klen;
	const char *kp = shoal_gguf_key(g, i, &klen);
	char key[256];
	if (klen >= sizeof key)
		return -1;
	memcpy(key, kp, klen);
	key[klen] = 0;
	shoal_gguf_type t = shoal_gguf_kv_type(g, i);
	uint32_t u32;
	uint64_t u64;
	int64_t i64;
	float f;
	bool b;
	const char *s;
	size_t n;
	switch (t) {
	case SHOAL_GGUF_UINT8:
	case SHOAL_GGUF_INT8:
	case SHOAL_GGUF_UINT16:
	case SHOAL_GGUF_INT16:
	case SHOAL_GGUF_INT32:
	case SHOAL_GGUF_INT64:
		if (!shoal_gguf_get_i64(g, key, &i64))
			return -1;
		if (t == SHOAL_GGUF_UINT8)
			shoal_gguf_writer_kv_u8(w, key, (uint8_t)i64);
		else if (t == SHOAL_GGUF_INT8)
			shoal_gguf_writer_kv_i8(w, key, (int8_t)i64);
		else if (t == SHOAL_GGUF_UINT16)
			shoal_gguf_writer_kv_u16(w, key, (uint16_t)i64);
		else if (t == SHOAL_GGUF_INT16)
			shoal_gguf_writer_kv_i16(w, key, (int16_t)i64);
		else if (t == SHOAL_GGUF_INT32)
			shoal_gguf_writer_kv_i32(w, key, (int32_t)i64);
		else
			shoal_gguf_writer_kv_i64(w, key, i64);
		return 0;
	case SHOAL_GGUF_UINT32:
		if (!shoal_gguf_get_u32(g, key, &u32))
			return -1;
		if (keep_layers && klen > 12 && !strcmp(key + klen - 12, ".block_count"))
			u32 = keep_layers;
		shoal_gguf_writer_kv_u32(w, key, u32);
		return 0;
	case SHOAL_GGUF_UINT64:
		if (!shoal_gguf_get_u64(g, key, &u64))
			return -1;
		shoal_gguf_writer_kv_u64(w, key, u64);
		return 0;
	case SHOAL_GGUF_FLOAT32:
		if (!shoal_gguf_get_f32(g, key, &f))
			return -1;
		shoal_gguf_writer_kv_f32(w, key, f);
		return 0;
	case SHOAL_GGUF_BOOL:
		if (!shoal_gguf_get_bool(g, key, &b))
			return -1;
		shoal_gguf_writer_kv_bool(w, key, b);
		return 0;
	case SHOAL_GGUF_STRING:
		if (!shoal_gguf_get_str(g, key, &s, &n))
			return -1;
		shoal_gguf_writer_kv_strn(w, key, s, n);
		return 0;
	case SHOAL_GGUF_ARRAY: {
		shoal_gguf_type et;
		uint64_t count;
		const void *data;
		if (!shoal_gguf_get_arr(g, key, &et, &count, &data))
			return -1;
		if (et != SHOAL_GGUF_STRING) {
			shoal_gguf_writer_kv_arr(w, key, et, data, count);
			return 0;
		}
		char **strs = calloc(count ? count : 1, sizeof *strs);
		int rc = strs ? 0 : -1;
		for (uint64_t k = 0; k < count && !rc; k++) {
			if (!shoal_gguf_arr_str(g, key, k, &s, &n) || !(strs[k] = malloc(n + 1))) {
				rc = -1;
				break;
			}
			memcpy(strs[k], s, n);
			strs[k][n] = 0;
		}
		if (!rc)
			shoal_gguf_writer_kv_arr_str(w, key, (const char *const *)strs, count);
		for (uint64_t k = 0; strs && k < count; k++)
			free(strs[k]);
		free(strs);
		return rc;
	}
	default:
		return -1; /* FLOAT64: no getter keeps it exact */
	}
}

/* ---- main ------------------------------------------------------------------ */

static int usage(void)
{
	fprintf(stderr,
	        "usage: requant IN.gguf OUT.gguf --type T | --mix q4_k_m|iq [--layers N]\n");
	return 2;
}

static shoal_dtype parse_type(const char *v)
{
	for (uint32_t t = 0; t < SHOAL_DTYPE__MAX; t++)
		if (shoal_dtype_known(t) && !strcmp(v, shoal_dtype_name((shoal_dtype)t)) &&
		    shoal_quant_supported((shoal_dtype)t) && t != SHOAL_DTYPE_Q8_K)
			return (shoal_dtype)t;
	return SHOAL_DTYPE__MAX;
}

/* Write tensor t converted to type `to`, row by row (row[ne0] is scratch,
 * q room for a converted row). */
static shoal_err write_tensor(shoal_gguf_writer *w, const shoal_gguf_tensor *t, shoal_dtype to,
                              float *row, void *q)
{
	uint64_t n0 = t->ne[0], rows = t->ne[1] * t->ne[2] * t->ne[3];
	size_t in_rb = shoal_dtype_row_bytes(t->type, n0), out_rb = shoal_dtype_row_bytes(to, n0);
	for (uint64_t r = 0; r < rows; r++) {
		shoal_dequantize_row(t->type, (const char *)t->data + r * in_rb, row, (int64_t)n0);
		shoal_quantize_row(to, row, q, (int64_t)n0);
		shoal_err e = shoal_gguf_writer_write(w, q, out_rb);
		if (e)
			return e;
	}
	return SHOAL_OK;
}

/* Whether --layers keep drops tensor t (a layer's, of layer keep or later). */
static bool dropped(const shoal_gguf_tensor *t, uint32_t keep)
{
	int l;
	return keep && sscanf(t->name, "blk.%d.", &l) == 1 && (uint32_t)l >= keep;
}

int main(int argc, char **argv)
{
	uint32_t keep = 0; /* --layers N: 0 keeps them all */
	if (argc == 7 && !strcmp(argv[5], "--layers")) {
		char *end;
		unsigned long v = strtoul(argv[6], &end, 10);
		if (*end || v < 1 || v > 4096) {
			fprintf(stderr, "requant: --layers wants a count of 1 or more\n");
			return 2;
		}
		keep = (uint32_t)v;
		argc = 5;
	}
	if (argc != 5)
		return usage();
	int mix = MIX_NONE;
	shoal_dtype type = SHOAL_DTYPE__MAX;
	if (!strcmp(argv[3], "--mix")) {
		if (!strcmp(argv[4], "q4_k_m"))
			mix = MIX_Q4_K_M;
		else if (!strcmp(argv[4], "iq"))
			mix = MIX_IQ;
		else
			return usage();
	}
	if (!mix) {
		if (strcmp(argv[3], "--type"))
			return usage();
		type = parse_type(argv[4]);
		if (type == SHOAL_DTYPE__MAX) {
			fprintf(stderr, "requant: cannot write type '%s'\n", argv[4]);
			return 2;
		}
	}
	shoal_gguf *g = NULL;
	char why[SHOAL_WHY_LEN] = "";
	if (shoal_gguf_open(argv[1], &g, why, sizeof why)) {
		fprintf(stderr, "requant: %s: %s\n", argv[1], why);
		return 1;
	}
	size_t nt = shoal_gguf_n_tensors(g);
	int n_layer = 0;
	uint64_t max_ne0 = 1;
	for (size_t i = 0; i < nt; i++) {
		const shoal_gguf_tensor *t = shoal_gguf_tensor_at(g, i);
		int l;
		if (sscanf(t->name, "blk.%d.", &l) == 1 && l + 1 > n_layer)
			n_layer = l + 1;
		if (t->ne[0] > max_ne0)
			max_ne0 = t->ne[0];
		if (!shoal_quant_supported(t->type)) {
			fprintf(stderr, "requant: %s is %s, which cannot be read\n", t->name,
			        shoal_dtype_name(t->type));
			shoal_gguf_free(g);
			return 1;
		}
	}
	if (keep && (keep > (uint32_t)n_layer ||
	             shoal_gguf_find(g, "deepseek2.nextn_predict_layers") >= 0)) {
		fprintf(stderr, "requant: --layers %u: the model has %d layers%s\n", keep, n_layer,
		        keep > (uint32_t)n_layer ? "" : " and MTP layers after them (not handled)");
		shoal_gguf_free(g);
		return 2;
	}
	if (keep)
		n_layer = (int)keep;
	shoal_gguf_writer *w = NULL;
	int rc = 1;
	float *row = malloc(max_ne0 * sizeof *row);
	void *q = malloc(max_ne0 * sizeof *row); /* any stored row is at most F32 size */
	shoal_dtype *to = calloc(nt ? nt : 1, sizeof *to);
	unsigned count[SHOAL_DTYPE__MAX] = {0};
	if (!row || !q || !to || shoal_gguf_writer_new(argv[2], &w))
		goto out;
	for (size_t i = 0; i < shoal_gguf_n_kv(g); i++)
		if (copy_kv(g, i, w, keep)) {
			fprintf(stderr, "requant: key/value %zu: type not copied\n", i);
			goto out;
		}
	for (size_t i = 0; i < nt; i++) {
		const shoal_gguf_tensor *t = shoal_gguf_tensor_at(g, i);
		if (dropped(t, keep))
			continue;
		to[i] = target_type(t, mix, type, n_layer);
		count[to[i]]++;
		shoal_gguf_writer_add_tensor(w, t->name, to[i], t->n_dims, t->ne);
	}
	if (shoal_gguf_writer_begin_data(w))
		goto out;
	for (size_t i = 0; i < nt; i++)
		if (!dropped(shoal_gguf_tensor_at(g, i), keep) &&
		    write_tensor(w, shoal_gguf_tensor_at(g, i), to[i], row, q))
			goto out;
	if (shoal_gguf_writer_finish(w))
		goto out;
	for (uint32_t t = 0; t < SHOAL_DTYPE__MAX; t++)
		if (count[t])
			printf("%s %u\n", shoal_dtype_name((shoal_dtype)t), count[t]);
	rc = 0;
out:
	if (rc)
		fprintf(stderr, "requant: writing %s failed\n", argv[2]);
	shoal_gguf_writer_free(w);
	shoal_gguf_free(g);
	free(row);
	free(q);
	free(to);
	return rc;
}

/*
 * models/tokenizer.c: building a tokenizer from GGUF metadata, the special
 * tokens, and the encode entry point that splits text around them.
 *
 * Part: models/. The merge algorithms live in tokenizer_spm.c and
 * tokenizer_bpe.c, decoding in tokenizer_decode.c, the text -> id map and
 * the id vector in tokenizer_vocab.c. Divisions:
 *   - small helpers (printable names)
 *   - loading: vocabulary arrays, pieces, special ids
 *   - accessors
 *   - encoding: special-token partition, then per-kind merges
 */
#include "models/tokenizer.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/hex.h"
#include "base/log.h"
#include "models/tokenizer_impl.h"

/* ------------------------------------------------------------------------
 * small helpers
 * ------------------------------------------------------------------------ */

/* A printable, bounded copy of a name from the file, for error messages. */
static const char *tok_printable(char *dst, size_t cap, const char *s, size_t len)
{
	size_t n = 0;
	for (size_t i = 0; i < len && n + 4 < cap; i++) {
		unsigned char c = (unsigned char)s[i];
		dst[n++] = (c >= 0x20 && c < 0x7f) ? (char)c : '?';
	}
	if (len > 0 && n < len && n + 4 >= cap) {
		memcpy(dst + n, "...", 3);
		n += 3;
	}
	dst[n] = '\0';
	return dst;
}

/* ------------------------------------------------------------------------
 * loading
 * ------------------------------------------------------------------------ */

/* "<0xAB>" -> 0xAB, or -1. */
static int tok_byte_value(const char *s, size_t len)
{
	if (len != 6 || memcmp(s, "<0x", 3) || s[5] != '>')
		return -1;
	uint8_t b;
	return shoal_hex_decode(s + 3, 2, &b, 1) ? -1 : b;
}

/* The decoded bytes of every token, into t->piece (never longer than the
 * text: U+2581 is 3 bytes -> 1, a GPT-2 character 1-2 bytes -> 1). */
static void tok_pieces_build(shoal_tokenizer *t)
{
	uint32_t n = 0;
	for (uint32_t id = 0; id < t->n_vocab; id++) {
		const char *s = t->text + t->text_off[id];
		size_t len = t->text_off[id + 1] - t->text_off[id];
		char *dst = t->piece + n;
		uint8_t a = t->attr[id];
		int byte = tok_byte_value(s, len);
		t->piece_off[id] = n;
		if ((a & TOKENIZER__BYTE) && byte >= 0) {
			dst[0] = (char)byte;
			n += 1;
		} else if (a & (TOKENIZER__CONTROL | TOKENIZER__USER | TOKENIZER__UNKNOWN |
		                TOKENIZER__BYTE)) {
			memcpy(dst, s, len);
			n += (uint32_t)len;
		} else if (a & TOKENIZER__UNUSED) {
			/* nothing */
		} else if (t->kind == TOKENIZER__SPM) {
			size_t k = 0;
			for (size_t i = 0; i < len; i++) {
				if (i + 2 < len && !memcmp(s + i, "\xe2\x96\x81", 3)) {
					dst[k++] = ' ';
					i += 2;
				} else {
					dst[k++] = s[i];
				}
			}
			n += (uint32_t)k;
		} else {
			n += (uint32_t)tokenizer__bpe_unmap(s, len, dst);
		}
	}
	t->piece_off[t->n_vocab] = n;
}

/* A special id from `key`, or `def`; an id outside the vocabulary is
 * ignored with a warning, as the reference engine does. */
static int32_t tok_special_id(const shoal_gguf *g, const shoal_tokenizer *t, const char *key,
                              int32_t def)
{
	uint32_t v;
	if (!shoal_gguf_get_u32(g, key, &v))
		return def < (int64_t)t->n_vocab ? def : -1;
	if (v >= t->n_vocab) {
		SHOAL_LOG_W("models", "%s = %u is outside the vocabulary (%u tokens); ignored", key,
		            v, t->n_vocab);
		return def < (int64_t)t->n_vocab ? def : -1;
	}
	return (int32_t)v;
}

/* Texts that end a turn in the chat formats we know (the reference engine
 * recognises end-of-generation tokens by these names too). */
static const char *const tok_eog_names[] = {
    "<|eot_id|>",         "<|im_end|>", "<|end|>",  "<end_of_turn>",
    "<|endoftext|>",      "<|eom_id|>", "<EOT>",    "_<EOT>",
    "<|end_of_text|>",    "<|return|>", "<|call|>", "<|file_sep|>",
    "<end_of_utterance>", NULL,
};

static int tok_special_cmp(const void *pa, const void *pb, void *arg)
{
	const shoal_tokenizer *t = arg;
	int32_t a = *(const int32_t *)pa, b = *(const int32_t *)pb;
	uint32_t la = t->text_off[a + 1] - t->text_off[a];
	uint32_t lb = t->text_off[b + 1] - t->text_off[b];
	if (la != lb)
		return la > lb ? -1 : 1;
	return a < b ? -1 : a > b;
}

static shoal_err tok_specials_build(shoal_tokenizer *t)
{
	/* End of generation: the names above (forced to control, so that they
	 * are parsed as one token), plus the EOS/EOT/EOM ids. */
	for (size_t k = 0; tok_eog_names[k]; k++) {
		int32_t id = tokenizer__find(t, tok_eog_names[k], strlen(tok_eog_names[k]));
		if (id < 0)
			continue;
		t->attr[id] |= TOKENIZER__EOG;
		if (!(t->attr[id] & (TOKENIZER__CONTROL | TOKENIZER__USER))) {
			t->attr[id] &= (uint8_t)~TOKENIZER__NORMAL;
			t->attr[id] |= TOKENIZER__CONTROL;
		}
	}
	int32_t eog[3] = {t->eos, t->eot, t->eom};
	for (size_t k = 0; k < 3; k++)
		if (eog[k] >= 0)
			t->attr[eog[k]] |= TOKENIZER__EOG;

	uint32_t n = 0;
	for (uint32_t id = 0; id < t->n_vocab; id++)
		if ((t->attr[id] & (TOKENIZER__CONTROL | TOKENIZER__USER | TOKENIZER__UNKNOWN)) &&
		    t->text_off[id + 1] > t->text_off[id])
			n++;
	t->special = malloc((n ? n : 1) * sizeof *t->special);
	if (!t->special)
		return SHOAL_ERR_NOMEM;
	n = 0;
	for (uint32_t id = 0; id < t->n_vocab; id++)
		if ((t->attr[id] & (TOKENIZER__CONTROL | TOKENIZER__USER | TOKENIZER__UNKNOWN)) &&
		    t->text_off[id + 1] > t->text_off[id])
			t->special[n++] = (int32_t)id;
	t->n_special = n;
	qsort_r(t->special, n, sizeof *t->special, tok_special_cmp, t);
	return SHOAL_OK;
}

/* tokens, scores and token types into t. */
static shoal_err tok_vocab_load(shoal_tokenizer *t, const shoal_gguf *g, char *why, size_t why_len)
{
	static const char k_tokens[] = "tokenizer.ggml.tokens";
	static const char k_scores[] = "tokenizer.ggml.scores";
	static const char k_types[] = "tokenizer.ggml.token_type";
	shoal_gguf_type et;
	uint64_t n;
	const void *data;

	if (!shoal_gguf_get_arr(g, k_tokens, &et, &n, &data))
		return shoal_why(why, why_len, SHOAL_ERR_FORMAT, "no %s array", k_tokens);
	if (et != SHOAL_GGUF_STRING)
		return shoal_why(why, why_len, SHOAL_ERR_FORMAT, "%s is not an array of strings",
		                 k_tokens);
	/* Ids are int32 everywhere (the API, the sampler): at most 2^31 - 1. */
	if (n == 0 || n > INT32_MAX - 1)
		return shoal_why(why, why_len, SHOAL_ERR_FORMAT, "%s has %llu tokens", k_tokens,
		                 (unsigned long long)n);
	t->n_vocab = (uint32_t)n;

	uint64_t total = 0;
	for (uint64_t i = 0; i < n; i++) {
		const char *s;
		size_t len;
		if (!shoal_gguf_arr_str(g, k_tokens, i, &s, &len))
			return shoal_why(why, why_len, SHOAL_ERR_FORMAT, "%s[%llu] is unreadable",
			                 k_tokens, (unsigned long long)i);
		total += len;
	}
	/* Offsets are 32-bit: the texts of a vocabulary are a few MB at most. */
	if (total >= UINT32_MAX)
		return shoal_why(why, why_len, SHOAL_ERR_FORMAT, "%s: %llu bytes of token text",
		                 k_tokens, (unsigned long long)total);

	t->text = malloc(total ? total : 1);
	t->piece = malloc(total ? total : 1);
	t->text_off = malloc((n + 1) * sizeof *t->text_off);
	t->piece_off = malloc((n + 1) * sizeof *t->piece_off);
	t->score = calloc(n, sizeof *t->score);
	t->attr = malloc(n);
	if (!t->text || !t->piece || !t->text_off || !t->piece_off || !t->score || !t->attr)
		return SHOAL_ERR_NOMEM;
	uint32_t off = 0;
	for (uint64_t i = 0; i < n; i++) {
		const char *s;
		size_t len;
		shoal_gguf_arr_str(g, k_tokens, i, &s, &len);
		t->text_off[i] = off;
		memcpy(t->text + off, s, len);
		off += (uint32_t)len;
	}
	t->text_off[n] = off;

	if (shoal_gguf_get_arr(g, k_scores, &et, &n, &data)) {
		if (et != SHOAL_GGUF_FLOAT32 || n != t->n_vocab)
			return shoal_why(why, why_len, SHOAL_ERR_FORMAT,
			                 "%s: expected %u float32 values", k_scores, t->n_vocab);
		/* Little-endian in the file, as is every host we build for. */
		memcpy(t->score, data, (size_t)n * sizeof(float));
	}

	memset(t->attr, TOKENIZER__NORMAL, t->n_vocab);
	if (shoal_gguf_get_arr(g, k_types, &et, &n, &data)) {
		if (et != SHOAL_GGUF_INT32 || n != t->n_vocab)
			return shoal_why(why, why_len, SHOAL_ERR_FORMAT,
			                 "%s: expected %u int32 values", k_types, t->n_vocab);
		for (uint32_t i = 0; i < t->n_vocab; i++) {
			int32_t ty;
			memcpy(&ty, (const char *)data + (size_t)i * 4, 4);
			/* 0 (undefined) and unknown numbers are read as normal. */
			static const uint8_t attr_of[7] = {
			    TOKENIZER__NORMAL,  TOKENIZER__NORMAL, TOKENIZER__UNKNOWN,
			    TOKENIZER__CONTROL, TOKENIZER__USER,   TOKENIZER__UNUSED,
			    TOKENIZER__BYTE,
			};
			t->attr[i] = (ty >= 0 && ty < 7) ? attr_of[ty] : TOKENIZER__NORMAL;
		}
	}
	return SHOAL_OK;
}

shoal_err shoal_tokenizer_from_gguf(const shoal_gguf *g, shoal_tokenizer **out, char *why,
                                    size_t why_len)
{
	shoal_err err;
	char name[80];
	const char *model, *pre = NULL;
	size_t model_len, pre_len = 0;
	shoal_tokenizer *t = NULL;

	*out = NULL;
	if (!shoal_gguf_get_str(g, "tokenizer.ggml.model", &model, &model_len))
		return shoal_why(why, why_len, SHOAL_ERR_FORMAT,
		                 "no tokenizer.ggml.model: the file has no tokenizer");
	t = calloc(1, sizeof *t);
	if (!t)
		return SHOAL_ERR_NOMEM;
	if (model_len == 5 && !memcmp(model, "llama", 5)) {
		t->kind = TOKENIZER__SPM;
	} else if (model_len == 4 && !memcmp(model, "gpt2", 4)) {
		t->kind = TOKENIZER__BPE;
	} else {
		err = shoal_why(why, why_len, SHOAL_ERR_UNSUPPORTED,
		                "tokenizer model '%s' is not supported (llama, gpt2)",
		                tok_printable(name, sizeof name, model, model_len));
		goto fail;
	}

	err = tok_vocab_load(t, g, why, why_len);
	if (err)
		goto fail;
	err = tokenizer__map_build(t);
	if (err)
		goto fail;

	for (int b = 0; b < 256; b++)
		t->byte_id[b] = -1;
	if (t->kind == TOKENIZER__SPM) {
		t->pre = TOKENIZER__PRE_NONE;
		for (int c = 0; c < 128; c++)
			t->spm_barrier[c] = true;
		for (uint32_t id = 0; id < t->n_vocab; id++) {
			uint32_t a = t->text_off[id], b = t->text_off[id + 1];
			for (uint32_t i = a; b - a >= 2 && i < b; i++)
				if ((unsigned char)t->text[i] < 0x80)
					t->spm_barrier[(unsigned char)t->text[i]] = false;
		}
		for (int b = 0; b < 256; b++) {
			char hex[8];
			snprintf(hex, sizeof hex, "<0x%02X>", b);
			t->byte_id[b] = tokenizer__find(t, hex, 6);
			if (t->byte_id[b] < 0 && b < 0x80) {
				char c = (char)b;
				t->byte_id[b] = tokenizer__find(t, &c, 1);
			}
		}
	} else {
		shoal_gguf_get_str(g, "tokenizer.ggml.pre", &pre, &pre_len);
		err = tokenizer__bpe_setup(t, pre, pre_len, g, why, why_len);
		if (err)
			goto fail;
	}

	/* Defaults where the metadata is silent: SentencePiece's <unk> <s>
	 * </s> are 0 1 2; byte-level vocabularies have no fixed ids. */
	bool spm = t->kind == TOKENIZER__SPM;
	t->bos = tok_special_id(g, t, "tokenizer.ggml.bos_token_id", spm ? 1 : -1);
	t->eos = tok_special_id(g, t, "tokenizer.ggml.eos_token_id", spm ? 2 : -1);
	t->unk = tok_special_id(g, t, "tokenizer.ggml.unknown_token_id", spm ? 0 : -1);
	t->eot = tok_special_id(g, t, "tokenizer.ggml.eot_token_id", -1);
	t->eom = tok_special_id(g, t, "tokenizer.ggml.eom_token_id", -1);
	/* BOS by default for SentencePiece and for Llama 3's byte-level
	 * vocabulary (as the reference engine does), not for other BPE. */
	t->add_bos = spm || t->pre == TOKENIZER__PRE_LLAMA3;
	shoal_gguf_get_bool(g, "tokenizer.ggml.add_bos_token", &t->add_bos);
	shoal_gguf_get_bool(g, "tokenizer.ggml.add_eos_token", &t->add_eos);
	t->add_space_prefix = spm;
	shoal_gguf_get_bool(g, "tokenizer.ggml.add_space_prefix", &t->add_space_prefix);
	/* GLM's templates write their own "[gMASK]<sop>": its vocabulary
	 * never gets a BOS, whatever the file says (as the reference) */
	if ((t->add_bos && t->bos < 0) || t->pre == TOKENIZER__PRE_GLM4)
		t->add_bos = false;
	if (t->add_eos && t->eos < 0)
		t->add_eos = false;

	err = tok_specials_build(t);
	if (err)
		goto fail;
	tok_pieces_build(t); /* after the attributes are final */
	*out = t;
	return SHOAL_OK;
fail:
	if (err == SHOAL_ERR_NOMEM)
		shoal_why(why, why_len, err, "out of memory building the tokenizer");
	shoal_tokenizer_free(t);
	return err;
}

void shoal_tokenizer_free(shoal_tokenizer *t)
{
	if (!t)
		return;
	tokenizer__bpe_free(t);
	free(t->text);
	free(t->text_off);
	free(t->piece);
	free(t->piece_off);
	free(t->score);
	free(t->attr);
	free(t->map);
	free(t->merge_key);
	free(t->merge_rank);
	free(t->merge_id);
	free(t->special);
	free(t);
}

/* ------------------------------------------------------------------------
 * accessors
 * ------------------------------------------------------------------------ */

uint32_t shoal_tokenizer_n_vocab(const shoal_tokenizer *t)
{
	return t->n_vocab;
}

int32_t shoal_tokenizer_bos(const shoal_tokenizer *t)
{
	return t->bos;
}

int32_t shoal_tokenizer_eos(const shoal_tokenizer *t)
{
	return t->eos;
}

bool shoal_tokenizer_adds_bos(const shoal_tokenizer *t)
{
	return t->add_bos;
}

int32_t shoal_tokenizer_find(const shoal_tokenizer *t, const char *text, size_t len)
{
	return tokenizer__find(t, text, len);
}

bool shoal_tokenizer_is_eog(const shoal_tokenizer *t, int32_t id)
{
	return id >= 0 && (uint32_t)id < t->n_vocab && (t->attr[id] & TOKENIZER__EOG);
}

/* ------------------------------------------------------------------------
 * encoding
 * ------------------------------------------------------------------------ */

/* A stretch of the input: raw text (id < 0) or one special token. */
typedef struct tok_frag {
	size_t off, len;
	int32_t id;
} tok_frag;

typedef struct tok_frags {
	tok_frag *v;
	size_t n, cap;
} tok_frags;

static shoal_err tok_frag_add(tok_frags *f, size_t off, size_t len, int32_t id)
{
	if (len == 0 && id < 0)
		return SHOAL_OK;
	if (f->n == f->cap) {
		size_t cap = f->cap ? 2 * f->cap : 16;
		tok_frag *v = realloc(f->v, cap * sizeof *v);
		if (!v)
			return SHOAL_ERR_NOMEM;
		f->v = v;
		f->cap = cap;
	}
	f->v[f->n++] = (tok_frag){off, len, id};
	return SHOAL_OK;
}

/* Split the text around special tokens, longest token text first (so
 * "<|im_end|>" wins over a shorter token inside it), each occurrence left
 * to right, as the reference engine partitions. Control and unknown tokens
 * only with parse_special; user-defined tokens always. */
static shoal_err tok_partition(const shoal_tokenizer *t, const char *text, size_t len,
                               bool parse_special, tok_frags *cur)
{
	tok_frags nxt = {0};
	shoal_err err = tok_frag_add(cur, 0, len, -1);
	if (err)
		return err;
	for (uint32_t k = 0; k < t->n_special && cur->n; k++) {
		int32_t id = t->special[k];
		if (!parse_special && !(t->attr[id] & TOKENIZER__USER))
			continue;
		const char *s = t->text + t->text_off[id];
		size_t sl = t->text_off[id + 1] - t->text_off[id];
		bool hit = false;
		for (size_t i = 0; i < cur->n && !hit; i++)
			hit = cur->v[i].id < 0 && cur->v[i].len >= sl &&
			      memmem(text + cur->v[i].off, cur->v[i].len, s, sl);
		if (!hit)
			continue;
		nxt.n = 0;
		for (size_t i = 0; i < cur->n && !err; i++) {
			tok_frag f = cur->v[i];
			if (f.id >= 0) {
				err = tok_frag_add(&nxt, f.off, f.len, f.id);
				continue;
			}
			size_t pos = f.off, end = f.off + f.len;
			while (!err) {
				const char *m =
				    end - pos >= sl ? memmem(text + pos, end - pos, s, sl) : NULL;
				if (!m) {
					err = tok_frag_add(&nxt, pos, end - pos, -1);
					break;
				}
				size_t at = (size_t)(m - text);
				err = tok_frag_add(&nxt, pos, at - pos, -1);
				if (!err)
					err = tok_frag_add(&nxt, at, sl, id);
				pos = at + sl;
			}
		}
		tok_frags tmp = *cur;
		*cur = nxt;
		nxt = tmp;
	}
	free(nxt.v);
	return err;
}

shoal_err shoal_tokenizer_encode(const shoal_tokenizer *t, const char *text, size_t len,
                                 bool add_special, bool parse_special, int32_t **ids, size_t *n_ids)
{
	tokenizer__out o = {0};
	tok_frags frags = {0};
	shoal_err err = SHOAL_OK;

	*ids = NULL;
	*n_ids = 0;
	if (add_special && t->add_bos)
		err = tokenizer__push(&o, t->bos);
	if (!err && len > 0)
		err = tok_partition(t, text, len, parse_special, &frags);
	/* SentencePiece prefixes a space to text at the start and after a
	 * special token (the reference's "is_prev_special"). */
	bool prev_special = true;
	for (size_t i = 0; i < frags.n && !err; i++) {
		const tok_frag *f = &frags.v[i];
		if (f->id >= 0) {
			err = tokenizer__push(&o, f->id);
			prev_special = true;
		} else if (t->kind == TOKENIZER__SPM) {
			err = tokenizer__spm_encode(t, text + f->off, f->len,
			                            t->add_space_prefix && prev_special, &o);
			prev_special = false;
		} else {
			err = tokenizer__bpe_encode(t, text + f->off, f->len, &o);
		}
	}
	if (!err && add_special && t->add_eos)
		err = tokenizer__push(&o, t->eos);
	if (!err && !o.ids)
		err = (o.ids = malloc(sizeof *o.ids)) ? SHOAL_OK : SHOAL_ERR_NOMEM;
	free(frags.v);
	if (err) {
		free(o.ids);
		return err;
	}
	*ids = o.ids;
	*n_ids = o.n;
	return SHOAL_OK;
}

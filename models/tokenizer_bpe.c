/*
 * models/tokenizer_bpe.c: byte-level BPE (tokenizer.ggml.model = "gpt2"):
 * GPT-2, Llama 3, Qwen2/2.5/3 and their kin.
 *
 * Part: models/. Divisions:
 *   - GPT-2's byte <-> unicode mapping (every byte has a printable stand-in)
 *   - the pre-tokenizers: one PCRE2 regex per tokenizer.ggml.pre, compiled
 *     once with PCRE2_UTF | PCRE2_UCP; the text is cut into the regex's
 *     matches ("words"), and BPE never merges across words
 *   - set-up: merges as (left id, right id) -> (rank, merged id)
 *   - the merge loop: lowest rank first, ties by the leftmost pair
 */
#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/log.h"
#include "models/gguf.h"
#include "models/tokenizer.h"
#include "models/tokenizer_impl.h"

/* ------------------------------------------------------------------------
 * GPT-2's byte <-> unicode mapping
 * ------------------------------------------------------------------------ */

/* Printable Latin-1 bytes (33..126, 161..172, 174..255) stand for
 * themselves; the other 68 (0..32, 127..160, 173) get U+0100..U+0143 in
 * byte order. */
static uint32_t bpe_byte_cp(unsigned char b)
{
	if (b <= 32)
		return 256u + b;
	if (b >= 127 && b <= 160)
		return 256u + 33u + (b - 127u);
	if (b == 173)
		return 256u + 67u;
	return b;
}

/* The byte a code point stands for, or -1. */
static int bpe_cp_byte(uint32_t cp)
{
	if (cp < 256)
		return bpe_byte_cp((unsigned char)cp) == cp ? (int)cp : -1;
	if (cp < 256 + 33)
		return (int)(cp - 256);
	if (cp < 256 + 67)
		return (int)(cp - 256 - 33 + 127);
	if (cp == 256 + 67)
		return 173;
	return -1;
}

size_t tokenizer__bpe_byte_char(unsigned char b, char *dst)
{
	uint32_t cp = bpe_byte_cp(b);
	if (cp < 0x80) {
		dst[0] = (char)cp;
		return 1;
	}
	dst[0] = (char)(0xc0 | (cp >> 6));
	dst[1] = (char)(0x80 | (cp & 0x3f));
	return 2;
}

size_t tokenizer__bpe_unmap(const char *src, size_t len, char *dst)
{
	const unsigned char *s = (const unsigned char *)src;
	size_t n = 0;
	for (size_t i = 0; i < len;) {
		uint32_t cp;
		size_t cl = tokenizer__utf8_valid(s + i, len - i, &cp);
		int b = cl ? bpe_cp_byte(cp) : -1;
		if (b >= 0) {
			dst[n++] = (char)b;
		} else {
			/* Outside the mapping: keep the bytes as they are. */
			if (!cl)
				cl = 1;
			memcpy(dst + n, src + i, cl);
			n += cl;
		}
		i += cl;
	}
	return n;
}

/* ------------------------------------------------------------------------
 * pre-tokenizers
 * ------------------------------------------------------------------------ */

/* The regexes of the Hugging Face tokenizers these vocabularies come from.
 * Llama 3's contractions are case-insensitive; they are spelled out as
 * [sS] etc. rather than (?i:...) so that PCRE2's Unicode case folding
 * cannot let "'ſ" (U+017F) or the Kelvin sign match. Llama 3 groups digits
 * by up to three, Qwen2 takes them one at a time. */
static const char bpe_re_gpt2[] =
    "'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^\\s\\p{L}\\p{N}]+|\\s+(?!\\S)|\\s+";
static const char bpe_re_llama3[] =
    "(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])"
    "|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}{1,3}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*"
    "|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+";
static const char bpe_re_qwen2[] =
    "(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])"
    "|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*"
    "|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+";

static const struct {
	const char *name;
	tokenizer__pre pre;
} bpe_pre_names[] = {
    {"default", TOKENIZER__PRE_GPT2},  {"gpt-2", TOKENIZER__PRE_GPT2},
    {"gpt2", TOKENIZER__PRE_GPT2},     {"llama-bpe", TOKENIZER__PRE_LLAMA3},
    {"llama3", TOKENIZER__PRE_LLAMA3}, {"llama-v3", TOKENIZER__PRE_LLAMA3},
    {"qwen2", TOKENIZER__PRE_QWEN2},   {"deepseek-r1-qwen", TOKENIZER__PRE_QWEN2},
};

/* ------------------------------------------------------------------------
 * set-up
 * ------------------------------------------------------------------------ */

static uint32_t bpe_key_hash(uint64_t key)
{
	/* Fibonacci hashing: the golden-ratio multiplier spreads the ids. */
	return (uint32_t)((key * 0x9E3779B97F4A7C15ull) >> 32);
}

static bool bpe_merge_find(const struct shoal_tokenizer *t, int32_t l, int32_t r, uint32_t *rank,
                           int32_t *id)
{
	uint64_t key = ((uint64_t)(uint32_t)l << 32) | (uint32_t)r;
	for (uint32_t i = bpe_key_hash(key) & t->merge_mask;; i = (i + 1) & t->merge_mask) {
		if (t->merge_key[i] == UINT64_MAX)
			return false;
		if (t->merge_key[i] == key) {
			*rank = t->merge_rank[i];
			*id = t->merge_id[i];
			return true;
		}
	}
}

static shoal_err bpe_merges_load(struct shoal_tokenizer *t, const shoal_gguf *g, char *why,
                                 size_t why_len)
{
	static const char key[] = "tokenizer.ggml.merges";
	shoal_gguf_type et;
	uint64_t n;
	const void *data;
	if (!shoal_gguf_get_arr(g, key, &et, &n, &data))
		return shoal_why(why, why_len, SHOAL_ERR_FORMAT,
		                 "no %s: a gpt2 tokenizer needs its merges", key);
	if (et != SHOAL_GGUF_STRING)
		return shoal_why(why, why_len, SHOAL_ERR_FORMAT, "%s is not an array of strings",
		                 key);
	if (n >= UINT32_MAX / 4)
		return shoal_why(why, why_len, SHOAL_ERR_FORMAT, "%s has %llu entries", key,
		                 (unsigned long long)n);
	/* Load factor at most 1/2. */
	uint32_t cap = 16;
	while (cap < 2 * n)
		cap *= 2;
	t->merge_key = malloc((size_t)cap * sizeof *t->merge_key);
	t->merge_rank = malloc((size_t)cap * sizeof *t->merge_rank);
	t->merge_id = malloc((size_t)cap * sizeof *t->merge_id);
	if (!t->merge_key || !t->merge_rank || !t->merge_id)
		return SHOAL_ERR_NOMEM;
	memset(t->merge_key, 0xff, (size_t)cap * sizeof *t->merge_key);
	t->merge_mask = cap - 1;

	char *cat = NULL;
	size_t cat_cap = 0, skipped = 0;
	for (uint64_t i = 0; i < n; i++) {
		const char *s, *sp;
		size_t len;
		if (!shoal_gguf_arr_str(g, key, i, &s, &len)) {
			free(cat);
			return shoal_why(why, why_len, SHOAL_ERR_FORMAT, "%s[%llu] is unreadable",
			                 key, (unsigned long long)i);
		}
		/* "left right", split at the first space after the first byte. */
		sp = len > 1 ? memchr(s + 1, ' ', len - 1) : NULL;
		if (!sp) {
			free(cat);
			return shoal_why(why, why_len, SHOAL_ERR_FORMAT,
			                 "%s[%llu] is not two tokens separated by a space", key,
			                 (unsigned long long)i);
		}
		size_t ll = (size_t)(sp - s), rl = len - ll - 1;
		if (ll + rl > cat_cap) {
			char *p = realloc(cat, ll + rl);
			if (!p) {
				free(cat);
				return SHOAL_ERR_NOMEM;
			}
			cat = p;
			cat_cap = ll + rl;
		}
		memcpy(cat, s, ll);
		memcpy(cat + ll, sp + 1, rl);
		int32_t l = tokenizer__find(t, s, ll), r = tokenizer__find(t, sp + 1, rl);
		int32_t m = tokenizer__find(t, cat, ll + rl);
		if (l < 0 || r < 0 || m < 0) {
			skipped++; /* a merge into or of nothing we could name */
			continue;
		}
		uint64_t k = ((uint64_t)(uint32_t)l << 32) | (uint32_t)r;
		uint32_t j = bpe_key_hash(k) & t->merge_mask;
		while (t->merge_key[j] != UINT64_MAX && t->merge_key[j] != k)
			j = (j + 1) & t->merge_mask;
		if (t->merge_key[j] == k)
			continue; /* a repeated merge keeps its first (best) rank */
		t->merge_key[j] = k;
		t->merge_rank[j] = (uint32_t)i;
		t->merge_id[j] = m;
		t->n_merges++;
	}
	free(cat);
	if (skipped)
		SHOAL_LOG_W("models",
		            "%zu of %llu merges name tokens outside the vocabulary; ignored",
		            skipped, (unsigned long long)n);
	return SHOAL_OK;
}

shoal_err tokenizer__bpe_setup(struct shoal_tokenizer *t, const char *pre, size_t pre_len,
                               const void *gv, char *why, size_t why_len)
{
	const shoal_gguf *g = gv;
	const char *pattern = NULL;
	t->pre = TOKENIZER__PRE_NONE;
	if (!pre) {
		t->pre = TOKENIZER__PRE_GPT2;
	} else {
		for (size_t i = 0; i < sizeof bpe_pre_names / sizeof bpe_pre_names[0]; i++)
			if (strlen(bpe_pre_names[i].name) == pre_len &&
			    !memcmp(bpe_pre_names[i].name, pre, pre_len))
				t->pre = bpe_pre_names[i].pre;
	}
	switch (t->pre) {
	case TOKENIZER__PRE_GPT2:
		pattern = bpe_re_gpt2;
		break;
	case TOKENIZER__PRE_LLAMA3:
		pattern = bpe_re_llama3;
		t->ignore_merges = true;
		break;
	case TOKENIZER__PRE_QWEN2:
		pattern = bpe_re_qwen2;
		break;
	case TOKENIZER__PRE_NONE: {
		char name[68];
		size_t k = 0;
		for (size_t i = 0; i < pre_len && k < 60; i++)
			name[k++] = (pre[i] >= 0x20 && pre[i] < 0x7f) ? pre[i] : '?';
		name[k] = '\0';
		return shoal_why(why, why_len, SHOAL_ERR_UNSUPPORTED,
		                 "pre-tokenizer '%s%s' is not supported (gpt-2, llama-bpe, qwen2)",
		                 name, k < pre_len ? "..." : "");
	}
	}

	int code;
	PCRE2_SIZE at;
	pcre2_code *re =
	    pcre2_compile((PCRE2_SPTR)pattern, PCRE2_ZERO_TERMINATED,
	                  PCRE2_UTF | PCRE2_UCP | PCRE2_NO_UTF_CHECK, &code, &at, NULL);
	if (!re) {
		/* Our own pattern: failing here is a bug or a PCRE2 without
		 * Unicode support, not bad input; still report, never abort. */
		PCRE2_UCHAR msg[160];
		pcre2_get_error_message(code, msg, sizeof msg);
		return shoal_why(why, why_len, SHOAL_ERR_UNSUPPORTED,
		                 "PCRE2 cannot compile the pre-tokenizer regex: %s", (char *)msg);
	}
	/* JIT makes matching several times faster; without it (an unsupported
	 * CPU) pcre2_match interprets, which is merely slower. */
	pcre2_jit_compile(re, PCRE2_JIT_COMPLETE);
	t->re = re;

	shoal_err err = bpe_merges_load(t, g, why, why_len);
	if (err)
		return err;
	for (int b = 0; b < 256; b++) {
		char c[2];
		size_t n = tokenizer__bpe_byte_char((unsigned char)b, c);
		t->byte_id[b] = tokenizer__find(t, c, n);
	}
	return SHOAL_OK;
}

void tokenizer__bpe_free(struct shoal_tokenizer *t)
{
	pcre2_code_free((pcre2_code *)t->re);
	t->re = NULL;
}

/* ------------------------------------------------------------------------
 * the merge loop
 * ------------------------------------------------------------------------ */

typedef struct bpe_sym {
	int32_t id;         /* token of this symbol; -1 for a byte without one */
	uint32_t len;       /* bytes; 0 once merged away */
	int32_t prev, next; /* neighbours, -1 at the ends */
} bpe_sym;

typedef struct bpe_pair {
	int32_t left, right; /* symbol indices */
	int32_t l_id, r_id;  /* their tokens when proposed (to spot stale pairs) */
	uint32_t rank;       /* merge order: lower merges first */
	int32_t id;          /* the merged token */
} bpe_pair;

/* Scratch reused across the words of one encode call. */
typedef struct bpe_work {
	const struct shoal_tokenizer *t;
	bpe_sym *sym;
	bpe_pair *heap;
	char *mapped;
	size_t cap; /* bytes of the longest word the buffers fit */
	size_t n_heap;
	pcre2_match_data *md;
} bpe_work;

static bool bpe_before(const bpe_pair *a, const bpe_pair *b)
{
	return a->rank < b->rank || (a->rank == b->rank && a->left < b->left);
}

TOKENIZER__HEAP_DEFINE(bpe_heap, bpe_pair, bpe_before)

static void bpe_try_pair(bpe_work *w, int32_t left, int32_t right)
{
	if (left < 0 || right < 0)
		return;
	int32_t l = w->sym[left].id, r = w->sym[right].id, id;
	uint32_t rank;
	if (l < 0 || r < 0 || !bpe_merge_find(w->t, l, r, &rank, &id))
		return;
	bpe_heap_push(w->heap, &w->n_heap, (bpe_pair){left, right, l, r, rank, id});
}

static shoal_err bpe_reserve(bpe_work *w, size_t len)
{
	if (len <= w->cap)
		return SHOAL_OK;
	size_t cap = w->cap ? w->cap : 64;
	while (cap < len)
		cap *= 2;
	/* The heap holds at most 3 pairs per byte (n-1 initial, 2 per merge). */
	if (cap > SIZE_MAX / (3 * sizeof(bpe_pair)))
		return SHOAL_ERR_NOMEM;
	bpe_sym *s = realloc(w->sym, cap * sizeof *s);
	if (s)
		w->sym = s;
	bpe_pair *h = realloc(w->heap, 3 * cap * sizeof *h);
	if (h)
		w->heap = h;
	char *m = realloc(w->mapped, 2 * cap);
	if (m)
		w->mapped = m;
	if (!s || !h || !m)
		return SHOAL_ERR_NOMEM;
	w->cap = cap;
	return SHOAL_OK;
}

/* BPE over one pre-tokenizer word of raw bytes. */
static shoal_err bpe_word(bpe_work *w, const char *s, size_t len, tokenizer__out *o)
{
	const struct shoal_tokenizer *t = w->t;
	if (len == 0)
		return SHOAL_OK;
	if (len > INT32_MAX / 4)
		return SHOAL_ERR_RANGE;
	shoal_err err = bpe_reserve(w, len);
	if (err)
		return err;
	if (t->ignore_merges) {
		/* Llama 3: a word that is itself a token is that token, even
		 * where the merges would have cut it differently. */
		size_t n = 0;
		for (size_t i = 0; i < len; i++)
			n += tokenizer__bpe_byte_char((unsigned char)s[i], w->mapped + n);
		int32_t id = tokenizer__find(t, w->mapped, n);
		if (id >= 0)
			return tokenizer__push(o, id);
	}
	int32_t n = (int32_t)len;
	for (int32_t i = 0; i < n; i++)
		w->sym[i] = (bpe_sym){t->byte_id[(unsigned char)s[i]], 1, i - 1, i + 1};
	w->sym[n - 1].next = -1;
	w->n_heap = 0;
	for (int32_t i = 1; i < n; i++)
		bpe_try_pair(w, i - 1, i);
	while (w->n_heap) {
		bpe_pair p = bpe_heap_pop(w->heap, &w->n_heap);
		bpe_sym *l = &w->sym[p.left], *r = &w->sym[p.right];
		if (l->len == 0 || r->len == 0 || l->id != p.l_id || r->id != p.r_id)
			continue;
		l->id = p.id;
		l->len += r->len;
		r->len = 0;
		l->next = r->next;
		if (r->next >= 0)
			w->sym[r->next].prev = p.left;
		bpe_try_pair(w, l->prev, p.left);
		bpe_try_pair(w, p.left, l->next);
	}
	for (int32_t i = 0; i >= 0; i = w->sym[i].next) {
		int32_t id = w->sym[i].id >= 0 ? w->sym[i].id : t->unk;
		if (id < 0)
			continue; /* a byte the vocabulary cannot spell, no <unk> */
		err = tokenizer__push(o, id);
		if (err)
			return err;
	}
	return SHOAL_OK;
}

/* Pre-tokenize one run of valid UTF-8 and BPE each word. Any bytes the
 * regex leaves between matches form words of their own. */
static shoal_err bpe_run(bpe_work *w, const char *s, size_t len, tokenizer__out *o)
{
	const pcre2_code *re = w->t->re;
	size_t pos = 0;
	shoal_err err = SHOAL_OK;
	while (pos < len && !err) {
		int rc = pcre2_match(re, (PCRE2_SPTR)s, len, pos, PCRE2_NO_UTF_CHECK, w->md, NULL);
		if (rc == PCRE2_ERROR_NOMATCH)
			return bpe_word(w, s + pos, len - pos, o);
		if (rc < 0)
			return SHOAL_ERR_RANGE; /* match limit: pathological text */
		PCRE2_SIZE *ov = pcre2_get_ovector_pointer(w->md);
		size_t ms = ov[0], me = ov[1];
		if (ms < pos || me < ms || me > len)
			return SHOAL_ERR_RANGE;
		if (me == ms) {
			/* An empty match (none of our patterns has one): step one
			 * character so the loop always advances. */
			uint32_t cp;
			size_t cl =
			    tokenizer__utf8_valid((const unsigned char *)s + ms, len - ms, &cp);
			me = ms + (cl ? cl : 1);
		}
		err = bpe_word(w, s + pos, ms - pos, o);
		if (!err)
			err = bpe_word(w, s + ms, me - ms, o);
		pos = me;
	}
	return err;
}

shoal_err tokenizer__bpe_encode(const struct shoal_tokenizer *t, const char *text, size_t len,
                                tokenizer__out *o)
{
	bpe_work w = {.t = t};
	shoal_err err = SHOAL_OK;
	w.md = pcre2_match_data_create_from_pattern((const pcre2_code *)t->re, NULL);
	if (!w.md)
		return SHOAL_ERR_NOMEM;
	/* PCRE2 may only see valid UTF-8: cut the text into valid runs, and
	 * let each invalid byte be a word of its own (byte-level BPE spells
	 * any byte). */
	const unsigned char *u = (const unsigned char *)text;
	size_t run = 0, i = 0;
	while (i < len && !err) {
		uint32_t cp;
		size_t cl = tokenizer__utf8_valid(u + i, len - i, &cp);
		if (cl) {
			i += cl;
			continue;
		}
		err = bpe_run(&w, text + run, i - run, o);
		if (!err)
			err = bpe_word(&w, text + i, 1, o);
		run = ++i;
	}
	if (!err)
		err = bpe_run(&w, text + run, len - run, o);
	pcre2_match_data_free(w.md);
	free(w.sym);
	free(w.heap);
	free(w.mapped);
	return err;
}

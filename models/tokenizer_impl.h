/*
 * models/tokenizer_impl.h: the inside of a shoal_tokenizer, shared by the
 * files of the tokenizer (tokenizer.c: loading, special tokens, encoding;
 * tokenizer_spm.c: SentencePiece-style merges; tokenizer_bpe.c: byte-level
 * BPE and its PCRE2 pre-tokenizers; tokenizer_decode.c: ids back to text;
 * tokenizer_vocab.c: the text -> id map and the id vector, beneath the
 * others). Not for use outside models/tokenizer*.
 *
 * Part: models/. Names shared between these files start with tokenizer__.
 */
#ifndef SHOAL_MODELS_TOKENIZER_IMPL_H
#define SHOAL_MODELS_TOKENIZER_IMPL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "base/err.h"

typedef enum tokenizer__kind {
	TOKENIZER__SPM, /* tokenizer.ggml.model = "llama" */
	TOKENIZER__BPE, /* tokenizer.ggml.model = "gpt2" */
} tokenizer__kind;

#define TOKENIZER__MAX_RE 6 /* regexes of one pre-tokenizer (deepseek-llm: 6) */

typedef enum tokenizer__pre {
	TOKENIZER__PRE_NONE,   /* SPM: no pre-tokenizer */
	TOKENIZER__PRE_GPT2,   /* "gpt-2", "default", "mpt", "olmo", ... */
	TOKENIZER__PRE_LLAMA3, /* "llama-bpe", "llama3", "llama-v3" */
	TOKENIZER__PRE_QWEN2,  /* "qwen2" */
	TOKENIZER__PRE_DEEPSEEK_LLM,
	TOKENIZER__PRE_DEEPSEEK_CODER,
	TOKENIZER__PRE_DEEPSEEK_V3,
	TOKENIZER__PRE_FALCON,
	TOKENIZER__PRE_STARCODER, /* also refact, command-r, smollm, ... */
	TOKENIZER__PRE_KIMI_K2,
	TOKENIZER__PRE_GPT4O, /* "gpt-4o": o200k (gpt-oss) */
	TOKENIZER__PRE_GLM4,  /* "glm4", "chatglm-bpe": Llama 3's split, merges only, no BOS */
} tokenizer__pre;

/* Token attributes, from tokenizer.ggml.token_type (GGUF numbering:
 * 1 normal, 2 unknown, 3 control, 4 user-defined, 5 unused, 6 byte). */
enum {
	TOKENIZER__NORMAL = 1u << 0,
	TOKENIZER__UNKNOWN = 1u << 1,
	TOKENIZER__CONTROL = 1u << 2,
	TOKENIZER__USER = 1u << 3,
	TOKENIZER__UNUSED = 1u << 4,
	TOKENIZER__BYTE = 1u << 5,
	TOKENIZER__EOG = 1u << 6, /* ends generation (not a GGUF type) */
};

typedef struct tokenizer__slot {
	uint32_t hash;
	int32_t id;
	uint32_t off, len; /* the token's text: text[off .. off + len) */
} tokenizer__slot;

struct shoal_tokenizer {
	tokenizer__kind kind;
	tokenizer__pre pre;
	uint32_t n_vocab;

	/* Token texts as stored in the vocabulary, and the bytes each token
	 * stands for when decoded (U+2581 -> ' ', <0xAB> -> 0xAB, GPT-2's
	 * byte-to-unicode undone). Token i is text[text_off[i] .. text_off[i+1]). */
	char *text;
	uint32_t *text_off; /* (n_vocab + 1) */
	char *piece;
	uint32_t *piece_off; /* (n_vocab + 1) */
	float *score;        /* (n_vocab) SPM merge priority; 0 when absent */
	uint8_t *attr;       /* (n_vocab) TOKENIZER__* bits */

	/* text -> id, open addressing over a power-of-two table (id -1 =
	 * empty); for duplicate texts the last id wins, as in the reference.
	 * A slot carries the hash and the text's place so that a probe costs
	 * one cache line plus the memcmp. */
	tokenizer__slot *map;
	uint32_t map_mask;

	/* BPE merges: (left id, right id) -> (rank, merged id). Keys are
	 * left << 32 | right; UINT64_MAX marks an empty slot (ids < 2^31). */
	uint64_t *merge_key;
	uint32_t *merge_rank;
	int32_t *merge_id;
	uint32_t merge_mask;
	uint32_t n_merges;

	/* SPM: the <0xXX> token of each byte; BPE: the token of each byte's
	 * GPT-2 character. -1 when the vocabulary lacks it. */
	int32_t byte_id[256];

	/* SPM: ASCII bytes that no token of two or more bytes contains; they
	 * never merge, so encoding may cut the text at them. */
	bool spm_barrier[128];

	/* Tokens matched in raw text before the tokenizer runs (control,
	 * user-defined, unknown), longest text first, ties by id. */
	int32_t *special;
	uint32_t n_special;

	int32_t bos, eos, eot, eom, unk;
	bool add_bos, add_eos;
	bool add_space_prefix; /* SPM: prepend U+2581 to the text */
	bool ignore_merges;    /* BPE (Llama 3): a whole word in the vocab wins */

	/* BPE only: pcre2_code_8 *, compiled once. Applied in order: each
	 * regex cuts every word the previous ones made (gaps too are words). */
	void *re[TOKENIZER__MAX_RE];
	uint32_t n_re;
};

/* A growing array of token ids (the result of an encode). */
typedef struct tokenizer__out {
	int32_t *ids;
	size_t n, cap;
} tokenizer__out;

/* Append id to o (o->ids grows by doubling, the caller frees it). */
shoal_err tokenizer__push(tokenizer__out *o, int32_t id);

/* ---- the vocabulary (tokenizer_vocab.c) ---- */
/* Build t->map over t->text / t->text_off (n_vocab < 2^31); the later id
 * of a duplicate text wins. SHOAL_ERR_NOMEM when out of memory. */
shoal_err tokenizer__map_build(struct shoal_tokenizer *t);

/* The id of a token text, or -1. */
int32_t tokenizer__find(const struct shoal_tokenizer *t, const char *s, size_t len);

/* Length of the valid UTF-8 character at s[0..len) (strict: no overlong
 * forms, no surrogates, nothing above U+10FFFF), or 0 if it is invalid. */
static inline size_t tokenizer__utf8_valid(const unsigned char *s, size_t len, uint32_t *cp)
{
	unsigned char c = s[0];
	if (c < 0x80) {
		*cp = c;
		return 1;
	}
	size_t n;
	uint32_t v, min;
	if (c >= 0xc2 && c <= 0xdf) {
		n = 2, v = c & 0x1f, min = 0x80;
	} else if (c >= 0xe0 && c <= 0xef) {
		n = 3, v = c & 0x0f, min = 0x800;
	} else if (c >= 0xf0 && c <= 0xf4) {
		n = 4, v = c & 0x07, min = 0x10000;
	} else {
		return 0;
	}
	if (len < n)
		return 0;
	for (size_t i = 1; i < n; i++) {
		if ((s[i] & 0xc0) != 0x80)
			return 0;
		v = (v << 6) | (s[i] & 0x3f);
	}
	if (v < min || v > 0x10ffff || (v >= 0xd800 && v <= 0xdfff))
		return 0;
	*cp = v;
	return n;
}

/* Encode one stretch of raw text (no special tokens in it), appending ids. */
shoal_err tokenizer__spm_encode(const struct shoal_tokenizer *t, const char *text, size_t len,
                                bool space_prefix, tokenizer__out *o);
shoal_err tokenizer__bpe_encode(const struct shoal_tokenizer *t, const char *text, size_t len,
                                tokenizer__out *o);

/* BPE set-up: the byte <-> unicode mapping, merges and the pre-tokenizer
 * regex; and the decoded bytes of a normal BPE token's text into dst (at
 * most len bytes: each character is one byte, or its own UTF-8 when it is
 * outside the mapping). Returns the byte count. */
shoal_err tokenizer__bpe_setup(struct shoal_tokenizer *t, const char *pre, size_t pre_len,
                               const void *g, char *why, size_t why_len);
size_t tokenizer__bpe_unmap(const char *src, size_t len, char *dst);
/* The UTF-8 of byte b's GPT-2 character (1 or 2 bytes) into dst[2]. */
size_t tokenizer__bpe_byte_char(unsigned char b, char *dst);
void tokenizer__bpe_free(struct shoal_tokenizer *t);

/* A binary min-heap over an array of TYPE, ordered by BEFORE(const TYPE *,
 * const TYPE *) (true: a comes out first). Both merge loops (SentencePiece
 * bigrams, BPE pairs) use it; the caller sizes `heap` for the most entries
 * it can hold. Defines static NAME_push(heap, &n, x) and NAME_pop(heap, &n)
 * (n > 0). */
#define TOKENIZER__HEAP_DEFINE(NAME, TYPE, BEFORE)                                                 \
	static inline void NAME##_push(TYPE *heap, size_t *n, TYPE x)                              \
	{                                                                                          \
		size_t i = (*n)++;                                                                 \
		while (i > 0) {                                                                    \
			size_t up = (i - 1) / 2;                                                   \
			if (!BEFORE(&x, &heap[up]))                                                \
				break;                                                             \
			heap[i] = heap[up];                                                        \
			i = up;                                                                    \
		}                                                                                  \
		heap[i] = x;                                                                       \
	}                                                                                          \
	static inline TYPE NAME##_pop(TYPE *heap, size_t *n)                                       \
	{                                                                                          \
		TYPE top = heap[0], last = heap[--(*n)];                                           \
		size_t i = 0, len = *n;                                                            \
		for (;;) {                                                                         \
			size_t c = 2 * i + 1;                                                      \
			if (c >= len)                                                              \
				break;                                                             \
			if (c + 1 < len && BEFORE(&heap[c + 1], &heap[c]))                         \
				c++;                                                               \
			if (!BEFORE(&heap[c], &last))                                              \
				break;                                                             \
			heap[i] = heap[c];                                                         \
			i = c;                                                                     \
		}                                                                                  \
		if (len)                                                                           \
			heap[i] = last;                                                            \
		return top;                                                                        \
	}

#endif

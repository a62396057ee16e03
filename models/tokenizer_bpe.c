/*
 * models/tokenizer_bpe.c: byte-level BPE (tokenizer.ggml.model = "gpt2"):
 * GPT-2, Llama 3, Qwen2/2.5/3, DeepSeek, Falcon, StarCoder, Kimi K2 and
 * their kin.
 *
 * Part: models/. Divisions:
 *   - GPT-2's byte <-> unicode mapping (every byte has a printable stand-in)
 *   - the pre-tokenizers: 1-6 PCRE2 regexes per tokenizer.ggml.pre, compiled
 *     once with PCRE2_UTF | PCRE2_UCP; the text is cut into the regexes'
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

/* The regexes of the pre-tokenizers, as the Hugging Face tokenizers and
 * the reference engine (llama-vocab.cpp) spell them; a pre-tokenizer with
 * several regexes applies them in order, each cutting the words the
 * previous ones made. Llama 3's contractions are case-insensitive; they
 * are spelled out as [sS] etc. rather than (?i:...) so that PCRE2's
 * Unicode case folding cannot let "'ſ" (U+017F) or the Kelvin sign match.
 * Code points are written \x{...} so this file stays ASCII. */
#define BPE_CONTRACTIONS    "'s|'t|'re|'ve|'m|'ll|'d"
#define BPE_CONTRACTIONS_CI "(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])"
/* GPT-2's one regex; the reference drops the last "|\s+", which changes
 * nothing here since gaps between matches are words anyway */
#define BPE_RE_GPT2 BPE_CONTRACTIONS "| ?\\p{L}+| ?\\p{N}+| ?[^\\s\\p{L}\\p{N}]+|\\s+(?!\\S)|\\s+"
/* CJK runs: CJK unified ideographs, then the range the reference writes
 * as U+0800..U+4E00, and Hangul syllables up to U+D7FF */
#define BPE_RE_CJK "[\\x{4E00}-\\x{9FA5}\\x{0800}-\\x{4E00}\\x{AC00}-\\x{D7FF}]+"

static const char *const bpe_re_gpt2[] = {BPE_RE_GPT2};
/* Llama 3 groups digits by up to three, Qwen2 takes them one at a time */
static const char *const bpe_re_llama3[] = {
    BPE_CONTRACTIONS_CI "|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}{1,3}"
                        "| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+"};
static const char *const bpe_re_qwen2[] = {
    BPE_CONTRACTIONS_CI "|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}"
                        "| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+"};
/* DeepSeek LLM: line breaks, cased letters (the list of the model's own
 * tokenizer, an older Unicode's Lu/Ll/Lt), ASCII and full-width
 * punctuation, trailing space, CJK, digit runs */
static const char *const bpe_re_deepseek_llm[] = {
    "[\\r\\n]",
    "\\s?["
    "A-Za-z\\x{B5}\\x{C0}-\\x{D6}\\x{D8}-\\x{F6}\\x{F8}-\\x{1BA}\\x{1BC}-"
    "\\x{1BF}\\x{1C4}-\\x{293}\\x{295}-\\x{2AF}\\x{370}-\\x{373}\\x{376}"
    "\\x{377}\\x{37B}-\\x{37D}\\x{37F}\\x{386}\\x{388}-\\x{38A}\\x{38C}"
    "\\x{38E}-\\x{3A1}\\x{3A3}-\\x{3F5}\\x{3F7}-\\x{481}\\x{48A}-\\x{52F}"
    "\\x{531}-\\x{556}\\x{10A0}-\\x{10C5}\\x{13A0}-\\x{13F5}\\x{13F8}-"
    "\\x{13FD}\\x{1C90}-\\x{1CBA}\\x{1CBD}-\\x{1CBF}\\x{1D00}-\\x{1D2B}"
    "\\x{1D6B}-\\x{1D77}\\x{1D79}-\\x{1D9A}\\x{1E00}-\\x{1F15}\\x{1F18}-"
    "\\x{1F1D}\\x{1F20}-\\x{1F45}\\x{1F48}-\\x{1F4D}\\x{1F50}-\\x{1F57}"
    "\\x{1F59}\\x{1F5B}\\x{1F5D}\\x{1F5F}-\\x{1F7D}\\x{1F80}-\\x{1FB4}"
    "\\x{1FB6}-\\x{1FBC}\\x{1FBE}\\x{1FC2}-\\x{1FC4}\\x{1FC6}-\\x{1FCC}"
    "\\x{1FD0}-\\x{1FD3}\\x{1FD6}-\\x{1FDB}\\x{1FE0}-\\x{1FEC}\\x{1FF2}-"
    "\\x{1FF4}\\x{1FF6}-\\x{1FFC}\\x{2102}\\x{2107}\\x{210A}-\\x{2113}"
    "\\x{2115}\\x{2119}-\\x{211D}\\x{2124}\\x{2126}\\x{2128}\\x{212A}-"
    "\\x{212D}\\x{212F}-\\x{2134}\\x{2139}\\x{213C}-\\x{213F}\\x{2145}-"
    "\\x{2149}\\x{214E}\\x{2183}\\x{2184}\\x{2C00}-\\x{2C7B}\\x{2C7E}-"
    "\\x{2CE4}\\x{2CEB}-\\x{2CEE}\\x{2CF2}\\x{2CF3}\\x{A640}-\\x{A66D}"
    "\\x{A680}-\\x{A69B}\\x{A722}-\\x{A76F}\\x{A771}-\\x{A787}\\x{A78B}-"
    "\\x{A78E}\\x{AB70}-\\x{ABBF}\\x{FB00}-\\x{FB06}\\x{FB13}-\\x{FB17}"
    "\\x{FF21}-\\x{FF3A}\\x{FF41}-\\x{FF5A}\\x{10400}-\\x{1044F}\\x{104B0}-"
    "\\x{104D3}\\x{104D8}-\\x{104FB}\\x{10C80}-\\x{10CB2}\\x{10CC0}-"
    "\\x{10CF2}\\x{118A0}-\\x{118DF}\\x{1E900}-\\x{1E943}"
    "]+",
    "\\s?[!-/:-~\\x{FF01}-\\x{FF0F}\\x{FF1A}-\\x{FF5E}\\x{2018}-\\x{201F}\\x{3000}-\\x{3002}]+",
    "\\s+$",
    BPE_RE_CJK,
    "\\p{N}+",
};
static const char *const bpe_re_deepseek_coder[] = {
    "[\\r\\n]", "\\s?\\p{L}+", "\\s?\\p{P}+", BPE_RE_CJK, "\\p{N}",
};
/* DeepSeek V3: digits in runs of at most 3, CJK ideographs and kana,
 * then an ASCII punctuation mark with the letters after it, letters and
 * marks, punctuation and symbols, whitespace */
static const char *const bpe_re_deepseek_v3[] = {
    "\\p{N}{1,3}",
    "[\\x{4E00}-\\x{9FA5}\\x{3040}-\\x{309F}\\x{30A0}-\\x{30FF}]+",
    "[!\"#$%&'()*+,\\-./:;<=>?@\\[\\\\\\]^_`{|}~][A-Za-z]+"
    "|[^\\r\\n\\p{L}\\p{P}\\p{S}]?[\\p{L}\\p{M}]+| ?[\\p{P}\\p{S}]+[\\r\\n]*"
    "|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+",
};
/* Falcon: punctuation runs first, GPT-2's regex, then digits by three */
static const char *const bpe_re_falcon[] = {
    "[\\p{P}\\$\\+<=>\\^~\\|`]+",
    BPE_RE_GPT2,
    "[0-9][0-9][0-9]",
};
/* StarCoder (and refact, command-r, ...): every digit alone, then GPT-2 */
static const char *const bpe_re_starcoder[] = {"\\p{N}", BPE_RE_GPT2};
/* Kimi K2 (tiktoken): Han runs; words of non-Han letters and marks with
 * an optional case-insensitive contraction (the pattern's class
 * intersections "[...&&[^\p{Han}]]" written as a lookahead); digits by
 * three; then as Llama 3 */
#define BPE_KIMI_UP "(?:(?!\\p{Han})[\\p{Lu}\\p{Lt}\\p{Lm}\\p{Lo}\\p{M}])"
#define BPE_KIMI_LO "(?:(?!\\p{Han})[\\p{Ll}\\p{Lm}\\p{Lo}\\p{M}])"
static const char *const bpe_re_kimi_k2[] = {
    "\\p{Han}+"
    "|[^\\r\\n\\p{L}\\p{N}]?" BPE_KIMI_UP "*" BPE_KIMI_LO "+(?:" BPE_CONTRACTIONS_CI ")?"
    "|[^\\r\\n\\p{L}\\p{N}]?" BPE_KIMI_UP "+" BPE_KIMI_LO "*(?:" BPE_CONTRACTIONS_CI ")?"
    "|\\p{N}{1,3}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+",
};

/* GPT-4o's o200k (gpt-oss, tiktoken): words of letters and marks split
 * where a capital follows small letters, each with an optional
 * case-insensitive contraction; digits by three; punctuation takes the
 * line breaks and slashes after it; then as Llama 3 */
#define BPE_O200K_UP "[\\p{Lu}\\p{Lt}\\p{Lm}\\p{Lo}\\p{M}]"
#define BPE_O200K_LO "[\\p{Ll}\\p{Lm}\\p{Lo}\\p{M}]"
static const char *const bpe_re_gpt4o[] = {
    "[^\\r\\n\\p{L}\\p{N}]?" BPE_O200K_UP "*" BPE_O200K_LO "+(?:" BPE_CONTRACTIONS_CI ")?"
    "|[^\\r\\n\\p{L}\\p{N}]?" BPE_O200K_UP "+" BPE_O200K_LO "*(?:" BPE_CONTRACTIONS_CI ")?"
    "|\\p{N}{1,3}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n/]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+",
};

#define BPE_RES(a) a, sizeof a / sizeof a[0]
static const struct {
	const char *const *re;
	uint32_t n_re;
	bool ignore_merges; /* a whole word that is a token wins */
} bpe_pre_kinds[] = {
    [TOKENIZER__PRE_GPT2] = {BPE_RES(bpe_re_gpt2), false},
    [TOKENIZER__PRE_LLAMA3] = {BPE_RES(bpe_re_llama3), true},
    [TOKENIZER__PRE_QWEN2] = {BPE_RES(bpe_re_qwen2), false},
    [TOKENIZER__PRE_DEEPSEEK_LLM] = {BPE_RES(bpe_re_deepseek_llm), false},
    [TOKENIZER__PRE_DEEPSEEK_CODER] = {BPE_RES(bpe_re_deepseek_coder), false},
    [TOKENIZER__PRE_DEEPSEEK_V3] = {BPE_RES(bpe_re_deepseek_v3), false},
    [TOKENIZER__PRE_FALCON] = {BPE_RES(bpe_re_falcon), false},
    [TOKENIZER__PRE_STARCODER] = {BPE_RES(bpe_re_starcoder), false},
    [TOKENIZER__PRE_KIMI_K2] = {BPE_RES(bpe_re_kimi_k2), false},
    [TOKENIZER__PRE_GPT4O] = {BPE_RES(bpe_re_gpt4o), false},
    [TOKENIZER__PRE_GLM4] = {BPE_RES(bpe_re_llama3), false},
};

/* tokenizer.ggml.pre names, as the converter writes them. */
static const struct {
	const char *name;
	tokenizer__pre pre;
} bpe_pre_names[] = {
    {"default", TOKENIZER__PRE_GPT2},
    {"gpt-2", TOKENIZER__PRE_GPT2},
    {"gpt2", TOKENIZER__PRE_GPT2},
    {"mpt", TOKENIZER__PRE_GPT2},
    {"olmo", TOKENIZER__PRE_GPT2},
    {"jais", TOKENIZER__PRE_GPT2},
    {"phi-2", TOKENIZER__PRE_GPT2},
    {"roberta-bpe", TOKENIZER__PRE_GPT2},
    {"llama-bpe", TOKENIZER__PRE_LLAMA3},
    {"llama3", TOKENIZER__PRE_LLAMA3},
    {"llama-v3", TOKENIZER__PRE_LLAMA3},
    {"falcon3", TOKENIZER__PRE_LLAMA3},
    {"pixtral", TOKENIZER__PRE_LLAMA3},
    {"qwen2", TOKENIZER__PRE_QWEN2},
    {"deepseek-r1-qwen", TOKENIZER__PRE_QWEN2},
    {"megrez", TOKENIZER__PRE_QWEN2},
    {"deepseek-llm", TOKENIZER__PRE_DEEPSEEK_LLM},
    {"deepseek-coder", TOKENIZER__PRE_DEEPSEEK_CODER},
    {"deepseek-v3", TOKENIZER__PRE_DEEPSEEK_V3},
    {"falcon", TOKENIZER__PRE_FALCON},
    {"starcoder", TOKENIZER__PRE_STARCODER},
    {"refact", TOKENIZER__PRE_STARCODER},
    {"command-r", TOKENIZER__PRE_STARCODER},
    {"smollm", TOKENIZER__PRE_STARCODER},
    {"codeshell", TOKENIZER__PRE_STARCODER},
    {"exaone", TOKENIZER__PRE_STARCODER},
    {"minerva-7b", TOKENIZER__PRE_STARCODER},
    {"kimi-k2", TOKENIZER__PRE_KIMI_K2},
    {"gpt-4o", TOKENIZER__PRE_GPT4O},
    {"glm4", TOKENIZER__PRE_GLM4},
    {"chatglm-bpe", TOKENIZER__PRE_GLM4},
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
	t->pre = TOKENIZER__PRE_NONE;
	if (!pre) {
		t->pre = TOKENIZER__PRE_GPT2;
	} else {
		for (size_t i = 0; i < sizeof bpe_pre_names / sizeof bpe_pre_names[0]; i++)
			if (strlen(bpe_pre_names[i].name) == pre_len &&
			    !memcmp(bpe_pre_names[i].name, pre, pre_len))
				t->pre = bpe_pre_names[i].pre;
	}
	if (t->pre == TOKENIZER__PRE_NONE) {
		/* one line, printable, bounded: the name may be anything */
		char name[68];
		size_t k = 0;
		for (size_t i = 0; i < pre_len && k < 60; i++)
			name[k++] = (pre[i] >= 0x20 && pre[i] < 0x7f) ? pre[i] : '?';
		name[k] = '\0';
		return shoal_why(why, why_len, SHOAL_ERR_UNSUPPORTED,
		                 "pre-tokenizer '%s%s' is not supported (gpt-2, llama-bpe, qwen2, "
		                 "deepseek-llm, deepseek-coder, deepseek-v3, falcon, starcoder, "
		                 "kimi-k2, gpt-4o and their aliases)",
		                 name, k < pre_len ? "..." : "");
	}
	t->ignore_merges = bpe_pre_kinds[t->pre].ignore_merges;
	for (uint32_t i = 0; i < bpe_pre_kinds[t->pre].n_re; i++) {
		int code;
		PCRE2_SIZE at;
		pcre2_code *re =
		    pcre2_compile((PCRE2_SPTR)bpe_pre_kinds[t->pre].re[i], PCRE2_ZERO_TERMINATED,
		                  PCRE2_UTF | PCRE2_UCP | PCRE2_NO_UTF_CHECK, &code, &at, NULL);
		if (!re) {
			/* Our own pattern: failing here is a bug or a PCRE2
			 * without Unicode support, not bad input; still report,
			 * never abort. */
			PCRE2_UCHAR msg[160];
			pcre2_get_error_message(code, msg, sizeof msg);
			return shoal_why(why, why_len, SHOAL_ERR_UNSUPPORTED,
			                 "PCRE2 cannot compile pre-tokenizer regex %u: %s", i,
			                 (char *)msg);
		}
		/* JIT makes matching several times faster; without it (an
		 * unsupported CPU) pcre2_match interprets, which is merely
		 * slower. */
		pcre2_jit_compile(re, PCRE2_JIT_COMPLETE);
		t->re[t->n_re++] = re;
	}

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
	for (uint32_t i = 0; i < t->n_re; i++)
		pcre2_code_free((pcre2_code *)t->re[i]);
	t->n_re = 0;
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

/* Pre-tokenize one run of valid UTF-8 with regexes [level, n_re) and BPE
 * each word. Any bytes a regex leaves between matches form words of their
 * own, which the later regexes cut further. */
static shoal_err bpe_run(bpe_work *w, uint32_t level, const char *s, size_t len, tokenizer__out *o)
{
	if (len == 0)
		return SHOAL_OK;
	if (level == w->t->n_re)
		return bpe_word(w, s, len, o);
	const pcre2_code *re = w->t->re[level];
	size_t pos = 0;
	shoal_err err = SHOAL_OK;
	while (pos < len && !err) {
		int rc = pcre2_match(re, (PCRE2_SPTR)s, len, pos, PCRE2_NO_UTF_CHECK, w->md, NULL);
		if (rc == PCRE2_ERROR_NOMATCH)
			return bpe_run(w, level + 1, s + pos, len - pos, o);
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
		/* ms, me are copied: the deeper levels reuse w->md */
		err = bpe_run(w, level + 1, s + pos, ms - pos, o);
		if (!err)
			err = bpe_run(w, level + 1, s + ms, me - ms, o);
		pos = me;
	}
	return err;
}

shoal_err tokenizer__bpe_encode(const struct shoal_tokenizer *t, const char *text, size_t len,
                                tokenizer__out *o)
{
	bpe_work w = {.t = t};
	shoal_err err = SHOAL_OK;
	/* our patterns capture nothing: one pair (the match) is enough */
	w.md = pcre2_match_data_create(1, NULL);
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
		err = bpe_run(&w, 0, text + run, i - run, o);
		if (!err)
			err = bpe_word(&w, text + i, 1, o);
		run = ++i;
	}
	if (!err)
		err = bpe_run(&w, 0, text + run, len - run, o);
	pcre2_match_data_free(w.md);
	free(w.sym);
	free(w.heap);
	free(w.mapped);
	return err;
}

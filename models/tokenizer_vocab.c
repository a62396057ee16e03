/*
 * models/tokenizer_vocab.c: what every file of the tokenizer shares about
 * the vocabulary: the text -> id map (FNV-1a over the token's text, open
 * addressing; built once at load, probed by the special tokens, the SPM and
 * BPE merges) and the growing id vector an encode appends to.
 *
 * Part: models/. The lowest file of the tokenizer: it calls none of
 * tokenizer.c, tokenizer_spm.c, tokenizer_bpe.c, tokenizer_decode.c, and
 * they call it (declared in tokenizer_impl.h).
 */
#include "models/tokenizer.h"

#include <stdlib.h>
#include <string.h>

#include "models/tokenizer_impl.h"

/* FNV-1a over bytes */
static uint32_t text_hash(const char *s, size_t len)
{
	uint32_t h = 2166136261u;
	for (size_t i = 0; i < len; i++) {
		h ^= (unsigned char)s[i];
		h *= 16777619u;
	}
	return h;
}

shoal_err tokenizer__map_build(shoal_tokenizer *t)
{
	/* Load factor at most 1/2: capacity is the power of two >= 2 n, but
	 * at most 2^31 (doubling once more would wrap to 0): n_vocab is below
	 * 2^31 (checked at load), so even then a free slot remains. */
	uint32_t cap = 16;
	while (cap < 2 * (uint64_t)t->n_vocab && cap < (UINT32_C(1) << 31))
		cap *= 2;
	t->map = malloc((size_t)cap * sizeof *t->map);
	if (!t->map)
		return SHOAL_ERR_NOMEM;
	for (uint32_t i = 0; i < cap; i++)
		t->map[i].id = -1;
	t->map_mask = cap - 1;
	for (uint32_t id = 0; id < t->n_vocab; id++) {
		uint32_t off = t->text_off[id], len = t->text_off[id + 1] - off;
		uint32_t h = text_hash(t->text + off, len);
		uint32_t i = h & t->map_mask;
		for (;; i = (i + 1) & t->map_mask) {
			const tokenizer__slot *e = &t->map[i];
			if (e->id < 0)
				break;
			if (e->hash == h && e->len == len &&
			    !memcmp(t->text + e->off, t->text + off, len))
				break; /* a duplicate text: the later id wins */
		}
		t->map[i] = (tokenizer__slot){h, (int32_t)id, off, len};
	}
	return SHOAL_OK;
}

int32_t tokenizer__find(const struct shoal_tokenizer *t, const char *s, size_t len)
{
	uint32_t h = text_hash(s, len);
	for (uint32_t i = h & t->map_mask;; i = (i + 1) & t->map_mask) {
		const tokenizer__slot *e = &t->map[i];
		if (e->id < 0)
			return -1;
		if (e->hash == h && e->len == len && !memcmp(t->text + e->off, s, len))
			return e->id;
	}
}

shoal_err tokenizer__push(tokenizer__out *o, int32_t id)
{
	if (o->n == o->cap) {
		size_t cap = o->cap ? o->cap * 2 : 64;
		if (cap > SIZE_MAX / sizeof *o->ids)
			return SHOAL_ERR_NOMEM;
		int32_t *p = realloc(o->ids, cap * sizeof *p);
		if (!p)
			return SHOAL_ERR_NOMEM;
		o->ids = p;
		o->cap = cap;
	}
	o->ids[o->n++] = id;
	return SHOAL_OK;
}

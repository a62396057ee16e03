/*
 * models/tokenizer_spm.c: SentencePiece-style BPE over token scores, for
 * vocabularies with tokenizer.ggml.model = "llama" (Llama 1/2, Mistral...).
 *
 * Part: models/. The text's spaces become U+2581 (a leading one is added
 * when the vocabulary asks for it), every UTF-8 character starts as one
 * symbol, and the adjacent pair whose concatenation is the vocabulary token
 * with the highest score is merged first (ties: the leftmost pair), until
 * no pair is a token. A symbol that is not a token comes out as its bytes'
 * <0xXX> tokens (byte fallback).
 */
#include <stdlib.h>
#include <string.h>

#include "models/tokenizer.h"
#include "models/tokenizer_impl.h"

typedef struct spm_sym {
	uint32_t start, len; /* bytes of the escaped text; len 0: merged away */
	int32_t prev, next;  /* neighbours, -1 at the ends */
} spm_sym;

typedef struct spm_bigram {
	int32_t left, right; /* symbol indices */
	float score;         /* of the token left+right would become */
	uint32_t size;       /* bytes of left+right when it was proposed */
} spm_bigram;

typedef struct spm_work {
	const struct shoal_tokenizer *t;
	const char *buf;
	spm_sym *sym;
	spm_bigram *heap;
	size_t n_heap;
} spm_work;

/* Heap order: higher score first; equal scores, the leftmost pair first. */
static bool spm_before(const spm_bigram *a, const spm_bigram *b)
{
	return a->score > b->score || (a->score == b->score && a->left < b->left);
}

TOKENIZER__HEAP_DEFINE(spm_heap, spm_bigram, spm_before)

static void spm_try_pair(spm_work *w, int32_t left, int32_t right)
{
	if (left < 0 || right < 0)
		return;
	const spm_sym *l = &w->sym[left], *r = &w->sym[right];
	uint32_t size = l->len + r->len; /* r starts where l ends */
	int32_t id = tokenizer__find(w->t, w->buf + l->start, size);
	if (id < 0)
		return;
	spm_heap_push(w->heap, &w->n_heap, (spm_bigram){left, right, w->t->score[id], size});
}

static shoal_err spm_emit(const struct shoal_tokenizer *t, const char *s, size_t len,
                          tokenizer__out *o)
{
	int32_t id = tokenizer__find(t, s, len);
	if (id >= 0)
		return tokenizer__push(o, id);
	for (size_t i = 0; i < len; i++) {
		id = t->byte_id[(unsigned char)s[i]];
		if (id < 0)
			id = t->unk;
		if (id < 0)
			continue; /* no byte tokens and no <unk>: nothing to say */
		shoal_err err = tokenizer__push(o, id);
		if (err)
			return err;
	}
	return SHOAL_OK;
}

/* Merge the symbols of buf[0..n) (one segment) and emit the result. */
static shoal_err spm_segment(spm_work *w, size_t n, tokenizer__out *o)
{
	int32_t n_sym = 0;
	for (size_t i = 0; i < n;) {
		/* One symbol per UTF-8 character; a byte that starts no valid
		 * character is a symbol of its own (the reference engine would
		 * swallow the bytes after it, which breaks round trips). */
		uint32_t cp;
		size_t cl = tokenizer__utf8_valid((const unsigned char *)w->buf + i, n - i, &cp);
		if (!cl)
			cl = 1;
		w->sym[n_sym] = (spm_sym){(uint32_t)i, (uint32_t)cl, n_sym - 1, n_sym + 1};
		n_sym++;
		i += cl;
	}
	if (n_sym == 0)
		return SHOAL_OK;
	w->sym[n_sym - 1].next = -1;
	w->n_heap = 0;
	for (int32_t i = 1; i < n_sym; i++)
		spm_try_pair(w, i - 1, i);

	while (w->n_heap) {
		spm_bigram b = spm_heap_pop(w->heap, &w->n_heap);
		spm_sym *l = &w->sym[b.left], *r = &w->sym[b.right];
		/* Stale: one side was merged away or grew since it was proposed. */
		if (l->len == 0 || r->len == 0 || l->len + r->len != b.size)
			continue;
		l->len += r->len;
		r->len = 0;
		l->next = r->next;
		if (r->next >= 0)
			w->sym[r->next].prev = b.left;
		spm_try_pair(w, l->prev, b.left);
		spm_try_pair(w, b.left, l->next);
	}
	shoal_err err = SHOAL_OK;
	for (int32_t i = 0; i >= 0 && !err; i = w->sym[i].next)
		err = spm_emit(w->t, w->buf + w->sym[i].start, w->sym[i].len, o);
	return err;
}

shoal_err tokenizer__spm_encode(const struct shoal_tokenizer *t, const char *text, size_t len,
                                bool space_prefix, tokenizer__out *o)
{
	/* Escaping at most triples the text (' ' -> U+2581, 3 bytes) and adds
	 * 3 bytes of prefix; offsets are 32-bit and the heap holds up to 3
	 * pairs per symbol (n-1 initial, 2 per merge): bound len so all fit. */
	if (len > (UINT32_MAX / 4) - 4)
		return SHOAL_ERR_RANGE;
	spm_work w = {.t = t};
	char *buf = malloc(3 * len + 3);
	size_t n = 0;
	if (!buf)
		return SHOAL_ERR_NOMEM;
	if (space_prefix) {
		memcpy(buf, "\xe2\x96\x81", 3);
		n = 3;
	}
	for (size_t i = 0; i < len; i++) {
		if (text[i] == ' ') {
			memcpy(buf + n, "\xe2\x96\x81", 3);
			n += 3;
		} else {
			buf[n++] = text[i];
		}
	}

	/* A barrier byte (one no multi-byte token contains, e.g. '\n' in
	 * Llama 2) never merges, so the text on either side of it merges
	 * independently: cutting there gives the same tokens, with heaps the
	 * size of a line instead of the whole text (2-3x faster on a book).
	 * Scratch is sized for the longest segment. */
	size_t longest = 0, seg = 0;
	for (size_t i = 0; i < n; i++) {
		unsigned char c = (unsigned char)buf[i];
		if (c < 0x80 && t->spm_barrier[c]) {
			if (i - seg > longest)
				longest = i - seg;
			seg = i + 1;
		}
	}
	if (n - seg > longest)
		longest = n - seg;

	shoal_err err = SHOAL_OK;
	w.sym = malloc((longest ? longest : 1) * sizeof *w.sym);
	w.heap = malloc((3 * longest + 1) * sizeof *w.heap);
	if (!w.sym || !w.heap) {
		err = SHOAL_ERR_NOMEM;
		goto out;
	}
	seg = 0;
	for (size_t i = 0; i <= n && !err; i++) {
		unsigned char c = i < n ? (unsigned char)buf[i] : 0;
		if (i < n && !(c < 0x80 && t->spm_barrier[c]))
			continue;
		w.buf = buf + seg;
		err = spm_segment(&w, i - seg, o);
		if (!err && i < n)
			err = spm_emit(t, buf + i, 1, o);
		seg = i + 1;
	}
out:
	free(w.heap);
	free(w.sym);
	free(buf);
	return err;
}

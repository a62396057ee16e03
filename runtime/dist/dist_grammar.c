/*
 * runtime/dist/dist_grammar.c: structured output at the last stage: a
 * session's grammar (models/grammar.h) turned into the sampler's filter.
 *
 * Part: runtime/ (distributed inference). The stage keeps each token's
 * bytes (its vocabulary table, built once per text mode from the model's
 * tokenizer on the first constrained OPEN); a session keeps its grammar
 * program and the matcher's state after the tokens generated so far. A
 * replay's OPEN carries those tokens (dist.h), so the state is rebuilt
 * from them alone: the same tokens, the same state, the same draws.
 * End-of-generation ids take no bytes: they may come only where the
 * document is whole. Tokens with no bytes (control tokens outside the
 * text) never may.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "runtime/dist/dist_impl.h"

/* Each token's bytes in one mode (special: control tokens show their text). */
static shoal_err vocab_build(dist__gvocab *v, const shoal_tokenizer *tok, uint32_t n_vocab,
                             bool special)
{
	size_t cap = (size_t)n_vocab * 8u, used = 0;
	v->off = malloc(((size_t)n_vocab + 1) * sizeof *v->off);
	v->eog = calloc(n_vocab, 1);
	v->plain = calloc(n_vocab, 1);
	v->bytes = malloc(cap);
	if (!v->off || !v->eog || !v->plain || !v->bytes)
		return SHOAL_ERR_NOMEM;
	for (uint32_t id = 0; id < n_vocab; id++) {
		v->off[id] = (uint32_t)used;
		v->eog[id] = shoal_tokenizer_is_eog(tok, (int32_t)id);
		if (v->eog[id])
			continue;
		for (;;) {
			size_t n = shoal_tokenizer_piece(tok, (int32_t)id, special,
			                                 (char *)v->bytes + used, cap - used);
			if (n <= cap - used) {
				used += n;
				break;
			}
			uint8_t *b = realloc(v->bytes, cap * 2 + n);
			if (!b)
				return SHOAL_ERR_NOMEM;
			v->bytes = b;
			cap = cap * 2 + n;
		}
		if (used > UINT32_MAX / 2)
			return SHOAL_ERR_RANGE;
	}
	v->off[n_vocab] = (uint32_t)used;
	for (uint32_t id = 0; id < n_vocab; id++) {
		bool plain = v->off[id + 1] > v->off[id];
		for (uint32_t i = v->off[id]; plain && i < v->off[id + 1]; i++)
			plain = v->bytes[i] >= 0x20 && v->bytes[i] < 0x7f && v->bytes[i] != '"' &&
			        v->bytes[i] != '\\';
		v->plain[id] = plain;
	}
	v->n_vocab = n_vocab;
	v->ready = true;
	return SHOAL_OK;
}

void dist__gvocab_fini(dist__gvocab *v)
{
	free(v->off);
	free(v->eog);
	free(v->plain);
	free(v->bytes);
	memset(v, 0, sizeof *v);
}

shoal_err dist__grammar_open(shoal_dist_stage *s, dist__sess *ss, const dist__ctl *c, char *w,
                             size_t w_len)
{
	if (!c->sp.n_grammar)
		return SHOAL_OK;
	if (!s->cfg.tok)
		return shoal_why(w, w_len, SHOAL_ERR_UNSUPPORTED,
		                 "structured output: this stage has no tokenizer of the model");
	/* the head may have more rows than the tokenizer has tokens (padding):
	 * those never fit */
	uint32_t nv = shoal_tokenizer_n_vocab(s->cfg.tok);
	nv = nv < s->n_vocab ? nv : s->n_vocab;
	bool special = shoal_grammar_flags(c->sp.grammar) & SHOAL_GRAMMAR_SPECIAL;
	dist__gvocab *v = &s->gv[special];
	if (!v->ready) {
		shoal_err e = vocab_build(v, s->cfg.tok, nv, special);
		if (e) {
			dist__gvocab_fini(v);
			return shoal_why(w, w_len, e, "structured output: the token table");
		}
	}
	ss->gram = malloc((size_t)c->sp.n_grammar * sizeof *ss->gram);
	ss->gsnap = malloc(DIST__SPEC_ROWS * sizeof *ss->gsnap); /* dist_verify.c */
	if (!ss->gram || !ss->gsnap)
		return shoal_why(w, w_len, SHOAL_ERR_NOMEM, "structured output: the grammar");
	memcpy(ss->gram, c->sp.grammar, (size_t)c->sp.n_grammar * sizeof *ss->gram);
	ss->gvocab = v;
	shoal_grammar_start(ss->gram, &ss->gst);
	for (uint32_t i = 0; i < c->n_done; i++) {
		int32_t id = c->done[i];
		if (id < 0 || (uint32_t)id >= v->n_vocab || v->eog[id] ||
		    !shoal_grammar_feed(ss->gram, &ss->gst, v->bytes + v->off[id],
		                        v->off[id + 1] - v->off[id]))
			return shoal_why(
			    w, w_len, SHOAL_ERR_FORMAT,
			    "structured output: replayed token %u (id %d) does not fit "
			    "the grammar",
			    i, id);
	}
	return SHOAL_OK;
}

void dist__grammar_close(dist__sess *ss)
{
	free(ss->gram);
	free(ss->gsnap);
	ss->gram = NULL;
	ss->gsnap = NULL;
	ss->gvocab = NULL;
}

static bool allow(void *ctx, int32_t id)
{
	const dist__sess *ss = ctx;
	const dist__gvocab *v = ss->gvocab;
	if (id < 0 || (uint32_t)id >= v->n_vocab)
		return false;
	if (v->eog[id])
		return shoal_grammar_done(ss->gram, &ss->gst);
	uint32_t n = v->off[id + 1] - v->off[id];
	shoal_grammar_state t = ss->gst;
	return n && shoal_grammar_feed(ss->gram, &t, v->bytes + v->off[id], n);
}

/* Most tokens fail on their first byte: one table lookup each; inside a
 * string most fit, and a token of plain bytes fits whenever its length
 * does (the string's room); only the others are fed whole. */
static void mask(void *ctx, float *logits, uint32_t n)
{
	const dist__sess *ss = ctx;
	const dist__gvocab *v = ss->gvocab;
	bool first[256];
	shoal_grammar_first(ss->gram, &ss->gst, first);
	bool done = shoal_grammar_done(ss->gram, &ss->gst);
	uint32_t room = shoal_grammar_plain_room(ss->gram, &ss->gst);
	for (uint32_t id = 0; id < n; id++) {
		if (logits[id] == -INFINITY)
			continue;
		if (id >= v->n_vocab) {
			logits[id] = -INFINITY;
			continue;
		}
		uint32_t len = v->off[id + 1] - v->off[id];
		const uint8_t *b = v->bytes + v->off[id];
		bool ok;
		if (v->eog[id])
			ok = done;
		else if (!len || !first[b[0]])
			ok = false;
		else if (v->plain[id] && len <= room) /* inside a string: no need to feed */
			ok = true;
		else if (len == 1)
			ok = true;
		else {
			shoal_grammar_state t = ss->gst;
			ok = shoal_grammar_feed(ss->gram, &t, b, len);
		}
		if (!ok)
			logits[id] = -INFINITY;
	}
}

shoal_sampler_filter dist__grammar_filter(dist__sess *ss)
{
	return (shoal_sampler_filter){.allow = allow, .mask = mask, .ctx = ss};
}

void dist__grammar_advance(dist__sess *ss, int32_t id)
{
	const dist__gvocab *v = ss->gvocab;
	if (id < 0 || (uint32_t)id >= v->n_vocab || v->eog[id])
		return;
	/* the sampler chose it under the filter: it fits */
	(void)shoal_grammar_feed(ss->gram, &ss->gst, v->bytes + v->off[id],
	                         v->off[id + 1] - v->off[id]);
}

/*
 * models/tokenizer_decode.c: token ids back to text: one token's piece,
 * a whole sequence, and the streaming detokenizer that only lets whole
 * UTF-8 characters out.
 *
 * Part: models/. The bytes of every token were decoded once when the
 * tokenizer was built (tokenizer.c), so nothing here allocates per token.
 */
#include <stdlib.h>
#include <string.h>

#include "models/tokenizer.h"
#include "models/tokenizer_impl.h"

/* The bytes of token id (pointer into t->piece), honouring `special`. */
static size_t tok_piece_ref(const shoal_tokenizer *t, int32_t id, bool special, const char **p)
{
	if (id < 0 || (uint32_t)id >= t->n_vocab)
		return 0;
	if (!special && (t->attr[id] & (TOKENIZER__CONTROL | TOKENIZER__UNKNOWN)))
		return 0;
	*p = t->piece + t->piece_off[id];
	return t->piece_off[id + 1] - t->piece_off[id];
}

/* Whether decoding strips the space SentencePiece put before the text. */
static bool tok_strips_space(const shoal_tokenizer *t)
{
	return t->kind == TOKENIZER__SPM && t->add_space_prefix;
}

size_t shoal_tokenizer_piece(const shoal_tokenizer *t, int32_t id, bool special, char *buf,
                             size_t cap)
{
	const char *p = NULL;
	size_t n = tok_piece_ref(t, id, special, &p);
	if (n)
		memcpy(buf, p, n < cap ? n : cap);
	return n;
}

shoal_err shoal_tokenizer_decode(const shoal_tokenizer *t, const int32_t *ids, size_t n,
                                 bool special, char **text, size_t *len)
{
	size_t total = 0;
	*text = NULL;
	*len = 0;
	for (size_t i = 0; i < n; i++) {
		if (ids[i] < 0 || (uint32_t)ids[i] >= t->n_vocab)
			return SHOAL_ERR_RANGE;
		const char *p;
		size_t k = tok_piece_ref(t, ids[i], special, &p);
		if (total > SIZE_MAX - k - 1)
			return SHOAL_ERR_NOMEM;
		total += k;
	}
	char *out = malloc(total + 1);
	if (!out)
		return SHOAL_ERR_NOMEM;
	bool strip = tok_strips_space(t);
	size_t o = 0;
	for (size_t i = 0; i < n; i++) {
		const char *p = NULL;
		size_t k = tok_piece_ref(t, ids[i], special, &p);
		if (!k)
			continue;
		if (strip && p[0] == ' ') {
			p++;
			k--;
		}
		strip = false;
		memcpy(out + o, p, k);
		o += k;
	}
	out[o] = '\0';
	*text = out;
	*len = o;
	return SHOAL_OK;
}

/* ------------------------------------------------------------------------
 * streaming
 * ------------------------------------------------------------------------ */

void shoal_detok_init(shoal_detok *d, const shoal_tokenizer *t, bool special)
{
	memset(d, 0, sizeof *d);
	d->tok = t;
	d->first = tok_strips_space(t);
	d->special = special;
}

/* Bytes a UTF-8 character starting with lead byte c needs (2..4), or 0 if
 * c cannot start one. C0, C1 and F5..FF never occur in UTF-8. */
static size_t detok_need(unsigned char c)
{
	if (c >= 0xc2 && c <= 0xdf)
		return 2;
	if (c >= 0xe0 && c <= 0xef)
		return 3;
	if (c >= 0xf0 && c <= 0xf4)
		return 4;
	return 0;
}

/* Whether c may follow pending[0..len) (the second byte of E0, ED, F0, F4
 * has a narrower range: no overlong forms, no surrogates, <= U+10FFFF). */
static bool detok_cont_ok(const char *pending, size_t len, unsigned char c)
{
	if ((c & 0xc0) != 0x80)
		return false;
	if (len != 1)
		return true;
	switch ((unsigned char)pending[0]) {
	case 0xe0:
		return c >= 0xa0;
	case 0xed:
		return c <= 0x9f;
	case 0xf0:
		return c >= 0x90;
	case 0xf4:
		return c <= 0x8f;
	default:
		return true;
	}
}

static const char detok_fffd[3] = {'\xef', '\xbf', '\xbd'};

/* Append n bytes if they fit whole; once something does not fit, the
 * output is closed (*cap shrinks to what was written) so that later, shorter
 * characters do not come out of order. */
static bool detok_put(char *out, size_t *cap, size_t *o, const char *s, size_t n)
{
	if (*cap - *o < n) {
		*cap = *o;
		return false;
	}
	memcpy(out + *o, s, n);
	*o += n;
	return true;
}

size_t shoal_detok_push(shoal_detok *d, int32_t id, char *out, size_t cap)
{
	const char *p = NULL;
	size_t k = tok_piece_ref(d->tok, id, d->special, &p), o = 0;
	if (!k)
		return 0;
	if (d->first && p[0] == ' ') {
		p++;
		k--;
	}
	d->first = false;
	for (size_t i = 0; i < k; i++) {
		unsigned char c = (unsigned char)p[i];
		if (d->pending_len) {
			if (detok_cont_ok(d->pending, d->pending_len, c)) {
				d->pending[d->pending_len++] = (char)c;
				if (d->pending_len == detok_need((unsigned char)d->pending[0])) {
					detok_put(out, &cap, &o, d->pending, d->pending_len);
					d->pending_len = 0;
				}
				continue;
			}
			/* The character broke off: one U+FFFD for it, then
			 * read c afresh. */
			detok_put(out, &cap, &o, detok_fffd, 3);
			d->pending_len = 0;
		}
		if (c < 0x80) {
			char ch = (char)c;
			detok_put(out, &cap, &o, &ch, 1);
		} else if (detok_need(c)) {
			d->pending[0] = (char)c;
			d->pending_len = 1;
		} else {
			detok_put(out, &cap, &o, detok_fffd, 3);
		}
	}
	return o;
}

size_t shoal_detok_flush(shoal_detok *d, char *out, size_t cap)
{
	size_t o = 0;
	if (d->pending_len) {
		detok_put(out, &cap, &o, detok_fffd, 3);
		d->pending_len = 0;
	}
	return o;
}

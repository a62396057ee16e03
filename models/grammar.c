/*
 * models/grammar.c: the grammar program's layout, its check, and the
 * byte-level matcher (models/grammar.h).
 *
 * Part: models/. A program, in words:
 *   0 magic  1 n_nodes  2 root  3 n_aux  4 n_bytes  5 flags
 *   then n_nodes nodes of 6 words (kind, n, off, x, y, z),
 *   then n_aux operand words, then the byte pool (n_bytes, padded).
 * Nodes (operands at aux[off..]):
 *   LITS    n literals (byte offset, length, continuation node or NONE):
 *           one of them; after one with a continuation, that node
 *   STRING  a JSON string of x..y characters
 *   NUMBER  a JSON number (x = 1: an integer), digits bounded
 *   ARRAY   '[' x..y items of node z ']'
 *   OBJECT  n properties (key literal `"k":`, value node, required), in
 *           order, optional ones skippable; x = 1: any keys (string node
 *           y) with values of node z
 *   ALT     one of n nodes: the first that takes the next byte
 *   SEQ     n nodes in order
 * The matcher is a stack of frames (node, phase, a, b, c); a step on the
 * top frame takes the byte, pushes a child, or pops a frame that may end
 * (a number ends where a non-digit comes, which its parent then takes).
 * Every loop is bounded: DEPTH frames, STEP_BUDGET moves per byte.
 *
 * Divisions: the layout; the check; the steps; the entry points.
 */
#include "models/grammar.h"

#include <stdio.h>
#include <string.h>

#include "models/grammar_impl.h"

/* ---- the layout ---------------------------------------------------------- */

/* Moves without taking a byte, per byte: a push or pop per level of the
 * deepest stack twice over, and then some. */
#define STEP_BUDGET (4u * SHOAL_GRAMMAR_MAX_DEPTH)

typedef struct gnode {
	uint32_t kind, n, off, x, y, z;
} gnode;

static uint32_t n_nodes(const uint32_t *w)
{
	return w[1];
}

static gnode node_at(const uint32_t *w, uint32_t i)
{
	const uint32_t *p = w + GRAMMAR__HDR + 6u * i;
	return (gnode){p[0], p[1], p[2], p[3], p[4], p[5]};
}

static const uint32_t *aux(const uint32_t *w)
{
	return w + GRAMMAR__HDR + 6u * n_nodes(w);
}

static const uint8_t *pool(const uint32_t *w)
{
	return (const uint8_t *)(aux(w) + w[3]);
}

uint32_t shoal_grammar_flags(const uint32_t *w)
{
	return w[5];
}

/* ---- the check ------------------------------------------------------------ */

static bool range_ok(uint32_t off, uint32_t len, uint32_t cap)
{
	return off <= cap && len <= cap - off;
}

shoal_err shoal_grammar_check(const uint32_t *w, uint32_t n, char *why, size_t why_len)
{
	if (!w || n < GRAMMAR__HDR || n > SHOAL_GRAMMAR_MAX_WORDS || w[0] != GRAMMAR__MAGIC)
		return shoal_why(why, why_len, SHOAL_ERR_FORMAT, "grammar: %u words, no header", n);
	uint32_t nn = w[1], na = w[3], nb = w[4];
	uint64_t need = (uint64_t)GRAMMAR__HDR + 6ull * nn + na + ((uint64_t)nb + 3) / 4;
	if (nn == 0 || nn > UINT16_MAX || w[2] >= nn || need != n)
		return shoal_why(why, why_len, SHOAL_ERR_FORMAT,
		                 "grammar: %u nodes, root %u, %u operands, %u bytes in %u words",
		                 nn, w[2], na, nb, n);
	const uint32_t *ax = aux(w);
	for (uint32_t i = 0; i < nn; i++) {
		gnode d = node_at(w, i);
		bool ok = true;
		switch (d.kind) {
		case GRAMMAR__LITS:
			ok = d.n <= na / 3 && range_ok(d.off, 3u * d.n, na);
			for (uint32_t j = 0; ok && j < d.n; j++) {
				const uint32_t *l = ax + d.off + 3u * j;
				ok = range_ok(l[0], l[1], nb) &&
				     (l[2] == GRAMMAR__NONE || l[2] < nn);
			}
			break;
		case GRAMMAR__STRING:
		case GRAMMAR__NUMBER:
			break;
		case GRAMMAR__ARRAY:
			ok = d.z < nn;
			break;
		case GRAMMAR__OBJECT:
			ok = d.n <= na / 4 && range_ok(d.off, 4u * d.n, na) &&
			     (!(d.x & 1) || (d.y < nn && d.z < nn));
			for (uint32_t j = 0; ok && j < d.n; j++) {
				const uint32_t *p = ax + d.off + 4u * j;
				ok = range_ok(p[0], p[1], nb) && p[1] > 0 && p[2] < nn;
			}
			break;
		case GRAMMAR__ALT:
		case GRAMMAR__SEQ:
			ok = range_ok(d.off, d.n, na);
			for (uint32_t j = 0; ok && j < d.n; j++)
				ok = ax[d.off + j] < nn;
			break;
		default:
			ok = false;
		}
		if (!ok)
			return shoal_why(why, why_len, SHOAL_ERR_FORMAT,
			                 "grammar: node %u (kind %u) is malformed", i, d.kind);
	}
	return SHOAL_OK;
}

/* ---- the steps ------------------------------------------------------------- */

enum { R_REJECT, R_TAKE, R_DONE, R_PUSH, R_POP };

static shoal_grammar_frame frame_of(uint32_t node)
{
	return (shoal_grammar_frame){.node = (uint16_t)node};
}

static bool push(shoal_grammar_state *st, uint32_t node)
{
	if (st->depth >= SHOAL_GRAMMAR_MAX_DEPTH)
		return false;
	st->f[st->depth++] = frame_of(node);
	return true;
}

/* Literal j of LITS node d: its bytes and length. */
static const uint8_t *lit(const uint32_t *w, const gnode *d, uint32_t j, uint32_t *len,
                          uint32_t *cont)
{
	const uint32_t *l = aux(w) + d->off + 3u * j;
	*len = l[1];
	if (cont)
		*cont = l[2];
	return pool(w) + l[0];
}

/* Whether some literal other than the current one extends its first p
 * bytes by at least one more. */
static bool lits_extend(const uint32_t *w, const gnode *d, uint32_t cur, uint32_t p)
{
	uint32_t lc, lj;
	const uint8_t *bc = lit(w, d, cur, &lc, NULL);
	for (uint32_t j = 0; j < d->n; j++) {
		const uint8_t *bj = lit(w, d, j, &lj, NULL);
		if (lj > p && !memcmp(bj, bc, p))
			return true;
	}
	return false;
}

static int step_lits(const uint32_t *w, const gnode *d, shoal_grammar_frame *f, uint8_t c)
{
	uint32_t p = f->b, lc = 0, cont;
	const uint8_t *bc = d->n ? lit(w, d, f->a, &lc, NULL) : NULL;
	for (uint32_t j = 0; j < d->n; j++) {
		uint32_t lj;
		const uint8_t *bj = lit(w, d, j, &lj, &cont);
		if (lj <= p || bj[p] != c || (p && memcmp(bj, bc, p)))
			continue;
		f->a = j;
		f->b = p + 1;
		if (f->b < lj)
			return R_TAKE;
		if (cont != GRAMMAR__NONE) { /* the literal's continuation */
			*f = frame_of(cont);
			return R_TAKE;
		}
		return lits_extend(w, d, j, f->b) ? R_TAKE : R_DONE;
	}
	return p && lc == p ? R_POP : R_REJECT;
}

static bool lits_may_end(const uint32_t *w, const gnode *d, const shoal_grammar_frame *f)
{
	uint32_t lc, cont;
	if (!f->b || !d->n)
		return false;
	lit(w, d, f->a, &lc, &cont);
	return lc == f->b && cont == GRAMMAR__NONE;
}

/* String phases; a \u escape of a high surrogate must be followed by one
 * of a low surrogate (S_LBS, S_LU, S_HEX2), a lone one is refused: every
 * JSON parser then reads the text (jansson refuses lone surrogates). */
enum { S_OPEN, S_BODY, S_ESC, S_UTF8, S_HEX, S_LBS, S_LU, S_HEX2 };

/* UTF-8 lead byte c: continuation bytes (0: not a lead) and the range of
 * the first one (overlong forms, surrogates and > U+10FFFF excluded). */
static uint32_t utf8_lead(uint8_t c, uint32_t *restrict_)
{
	*restrict_ = 0;
	if (c >= 0xc2 && c <= 0xdf)
		return 1;
	if (c >= 0xe0 && c <= 0xef) {
		*restrict_ = c == 0xe0 ? 1 : c == 0xed ? 2 : 0;
		return 2;
	}
	if (c >= 0xf0 && c <= 0xf4) {
		*restrict_ = c == 0xf0 ? 3 : c == 0xf4 ? 4 : 0;
		return 3;
	}
	return 0;
}

static int step_string(const gnode *d, shoal_grammar_frame *f, uint8_t c)
{
	static const uint8_t lo[5] = {0x80, 0xa0, 0x80, 0x90, 0x80};
	static const uint8_t hi[5] = {0xbf, 0xbf, 0x9f, 0xbf, 0x8f};
	switch (f->phase) {
	case S_OPEN:
		if (c != '"')
			return R_REJECT;
		f->phase = S_BODY;
		return R_TAKE;
	case S_BODY:
		if (c == '"')
			return f->a >= d->x ? R_DONE : R_REJECT;
		if (f->a >= d->y || c < 0x20 || c == 0x7f)
			return R_REJECT;
		if (c == '\\') {
			f->phase = S_ESC;
			return R_TAKE;
		}
		if (c >= 0x80) {
			uint32_t r;
			if (!(f->b = utf8_lead(c, &r)))
				return R_REJECT;
			f->c = r;
			f->phase = S_UTF8;
		}
		f->a++;
		return R_TAKE;
	case S_ESC:
		if (c == 'u') {
			f->phase = S_HEX;
			f->b = f->c = 0;
			return R_TAKE;
		}
		if (!strchr("\"\\/bfnrt", c) || !c)
			return R_REJECT;
		f->a++;
		f->phase = S_BODY;
		return R_TAKE;
	case S_UTF8:
		if (c < lo[f->c] || c > hi[f->c])
			return R_REJECT;
		f->c = 0;
		if (--f->b == 0)
			f->phase = S_BODY;
		return R_TAKE;
	case S_HEX:
	case S_HEX2: {
		uint32_t v = c >= '0' && c <= '9'   ? (uint32_t)(c - '0')
		             : c >= 'a' && c <= 'f' ? (uint32_t)(c - 'a' + 10)
		             : c >= 'A' && c <= 'F' ? (uint32_t)(c - 'A' + 10)
		                                    : 16u;
		if (v == 16)
			return R_REJECT;
		f->c = f->c * 16 + v;
		if (++f->b < 4)
			return R_TAKE;
		bool high = f->c >= 0xd800 && f->c <= 0xdbff,
		     low = f->c >= 0xdc00 && f->c <= 0xdfff;
		if (f->phase == S_HEX ? low : !low)
			return R_REJECT;
		if (f->phase == S_HEX && high) {
			f->phase = S_LBS;
			return R_TAKE;
		}
		f->c = 0;
		f->a++;
		f->phase = S_BODY;
		return R_TAKE;
	}
	case S_LBS:
		if (c != '\\')
			return R_REJECT;
		f->phase = S_LU;
		return R_TAKE;
	case S_LU:
		if (c != 'u')
			return R_REJECT;
		f->phase = S_HEX2;
		f->b = f->c = 0;
		return R_TAKE;
	}
	return R_REJECT;
}

/* Number phases: 0 start, 1 after '-', 2 a leading 0, 3 integer digits,
 * 4 after '.', 5 fraction digits, 6 after 'e', 7 after its sign, 8
 * exponent digits. 2, 3, 5, 8 may end. */
static bool number_may_end(uint32_t phase)
{
	return phase == 2 || phase == 3 || phase == 5 || phase == 8;
}

static int step_number(const gnode *d, shoal_grammar_frame *f, uint8_t c)
{
	bool digit = c >= '0' && c <= '9', integer = d->x & 1;
	bool frac = !integer && c == '.', exp = !integer && (c == 'e' || c == 'E');
	uint32_t ph = f->phase;
	if ((ph == 0 || ph == 1) && digit) {
		f->phase = c == '0' ? 2 : 3;
		f->a = 1;
		return R_TAKE;
	}
	if (ph == 0 && c == '-') {
		f->phase = 1;
		return R_TAKE;
	}
	if ((ph == 3 || ph == 5) && digit && f->a < SHOAL_GRAMMAR_MAX_DIGITS) {
		f->a++;
		return R_TAKE;
	}
	if ((ph == 2 || ph == 3) && frac) {
		f->phase = 4;
		return R_TAKE;
	}
	if ((ph == 2 || ph == 3 || ph == 5) && exp) {
		f->phase = 6;
		return R_TAKE;
	}
	if ((ph == 4 || ph == 6 || ph == 7) && digit) {
		f->phase = ph == 4 ? 5 : 8;
		f->a = 1;
		return R_TAKE;
	}
	if (ph == 6 && (c == '+' || c == '-')) {
		f->phase = 7;
		return R_TAKE;
	}
	if (ph == 8 && digit && f->a < 2) {
		f->a++;
		return R_TAKE;
	}
	return number_may_end(ph) ? R_POP : R_REJECT;
}

enum { A_OPEN, A_FIRST, A_AFTER, A_COMMA, A_IN };

static int step_array(const gnode *d, shoal_grammar_state *st, shoal_grammar_frame *f, uint8_t c)
{
	switch (f->phase) {
	case A_OPEN:
		if (c != '[')
			return R_REJECT;
		f->phase = A_FIRST;
		return R_TAKE;
	case A_FIRST:
		if (c == ']' && d->x == 0)
			return R_DONE;
		if (d->y == 0)
			return R_REJECT;
		f->phase = A_IN;
		return push(st, d->z) ? R_PUSH : R_REJECT;
	case A_AFTER:
		if (c == ',' && f->a < d->y) {
			f->phase = A_COMMA;
			return R_TAKE;
		}
		return c == ']' && f->a >= d->x ? R_DONE : R_REJECT;
	case A_COMMA:
		f->phase = A_IN;
		return push(st, d->z) ? R_PUSH : R_REJECT;
	}
	return R_REJECT;
}

enum { O_OPEN, O_FIRST, O_KEY, O_AFTER, O_COMMA, O_VALUE, O_IN, O_GKEY, O_COLON, O_GVAL, O_GIN };

/* Property j of OBJECT d: key bytes, length, value node, required. */
static const uint8_t *prop(const uint32_t *w, const gnode *d, uint32_t j, uint32_t *len,
                           uint32_t *child, bool *req)
{
	const uint32_t *p = aux(w) + d->off + 4u * j;
	*len = p[1];
	if (child)
		*child = p[2];
	if (req)
		*req = p[3] != 0;
	return pool(w) + p[0];
}

/* Whether the properties from i on are all optional. */
static bool rest_optional(const uint32_t *w, const gnode *d, uint32_t i)
{
	for (uint32_t j = i; j < d->n; j++) {
		uint32_t len;
		bool req;
		prop(w, d, j, &len, NULL, &req);
		if (req)
			return false;
	}
	return true;
}

/* The key candidate after the current one's first p bytes that takes byte
 * c: properties from f->a up to the first required one. */
static bool key_take(const uint32_t *w, const gnode *d, shoal_grammar_frame *f, uint8_t c)
{
	uint32_t p = f->b, lc = 0;
	const uint8_t *bc = p ? prop(w, d, f->c, &lc, NULL, NULL) : NULL;
	for (uint32_t j = f->a; j < d->n; j++) {
		uint32_t lj;
		bool req;
		const uint8_t *bj = prop(w, d, j, &lj, NULL, &req);
		if (lj > p && bj[p] == c && (!p || !memcmp(bj, bc, p))) {
			f->c = j;
			f->b = p + 1;
			if (f->b == lj)
				f->phase = O_VALUE;
			return true;
		}
		if (req)
			break;
	}
	return false;
}

static int step_object(const uint32_t *w, const gnode *d, shoal_grammar_state *st,
                       shoal_grammar_frame *f, uint8_t c)
{
	bool any = d->x & 1;
	uint32_t child;
	switch (f->phase) {
	case O_OPEN:
		if (c != '{')
			return R_REJECT;
		f->phase = O_FIRST;
		return R_TAKE;
	case O_FIRST:
	case O_COMMA:
		if (f->phase == O_FIRST && c == '}' && (any || rest_optional(w, d, f->a)))
			return R_DONE;
		if (any) {
			f->phase = O_GKEY;
			return push(st, d->y) ? R_PUSH : R_REJECT;
		}
		f->b = 0;
		f->phase = O_KEY;
		return key_take(w, d, f, c) ? R_TAKE : R_REJECT;
	case O_KEY:
		return key_take(w, d, f, c) ? R_TAKE : R_REJECT;
	case O_VALUE: {
		uint32_t len;
		prop(w, d, f->c, &len, &child, NULL);
		f->phase = O_IN;
		return push(st, child) ? R_PUSH : R_REJECT;
	}
	case O_AFTER:
		if (c == ',' && (any || f->a < d->n)) {
			f->phase = O_COMMA;
			return R_TAKE;
		}
		return c == '}' && (any || rest_optional(w, d, f->a)) ? R_DONE : R_REJECT;
	case O_COLON:
		if (c != ':')
			return R_REJECT;
		f->phase = O_GVAL;
		return R_TAKE;
	case O_GVAL:
		f->phase = O_GIN;
		return push(st, d->z) ? R_PUSH : R_REJECT;
	}
	return R_REJECT;
}

/* The top frame's child finished: true if the frame is finished too. */
static bool child_done(const uint32_t *w, shoal_grammar_frame *f)
{
	gnode d = node_at(w, f->node);
	switch (d.kind) {
	case GRAMMAR__ARRAY:
		f->a++;
		f->phase = A_AFTER;
		return false;
	case GRAMMAR__OBJECT:
		if (f->phase == O_IN)
			f->a = f->c + 1;
		f->phase = f->phase == O_GKEY ? O_COLON : O_AFTER;
		return false;
	case GRAMMAR__SEQ:
		return ++f->a >= d.n;
	default:
		return false; /* not reached: only these push */
	}
}

static void pop(const uint32_t *w, shoal_grammar_state *st)
{
	while (st->depth > 0) {
		st->depth--;
		if (!st->depth || !child_done(w, &st->f[st->depth - 1]))
			return;
	}
}

static bool feed_byte(const uint32_t *w, shoal_grammar_state *st, uint8_t c, uint32_t *budget)
{
	while ((*budget)-- > 0 && st->depth > 0) {
		shoal_grammar_frame *f = &st->f[st->depth - 1];
		gnode d = node_at(w, f->node);
		int r = R_REJECT;
		switch (d.kind) {
		case GRAMMAR__LITS:
			r = step_lits(w, &d, f, c);
			break;
		case GRAMMAR__STRING:
			r = step_string(&d, f, c);
			break;
		case GRAMMAR__NUMBER:
			r = step_number(&d, f, c);
			break;
		case GRAMMAR__ARRAY:
			r = step_array(&d, st, f, c);
			break;
		case GRAMMAR__OBJECT:
			r = step_object(w, &d, st, f, c);
			break;
		case GRAMMAR__SEQ:
			if (f->a >= d.n)
				r = R_POP;
			else
				r = push(st, aux(w)[d.off + f->a]) ? R_PUSH : R_REJECT;
			break;
		case GRAMMAR__ALT:
			/* the first branch that takes c (a schema's branches begin
			 * with different bytes: at most one does) */
			for (uint32_t j = 0; j < d.n; j++) {
				shoal_grammar_state t = *st;
				t.f[t.depth - 1] = frame_of(aux(w)[d.off + j]);
				if (feed_byte(w, &t, c, budget)) {
					*st = t;
					return true;
				}
			}
			return false;
		}
		switch (r) {
		case R_TAKE:
			return true;
		case R_DONE:
			pop(w, st);
			return true;
		case R_POP:
			pop(w, st);
			break;
		case R_PUSH:
			break;
		default:
			return false;
		}
	}
	return false;
}

/* ---- the entry points ------------------------------------------------------ */

void shoal_grammar_start(const uint32_t *w, shoal_grammar_state *st)
{
	st->depth = 1;
	st->f[0] = frame_of(w[2]);
}

bool shoal_grammar_feed(const uint32_t *w, shoal_grammar_state *st, const uint8_t *b, size_t n)
{
	for (size_t i = 0; i < n; i++) {
		uint32_t budget = STEP_BUDGET;
		if (!feed_byte(w, st, b[i], &budget))
			return false;
	}
	return true;
}

bool shoal_grammar_done(const uint32_t *w, const shoal_grammar_state *st0)
{
	shoal_grammar_state st = *st0;
	for (uint32_t guard = 0; st.depth > 0 && guard < STEP_BUDGET; guard++) {
		shoal_grammar_frame *f = &st.f[st.depth - 1];
		gnode d = node_at(w, f->node);
		bool ends = (d.kind == GRAMMAR__NUMBER && number_may_end(f->phase)) ||
		            (d.kind == GRAMMAR__LITS && lits_may_end(w, &d, f)) ||
		            (d.kind == GRAMMAR__SEQ && f->a >= d.n);
		if (!ends)
			return false;
		pop(w, &st);
	}
	return st.depth == 0;
}

uint32_t shoal_grammar_plain_room(const uint32_t *w, const shoal_grammar_state *st)
{
	if (!st->depth)
		return 0;
	const shoal_grammar_frame *f = &st->f[st->depth - 1];
	gnode d = node_at(w, f->node);
	if (d.kind != GRAMMAR__STRING || f->phase != S_BODY)
		return 0;
	if (d.y == GRAMMAR__NONE)
		return UINT32_MAX;
	return d.y > f->a ? d.y - f->a : 0;
}

void shoal_grammar_first(const uint32_t *w, const shoal_grammar_state *st, bool first[256])
{
	for (int c = 0; c < 256; c++) {
		shoal_grammar_state t = *st;
		uint8_t b = (uint8_t)c;
		first[c] = shoal_grammar_feed(w, &t, &b, 1);
	}
}

/*
 * models/reply.c: a chat reply read as reasoning and answer
 * (models/reply.h).
 *
 * Part: models/. Divisions: growing strings; THINK; HARMONY.
 */
#include "models/reply.h"

#include <stdlib.h>
#include <string.h>

/* ----------------------------------------------------------- growing strings */

typedef struct rp_str {
	char *s;
	size_t n, cap;
	bool oom;
} rp_str;

static void put(rp_str *b, const char *p, size_t n)
{
	if (b->oom || !n)
		return;
	if (b->n + n + 1 > b->cap) {
		size_t cap = b->cap ? b->cap : 64;
		while (cap < b->n + n + 1)
			cap *= 2;
		char *s = realloc(b->s, cap);
		if (!s) {
			b->oom = true;
			return;
		}
		b->s = s;
		b->cap = cap;
	}
	memcpy(b->s + b->n, p, n);
	b->n += n;
	b->s[b->n] = 0;
}

static void puts_(rp_str *b, const char *s)
{
	put(b, s, strlen(s));
}

static bool is_ws(char c)
{
	return c == ' ' || c == '\n' || c == '\t' || c == '\r';
}

/* Whether p[n] is a proper prefix of s (the text ended inside it). */
static bool prefix_of(const char *p, size_t n, const char *s)
{
	return n < strlen(s) && !memcmp(p, s, n);
}

static bool starts(const char *p, size_t n, const char *s)
{
	size_t l = strlen(s);
	return n >= l && !memcmp(p, s, l);
}

static const char *find(const char *p, size_t n, const char *s)
{
	size_t l = strlen(s);
	for (size_t i = 0; i + l <= n; i++)
		if (p[i] == s[0] && !memcmp(p + i, s, l))
			return p + i;
	return NULL;
}

/* The length of p[n]'s longest proper suffix that is a proper prefix of
 * one of the markers (NULL-terminated list): the bytes to hold back. */
static size_t held_tail(const char *p, size_t n, const char *const *marks)
{
	for (size_t k = n < 16 ? n : 16; k > 0; k--)
		for (size_t m = 0; marks[m]; m++)
			if (prefix_of(p + n - k, k, marks[m]))
				return k;
	return 0;
}

/* ---------------------------------------------------------------------- THINK */

static void split_think(const char *t, size_t len, bool final, rp_str *r, rp_str *c,
                        size_t *settled)
{
	static const char *const close_mark[] = {"</think>", NULL};
	size_t i = 0;
	while (i < len && is_ws(t[i]))
		i++;
	if (!final && prefix_of(t + i, len - i, "<think>")) {
		*settled = 0; /* it may open reasoning */
		return;
	}
	if (!starts(t + i, len - i, "<think>")) {
		put(c, t, len);
		*settled = len;
		return;
	}
	size_t r0 = i + 7;
	const char *e = find(t + r0, len - r0, "</think>");
	size_t r1 = e ? (size_t)(e - t) : len;
	size_t hold = 0;
	if (!e && !final)
		hold = held_tail(t + r0, r1 - r0, close_mark);
	size_t a = r0, b = r1 - hold;
	while (a < b && is_ws(t[a]))
		a++;
	size_t kept = b; /* white space at the end waits: a trim may drop it */
	while (kept > a && is_ws(t[kept - 1]))
		kept--;
	put(r, t + a, kept - a);
	if (!e) {
		*settled = final ? len : kept;
		return;
	}
	size_t c0 = r1 + 8;
	while (c0 < len && is_ws(t[c0]))
		c0++;
	put(c, t + c0, len - c0);
	*settled = len;
}

/* -------------------------------------------------------------------- HARMONY */

#define H_START   "<|start|>"
#define H_CHANNEL "<|channel|>"
#define H_MESSAGE "<|message|>"
#define H_END     "<|end|>"

static const char *const h_marks[] = {H_START,      H_CHANNEL,  H_MESSAGE,       H_END,
                                      "<|return|>", "<|call|>", "<|constrain|>", NULL};

/* The end of a body that starts at p[0..n): the first of <|end|>,
 * <|start|> or <|channel|> (a message the model did not end), or n. */
static size_t body_end(const char *p, size_t n, size_t *skip)
{
	size_t best = n;
	*skip = 0;
	static const char *const enders[] = {H_END, H_START, H_CHANNEL, "<|return|>", "<|call|>"};
	for (size_t k = 0; k < sizeof enders / sizeof *enders; k++) {
		const char *f = find(p, best, enders[k]);
		if (f && (size_t)(f - p) < best) {
			best = (size_t)(f - p);
			/* <|end|> (and the end-of-generation markers, should a
			 * client's text carry them) close the message; the
			 * others open the next one */
			*skip = k == 0 || k > 2 ? strlen(enders[k]) : 0;
		}
	}
	return best;
}

static void split_harmony(const char *t, size_t len, bool final, rp_str *r, rp_str *c,
                          size_t *settled)
{
	size_t p = 0;
	*settled = 0;
	while (p < len) {
		const char *role = NULL;
		size_t n_role = 0;
		/* the generation prompt opened the first message's header
		 * ("<|start|>assistant"): a call's recipient may come first */
		bool first_to = p == 0 && starts(t, len, " to=");
		if (p == 0 && !final && prefix_of(t, len, " to=")) {
			*settled = 0;
			return;
		}
		if (first_to || starts(t + p, len - p, H_START)) {
			p += first_to ? 0 : strlen(H_START);
			const char *ch = find(t + p, len - p, H_CHANNEL);
			const char *ms = find(t + p, len - p, H_MESSAGE);
			const char *stop = ch && (!ms || ch < ms) ? ch : ms;
			if (!stop)
				return; /* the header goes on (or was cut): markup */
			role = t + p;
			n_role = (size_t)(stop - role);
			p = (size_t)(stop - t);
		}
		const char *hdr = NULL;
		size_t n_hdr = 0;
		if (starts(t + p, len - p, H_CHANNEL)) {
			p += strlen(H_CHANNEL);
			const char *ms = find(t + p, len - p, H_MESSAGE);
			if (!ms)
				return;
			hdr = t + p;
			n_hdr = (size_t)(ms - hdr);
			p = (size_t)(ms - t);
		}
		if (starts(t + p, len - p, H_MESSAGE)) {
			p += strlen(H_MESSAGE);
		} else if (role || hdr) {
			return; /* a header that is not followed by a message */
		} else {
			/* not the form: the rest is answer, but a tail that may
			 * become a marker waits */
			size_t hold = final ? 0 : held_tail(t + p, len - p, h_marks);
			put(c, t + p, len - p - hold);
			*settled = len - hold;
			return;
		}
		size_t skip;
		size_t n_body = body_end(t + p, len - p, &skip);
		bool open = p + n_body == len;
		size_t hold = open && !final ? held_tail(t + p, n_body, h_marks) : 0;
		size_t n_chan = 0;
		while (hdr && n_chan < n_hdr && !is_ws(hdr[n_chan]))
			n_chan++;
		bool call =
		    (hdr && find(hdr, n_hdr, " to=")) || (role && find(role, n_role, " to="));
		if (call) {
			/* whole calls only: the tool reader needs the end */
			if (open && !final)
				return;
			/* one form for the tool reader: the recipient after the
			 * channel's name, wherever the model put it */
			puts_(c, H_CHANNEL);
			put(c, hdr, n_chan);
			const char *to = role ? find(role, n_role, " to=") : NULL;
			if (to)
				put(c, to, (size_t)(role + n_role - to));
			put(c, hdr + n_chan, n_hdr - n_chan);
			puts_(c, H_MESSAGE);
			put(c, t + p, n_body);
		} else if (n_chan == 8 && !memcmp(hdr, "analysis", 8)) {
			if (r->n && n_body - hold) /* a later analysis message */
				puts_(r, "\n\n");
			put(r, t + p, n_body - hold);
		} else {
			put(c, t + p, n_body - hold);
		}
		p += n_body - hold;
		*settled = p;
		if (hold)
			return;
		p += skip;
		*settled = p;
	}
}

/* ----------------------------------------------------------------- the split */

shoal_reply_form shoal_reply_form_of(shoal_chat_style st)
{
	switch (st) {
	case SHOAL_CHAT_PLAIN:
		return SHOAL_REPLY_PLAIN;
	case SHOAL_CHAT_HARMONY:
		return SHOAL_REPLY_HARMONY;
	default:
		return SHOAL_REPLY_THINK;
	}
}

shoal_err shoal_reply_split(shoal_reply_form f, const char *text, size_t len, bool final,
                            shoal_reply *out)
{
	rp_str r = {0}, c = {0};
	memset(out, 0, sizeof *out);
	if (!text)
		len = 0;
	if (f == SHOAL_REPLY_THINK) {
		split_think(text, len, final, &r, &c, &out->settled);
	} else if (f == SHOAL_REPLY_HARMONY) {
		split_harmony(text, len, final, &r, &c, &out->settled);
	} else {
		put(&c, text, len);
		out->settled = len;
	}
	if (!r.s)
		r.s = calloc(1, 1);
	if (!c.s)
		c.s = calloc(1, 1);
	if (r.oom || c.oom || !r.s || !c.s) {
		free(r.s);
		free(c.s);
		memset(out, 0, sizeof *out);
		return SHOAL_ERR_NOMEM;
	}
	out->reasoning = r.s;
	out->n_reasoning = r.n;
	out->content = c.s;
	out->n_content = c.n;
	return SHOAL_OK;
}

void shoal_reply_fini(shoal_reply *r)
{
	if (!r)
		return;
	free(r->reasoning);
	free(r->content);
	memset(r, 0, sizeof *r);
}

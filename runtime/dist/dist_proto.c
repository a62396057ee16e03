/*
 * runtime/dist/dist_proto.c: the control block codec of distributed inference
 * and the loop that polls a set of data links and hands frames on.
 *
 * Part: runtime/ (distributed inference; the layouts are in dist.h).
 */
#include <errno.h>
#include <poll.h>
#include <string.h>

#include "base/assert.h"
#include "base/clock.h"
#include "base/log.h"
#include "runtime/dist/dist_impl.h"

uint64_t dist__now_ns(void)
{
	return shoal_clock_now_ns();
}

static uint32_t f2w(float f)
{
	uint32_t w;
	memcpy(&w, &f, 4);
	return w;
}

static float w2f(uint32_t w)
{
	float f;
	memcpy(&f, &w, 4);
	return f;
}

uint32_t dist__ctl_encode(const dist__ctl *c, int32_t *words, uint32_t cap)
{
	/* our own callers build c: a bad op or a tail without its ids is a bug */
	SHOAL_ASSERT(c->op == SHOAL_DIST_CTL_OPEN || c->op == SHOAL_DIST_CTL_CLOSE ||
	             c->op == SHOAL_DIST_CTL_ERROR || c->op == SHOAL_DIST_CTL_MATCH ||
	             c->op == SHOAL_DIST_CTL_SPEC);
	bool hashed = c->op == SHOAL_DIST_CTL_OPEN || c->op == SHOAL_DIST_CTL_CLOSE;
	SHOAL_ASSERT(!hashed ||
	             (c->n_hash <= SHOAL_DIST_PREFIX_MAX_BLOCKS && (!c->n_hash || c->hash)));
	uint32_t hw = hashed ? c->n_hash * (SHOAL_DIST_PREFIX_HASH / 4u) : 0;
	SHOAL_ASSERT(c->op != SHOAL_DIST_CTL_OPEN || !c->n_tail || c->tail);
	SHOAL_ASSERT(words || !cap);
	uint32_t extra = 0;
	size_t rlen = 0;
	SHOAL_ASSERT(c->op != SHOAL_DIST_CTL_OPEN || c->sp.n_bias <= SHOAL_SAMPLER_MAX_BIAS);
	SHOAL_ASSERT(c->op != SHOAL_DIST_CTL_OPEN || !c->sp.n_grammar || c->sp.grammar);
	SHOAL_ASSERT(c->op != SHOAL_DIST_CTL_OPEN || !c->n_done || c->done);
	if (c->op == SHOAL_DIST_CTL_OPEN)
		extra = 2u * c->sp.n_bias + c->n_tail + c->sp.n_grammar + c->n_done + hw;
	else if (c->op == SHOAL_DIST_CTL_CLOSE)
		extra = hw;
	else if (c->op == SHOAL_DIST_CTL_ERROR) {
		rlen = strnlen(c->reason, SHOAL_XFER_REASON_MAX);
		extra = (uint32_t)((rlen + 3) / 4);
	}
	if (SHOAL_DIST_CTL_WORDS + extra > cap)
		return 0;
	uint32_t w[SHOAL_DIST_CTL_WORDS];
	w[0] = c->op;
	w[1] = hashed || c->op == SHOAL_DIST_CTL_MATCH ? c->n_hash : c->status;
	memcpy(&w[2], c->owner, SHOAL_PEER_ID_LEN);
	w[6] = c->n_prompt;
	w[7] = c->max_tokens;
	w[8] = c->logprobs | (c->no_logprob ? DIST__NO_LOGPROB : 0u) |
	       (c->want_match ? DIST__WANT_MATCH : 0u) | (c->want_mtp ? DIST__WANT_MTP : 0u);
	w[9] = f2w(c->sp.temp);
	w[10] = (uint32_t)c->sp.top_k;
	w[11] = f2w(c->sp.top_p);
	w[12] = f2w(c->sp.min_p);
	w[13] = f2w(c->sp.repeat_penalty);
	w[14] = (uint32_t)c->sp.repeat_last_n;
	w[15] = c->op == SHOAL_DIST_CTL_ERROR  ? (uint32_t)rlen
	        : c->op == SHOAL_DIST_CTL_OPEN ? c->n_tail
	                                       : 0;
	w[16] = (uint32_t)c->sp.seed;
	w[17] = (uint32_t)(c->sp.seed >> 32);
	w[18] = c->first_step;
	w[19] = f2w(c->sp.presence_penalty);
	w[20] = f2w(c->sp.frequency_penalty);
	w[21] = c->op == SHOAL_DIST_CTL_OPEN ? c->sp.n_bias : 0;
	w[22] = c->op == SHOAL_DIST_CTL_OPEN ? c->sp.n_grammar : 0;
	w[23] = c->op == SHOAL_DIST_CTL_OPEN ? c->n_done : 0;
	w[24] = c->op == SHOAL_DIST_CTL_OPEN ? c->pfloor : 0;
	w[25] = w[26] = w[27] = 0;
	memcpy(words, w, sizeof w);
	if (c->op == SHOAL_DIST_CTL_OPEN) {
		int32_t *b = words + SHOAL_DIST_CTL_WORDS;
		for (uint32_t i = 0; i < c->sp.n_bias; i++) {
			b[2 * i] = c->sp.bias_id[i];
			b[2 * i + 1] = (int32_t)f2w(c->sp.bias[i]);
		}
		b += 2 * c->sp.n_bias;
		if (c->n_tail)
			memcpy(b, c->tail, c->n_tail * 4u);
		b += c->n_tail;
		if (c->sp.n_grammar)
			memcpy(b, c->sp.grammar, c->sp.n_grammar * 4u);
		b += c->sp.n_grammar;
		if (c->n_done)
			memcpy(b, c->done, c->n_done * 4u);
		b += c->n_done;
		if (hw)
			memcpy(b, c->hash, hw * 4u);
	} else if (c->op == SHOAL_DIST_CTL_CLOSE) {
		if (hw)
			memcpy(words + SHOAL_DIST_CTL_WORDS, c->hash, hw * 4u);
	} else if (extra) {
		memset(words + SHOAL_DIST_CTL_WORDS, 0, extra * 4u);
		memcpy(words + SHOAL_DIST_CTL_WORDS, c->reason, rlen);
	}
	return SHOAL_DIST_CTL_WORDS + extra;
}

shoal_err dist__ctl_decode(const shoal_xfer_frame *f, dist__ctl *c, char *why, size_t why_len)
{
	const shoal_xfer_hdr *h = &f->hdr;
	if (h->n_rows != 1 || h->dim < SHOAL_DIST_CTL_WORDS || h->dtype != SHOAL_XFER_DTYPE_I32 ||
	    h->payload_len != h->dim * 4u)
		return shoal_why(why, why_len, SHOAL_ERR_FORMAT,
		                 "control frame of %u rows x %u words", h->n_rows, h->dim);
	uint32_t w[SHOAL_DIST_CTL_WORDS];
	memcpy(w, f->payload, sizeof w);
	memset(c, 0, sizeof *c);
	c->op = w[0];
	c->status = w[1];
	memcpy(c->owner, &w[2], SHOAL_PEER_ID_LEN);
	c->n_prompt = w[6];
	c->max_tokens = w[7];
	c->logprobs = w[8] & ~(DIST__NO_LOGPROB | DIST__WANT_MATCH | DIST__WANT_MTP);
	c->want_match = (w[8] & DIST__WANT_MATCH) != 0;
	c->want_mtp = (w[8] & DIST__WANT_MTP) != 0;
	c->no_logprob = (w[8] & DIST__NO_LOGPROB) != 0;
	c->sp.temp = w2f(w[9]);
	c->sp.top_k = (int32_t)w[10];
	c->sp.top_p = w2f(w[11]);
	c->sp.min_p = w2f(w[12]);
	c->sp.repeat_penalty = w2f(w[13]);
	c->sp.repeat_last_n = (int32_t)w[14];
	c->n_tail = w[15];
	c->sp.seed = (uint64_t)w[16] | (uint64_t)w[17] << 32;
	c->first_step = w[18];
	c->sp.presence_penalty = w2f(w[19]);
	c->sp.frequency_penalty = w2f(w[20]);
	uint32_t n_bias = w[21], n_gram = w[22], n_done = w[23];
	c->pfloor = w[24];
	uint32_t extra = h->dim - SHOAL_DIST_CTL_WORDS;
	const uint8_t *p = f->payload + SHOAL_DIST_CTL_WORDS * 4u;
	const uint32_t hwords = SHOAL_DIST_PREFIX_HASH / 4u;
	if (c->op != SHOAL_DIST_CTL_ERROR) { /* word 1 counts prefix blocks */
		c->n_hash = c->status;
		c->status = 0;
		if (c->n_hash > SHOAL_DIST_PREFIX_MAX_BLOCKS)
			return shoal_why(why, why_len, SHOAL_ERR_FORMAT,
			                 "control: %u prefix blocks (at most %u)", c->n_hash,
			                 SHOAL_DIST_PREFIX_MAX_BLOCKS);
	}
	uint32_t hw = c->n_hash * hwords;
	switch (c->op) {
	case SHOAL_DIST_CTL_OPEN:
		if (n_bias > SHOAL_SAMPLER_MAX_BIAS || n_gram > SHOAL_GRAMMAR_MAX_WORDS ||
		    n_done > SHOAL_DIST_REPLAY_MAX || c->pfloor > SHOAL_DIST_PREFIX_MAX_BLOCKS ||
		    (n_done && (!n_gram || n_done != c->first_step)) ||
		    extra < 2u * n_bias + n_gram + n_done + hw ||
		    c->n_tail != extra - 2u * n_bias - n_gram - n_done - hw ||
		    (uint64_t)c->n_hash * SHOAL_DIST_PREFIX_BLOCK >= c->n_prompt ||
		    c->n_tail > SHOAL_DIST_TAIL_MAX || c->n_prompt == 0 ||
		    !(c->sp.presence_penalty >= -2.0f && c->sp.presence_penalty <= 2.0f) ||
		    !(c->sp.frequency_penalty >= -2.0f && c->sp.frequency_penalty <= 2.0f) ||
		    c->n_tail > c->n_prompt || c->logprobs > SHOAL_DIST_MAX_LOGPROBS ||
		    !(c->sp.temp >= 0.0f) || !(c->sp.repeat_penalty > 0.0f) ||
		    c->sp.repeat_last_n < 0 || (uint32_t)c->sp.repeat_last_n > SHOAL_DIST_TAIL_MAX)
			return shoal_why(why, why_len, SHOAL_ERR_FORMAT,
			                 "open: bad fields (prompt %u, tail %u of %u words, "
			                 "logprobs %u)",
			                 c->n_prompt, c->n_tail, extra, c->logprobs);
		for (uint32_t i = 0; i < n_bias; i++) {
			int32_t pair[2];
			memcpy(pair, p + 8u * i, 8);
			c->sp.bias_id[i] = pair[0];
			c->sp.bias[i] = w2f((uint32_t)pair[1]);
			if (!(c->sp.bias[i] >= -100.0f && c->sp.bias[i] <= 100.0f))
				return shoal_why(why, why_len, SHOAL_ERR_FORMAT,
				                 "open: logit bias %u out of [-100, 100]", i);
		}
		c->sp.n_bias = n_bias;
		/* payload is 16-aligned: the tail's words are aligned */
		c->tail = (const int32_t *)(const void *)(p + 8u * n_bias);
		if (n_gram) {
			c->sp.grammar = (const uint32_t *)(const void *)(c->tail + c->n_tail);
			c->sp.n_grammar = n_gram;
			shoal_err e = shoal_grammar_check(c->sp.grammar, n_gram, why, why_len);
			if (e)
				return e;
			c->done = (const int32_t *)(const void *)(c->sp.grammar + n_gram);
			c->n_done = n_done;
		}
		c->hash = c->n_hash ? p + 8u * n_bias + 4u * (c->n_tail + n_gram + n_done) : NULL;
		return SHOAL_OK;
	case SHOAL_DIST_CTL_CLOSE:
		if (extra != hw)
			return shoal_why(why, why_len, SHOAL_ERR_FORMAT,
			                 "close: %u prefix blocks in %u words", c->n_hash, extra);
		c->hash = c->n_hash ? p : NULL;
		return SHOAL_OK;
	case SHOAL_DIST_CTL_MATCH:
	case SHOAL_DIST_CTL_SPEC:
		if (extra || (c->op == SHOAL_DIST_CTL_SPEC && c->n_hash))
			return shoal_why(why, why_len, SHOAL_ERR_FORMAT, "%s: %u words more",
			                 c->op == SHOAL_DIST_CTL_SPEC ? "spec" : "match", extra);
		return SHOAL_OK;
	case SHOAL_DIST_CTL_ERROR:
		if (c->n_tail > SHOAL_XFER_REASON_MAX || (c->n_tail + 3) / 4 != extra ||
		    c->status == 0 || c->status >= SHOAL_ERR__COUNT)
			return shoal_why(why, why_len, SHOAL_ERR_FORMAT,
			                 "error: reason of %u bytes in %u words, status %u",
			                 c->n_tail, extra, c->status);
		for (uint32_t i = 0; i < c->n_tail; i++)
			c->reason[i] = p[i] >= 0x20 && p[i] < 0x7f ? (char)p[i] : '?';
		c->reason[c->n_tail] = 0;
		c->n_tail = 0;
		return SHOAL_OK;
	default:
		return shoal_why(why, why_len, SHOAL_ERR_FORMAT, "control op %u", c->op);
	}
}

shoal_err dist__ctl_send(shoal_xfer_link *k, uint64_t sid, const dist__ctl *c, int32_t *scratch,
                         uint32_t cap, int timeout_ms, char *why, size_t why_len)
{
	if (!k)
		return shoal_why(why, why_len, SHOAL_ERR_NOTFOUND, "no link for a control message");
	uint32_t dim = dist__ctl_encode(c, scratch, cap);
	if (!dim)
		return shoal_why(why, why_len, SHOAL_ERR_RANGE, "control block too large");
	shoal_xfer_row row = {.session = sid, .pos = 0};
	shoal_xfer_hdr h = {.kind = SHOAL_XFER_KIND_SESSION,
	                    .dtype = SHOAL_XFER_DTYPE_I32,
	                    .dim = dim,
	                    .n_rows = 1,
	                    .rows = &row,
	                    .payload_len = dim * 4u};
	struct iovec v = {.iov_base = scratch, .iov_len = dim * 4u};
	return shoal_xfer_link_send(k, &h, &v, 1, timeout_ms, why, why_len);
}

shoal_err dist__poll(shoal_xfer_link *const *links, uint32_t n, int timeout_ms, dist__handle_fn fn,
                     void *obj, uint64_t *dropped, const char *who, char *why, size_t why_len)
{
	struct pollfd pf[DIST__MAX_POLL];
	int np = 0;
	SHOAL_ASSERT(links || !n);
	for (uint32_t i = 0; i < n; i++)
		np += shoal_xfer_link_pollfds(links[i], pf + np, (int)DIST__MAX_POLL - np);
	int r = poll(pf, (nfds_t)np, timeout_ms);
	if (r < 0 && errno != EINTR)
		return shoal_why(why, why_len, SHOAL_ERR_IO, "poll: %s", strerror(errno));
	/* Drain every link, not only the readable ones: a link may hold a
	 * whole frame in its buffer with nothing left on the socket. */
	for (uint32_t i = 0; i < n; i++) {
		for (;;) {
			shoal_xfer_frame f;
			char w[SHOAL_WHY_LEN] = "";
			shoal_err e = shoal_xfer_link_recv(links[i], 0, &f, w, sizeof w);
			if (e == SHOAL_ERR_TIMEOUT)
				break;
			if (e == SHOAL_ERR_FORMAT || e == SHOAL_ERR_MISMATCH) {
				SHOAL_LOG_W(who, "dropped a frame: %s", w);
				(*dropped)++;
				continue;
			}
			if (e)
				return shoal_why(why, why_len, e, "%s", w);
			e = fn(obj, links[i], &f, why, why_len);
			if (e)
				return e;
		}
	}
	return SHOAL_OK;
}

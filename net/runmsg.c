/*
 * net/runmsg.c: encoder and checked decoder of the run messages (see
 * runmsg.h). The envelope is net/ctlmsg.c's: shoal_ctlmsg_decode checks
 * it (and pre-scans the bytes, so msgpack-c cannot be made to allocate
 * past them) before the typed fields are read here.
 *
 * Divisions: encode; decode (field readers, one reader per type).
 */
#include "net/runmsg.h"

#include <math.h>
#include <string.h>

#include <msgpack.h>

#include "net/ctlmsg.h"

/* ------------------------------------------------------------------- encode */

static int runmsg_key(msgpack_packer *pk, const char *k)
{
	return msgpack_pack_str_with_body(pk, k, strlen(k));
}

/* The envelope of a map with n_fields more entries. */
static int runmsg_head(msgpack_packer *pk, uint32_t type, uint64_t seq, size_t n_fields)
{
	int rc = msgpack_pack_map(pk, 3 + n_fields);
	rc |= runmsg_key(pk, "t") | msgpack_pack_uint32(pk, type);
	rc |= runmsg_key(pk, "v") | msgpack_pack_uint32(pk, SHOAL_WIRE_SCHEMA);
	rc |= runmsg_key(pk, "seq") | msgpack_pack_uint64(pk, seq);
	return rc;
}

static int runmsg_kstr(msgpack_packer *pk, const char *k, const char *s, size_t n)
{
	return runmsg_key(pk, k) | msgpack_pack_str_with_body(pk, n ? s : "", n);
}

shoal_err shoal_runmsg_encode_req(uint64_t seq, const shoal_run_req *r, shoal_wire_buf *b)
{
	if (r->prompt_len > SHOAL_RUN_MAX_PROMPT || r->system_len > SHOAL_RUN_MAX_SYSTEM ||
	    r->max_tokens > SHOAL_RUN_MAX_TOKENS || r->logprobs > SHOAL_RUN_MAX_LOGPROBS ||
	    r->top_k > SHOAL_RUN_MAX_TOP_K || r->speculate_len > SHOAL_RUN_MAX_SPECULATE)
		return SHOAL_ERR_RANGE;
	msgpack_packer pk;
	b->len = 0;
	msgpack_packer_init(&pk, b, shoal_wire_buf_write);
	int rc = runmsg_head(&pk, SHOAL_CTLMSG_RUN_REQ, seq,
	                     9 + (r->chat ? 1 : 0) + !!r->system + !!r->speculate);
	rc |= runmsg_kstr(&pk, "prompt", r->prompt, r->prompt_len);
	rc |= runmsg_key(&pk, "max_tokens") | msgpack_pack_uint32(&pk, r->max_tokens);
	rc |= runmsg_key(&pk, "logprobs") | msgpack_pack_uint32(&pk, r->logprobs);
	rc |= runmsg_key(&pk, "temp") | msgpack_pack_float(&pk, r->temp);
	rc |= runmsg_key(&pk, "top_k") | msgpack_pack_uint32(&pk, r->top_k);
	rc |= runmsg_key(&pk, "top_p") | msgpack_pack_float(&pk, r->top_p);
	rc |= runmsg_key(&pk, "min_p") | msgpack_pack_float(&pk, r->min_p);
	rc |= runmsg_key(&pk, "repeat_penalty") | msgpack_pack_float(&pk, r->repeat_penalty);
	rc |= runmsg_key(&pk, "seed") | msgpack_pack_uint64(&pk, r->seed);
	/* chat and system only when given: a plain prompt is the old request */
	if (r->chat)
		rc |= runmsg_key(&pk, "chat") | msgpack_pack_true(&pk);
	if (r->system)
		rc |= runmsg_kstr(&pk, "system", r->system, r->system_len);
	if (r->speculate)
		rc |= runmsg_kstr(&pk, "speculate", r->speculate, r->speculate_len);
	return rc ? SHOAL_ERR_NOMEM : SHOAL_OK;
}

shoal_err shoal_runmsg_encode_token(uint64_t seq, const shoal_run_token *t, shoal_wire_buf *b)
{
	if (t->text_len > SHOAL_RUN_MAX_TEXT || t->n_top > SHOAL_RUN_MAX_LOGPROBS)
		return SHOAL_ERR_RANGE;
	msgpack_packer pk;
	b->len = 0;
	msgpack_packer_init(&pk, b, shoal_wire_buf_write);
	int rc = runmsg_head(&pk, SHOAL_CTLMSG_RUN_TOKEN, seq, 5);
	rc |= runmsg_key(&pk, "id") | msgpack_pack_int32(&pk, t->id);
	rc |= runmsg_kstr(&pk, "text", t->text, t->text_len);
	rc |= runmsg_key(&pk, "logprob") | msgpack_pack_float(&pk, t->logprob);
	rc |= runmsg_key(&pk, "top_ids") | msgpack_pack_array(&pk, t->n_top);
	for (uint32_t i = 0; i < t->n_top; i++)
		rc |= msgpack_pack_int32(&pk, t->top_ids[i]);
	rc |= runmsg_key(&pk, "top_lps") | msgpack_pack_array(&pk, t->n_top);
	for (uint32_t i = 0; i < t->n_top; i++)
		rc |= msgpack_pack_float(&pk, t->top_lps[i]);
	return rc ? SHOAL_ERR_NOMEM : SHOAL_OK;
}

shoal_err shoal_runmsg_encode_end(uint64_t seq, const shoal_run_end *e, shoal_wire_buf *b)
{
	if ((unsigned)e->err >= SHOAL_ERR__COUNT || (e->retry && e->err == SHOAL_OK) ||
	    e->why_len > SHOAL_RUN_MAX_WHY || e->text_len > SHOAL_RUN_MAX_TEXT)
		return SHOAL_ERR_RANGE;
	msgpack_packer pk;
	b->len = 0;
	msgpack_packer_init(&pk, b, shoal_wire_buf_write);
	int rc = runmsg_head(&pk, SHOAL_CTLMSG_RUN_END, seq, 5);
	rc |= runmsg_key(&pk, "err") | msgpack_pack_uint32(&pk, (uint32_t)e->err);
	rc |= runmsg_key(&pk, "retry") |
	      (e->retry ? msgpack_pack_true(&pk) : msgpack_pack_false(&pk));
	rc |= runmsg_kstr(&pk, "why", e->why, e->why_len);
	rc |= runmsg_kstr(&pk, "text", e->text, e->text_len);
	rc |= runmsg_key(&pk, "tokens") | msgpack_pack_uint32(&pk, e->tokens);
	return rc ? SHOAL_ERR_NOMEM : SHOAL_OK;
}

/* ------------------------------------------------------------------- decode */

/* Field readers: SHOAL_OK and the value, or an error with the field named. */

static shoal_err runmsg_str(const msgpack_object *o, const char *k, size_t max, const char **p,
                            size_t *n, char *why, size_t why_len)
{
	if (o->type != MSGPACK_OBJECT_STR)
		return shoal_why(why, why_len, SHOAL_ERR_FORMAT, "\"%s\" is not a string", k);
	if (o->via.str.size > max)
		return shoal_why(why, why_len, SHOAL_ERR_RANGE, "\"%s\" is longer than %zu bytes",
		                 k, max);
	*p = o->via.str.ptr; /* points into the message: msgpack-c references it */
	*n = o->via.str.size;
	return SHOAL_OK;
}

static shoal_err runmsg_uint(const msgpack_object *o, const char *k, uint64_t max, uint64_t *v,
                             char *why, size_t why_len)
{
	if (o->type == MSGPACK_OBJECT_NEGATIVE_INTEGER)
		return shoal_why(why, why_len, SHOAL_ERR_RANGE, "\"%s\" is negative", k);
	if (o->type != MSGPACK_OBJECT_POSITIVE_INTEGER)
		return shoal_why(why, why_len, SHOAL_ERR_FORMAT, "\"%s\" is not an integer", k);
	if (o->via.u64 > max)
		return shoal_why(why, why_len, SHOAL_ERR_RANGE, "\"%s\" is above %llu", k,
		                 (unsigned long long)max);
	*v = o->via.u64;
	return SHOAL_OK;
}

static shoal_err runmsg_int32(const msgpack_object *o, const char *k, int32_t *v, char *why,
                              size_t why_len)
{
	int64_t x;
	if (o->type == MSGPACK_OBJECT_POSITIVE_INTEGER && o->via.u64 <= INT32_MAX)
		x = (int64_t)o->via.u64;
	else if (o->type == MSGPACK_OBJECT_NEGATIVE_INTEGER && o->via.i64 >= INT32_MIN)
		x = o->via.i64;
	else
		return shoal_why(why, why_len, SHOAL_ERR_FORMAT, "\"%s\" is not a 32-bit integer",
		                 k);
	*v = (int32_t)x;
	return SHOAL_OK;
}

/* A number (float or integer) within [lo, hi]; NaN is never within. */
static shoal_err runmsg_num(const msgpack_object *o, const char *k, double lo, double hi, float *v,
                            char *why, size_t why_len)
{
	double x;
	if (o->type == MSGPACK_OBJECT_FLOAT32 || o->type == MSGPACK_OBJECT_FLOAT64)
		x = o->via.f64;
	else if (o->type == MSGPACK_OBJECT_POSITIVE_INTEGER)
		x = (double)o->via.u64;
	else if (o->type == MSGPACK_OBJECT_NEGATIVE_INTEGER)
		x = (double)o->via.i64;
	else
		return shoal_why(why, why_len, SHOAL_ERR_FORMAT, "\"%s\" is not a number", k);
	if (!(x >= lo && x <= hi))
		return shoal_why(why, why_len, SHOAL_ERR_RANGE, "\"%s\" is not in [%g, %g]", k, lo,
		                 hi);
	*v = (float)x;
	return SHOAL_OK;
}

static shoal_err runmsg_bool(const msgpack_object *o, const char *k, bool *v, char *why,
                             size_t why_len)
{
	if (o->type != MSGPACK_OBJECT_BOOLEAN)
		return shoal_why(why, why_len, SHOAL_ERR_FORMAT, "\"%s\" is not a boolean", k);
	*v = o->via.boolean;
	return SHOAL_OK;
}

static int runmsg_is(const msgpack_object *k, const char *name)
{
	size_t l = strlen(name);
	return k->type == MSGPACK_OBJECT_STR && k->via.str.size == l &&
	       !memcmp(k->via.str.ptr, name, l);
}

/* The fields of one type, in the order of its bit in the "seen" mask. */
static const char *const runmsg_req_keys[] = {"prompt", "max_tokens", "logprobs", "temp",
                                              "top_k",  "top_p",      "min_p",    "repeat_penalty",
                                              "seed",   "chat",       "system",   "speculate"};
#define RUNMSG_REQ_NEEDED 9 /* the first nine; chat, system, speculate are optional */
static const char *const runmsg_tok_keys[] = {"id", "text", "logprob", "top_ids", "top_lps"};
static const char *const runmsg_end_keys[] = {"err", "retry", "why", "text", "tokens"};

static int runmsg_index(const msgpack_object *k, const char *const *keys, int n)
{
	for (int i = 0; i < n; i++)
		if (runmsg_is(k, keys[i]))
			return i;
	return -1;
}

static shoal_err runmsg_req_field(int i, const msgpack_object *o, shoal_run_req *r, char *why,
                                  size_t why_len)
{
	const char *k = runmsg_req_keys[i];
	uint64_t u = 0;
	shoal_err e;
	switch (i) {
	case 0:
		return runmsg_str(o, k, SHOAL_RUN_MAX_PROMPT, &r->prompt, &r->prompt_len, why,
		                  why_len);
	case 1:
		e = runmsg_uint(o, k, SHOAL_RUN_MAX_TOKENS, &u, why, why_len);
		r->max_tokens = (uint32_t)u;
		return e;
	case 2:
		e = runmsg_uint(o, k, SHOAL_RUN_MAX_LOGPROBS, &u, why, why_len);
		r->logprobs = (uint32_t)u;
		return e;
	case 3:
		return runmsg_num(o, k, 0, SHOAL_RUN_MAX_TEMP, &r->temp, why, why_len);
	case 4:
		e = runmsg_uint(o, k, SHOAL_RUN_MAX_TOP_K, &u, why, why_len);
		r->top_k = (uint32_t)u;
		return e;
	case 5:
		return runmsg_num(o, k, 0, 1, &r->top_p, why, why_len);
	case 6:
		return runmsg_num(o, k, 0, 1, &r->min_p, why, why_len);
	case 7:
		return runmsg_num(o, k, 0, SHOAL_RUN_MAX_REPEAT_PENALTY, &r->repeat_penalty, why,
		                  why_len);
	case 8:
		return runmsg_uint(o, k, UINT64_MAX, &r->seed, why, why_len);
	case 9:
		return runmsg_bool(o, k, &r->chat, why, why_len);
	case 10:
		return runmsg_str(o, k, SHOAL_RUN_MAX_SYSTEM, &r->system, &r->system_len, why,
		                  why_len);
	default:
		e = runmsg_str(o, k, SHOAL_RUN_MAX_SPECULATE, &r->speculate, &r->speculate_len, why,
		               why_len);
		if (!e && !r->speculate_len)
			return shoal_why(why, why_len, SHOAL_ERR_FORMAT, "\"%s\" is empty", k);
		return e;
	}
}

/* An array of at most SHOAL_RUN_MAX_LOGPROBS entries, each an int32 (ids)
 * or a number (lps, -inf allowed: a token the sampler could not pick). */
static shoal_err runmsg_top(const msgpack_object *o, const char *k, int32_t *ids, float *lps,
                            uint32_t *n, char *why, size_t why_len)
{
	if (o->type != MSGPACK_OBJECT_ARRAY)
		return shoal_why(why, why_len, SHOAL_ERR_FORMAT, "\"%s\" is not an array", k);
	if (o->via.array.size > SHOAL_RUN_MAX_LOGPROBS)
		return shoal_why(why, why_len, SHOAL_ERR_RANGE, "\"%s\" has %u entries (max %u)", k,
		                 o->via.array.size, SHOAL_RUN_MAX_LOGPROBS);
	*n = o->via.array.size;
	for (uint32_t j = 0; j < *n; j++) {
		const msgpack_object *x = &o->via.array.ptr[j];
		shoal_err e = ids ? runmsg_int32(x, k, &ids[j], why, why_len)
		                  : runmsg_num(x, k, -HUGE_VAL, HUGE_VAL, &lps[j], why, why_len);
		if (e)
			return e;
	}
	return SHOAL_OK;
}

static shoal_err runmsg_tok_field(int i, const msgpack_object *o, shoal_run_token *t,
                                  uint32_t *n_ids, char *why, size_t why_len)
{
	const char *k = runmsg_tok_keys[i];
	switch (i) {
	case 0:
		return runmsg_int32(o, k, &t->id, why, why_len);
	case 1:
		return runmsg_str(o, k, SHOAL_RUN_MAX_TEXT, &t->text, &t->text_len, why, why_len);
	case 2:
		return runmsg_num(o, k, -HUGE_VAL, HUGE_VAL, &t->logprob, why, why_len);
	case 3:
		return runmsg_top(o, k, t->top_ids, NULL, n_ids, why, why_len);
	default:
		return runmsg_top(o, k, NULL, t->top_lps, &t->n_top, why, why_len);
	}
}

static shoal_err runmsg_end_field(int i, const msgpack_object *o, shoal_run_end *d, char *why,
                                  size_t why_len)
{
	const char *k = runmsg_end_keys[i];
	uint64_t u = 0;
	shoal_err e;
	switch (i) {
	case 0:
		e = runmsg_uint(o, k, SHOAL_ERR__COUNT - 1, &u, why, why_len);
		d->err = (shoal_err)u;
		return e;
	case 1:
		return runmsg_bool(o, k, &d->retry, why, why_len);
	case 2:
		return runmsg_str(o, k, SHOAL_RUN_MAX_WHY, &d->why, &d->why_len, why, why_len);
	case 4:
		e = runmsg_uint(o, k, UINT32_MAX, &u, why, why_len);
		d->tokens = (uint32_t)u;
		d->has_tokens = true;
		return e;
	default:
		return runmsg_str(o, k, SHOAL_RUN_MAX_TEXT, &d->text, &d->text_len, why, why_len);
	}
}

/* Read the fields of m->type from map; every key at most once. */
static shoal_err runmsg_fields(const msgpack_object_map *map, shoal_runmsg *m, char *why,
                               size_t why_len)
{
	const char *const *keys;
	int nk, needed;
	uint32_t n_ids = 0;
	if (m->type == SHOAL_CTLMSG_RUN_REQ)
		keys = runmsg_req_keys, nk = 12, needed = RUNMSG_REQ_NEEDED;
	else if (m->type == SHOAL_CTLMSG_RUN_TOKEN)
		keys = runmsg_tok_keys, nk = 5, needed = 5;
	else
		keys = runmsg_end_keys, nk = 5, needed = 4; /* tokens is optional */
	uint32_t seen = 0;
	for (uint32_t i = 0; i < map->size; i++) {
		int f = runmsg_index(&map->ptr[i].key, keys, nk);
		if (f < 0)
			continue; /* the envelope's, or a later version's */
		if (seen & (1u << f))
			return shoal_why(why, why_len, SHOAL_ERR_FORMAT, "\"%s\" twice", keys[f]);
		seen |= 1u << f;
		const msgpack_object *o = &map->ptr[i].val;
		shoal_err e = m->type == SHOAL_CTLMSG_RUN_REQ
		                  ? runmsg_req_field(f, o, &m->req, why, why_len)
		              : m->type == SHOAL_CTLMSG_RUN_TOKEN
		                  ? runmsg_tok_field(f, o, &m->tok, &n_ids, why, why_len)
		                  : runmsg_end_field(f, o, &m->end, why, why_len);
		if (e)
			return e;
	}
	for (int f = 0; f < needed; f++)
		if (!(seen & (1u << f)))
			return shoal_why(why, why_len, SHOAL_ERR_FORMAT, "no \"%s\"", keys[f]);
	if (m->type == SHOAL_CTLMSG_RUN_TOKEN && n_ids != m->tok.n_top)
		return shoal_why(why, why_len, SHOAL_ERR_FORMAT, "%u top ids but %u top logprobs",
		                 n_ids, m->tok.n_top);
	if (m->type == SHOAL_CTLMSG_RUN_END && m->end.err != SHOAL_OK && !m->end.why_len)
		return shoal_why(why, why_len, SHOAL_ERR_FORMAT, "an error without a reason");
	if (m->type == SHOAL_CTLMSG_RUN_END && m->end.err == SHOAL_OK && m->end.retry)
		return shoal_why(why, why_len, SHOAL_ERR_FORMAT, "\"retry\" without an error");
	return SHOAL_OK;
}

shoal_err shoal_runmsg_decode(const uint8_t *buf, size_t len, shoal_runmsg *m, char *why,
                              size_t why_len)
{
	memset(m, 0, sizeof *m);
	shoal_ctlmsg env;
	shoal_err e = shoal_ctlmsg_decode(buf, len, &env, why, why_len);
	if (e == SHOAL_ERR_NOTFOUND)
		return shoal_why(why, why_len, SHOAL_ERR_UNSUPPORTED, "a membership message");
	if (e)
		return e;
	if (env.type < SHOAL_CTLMSG_RUN_REQ || env.type > SHOAL_CTLMSG_RUN_END)
		return shoal_why(why, why_len, SHOAL_ERR_UNSUPPORTED,
		                 "message type %u is not a run message", env.type);
	m->type = env.type;
	m->seq = env.seq;
	msgpack_unpacked up;
	msgpack_unpacked_init(&up);
	size_t off = 0;
	/* the envelope decoded, so this is one map */
	if (msgpack_unpack_next(&up, (const char *)buf, len, &off) != MSGPACK_UNPACK_SUCCESS ||
	    up.data.type != MSGPACK_OBJECT_MAP)
		e = shoal_why(why, why_len, SHOAL_ERR_FORMAT, "not a msgpack map");
	else
		e = runmsg_fields(&up.data.via.map, m, why, why_len);
	msgpack_unpacked_destroy(&up);
	return e;
}

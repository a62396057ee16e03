/*
 * runtime/api/api_run.c: the sink side of a request's runs (api_impl.h).
 * The node's data thread hands each run's tokens and end to its sink;
 * they go into the run, under the lock its request's runs share, and wake
 * the connection's thread. A request of n choices has n runs in one set:
 * one lock and one condition, so the connection's thread waits for
 * whichever run moves first. The set lives until the connection and every
 * run in flight let go of it (refs).
 *
 * Part: runtime/, room api/. Sinks run on the node's data thread: nothing
 * here blocks but the set's lock, which the connection's thread holds only
 * to read or to step.
 */
#include "config.h"

#include "runtime/api/api_impl.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

/* The test hook's forced text goes out this many bytes per token. */
#define API_FORCED_PIECE 8

api__runs *api__runs_new(uint32_t n, bool quiet, const char *forced)
{
	api__runs *s = calloc(1, sizeof *s + (size_t)n * sizeof s->run[0]);
	if (!s)
		return NULL;
	if (pthread_mutex_init(&s->mu, NULL)) {
		free(s);
		return NULL;
	}
	if (pthread_cond_init(&s->cv, NULL)) {
		pthread_mutex_destroy(&s->mu);
		free(s);
		return NULL;
	}
	s->refs = 1;
	s->quiet = quiet;
	s->n = n;
	for (uint32_t i = 0; i < n; i++) {
		s->run[i].set = s;
		s->run[i].forced = forced;
	}
	return s;
}

void api__runs_unref(api__runs *s)
{
	pthread_mutex_lock(&s->mu);
	int left = --s->refs;
	pthread_mutex_unlock(&s->mu);
	if (left)
		return;
	pthread_mutex_destroy(&s->mu);
	pthread_cond_destroy(&s->cv);
	for (uint32_t i = 0; i < s->n; i++) {
		free(s->run[i].text);
		free(s->run[i].toks);
	}
	free(s);
}

void api__runs_wait(api__runs *s, unsigned ms)
{
	struct timespec ts;
	clock_gettime(CLOCK_REALTIME, &ts);
	ts.tv_nsec += (long)(ms % 1000) * 1000000L;
	ts.tv_sec += ms / 1000 + ts.tv_nsec / 1000000000L;
	ts.tv_nsec %= 1000000000L;
	pthread_cond_timedwait(&s->cv, &s->mu, &ts);
}

/* Append p[n] to the run's text (under mu); false when out of memory. */
static bool run_text(api__run *r, const char *p, size_t n)
{
	if (r->len + n + 1 > r->cap) {
		size_t cap = (r->cap ? r->cap * 2 : 1024) + n;
		char *t = realloc(r->text, cap);
		if (!t)
			return false;
		r->text = t;
		r->cap = cap;
	}
	memcpy(r->text + r->len, p, n);
	r->len += n;
	r->text[r->len] = '\0';
	return true;
}

static void sink_token(void *ctx, int32_t id, const char *text, size_t len, float lp,
                       uint32_t n_top, const int32_t *top_ids, const float *top_lps)
{
	api__run *r = ctx;
	api__runs *s = r->set;
	pthread_mutex_lock(&s->mu);
	if (r->n_tok == r->cap_tok) {
		size_t cap = r->cap_tok ? 2 * r->cap_tok : 64;
		api__tok *t = realloc(r->toks, cap * sizeof *t);
		if (t) {
			r->toks = t;
			r->cap_tok = cap;
		}
	}
	if (r->n_tok < r->cap_tok) {
		api__tok *t = &r->toks[r->n_tok++];
		t->id = id;
		t->lp = lp;
		t->n_top = n_top < SHOAL_API_MAX_TOP ? n_top : SHOAL_API_MAX_TOP;
		memcpy(t->top_ids, top_ids, t->n_top * sizeof *top_ids);
		memcpy(t->top_lps, top_lps, t->n_top * sizeof *top_lps);
		t->off = r->len;
		if (r->forced) { /* test hook: the forced text's next piece */
			size_t left = strlen(r->forced + r->forced_off);
			len = left < API_FORCED_PIECE ? left : API_FORCED_PIECE;
			text = r->forced + r->forced_off;
			r->forced_off += len;
		}
		t->len = run_text(r, text, len) ? len : 0;
	}
	if (!s->quiet || r->n_tok <= 1)
		pthread_cond_broadcast(&s->cv);
	pthread_mutex_unlock(&s->mu);
}

static void sink_cached(void *ctx, uint32_t cached)
{
	api__run *r = ctx;
	pthread_mutex_lock(&r->set->mu);
	r->cached = cached;
	pthread_mutex_unlock(&r->set->mu);
}

static void sink_end(void *ctx, shoal_err err, const char *why, const char *tail, size_t tail_len)
{
	api__run *r = ctx;
	api__runs *s = r->set;
	pthread_mutex_lock(&s->mu);
	if (!err && r->forced) { /* test hook: the rest of the forced text */
		tail = r->forced + r->forced_off;
		tail_len = strlen(tail);
	}
	if (!err && tail_len)
		run_text(r, tail, tail_len);
	r->done = true;
	r->err = err;
	snprintf(r->why, sizeof r->why, "%s", why ? why : "");
	pthread_cond_broadcast(&s->cv);
	pthread_mutex_unlock(&s->mu);
	api__runs_unref(s);
}

shoal_api_sink api__runs_sink(api__runs *s, uint32_t i)
{
	pthread_mutex_lock(&s->mu);
	s->refs++;
	pthread_mutex_unlock(&s->mu);
	return (shoal_api_sink){.on_token = sink_token,
	                        .on_end = sink_end,
	                        .on_cached = sink_cached,
	                        .ctx = &s->run[i]};
}

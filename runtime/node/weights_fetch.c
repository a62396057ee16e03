/*
 * runtime/node/weights_fetch.c: the fetcher half of runtime/node/weights.h:
 * one job at a time on its own thread (the node thread never waits on a
 * transfer): learn a model's header and digests and make its weights
 * cache, or fill the cache with the tensors of a peer's assignment, chunk
 * by chunk with SHOAL_WEIGHTS_WINDOW requests in flight. Progress: a bar
 * on stderr when it is a terminal, log lines otherwise, and a snapshot for
 * `shoal status`.
 *
 * Divisions: a link to a source; progress; the header job; the tensor job;
 * the thread; new/free.
 */
#include "config.h"

#include "runtime/node/weights.h"

#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <sodium.h>

#include "base/clock.h"
#include "base/hex.h"
#include "base/log.h"

/* A reply comes within this long or the source is given up for the job:
 * 512 KiB at 10 MB/s (a poor Wi-Fi link) takes 50 ms, x 100 headroom. */
#define WF_REPLY_MS 5000
/* A chunk that fails its check is asked for again at most this often per
 * tensor before the source is given up (damage every time is no accident). */
#define WF_MAX_RETRY 8u
/* The model's header and digests may take at most this much (the largest
 * GGUF headers, tokenizers included, are tens of MiB). */
#define WF_MAX_META (256ull << 20)
/* Progress lines when stderr is no terminal: every 10 % of a job. */
#define WF_LOG_STEPS 10

struct shoal_weights_fetcher {
	shoal_weights_config cfg;
	char dir[1024];
	shoal_xfer_config xcfg;
	pthread_t thr;
	bool thr_live;
	pthread_mutex_t mu; /* everything below */
	shoal_weights_progress pr;
	int result; /* 0 running or none, 1 ok, -1 failed */
	shoal_wcache *made;
	/* the job (the thread's while it runs) */
	shoal_weights_src *src;
	size_t n_src;
	shoal_wcache *wc;
	uint32_t *tensors;
	size_t nt;
	uint64_t t0_us;
	int logged_step;
};

/* ---- a link to a source --------------------------------------------------- */

static void wf_put32(uint8_t *p, uint32_t v)
{
	for (int i = 0; i < 4; i++)
		p[i] = (uint8_t)(v >> (8 * i));
}

static uint32_t wf_get32(const uint8_t *p)
{
	return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

static uint64_t wf_get64(const uint8_t *p)
{
	return (uint64_t)wf_get32(p) | (uint64_t)wf_get32(p + 4) << 32;
}

static shoal_err wf_dial(shoal_weights_fetcher *f, const shoal_weights_src *s, shoal_xfer_link **k,
                         char *why, size_t why_len)
{
	uint8_t tok[SHOAL_LINK_TOKEN_LEN];
	shoal_weights_link_token(&f->cfg.key, f->cfg.self, f->cfg.model_id, SHOAL_WEIGHTS_ROLE,
	                         tok);
	return shoal_xfer_link_connect(&f->xcfg, s->host, s->port, tok, sizeof tok, k, why,
	                               why_len);
}

static shoal_err wf_request(shoal_weights_fetcher *f, shoal_xfer_link *k, uint32_t op,
                            uint32_t what, uint32_t len, uint64_t off, char *why, size_t why_len)
{
	uint8_t b[4 + 4 + 8]; /* u32 what, u32 len, u64 offset */
	wf_put32(b, what);
	wf_put32(b + 4, len);
	wf_put32(b + 8, (uint32_t)off);
	wf_put32(b + 12, (uint32_t)(off >> 32));
	shoal_xfer_hdr h = {
	    .kind = SHOAL_XFER_KIND_WEIGHTS, .dtype = SHOAL_XFER_DTYPE_U8, .n_aux = op};
	memcpy(h.digest, f->cfg.model_id, SHOAL_MODEL_ID_BYTES);
	struct iovec v = {.iov_base = b, .iov_len = op == SHOAL_WEIGHTS_OP_READ ? 16 : 0};
	return shoal_xfer_link_send(k, &h, &v, 1, WF_REPLY_MS, why, why_len);
}

/* The next reply of op `op` (an ERR reply is the source's refusal). */
static shoal_err wf_reply(shoal_xfer_link *k, uint32_t op, shoal_xfer_frame *fr, char *why,
                          size_t why_len)
{
	shoal_err e = shoal_xfer_link_recv(k, WF_REPLY_MS, fr, why, why_len);
	if (e)
		return e;
	if (fr->hdr.kind == SHOAL_XFER_KIND_ERROR || fr->hdr.kind != SHOAL_XFER_KIND_WEIGHTS ||
	    fr->hdr.n_aux == SHOAL_WEIGHTS_OP_ERR)
		return shoal_why(why, why_len, SHOAL_ERR_NOTFOUND, "the peer says: %.*s",
		                 (int)(fr->hdr.payload_len < 200 ? fr->hdr.payload_len : 200),
		                 (const char *)fr->payload);
	if (fr->hdr.n_aux != op || (op == SHOAL_WEIGHTS_OP_READ && fr->hdr.payload_len < 48))
		return shoal_why(why, why_len, SHOAL_ERR_PROTO,
		                 "a weights reply of op %u, %u bytes", fr->hdr.n_aux,
		                 fr->hdr.payload_len);
	return SHOAL_OK;
}

/* ---- progress ------------------------------------------------------------- */

static void wf_progress(shoal_weights_fetcher *f, uint64_t add, bool end)
{
	pthread_mutex_lock(&f->mu);
	f->pr.done += add;
	f->pr.fetched += add;
	double s = (double)(shoal_clock_now_us() - f->t0_us) / 1e6;
	f->pr.mb_s = s > 0 ? (double)f->pr.done / 1e6 / s : 0;
	shoal_weights_progress p = f->pr;
	pthread_mutex_unlock(&f->mu);
	double eta = p.mb_s > 0 ? (double)(p.total - p.done) / 1e6 / p.mb_s : 0;
	int pct = p.total ? (int)(100.0 * (double)p.done / (double)p.total) : 100;
	if (f->cfg.tty) {
		char bar[31];
		int fill = pct * 30 / 100;
		for (int i = 0; i < 30; i++)
			bar[i] = i < fill ? '#' : '.';
		bar[30] = '\0';
		fprintf(stderr, "\rweights [%s] %3d%% %.1f/%.1f MiB  %.1f MB/s  ETA %.0f s%s", bar,
		        pct, (double)p.done / 1048576.0, (double)p.total / 1048576.0, p.mb_s, eta,
		        end ? "\n" : "");
		fflush(stderr);
	} else if (end || pct / WF_LOG_STEPS > f->logged_step) {
		f->logged_step = pct / WF_LOG_STEPS;
		SHOAL_LOG_I("weights", "fetching: %d%%, %.1f of %.1f MiB, %.1f MB/s, ETA %.0f s",
		            pct, (double)p.done / 1048576.0, (double)p.total / 1048576.0, p.mb_s,
		            eta);
	}
}

static void wf_job_begin(shoal_weights_fetcher *f, uint64_t total, uint32_t tensors)
{
	pthread_mutex_lock(&f->mu);
	f->pr.done = 0;
	f->pr.total = total;
	f->pr.tensors_done = 0;
	f->pr.tensors_total = tensors;
	f->pr.failed = false;
	f->pr.why[0] = '\0';
	pthread_mutex_unlock(&f->mu);
	f->t0_us = shoal_clock_now_us();
	f->logged_step = 0;
}

static void wf_set_peer(shoal_weights_fetcher *f, const shoal_weights_src *s)
{
	pthread_mutex_lock(&f->mu);
	snprintf(f->pr.peer, sizeof f->pr.peer, "%s", s->name);
	pthread_mutex_unlock(&f->mu);
}

/* ---- the header job ------------------------------------------------------- */

/* INFO, then the META blob, from one source; the cache made from it. */
static shoal_err wf_header_from(shoal_weights_fetcher *f, const shoal_weights_src *s, char *why,
                                size_t why_len)
{
	shoal_xfer_link *k = NULL;
	uint8_t *meta = NULL;
	shoal_xfer_frame fr;
	shoal_err e = wf_dial(f, s, &k, why, why_len);
	if (!e)
		e = wf_request(f, k, SHOAL_WEIGHTS_OP_INFO, 0, 0, 0, why, why_len);
	if (!e)
		e = wf_reply(k, SHOAL_WEIGHTS_OP_INFO, &fr, why, why_len);
	if (!e && fr.hdr.payload_len != 24)
		e = shoal_why(why, why_len, SHOAL_ERR_PROTO, "an INFO reply of %u bytes",
		              fr.hdr.payload_len);
	if (e)
		goto out;
	uint64_t fsize = wf_get64(fr.payload), hlen = wf_get64(fr.payload + 8),
	         nt = wf_get64(fr.payload + 16);
	if (hlen > WF_MAX_META || nt > WF_MAX_META / 32 || hlen + 32 * nt > WF_MAX_META ||
	    hlen > fsize) {
		e = shoal_why(why, why_len, SHOAL_ERR_RANGE,
		              "a header of %llu bytes and %llu tensors in %llu bytes",
		              (unsigned long long)hlen, (unsigned long long)nt,
		              (unsigned long long)fsize);
		goto out;
	}
	uint64_t mlen = hlen + 32 * nt;
	if (!(meta = malloc(mlen ? mlen : 1))) {
		e = SHOAL_ERR_NOMEM;
		goto out;
	}
	wf_job_begin(f, mlen, 0);
	for (uint64_t off = 0; off < mlen && !e;) {
		uint32_t len =
		    mlen - off < SHOAL_WEIGHTS_CHUNK ? (uint32_t)(mlen - off) : SHOAL_WEIGHTS_CHUNK;
		e = wf_request(f, k, SHOAL_WEIGHTS_OP_READ, SHOAL_WEIGHTS_META, len, off, why,
		               why_len);
		if (!e)
			e = wf_reply(k, SHOAL_WEIGHTS_OP_READ, &fr, why, why_len);
		if (e)
			break;
		if (fr.hdr.payload_len != 48 + len || wf_get64(fr.payload + 8) != off) {
			e = shoal_why(why, why_len, SHOAL_ERR_PROTO, "a header piece out of place");
			break;
		}
		uint8_t d[SHOAL_DIGEST_BYTES];
		crypto_generichash(d, sizeof d, fr.payload + 48, len, NULL, 0);
		if (sodium_memcmp(d, fr.payload + 16, SHOAL_DIGEST_BYTES) != 0) {
			SHOAL_LOG_W("weights", "a header piece at %llu failed its check; again",
			            (unsigned long long)off);
			continue;
		}
		memcpy(meta + off, fr.payload + 48, len);
		off += len;
	}
	if (e)
		goto out;
	shoal_wcache_evict(f->dir, f->cfg.model_id, f->cfg.cache_max, fsize);
	shoal_wcache *wc = NULL;
	e = shoal_wcache_create(f->dir, f->cfg.model_id, fsize, meta, (size_t)hlen, meta + hlen,
	                        (size_t)nt, &wc, why, why_len);
	if (!e) {
		SHOAL_LOG_I("weights",
		            "header and %llu tensor digests from %s verified against the model id "
		            "(%.1f KiB); cache %s",
		            (unsigned long long)nt, s->name, (double)mlen / 1024.0,
		            shoal_wcache_path(wc));
		pthread_mutex_lock(&f->mu);
		f->made = wc;
		pthread_mutex_unlock(&f->mu);
	}
out:
	free(meta);
	if (k)
		shoal_xfer_link_bye(k, "header fetched");
	shoal_xfer_link_free(k);
	return e;
}

static shoal_err wf_header_job(shoal_weights_fetcher *f, char *why, size_t why_len)
{
	shoal_err e = shoal_why(why, why_len, SHOAL_ERR_NOTFOUND, "no peer serves the model");
	for (size_t i = 0; i < f->n_src; i++) {
		wf_set_peer(f, &f->src[i]);
		if ((e = wf_header_from(f, &f->src[i], why, why_len)) == SHOAL_OK)
			return SHOAL_OK;
		SHOAL_LOG_W("weights", "header from %s: %s", f->src[i].name, why);
	}
	return e;
}

/* ---- the tensor job ------------------------------------------------------- */

/* Tensor t from link k, SHOAL_WEIGHTS_WINDOW chunks in flight; a chunk that
 * fails its check is asked for again (invariant 3), then the whole
 * tensor is checked (shoal_wcache_finish). */
static shoal_err wf_tensor(shoal_weights_fetcher *f, shoal_xfer_link *k, uint32_t t, char *why,
                           size_t why_len)
{
	const shoal_model_id *mid = shoal_wcache_id(f->wc);
	uint64_t nb = shoal_model_id_tensor_bytes(mid, t);
	uint64_t n_chunks = (nb + SHOAL_WEIGHTS_CHUNK - 1) / SHOAL_WEIGHTS_CHUNK;
	uint64_t fifo[SHOAL_WEIGHTS_WINDOW + WF_MAX_RETRY]; /* chunk numbers in flight, in order */
	size_t head = 0, n_fly = 0;
	uint64_t next = 0, done = 0;
	uint32_t retries = 0;
	shoal_xfer_frame fr;
	shoal_err e = SHOAL_OK;
	size_t cap = sizeof fifo / sizeof fifo[0];
	while (done < n_chunks) {
		while (next < n_chunks && n_fly < SHOAL_WEIGHTS_WINDOW) {
			uint64_t off = next * SHOAL_WEIGHTS_CHUNK;
			uint32_t len =
			    (uint32_t)(nb - off < SHOAL_WEIGHTS_CHUNK ? nb - off
			                                              : SHOAL_WEIGHTS_CHUNK);
			if ((e = wf_request(f, k, SHOAL_WEIGHTS_OP_READ, t, len, off, why,
			                    why_len)))
				return e;
			fifo[(head + n_fly++) % cap] = next++;
		}
		if ((e = wf_reply(k, SHOAL_WEIGHTS_OP_READ, &fr, why, why_len)))
			return e;
		uint64_t c = fifo[head];
		head = (head + 1) % cap;
		n_fly--;
		uint64_t off = c * SHOAL_WEIGHTS_CHUNK;
		uint32_t len =
		    (uint32_t)(nb - off < SHOAL_WEIGHTS_CHUNK ? nb - off : SHOAL_WEIGHTS_CHUNK);
		if (wf_get32(fr.payload) != t || wf_get32(fr.payload + 4) != len ||
		    wf_get64(fr.payload + 8) != off || fr.hdr.payload_len != 48 + len)
			return shoal_why(why, why_len, SHOAL_ERR_PROTO,
			                 "a reply for another chunk (tensor %u at %llu wanted)", t,
			                 (unsigned long long)off);
		e = shoal_wcache_put_chunk(f->wc, t, off, fr.payload + 48, len, fr.payload + 16,
		                           why, why_len);
		if (e == SHOAL_ERR_MISMATCH && retries < WF_MAX_RETRY) {
			retries++;
			pthread_mutex_lock(&f->mu);
			f->pr.refetched++;
			pthread_mutex_unlock(&f->mu);
			SHOAL_LOG_W("weights", "%s: detected, fetched again", why);
			/* ask again after what is in flight (the server answers in order) */
			if ((e = wf_request(f, k, SHOAL_WEIGHTS_OP_READ, t, len, off, why,
			                    why_len)))
				return e;
			fifo[(head + n_fly++) % cap] = c;
			continue;
		}
		if (e)
			return e;
		done++;
		wf_progress(f, len, false);
	}
	return shoal_wcache_finish(f->wc, t, why, why_len);
}

static shoal_err wf_tensor_job(shoal_weights_fetcher *f, char *why, size_t why_len)
{
	const shoal_model_id *mid = shoal_wcache_id(f->wc);
	uint64_t total = 0;
	uint32_t want = 0;
	for (size_t i = 0; i < f->nt; i++)
		if (!shoal_wcache_has(f->wc, f->tensors[i])) {
			total += shoal_model_id_tensor_bytes(mid, f->tensors[i]);
			want++;
		}
	wf_job_begin(f, total, want);
	SHOAL_LOG_I("weights", "fetching %u tensor(s), %.1f MiB, from %zu peer(s)", want,
	            (double)total / 1048576.0, f->n_src);
#ifdef SHOAL_TEST_HOOKS
	/* test hook (--enable-test-hooks): the process dies (SIGKILL) after
	 * this many tensors, to show that a fetch resumes
	 * (tests/sh/weights_fetch.sh) */
	const char *die = getenv("SHOAL_TEST_FETCH_DIE_AFTER");
	uint32_t die_after = die ? (uint32_t)strtoul(die, NULL, 10) : 0, fetched_now = 0;
#endif
	size_t si = 0;
	shoal_xfer_link *k = NULL;
	shoal_err e = SHOAL_OK;
	uint32_t refetched0 = f->pr.refetched;
	for (size_t i = 0; i < f->nt; i++) {
		uint32_t t = f->tensors[i];
		if (shoal_wcache_has(f->wc, t))
			continue;
		size_t tried = 0;
		for (;;) {
			if (!k) {
				if (tried++ >= f->n_src)
					return shoal_why(why, why_len, SHOAL_ERR_NOTFOUND,
					                 "no peer gave tensor %u: %s", t,
					                 why[0] ? why : "no peer to ask");
				wf_set_peer(f, &f->src[si]);
				if ((e = wf_dial(f, &f->src[si], &k, why, why_len))) {
					SHOAL_LOG_W("weights", "link to %s: %s", f->src[si].name,
					            why);
					si = (si + 1) % f->n_src;
					continue;
				}
			}
			uint64_t before = f->pr.done;
			if ((e = wf_tensor(f, k, t, why, why_len)) == SHOAL_OK)
				break;
			SHOAL_LOG_W("weights", "tensor %u from %s: %s", t, f->src[si].name, why);
			pthread_mutex_lock(&f->mu);
			f->pr.fetched -= f->pr.done - before; /* only verified bytes count */
			f->pr.done = before;
			pthread_mutex_unlock(&f->mu);
			shoal_xfer_link_bye(k, "trying another peer");
			shoal_xfer_link_free(k);
			k = NULL;
			si = (si + 1) % f->n_src;
		}
		pthread_mutex_lock(&f->mu);
		f->pr.tensors_done++;
		pthread_mutex_unlock(&f->mu);
#ifdef SHOAL_TEST_HOOKS
		if (die_after && ++fetched_now == die_after) {
			SHOAL_LOG_W("weights",
			            "test hook: %u tensor(s) fetched, the process dies now",
			            fetched_now);
			raise(SIGKILL);
		}
#endif
	}
	if (k)
		shoal_xfer_link_bye(k, "tensors fetched");
	shoal_xfer_link_free(k);
	wf_progress(f, 0, true);
	pthread_mutex_lock(&f->mu);
	shoal_weights_progress p = f->pr;
	pthread_mutex_unlock(&f->mu);
	double s = (double)(shoal_clock_now_us() - f->t0_us) / 1e6;
	SHOAL_LOG_I("weights",
	            "fetched and verified %u tensor(s), %llu bytes in %.2f s (%.1f MB/s); %u "
	            "chunk(s) failed their check and were fetched again",
	            want, (unsigned long long)total, s, s > 0 ? (double)total / 1e6 / s : 0.0,
	            p.refetched - refetched0);
	return SHOAL_OK;
}

/* ---- the thread ----------------------------------------------------------- */

static void *wf_main(void *arg)
{
	shoal_weights_fetcher *f = arg;
	char why[SHOAL_WHY_LEN] = "";
	shoal_err e = f->wc ? wf_tensor_job(f, why, sizeof why) : wf_header_job(f, why, sizeof why);
	pthread_mutex_lock(&f->mu);
	f->pr.running = false;
	f->pr.failed = e != SHOAL_OK;
	snprintf(f->pr.why, sizeof f->pr.why, "%s", e ? why : "");
	f->result = e ? -1 : 1;
	pthread_mutex_unlock(&f->mu);
	if (e)
		SHOAL_LOG_W("weights", "fetch failed: %s", why);
	return NULL;
}

/* ---- new/free ------------------------------------------------------------- */

shoal_err shoal_weights_fetcher_new(const shoal_weights_config *cfg, shoal_weights_fetcher **out)
{
	*out = NULL;
	shoal_weights_fetcher *f = calloc(1, sizeof *f);
	if (!f)
		return SHOAL_ERR_NOMEM;
	f->cfg = *cfg;
	snprintf(f->dir, sizeof f->dir, "%s", cfg->dir);
	f->cfg.dir = f->dir;
	shoal_xfer_config_default(&f->xcfg);
	memcpy(f->xcfg.self_id, cfg->self, SHOAL_PEER_ID_LEN);
	f->xcfg.verbs = NULL; /* bulk bytes over TCP: the RDMA upgrade is the data plane's */
	if (pthread_mutex_init(&f->mu, NULL) != 0) {
		free(f);
		return SHOAL_ERR_NOMEM;
	}
	*out = f;
	return SHOAL_OK;
}

static void wf_join(shoal_weights_fetcher *f)
{
	if (f->thr_live)
		pthread_join(f->thr, NULL);
	f->thr_live = false;
	free(f->src);
	free(f->tensors);
	f->src = NULL;
	f->tensors = NULL;
}

void shoal_weights_fetcher_free(shoal_weights_fetcher *f)
{
	if (!f)
		return;
	wf_join(f);
	shoal_wcache_free(f->made);
	pthread_mutex_destroy(&f->mu);
	sodium_memzero(&f->cfg.key, sizeof f->cfg.key);
	free(f);
}

shoal_err shoal_weights_start(shoal_weights_fetcher *f, const shoal_weights_src *src, size_t n,
                              shoal_wcache *wc, const uint32_t *tensors, size_t nt)
{
	pthread_mutex_lock(&f->mu);
	bool running = f->pr.running;
	pthread_mutex_unlock(&f->mu);
	if (running)
		return SHOAL_ERR_BUSY;
	wf_join(f);
	f->src = malloc((n ? n : 1) * sizeof *src);
	f->tensors = malloc((nt ? nt : 1) * sizeof *tensors);
	if (!f->src || !f->tensors)
		return SHOAL_ERR_NOMEM;
	memcpy(f->src, src, n * sizeof *src);
	if (nt)
		memcpy(f->tensors, tensors, nt * sizeof *tensors);
	f->n_src = n;
	f->nt = nt;
	f->wc = wc;
	pthread_mutex_lock(&f->mu);
	f->pr.running = true;
	f->result = 0;
	pthread_mutex_unlock(&f->mu);
	if (pthread_create(&f->thr, NULL, wf_main, f) != 0) {
		pthread_mutex_lock(&f->mu);
		f->pr.running = false;
		f->result = -1;
		pthread_mutex_unlock(&f->mu);
		return SHOAL_ERR_NOMEM;
	}
	f->thr_live = true;
	return SHOAL_OK;
}

int shoal_weights_poll(shoal_weights_fetcher *f)
{
	pthread_mutex_lock(&f->mu);
	int r = f->result;
	pthread_mutex_unlock(&f->mu);
	return r;
}

shoal_wcache *shoal_weights_take_cache(shoal_weights_fetcher *f)
{
	pthread_mutex_lock(&f->mu);
	shoal_wcache *c = f->made;
	f->made = NULL;
	pthread_mutex_unlock(&f->mu);
	return c;
}

void shoal_weights_get_progress(shoal_weights_fetcher *f, shoal_weights_progress *p)
{
	pthread_mutex_lock(&f->mu);
	*p = f->pr;
	pthread_mutex_unlock(&f->mu);
}

json_t *shoal_weights_progress_json(const shoal_weights_progress *p)
{
	return json_pack("{sb sb ss sI sI sI si si si sf ss}", "running", p->running, "failed",
	                 p->failed, "why", p->why, "bytes_done", (json_int_t)p->done, "bytes_total",
	                 (json_int_t)p->total, "bytes_fetched", (json_int_t)p->fetched,
	                 "tensors_done", (int)p->tensors_done, "tensors_total",
	                 (int)p->tensors_total, "refetched_chunks", (int)p->refetched, "mb_s",
	                 p->mb_s, "peer", p->peer);
}

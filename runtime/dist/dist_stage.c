/*
 * runtime/dist/dist_stage.c: a pipeline stage (or an expert server): an engine
 * for its layer range, a map (owner, session id) -> engine slot, and the
 * handling of the frames of dist.h: control, token ids or hidden states in,
 * hidden states or sampled tokens out, expert requests answered.
 *
 * Part: runtime/ (distributed inference). Divisions: sessions, sending,
 * running a frame, control, entry points, creation.
 */
#include <stdlib.h>
#include <stdio.h>
#include <string.h>

#include "base/assert.h"
#include "base/hex.h"
#include "base/log.h"
#include "runtime/backends.h"
#include "runtime/dist/dist_impl.h"

#define LOG_PART  "dist"
#define RES_WORDS (2u + 2u * SHOAL_DIST_MAX_LOGPROBS)

/* ---- sessions ------------------------------------------------------------ */

static int sess_find(const shoal_dist_stage *s, uint64_t sid)
{
	for (uint32_t i = 0; i < s->cfg.max_sessions; i++)
		if (s->sess[i].used && s->sess[i].sid == sid)
			return (int)i;
	return -1;
}

/* A split stage's two engines open and close their sessions in step, so
 * a session has the same slot in both. */
static void slot_close(shoal_dist_stage *s, uint32_t slot)
{
	shoal_engine_session_close(s->e, slot);
	if (s->e2)
		shoal_engine_session_close(s->e2, slot);
}

static shoal_err slot_open(shoal_dist_stage *s, uint32_t *slot)
{
	shoal_err err = shoal_engine_session_open(s->e, slot);
	uint32_t other;
	if (err || !s->e2)
		return err;
	if ((err = shoal_engine_session_open(s->e2, &other)) || other != *slot) {
		if (!err)
			shoal_engine_session_close(s->e2, other);
		shoal_engine_session_close(s->e, *slot);
		return SHOAL_ERR_BUSY;
	}
	return SHOAL_OK;
}

/* Run the batch through the stage's engine, or its two parts. */
static shoal_err run_parts(shoal_dist_stage *s, const shoal_engine_batch *b, char *w, size_t w_len)
{
	if (!s->e2)
		return shoal_engine_run(s->e, b, w, w_len);
	shoal_engine_batch b1 = *b, b2 = *b;
	b1.want_logits = NULL;
	b1.logits = NULL;
	b1.hidden_out = s->mid;
	b2.tokens = NULL;
	b2.hidden_in = s->mid;
	shoal_err err = shoal_engine_run(s->e, &b1, w, w_len);
	return err ? err : shoal_engine_run(s->e2, &b2, w, w_len);
}

/* Free session ss; its slot too unless the prefix cache keeps it. */
static void sess_release(shoal_dist_stage *s, dist__sess *ss, bool keep_slot)
{
	if (!keep_slot)
		slot_close(s, ss->slot);
	shoal_sampler_free(ss->smp);
	dist__grammar_close(ss);
	dist__mtp_close(ss);
	int32_t *hist = ss->hist, *ptail = ss->ptail;
	memset(ss, 0, sizeof *ss);
	ss->hist = hist;
	ss->ptail = ptail;
}

static void sess_drop(shoal_dist_stage *s, dist__sess *ss)
{
	sess_release(s, ss, false);
}

/* CLOSE of session ss with the chain hashes of its fed positions: keep
 * its KV under them, as many whole blocks as its slot holds (dist.h "The
 * prefix cache"); the slots of the sessions that no longer fit freed. */
static void sess_keep(shoal_dist_stage *s, dist__sess *ss, const dist__ctl *c)
{
	uint32_t len = shoal_engine_session_len(s->e, ss->slot);
	uint32_t n = len / SHOAL_DIST_PREFIX_BLOCK;
	if (n > c->n_hash)
		n = c->n_hash;
	if (!s->pc.e || ss->failed || !n) {
		sess_drop(s, ss);
		return;
	}
	for (uint32_t b = 0; b < n; b++)
		dist__prefix_key(s->pc.salt, c->hash + (size_t)b * SHOAL_DIST_PREFIX_HASH,
		                 s->pkeys + (size_t)b * SHOAL_DIST_PREFIX_HASH);
	uint32_t freed[DIST__MAX_SESSIONS], n_freed = 0;
	uint32_t held = n * SHOAL_DIST_PREFIX_BLOCK;
	uint64_t bytes = shoal_engine_kv_bytes_held(s->e, held) +
	                 (s->e2 ? shoal_engine_kv_bytes_held(s->e2, held) : 0);
	bool kept = dist__pcache_put(&s->pc, ss->slot, s->pkeys, n, bytes, freed, &n_freed);
	for (uint32_t i = 0; i < n_freed; i++)
		slot_close(s, freed[i]);
	sess_release(s, ss, kept);
}

/* An engine slot for a new session: a free one, else the least recently
 * used kept session's. */
static shoal_err slot_get(shoal_dist_stage *s, uint32_t *slot)
{
	shoal_err e;
	int64_t f;
	while ((e = slot_open(s, slot)) == SHOAL_ERR_BUSY && (f = dist__pcache_evict(&s->pc)) >= 0)
		slot_close(s, (uint32_t)f);
	return e;
}

/* Free session ss without its owner's word, remembering it (dist__gone). */
static void sess_forget(shoal_dist_stage *s, dist__sess *ss, const char *why)
{
	dist__gone *g = &s->gone[s->n_gone++ % DIST__MAX_GONE];
	g->sid = ss->sid;
	memcpy(g->owner, ss->owner, SHOAL_PEER_ID_LEN);
	g->why = why;
	sess_drop(s, ss);
}

/* The session idle longest, if idle for SHOAL_DIST_IDLE_MS; -1: none. */
static int sess_idlest(const shoal_dist_stage *s)
{
	uint64_t now = dist__now_ns(), limit = (uint64_t)SHOAL_DIST_IDLE_MS * 1000000u;
	int best = -1;
	for (uint32_t i = 0; i < s->cfg.max_sessions; i++)
		if (s->sess[i].used && now - s->sess[i].last_ns >= limit &&
		    (best < 0 || s->sess[i].last_ns < s->sess[best].last_ns))
			best = (int)i;
	return best;
}

/* ---- sending --------------------------------------------------------------- */

static shoal_xfer_link *link_to(shoal_dist_stage *s, const uint8_t peer[SHOAL_PEER_ID_LEN])
{
	return s->cfg.link(s->cfg.link_ctx, peer);
}

/* Where control for a session goes: down the chain, or to its owner. */
static shoal_xfer_link *ctl_dest(shoal_dist_stage *s, const uint8_t owner[SHOAL_PEER_ID_LEN])
{
	return link_to(s, s->cfg.has_head ? owner : s->cfg.next);
}

static shoal_err err_send(shoal_dist_stage *s, uint64_t sid, const dist__ctl *c);

/* Fail session i (or, i < 0, an unknown one of owner/sid): log, send
 * ERROR to its owner (kept and tried again for a while when the owner
 * cannot be reached), drop its later frames. */
static shoal_err sess_fail(shoal_dist_stage *s, int i, uint64_t sid,
                           const uint8_t owner[SHOAL_PEER_ID_LEN], shoal_err status,
                           const char *reason)
{
	if (i >= 0) {
		if (s->sess[i].failed)
			return SHOAL_OK;
		s->sess[i].failed = true;
		owner = s->sess[i].owner;
	}
	s->met.session_errors++;
	uint64_t held = 0;
	if (status != SHOAL_ERR_BUSY) {
		SHOAL_LOG_W(LOG_PART, "session %016llx failed at layers [%u, %u): %s",
		            (unsigned long long)sid, s->cfg.layer_begin, s->cfg.layer_end, reason);
	} else if (shoal_log_limit_pass(&s->log_busy, SHOAL_LOG_LIMIT_US, &held)) {
		/* owners retry a refused OPEN every 200 ms: one line a second */
		SHOAL_LOG_I(LOG_PART,
		            "session %016llx refused at layers [%u, %u): %s (%llu more refused "
		            "since the last line)",
		            (unsigned long long)sid, s->cfg.layer_begin, s->cfg.layer_end, reason,
		            (unsigned long long)held);
	}
	dist__ctl c = {.op = SHOAL_DIST_CTL_ERROR, .status = status ? status : SHOAL_ERR_PROTO};
	memcpy(c.owner, owner, SHOAL_PEER_ID_LEN);
	snprintf(c.reason, sizeof c.reason, "layers [%u, %u): %s", s->cfg.layer_begin,
	         s->cfg.layer_end, reason);
	if (err_send(s, sid, &c) != SHOAL_OK && (s->cfg.owner_link || s->cfg.has_head)) {
		/* the owner's endpoint may be stale (it restarted): try again
		 * while the view catches up, so that it learns and replays */
		dist__err *pe = &s->errs[s->n_errs < DIST__MAX_ERRS ? s->n_errs++ : 0];
		pe->sid = sid;
		pe->c = c;
		pe->until_ns = dist__now_ns() + (uint64_t)DIST__ERR_RETRY_MS * 1000000u;
	}
	return SHOAL_OK;
}

/* Send the ERROR block c of session sid: straight to the owner when we
 * can reach it (the chain onward may be what broke), else onward. */
static shoal_err err_send(shoal_dist_stage *s, uint64_t sid, const dist__ctl *c)
{
	char why[SHOAL_WHY_LEN];
	shoal_xfer_link *k = s->cfg.owner_link && !s->cfg.has_head
	                         ? s->cfg.owner_link(s->cfg.owner_link_ctx, c->owner)
	                         : ctl_dest(s, c->owner);
	shoal_err e = dist__ctl_send(k, sid, c, s->ctl, (uint32_t)(sizeof s->ctl / 4),
	                             s->cfg.timeout_ms, why, sizeof why);
	if (e)
		SHOAL_LOG_W(LOG_PART, "could not pass the error of session %016llx on: %s",
		            (unsigned long long)sid, why);
	return e;
}

/* The errors not delivered yet, once more (at most every 100 ms). */
static void errs_retry(shoal_dist_stage *s)
{
	uint64_t now = dist__now_ns();
	if (!s->n_errs || now - s->errs_last_ns < 100000000u)
		return;
	s->errs_last_ns = now;
	for (uint32_t i = 0; i < s->n_errs;) {
		if (err_send(s, s->errs[i].sid, &s->errs[i].c) == SHOAL_OK ||
		    now > s->errs[i].until_ns)
			s->errs[i] = s->errs[--s->n_errs];
		else
			i++;
	}
}

/* A row of session sid that this stage freed without its owner's word:
 * the owner hears once (NOTFOUND: it replays the session) and the row is
 * dropped; false when sid is not among them. */
static bool sess_gone(shoal_dist_stage *s, uint64_t sid)
{
	for (uint32_t i = 0; i < DIST__MAX_GONE; i++) {
		dist__gone *g = &s->gone[i];
		if (!g->sid || g->sid != sid)
			continue;
		char w[SHOAL_WHY_LEN];
		snprintf(w, sizeof w, "the session was freed here: %s", g->why);
		g->sid = 0;
		sess_fail(s, -1, sid, g->owner, SHOAL_ERR_NOTFOUND, w);
		return true;
	}
	return false;
}

/* Hidden states of rows [0, n) downstream, as few frames as fit. */
static shoal_err send_hidden(shoal_dist_stage *s, uint32_t n, char *why, size_t why_len)
{
	shoal_xfer_link *k = link_to(s, s->cfg.next);
	if (!k)
		return shoal_why(why, why_len, SHOAL_ERR_NOTFOUND, "no link to the next stage");
	/* frame = 96 + n (16 tag + 4 d payload) bytes */
	uint32_t max = shoal_xfer_link_max_send(k), per_row = 16u + 4u * s->d;
	uint32_t fit = max > SHOAL_XFER_HDR_SIZE ? (max - SHOAL_XFER_HDR_SIZE) / per_row : 0;
	if (fit > SHOAL_XFER_MAX_ROWS_DEFAULT)
		fit = SHOAL_XFER_MAX_ROWS_DEFAULT;
	if (!fit)
		return shoal_why(why, why_len, SHOAL_ERR_RANGE, "one row does not fit a frame");
	for (uint32_t r0 = 0; r0 < n; r0 += fit) {
		uint32_t m = n - r0 < fit ? n - r0 : fit;
		shoal_xfer_hdr h = {.kind = SHOAL_XFER_KIND_HIDDEN,
		                    .dtype = SHOAL_XFER_DTYPE_F32,
		                    .layer_first = (uint16_t)s->cfg.layer_begin,
		                    .layer_end = (uint16_t)s->cfg.layer_end,
		                    .dim = s->d,
		                    .n_rows = m,
		                    .rows = s->tags + r0,
		                    .payload_len = m * s->d * 4u};
		struct iovec v = {.iov_base = s->hout + (size_t)r0 * s->d,
		                  .iov_len = (size_t)m * s->d * 4u};
		shoal_err e = shoal_xfer_link_send(k, &h, &v, 1, s->cfg.timeout_ms, why, why_len);
		if (e)
			return e;
		s->met.hidden_sent++;
		s->met.hidden_bytes += shoal_xfer_frame_head_len(&h) + h.payload_len;
	}
	return SHOAL_OK;
}

/* ---- running a frame --------------------------------------------------------- */

/* Sample the wanted row r (logits lg) of session ss into result row o:
 * its choice as if the session's rows before it in the step were kept
 * (dist.h "Speculation"). false: the session failed here. */
static bool sample_row(shoal_dist_stage *s, uint32_t r, const float *lg, int32_t *o)
{
	uint32_t si = s->row_sess[r];
	dist__sess *ss = &s->sess[si];
	bool first = ss->stamp != s->met.runs; /* its first row in this run */
	ss->stamp = s->met.runs;
	if (first)
		ss->stuck = false;
	memset(o, 0, (2 + 2 * ss->logprobs) * 4u);
	o[0] = -1;
	if (first && !dist__verify_rewind(ss, s->pos[r])) {
		sess_fail(s, (int)si, ss->sid, ss->owner, SHOAL_ERR_RANGE,
		          "a step that goes back further than a step's drafts");
		return false;
	}
	if (ss->next_pos && s->pos[r] != ss->next_pos) {
		sess_fail(s, (int)si, ss->sid, ss->owner, SHOAL_ERR_RANGE,
		          "a sampled row that skips positions");
		return false;
	}
	uint32_t t = ss->step0 + shoal_gen_step_of_pos(ss->n_prompt, s->pos[r]);
	float lp = 0.0f;
	shoal_sampler_filter gf = ss->gram ? dist__grammar_filter(ss) : (shoal_sampler_filter){0};
	/* a later row of a step whose grammar allows no token may be a
	 * rejected draft's: id -1, the owner judges (dist.h) */
	int32_t id = ss->stuck ? -1
	                       : shoal_gen_pick(ss->smp, lg, s->n_vocab, ss->hist, ss->n_hist, t,
	                                        ss->gram ? &gf : NULL, ss->no_logprob ? NULL : &lp,
	                                        ss->logprobs, s->top_ids, s->top_lps);
	ss->stuck = id < 0;
	if (id < 0 && first) {
		sess_fail(s, (int)si, ss->sid, ss->owner, SHOAL_ERR_UNSUPPORTED,
		          "structured output: no token of the vocabulary continues the "
		          "reply's grammar");
		return false;
	}
	uint8_t added = 0;
	if (id >= 0) {
		if (ss->gram)
			dist__grammar_advance(ss, id);
		if (ss->n_hist == 2 * SHOAL_DIST_TAIL_MAX) {
			memmove(ss->hist, ss->hist + SHOAL_DIST_TAIL_MAX,
			        SHOAL_DIST_TAIL_MAX * sizeof *ss->hist);
			ss->n_hist = SHOAL_DIST_TAIL_MAX;
		}
		ss->hist[ss->n_hist++] = id;
		added = 1;
		o[0] = id;
		memcpy(&o[1], &lp, 4);
		for (uint32_t j = 0; j < ss->logprobs; j++) {
			o[2 + 2 * j] = s->top_ids[j];
			memcpy(&o[3 + 2 * j], &s->top_lps[j], 4);
		}
	}
	dist__verify_note(ss, s->pos[r], added);
	return true;
}

/* Rows [0, m) of s->reply (dim words each, tags s->otags) to owner, in as
 * few TOKEN frames as fit the link. */
static shoal_err send_reply(shoal_dist_stage *s, const uint8_t *owner, uint32_t m, uint32_t dim,
                            char *why, size_t why_len)
{
	shoal_xfer_link *k = link_to(s, owner);
	if (!k)
		return shoal_why(why, why_len, SHOAL_ERR_NOTFOUND, "no link to an owner");
	uint32_t max = shoal_xfer_link_max_send(k), per_row = 16u + 4u * dim;
	uint32_t fit = max > SHOAL_XFER_HDR_SIZE ? (max - SHOAL_XFER_HDR_SIZE) / per_row : 0;
	if (fit > SHOAL_XFER_MAX_ROWS_DEFAULT)
		fit = SHOAL_XFER_MAX_ROWS_DEFAULT;
	if (!fit)
		return shoal_why(why, why_len, SHOAL_ERR_RANGE, "one result does not fit a frame");
	for (uint32_t r0 = 0; r0 < m; r0 += fit) {
		uint32_t c = m - r0 < fit ? m - r0 : fit;
		shoal_xfer_hdr h = {.kind = SHOAL_XFER_KIND_TOKEN,
		                    .dtype = SHOAL_XFER_DTYPE_I32,
		                    .layer_first = (uint16_t)s->n_layer,
		                    .layer_end = (uint16_t)s->n_layer,
		                    .dim = dim,
		                    .n_rows = c,
		                    .rows = s->otags + r0,
		                    .payload_len = c * dim * 4u};
		struct iovec v = {.iov_base = s->reply + (size_t)r0 * dim,
		                  .iov_len = (size_t)c * dim * 4u};
		shoal_err e = shoal_xfer_link_send(k, &h, &v, 1, s->cfg.timeout_ms, why, why_len);
		if (e)
			return e;
		s->met.tokens_sent++;
		s->met.tokens_bytes += shoal_xfer_frame_head_len(&h) + h.payload_len;
	}
	return SHOAL_OK;
}

/* Last stage: sample the rows [r0, r0 + n) that asked for logits (in row
 * order), then the results to each owner. */
static shoal_err send_results(shoal_dist_stage *s, uint32_t r0, uint32_t n, char *why,
                              size_t why_len)
{
	uint32_t wi = 0, li = 0;    /* results; logits rows (one per wanted row) */
	uint8_t *done = s->rdone;   /* per result: sent */
	uint32_t *wsess = s->wsess; /* per result: its session */
	for (uint32_t r = r0; r < r0 + n; r++) {
		if (!s->want[r])
			continue;
		const float *lg = s->logits + (size_t)li++ * s->n_vocab; /* (n_vocab) */
		if (s->sess[s->row_sess[r]].failed) /* at an earlier row of this run */
			continue;
		if (!sample_row(s, r, lg, s->res + (size_t)wi * RES_WORDS))
			continue;
		if (s->mtp)
			s->rchoice[r] = s->res[(size_t)wi * RES_WORDS];
		s->rtags[wi] = s->tags[r];
		wsess[wi] = s->row_sess[r];
		done[wi] = 0;
		wi++;
	}
	uint32_t n_want = wi;
	if (s->mtp) /* the guesses go with these results */
		dist__mtp_run(s, r0, n);
	for (uint32_t a = 0; a < n_want; a++) {
		if (done[a])
			continue;
		const uint8_t *owner = s->sess[wsess[a]].owner;
		uint32_t K = 0, m = 0;
		bool guess = false;
		for (uint32_t w = a; w < n_want; w++) /* this owner's rows: K is their largest */
			if (!done[w] &&
			    !memcmp(s->sess[wsess[w]].owner, owner, SHOAL_PEER_ID_LEN)) {
				if (s->sess[wsess[w]].logprobs > K)
					K = s->sess[wsess[w]].logprobs;
				guess |= s->sess[wsess[w]].mtp.ops != NULL;
			}
		uint32_t dim = 2 + 2 * K + guess; /* an MTP guess last (dist.h) */
		for (uint32_t w = a; w < n_want; w++) {
			const dist__sess *ss = &s->sess[wsess[w]];
			if (done[w] || memcmp(ss->owner, owner, SHOAL_PEER_ID_LEN))
				continue;
			int32_t *o = s->reply + (size_t)m * dim;
			memcpy(o, s->res + (size_t)w * RES_WORDS, (2 + 2 * ss->logprobs) * 4u);
			for (uint32_t j = ss->logprobs; j < K; j++) {
				o[2 + 2 * j] = -1;
				o[3 + 2 * j] = 0;
			}
			if (guess)
				o[2 + 2 * K] = ss->mtp.ops ? ss->mtp_guess : -1;
			s->otags[m] = s->rtags[w];
			done[w] = 1;
			m++;
		}
		shoal_err e = send_reply(s, owner, m, dim, why, why_len);
		if (e) {
			/* this owner cannot be reached now (gone, or restarted and
			 * the view lags): its sessions fail, and it is told as soon
			 * as it can be; the other owners' results still go */
			for (uint32_t w = 0; w < n_want; w++)
				if (!memcmp(s->sess[wsess[w]].owner, owner, SHOAL_PEER_ID_LEN))
					sess_fail(s, (int)wsess[w], s->sess[wsess[w]].sid, owner,
					          SHOAL_ERR_CLOSED, why);
		}
	}
	return SHOAL_OK;
}

/* Fail every distinct live session named by the batch rows [r0, r0 + n). */
static void fail_batch(shoal_dist_stage *s, uint32_t r0, uint32_t n, shoal_err e,
                       const char *reason)
{
	for (uint32_t r = r0; r < r0 + n; r++) {
		dist__sess *ss = &s->sess[s->row_sess[r]];
		sess_fail(s, (int)s->row_sess[r], ss->sid, ss->owner, e, reason);
	}
}

/* Whether kept or open slot's engines can start a batch at position p. */
static bool slot_can_start(const shoal_dist_stage *s, uint32_t slot, uint32_t p)
{
	return shoal_engine_session_reusable(s->e, slot, p) == p &&
	       (!s->e2 || shoal_engine_session_reusable(s->e2, slot, p) == p);
}

/* Check the pending rows of each session before a run, so that one
 * session's bad rows (positions that skip, tokens out of the vocabulary,
 * possibly from the network) fail that session only: drop them and
 * compact. Returns the rows left. */
static uint32_t screen_rows(shoal_dist_stage *s, uint32_t n)
{
	uint32_t n_ctx = shoal_engine_n_ctx(s->e), m = 0;
	for (uint32_t r = 0; r < n; r++) {
		uint32_t si = s->row_sess[r];
		dist__sess *ss = &s->sess[si];
		if (ss->failed)
			continue;
		/* the previous row of this session in the batch, if any */
		int prev = -1;
		for (uint32_t q = 0; q < r; q++)
			if (s->row_sess[q] == si)
				prev = (int)q;
		const char *bad = NULL;
		if (prev < 0 && s->pos[r] > shoal_engine_session_len(s->e, ss->slot))
			bad = "a position past the session's length";
		else if (prev < 0 && !slot_can_start(s, ss->slot, s->pos[r]))
			bad = "a rewind past what its sliding layers' rings hold";
		else if (prev >= 0 && s->pos[r] != s->pos[prev] + 1)
			bad = "positions that are not consecutive";
		else if (s->pos[r] >= n_ctx)
			bad = "a position past the context";
		else if (s->cfg.has_embd && (s->tok[r] < 0 || (uint32_t)s->tok[r] >= s->n_vocab))
			bad = "a token id out of the vocabulary";
		if (bad) {
			char w[SHOAL_WHY_LEN];
			snprintf(w, sizeof w, "row at %u: %s", s->pos[r], bad);
			sess_fail(s, (int)si, ss->sid, ss->owner, SHOAL_ERR_RANGE, w);
			continue;
		}
		if (m != r) {
			s->row_sess[m] = s->row_sess[r];
			s->slot[m] = s->slot[r];
			s->pos[m] = s->pos[r];
			s->tags[m] = s->tags[r];
			s->tok[m] = s->tok[r];
			if (!s->cfg.has_embd)
				memcpy(s->hin + (size_t)m * s->d, s->hin + (size_t)r * s->d,
				       (size_t)s->d * 4u);
		}
		m++;
	}
	/* rows kept before a session failed later in the batch: drop them too */
	uint32_t k = 0;
	for (uint32_t r = 0; r < m; r++) {
		if (s->sess[s->row_sess[r]].failed)
			continue;
		if (k != r) {
			s->row_sess[k] = s->row_sess[r];
			s->slot[k] = s->slot[r];
			s->pos[k] = s->pos[r];
			s->tags[k] = s->tags[r];
			s->tok[k] = s->tok[r];
			if (!s->cfg.has_embd)
				memcpy(s->hin + (size_t)k * s->d, s->hin + (size_t)r * s->d,
				       (size_t)s->d * 4u);
		}
		k++;
	}
	return k;
}

/* Run rows [r0, r0 + n) of the pending batch (n_want of them want
 * logits) and pass the result on: one HIDDEN frame downstream, or the
 * results to their owners. */
static shoal_err run_rows(shoal_dist_stage *s, uint32_t r0, uint32_t n, uint32_t n_want, char *why,
                          size_t why_len)
{
	bool head = s->cfg.has_head || s->cfg.tp_head;
	SHOAL_ASSERT(head || r0 == 0);
	shoal_engine_batch b = {.n_rows = n,
	                        .tokens = s->cfg.has_embd ? s->tok + r0 : NULL,
	                        .hidden_in = s->cfg.has_embd ? NULL : s->hin + (size_t)r0 * s->d,
	                        .session = s->slot + r0,
	                        .pos = s->pos + r0,
	                        .want_logits = head ? s->want + r0 : NULL,
	                        .hidden_out = !s->cfg.has_head || s->mtp ? s->hout : NULL,
	                        .logits = n_want && s->cfg.has_head ? s->logits : NULL};
	char w[SHOAL_WHY_LEN] = "";
	s->tp_rows = n; /* a group's slices carry these rows' tags */
	s->tp_row0 = r0;
	uint64_t t0 = dist__now_ns();
	shoal_err e = run_parts(s, &b, w, sizeof w);
	s->met.last_run_ns = dist__now_ns() - t0;
	s->met.run_ns += s->met.last_run_ns;
	s->met.runs++;
	s->met.rows += n;
	for (uint32_t r = r0 + 1; r < r0 + n; r++)
		if (s->row_sess[r] != s->row_sess[r0]) {
			s->met.batched_runs++;
			break;
		}
	if (e) { /* rows were screened: this is the engine or the experts */
		fail_batch(s, r0, n, e, w);
		return SHOAL_OK;
	}
	if (!s->cfg.has_head) {
		if (s->cfg.tp_n > 1 && !s->cfg.tp_out) /* another member passes it on */
			return SHOAL_OK;
		e = send_hidden(s, n, why, why_len);
		if (e) /* the next stage is gone: these sessions cannot go on */
			fail_batch(s, 0, n, e == SHOAL_ERR_TIMEOUT ? e : SHOAL_ERR_CLOSED, why);
		return e;
	}
	if (s->mtp) /* the rows' choices, from send_results */
		for (uint32_t r = r0; r < r0 + n; r++)
			s->rchoice[r] = -1;
	if (!n_want && s->mtp)
		dist__mtp_run(s, r0, n);
	return n_want ? send_results(s, r0, n, why, why_len) : SHOAL_OK;
}

/* Run the pending rows (one batch, possibly of several sessions and
 * frames): in one engine run, or, on the last stage, in as few as keep
 * the rows wanting logits within n_lrows (drafts add rows). */
static shoal_err flush(shoal_dist_stage *s, char *why, size_t why_len)
{
	uint32_t n = s->n_pend;
	s->n_pend = 0;
	if (n)
		n = screen_rows(s, n);
	if (!n)
		return SHOAL_OK;
	bool head = s->cfg.has_head || s->cfg.tp_head;
	if (!head)
		return run_rows(s, 0, n, 0, why, why_len);
	/* want logits: every row whose session's prompt is in (the last
	 * prompt row, a fed token, its drafts: dist.h invariant 4) */
	for (uint32_t r = 0; r < n; r++)
		s->want[r] = s->pos[r] + 1 >= s->sess[s->row_sess[r]].n_prompt;
	for (uint32_t r0 = 0, r1; r0 < n; r0 = r1) {
		uint32_t n_want = 0;
		for (r1 = r0; r1 < n && n_want + s->want[r1] <= s->n_lrows; r1++)
			n_want += s->want[r1];
		shoal_err e = run_rows(s, r0, r1 - r0, n_want, why, why_len);
		if (e)
			return e;
	}
	return SHOAL_OK;
}

/* Token ids (stage 0) or hidden states: append the rows of live sessions
 * to the pending batch (running it first if they would not fit). */
static shoal_err take_frame(shoal_dist_stage *s, const shoal_xfer_frame *f, char *why,
                            size_t why_len)
{
	const shoal_xfer_hdr *h = &f->hdr;
	char w[SHOAL_WHY_LEN] = "";
	bool ok;
	if (s->cfg.has_embd)
		ok = h->kind == SHOAL_XFER_KIND_TOKEN && h->dim == 1 && h->layer_first == 0 &&
		     h->layer_end == 0;
	else
		ok = h->kind == SHOAL_XFER_KIND_HIDDEN && h->dtype == SHOAL_XFER_DTYPE_F32 &&
		     h->dim == s->d && h->layer_end == s->cfg.layer_begin;
	if (ok && h->n_rows > s->R)
		ok = false;
	if (!ok)
		snprintf(
		    w, sizeof w, "%s frame of %u rows x %u, layers [%u, %u), not for this stage",
		    shoal_xfer_kind_name(h->kind), h->n_rows, h->dim, h->layer_first, h->layer_end);
	if (ok && s->n_pend + h->n_rows > s->R) {
		shoal_err e = flush(s, why, why_len);
		if (e)
			return e;
	}
	uint32_t n = s->n_pend, n0 = n;
	for (uint32_t r = 0; r < h->n_rows; r++) {
		int i = sess_find(s, h->rows[r].session);
		if (i < 0 && sess_gone(s, h->rows[r].session))
			continue;
		if (i < 0 || s->sess[i].failed) {
			/* a peer retrying into a dropped session sends these per
			 * row: one line a second, with the count held back */
			uint64_t held;
			if (shoal_log_limit_pass(&s->log_row, SHOAL_LOG_LIMIT_US, &held))
				SHOAL_LOG_W(
				    LOG_PART,
				    "layers [%u, %u): dropped a row of %s session %016llx "
				    "(and %llu row(s) of such sessions since the last line)",
				    s->cfg.layer_begin, s->cfg.layer_end,
				    i < 0 ? "unknown" : "failed",
				    (unsigned long long)h->rows[r].session,
				    (unsigned long long)held);
			continue;
		}
		if (!ok) { /* malformed: fail the sessions it names, once each */
			sess_fail(s, i, s->sess[i].sid, s->sess[i].owner, SHOAL_ERR_FORMAT, w);
			continue;
		}
		s->sess[i].last_ns = dist__now_ns();
		if (!s->sess[i].started) { /* a first row past 0 starts from kept KV */
			s->sess[i].started = true;
			if (h->rows[r].pos) {
				s->met.prefix_hits++;
				s->met.prefix_hit_tokens += h->rows[r].pos;
			}
		}
		s->row_sess[n] = (uint32_t)i;
		s->slot[n] = s->sess[i].slot;
		s->pos[n] = h->rows[r].pos;
		s->tags[n] = h->rows[r];
		if (s->cfg.has_embd)
			memcpy(&s->tok[n], f->payload + (size_t)r * 4u, 4);
		else
			memcpy(s->hin + (size_t)n * s->d, f->payload + (size_t)r * s->d * 4u,
			       (size_t)s->d * 4u);
		n++;
	}
	if (n - n0 < h->n_rows)
		s->met.dropped++;
	s->n_pend = n;
	return SHOAL_OK;
}

/* ---- control -------------------------------------------------------------------- */

/* The fewest blocks, 1..m, that kept slot's engines can rewind to (each
 * sliding layer's ring still holding the window before it: engine.h
 * shoal_engine_session_reusable), or m + 1 where none can. */
static uint32_t slot_floor(const shoal_dist_stage *s, uint32_t slot, uint32_t m)
{
	for (uint32_t b = 1; b <= m; b++) {
		if (slot_can_start(s, slot, b * SHOAL_DIST_PREFIX_BLOCK))
			return b;
	}
	return m + 1;
}

/* Open session sid; c->n_hash is cut to the prefix blocks held here (and
 * c->pfloor raised to what its rings need). */
static shoal_err sess_open(shoal_dist_stage *s, uint64_t sid, dist__ctl *c, char *w, size_t w_len)
{
	int i = sess_find(s, sid);
	if (i >= 0 && memcmp(s->sess[i].owner, c->owner, SHOAL_PEER_ID_LEN))
		return shoal_why(w, w_len, SHOAL_ERR_BUSY, "session %016llx is already open",
		                 (unsigned long long)sid);
	if (i >= 0) { /* its owner never reopens a live one: a restarted owner's */
		SHOAL_LOG_I(LOG_PART,
		            "layers [%u, %u): session %016llx opened again: the old one freed",
		            s->cfg.layer_begin, s->cfg.layer_end, (unsigned long long)sid);
		sess_drop(s, &s->sess[i]);
		i = -1;
	}
	/* a freed session goes to the owners that waited for one first
	 * (dist_admit.c), replays before new requests: at the first stage
	 * only, which OPENs reach in the owners' order; the stages after it
	 * take what it admitted (their own lists could disagree with it and
	 * refuse, in turn, every owner it lets through) */
	uint64_t now = dist__now_ns();
	bool resumed = c->first_step > 0, ordered = s->cfg.has_embd;
	uint32_t ahead = ordered ? dist__admit_ahead(&s->admit, c->owner, resumed, now) : 0;
	uint32_t n_free = 0;
	for (uint32_t j = 0; j < s->cfg.max_sessions; j++)
		if (!s->sess[j].used && n_free++ == 0)
			i = (int)j;
	if (n_free <= ahead)
		i = -1;
	if (i < 0 && n_free == 0 && ahead == 0 && (i = sess_idlest(s)) >= 0) {
		/* its owner went silent (died, or lost its CLOSE): the slot goes
		 * to a session that runs */
		SHOAL_LOG_W(
		    LOG_PART, "layers [%u, %u): session %016llx idle for %llu s: freed",
		    s->cfg.layer_begin, s->cfg.layer_end, (unsigned long long)s->sess[i].sid,
		    (unsigned long long)((dist__now_ns() - s->sess[i].last_ns) / 1000000000u));
		sess_forget(s, &s->sess[i], "it was idle and its slot went to another session");
	}
	if (i < 0) {
		if (ordered)
			dist__admit_refused(&s->admit, c->owner, resumed, now);
		if (n_free)
			return shoal_why(
			    w, w_len, SHOAL_ERR_BUSY,
			    "%u session(s) free, held for %u owner(s) that waited first", n_free,
			    ahead);
		return shoal_why(w, w_len, SHOAL_ERR_BUSY, "all %u sessions in use",
		                 s->cfg.max_sessions);
	}
	if (ordered)
		dist__admit_taken(&s->admit, c->owner);
	dist__sess *ss = &s->sess[i];
	/* the kept session holding the longest run of the prompt's blocks;
	 * the OPEN goes on with as many as every stage so far holds */
	uint32_t m = 0;
	int hit = -1;
	if (c->n_hash && s->pc.e) {
		for (uint32_t b = 0; b < c->n_hash; b++)
			dist__prefix_key(s->pc.salt, c->hash + (size_t)b * SHOAL_DIST_PREFIX_HASH,
			                 s->pkeys + (size_t)b * SHOAL_DIST_PREFIX_HASH);
		hit = dist__pcache_match(&s->pc, s->pkeys, c->n_hash, &m);
	}
	if (hit >= 0)
		ss->slot = dist__pcache_take(&s->pc, hit); /* rows from M x BLOCK rewind it */
	if (hit >= 0 && m) {
		/* sliding layers' rings: M must be at least this stage's floor
		 * too, or nothing is reused (dist.h "The prefix cache") */
		uint32_t a = slot_floor(s, ss->slot, m);
		if (a > c->pfloor)
			c->pfloor = a;
		if (m < c->pfloor)
			m = 0;
	}
	if (!m)
		c->pfloor = 0;
	c->n_hash = m;
	if (hit < 0) {
		if (slot_get(s, &ss->slot))
			return shoal_why(w, w_len, SHOAL_ERR_BUSY, "no engine session free");
		shoal_engine_session_reset(s->e, ss->slot);
		if (s->e2)
			shoal_engine_session_reset(s->e2, ss->slot);
	}
	if (s->cfg.has_head) {
		if (shoal_sampler_new(&c->sp, s->n_vocab, &ss->smp)) {
			slot_close(s, ss->slot);
			return shoal_why(w, w_len, SHOAL_ERR_NOMEM, "sampler");
		}
		memcpy(ss->hist, c->tail, (size_t)c->n_tail * 4u);
		ss->n_hist = c->n_tail;
		shoal_err ge = dist__grammar_open(s, ss, c, w, w_len);
		if (ge) {
			dist__grammar_close(ss);
			shoal_sampler_free(ss->smp);
			ss->smp = NULL;
			slot_close(s, ss->slot);
			return ge;
		}
	}
	ss->used = true;
	ss->failed = false;
	ss->sid = sid;
	memcpy(ss->owner, c->owner, SHOAL_PEER_ID_LEN);
	ss->n_prompt = c->n_prompt;
	ss->step0 = c->first_step;
	ss->last_ns = dist__now_ns();
	ss->logprobs = c->logprobs < s->n_vocab ? c->logprobs : s->n_vocab;
	ss->no_logprob = c->no_logprob && !ss->logprobs;
	if (s->rchoice) /* the model has an MTP layer */
		dist__mtp_open(s, ss, c);
	return SHOAL_OK;
}

static shoal_err handle_ctl(shoal_dist_stage *s, const shoal_xfer_frame *f, char *why,
                            size_t why_len)
{
	dist__ctl c;
	char w[SHOAL_WHY_LEN] = "";
	uint64_t sid = f->hdr.rows[0].session;
	shoal_err e = dist__ctl_decode(f, &c, w, sizeof w);
	if (e) {
		s->met.dropped++;
		SHOAL_LOG_W(LOG_PART, "layers [%u, %u): dropped a control frame: %s",
		            s->cfg.layer_begin, s->cfg.layer_end, w);
		int i = sess_find(s, sid);
		if (i >= 0)
			sess_fail(s, i, sid, s->sess[i].owner, SHOAL_ERR_FORMAT, w);
		return SHOAL_OK;
	}
	int i = sess_find(s, sid);
	if (i >= 0 && memcmp(s->sess[i].owner, c.owner, SHOAL_PEER_ID_LEN) &&
	    c.op != SHOAL_DIST_CTL_OPEN) {
		s->met.dropped++;
		SHOAL_LOG_W(LOG_PART, "control for session %016llx from another owner: dropped",
		            (unsigned long long)sid);
		return SHOAL_OK;
	}
	switch (c.op) {
	case SHOAL_DIST_CTL_OPEN:
		if (s->cfg.layer_begin == s->cfg.layer_end) /* an expert server: not a stage */
			return SHOAL_OK;
		e = sess_open(s, sid, &c, w, sizeof w);
		if (e)
			return sess_fail(s, -1, sid, c.owner, e, w);
		if (s->cfg.has_head && c.want_match) { /* every stage's minimum: to the owner */
			dist__ctl mc = {.op = SHOAL_DIST_CTL_MATCH, .n_hash = c.n_hash};
			memcpy(mc.owner, c.owner, SHOAL_PEER_ID_LEN);
			e = dist__ctl_send(ctl_dest(s, c.owner), sid, &mc, s->ctl,
			                   (uint32_t)(sizeof s->ctl / 4), s->cfg.timeout_ms, why,
			                   why_len);
			if (e && (i = sess_find(s, sid)) >= 0)
				sess_fail(s, i, sid, c.owner, SHOAL_ERR_CLOSED, why);
			return e;
		}
		break;
	case SHOAL_DIST_CTL_CLOSE:
		if (i >= 0)
			sess_keep(s, &s->sess[i], &c);
		break;
	case SHOAL_DIST_CTL_SPEC: /* guesses wanted from the next step on, or not */
		if (i >= 0 && s->sess[i].mtp.ops)
			shoal_mtp_drafter_defer(&s->sess[i].mtp, !c.want_mtp);
		break;
	case SHOAL_DIST_CTL_MATCH: /* the owner's: not for a stage */
		s->met.dropped++;
		return SHOAL_OK;
	case SHOAL_DIST_CTL_ERROR:
		if (i >= 0)
			s->sess[i].failed = true;
		break;
	}
	/* pass it on: down the chain; the last stage only passes errors; in a
	 * group only the member that passes the output on */
	if ((s->cfg.has_head && c.op != SHOAL_DIST_CTL_ERROR) ||
	    (s->cfg.tp_n > 1 && !s->cfg.tp_out))
		return SHOAL_OK;
	e = dist__ctl_send(ctl_dest(s, c.owner), sid, &c, s->ctl, (uint32_t)(sizeof s->ctl / 4),
	                   s->cfg.timeout_ms, why, why_len);
	if (e && c.op == SHOAL_DIST_CTL_OPEN && (i = sess_find(s, sid)) >= 0)
		sess_fail(s, i, sid, c.owner, SHOAL_ERR_CLOSED, why); /* the rest never opened it */
	return e;
}

/* ---- entry points --------------------------------------------------------------- */

/* A group's entry could not relay frame f to a member: the sessions it
 * names cannot run here (the member is gone: the plan will change). */
static shoal_err relay_failed(shoal_dist_stage *s, const shoal_xfer_frame *f, const char *why)
{
	char w[SHOAL_WHY_WRAP_LEN];
	snprintf(w, sizeof w, "a member of the group cannot be reached: %s", why);
	s->met.dropped++;
	for (uint32_t r = 0; r < f->hdr.n_rows; r++) {
		uint64_t sid = f->hdr.rows[r].session;
		int i = sess_find(s, sid);
		dist__ctl c;
		char cw[SHOAL_WHY_LEN];
		if (i >= 0)
			sess_fail(s, i, sid, s->sess[i].owner, SHOAL_ERR_CLOSED, w);
		else if (f->hdr.kind == SHOAL_XFER_KIND_SESSION &&
		         dist__ctl_decode(f, &c, cw, sizeof cw) == SHOAL_OK &&
		         c.op == SHOAL_DIST_CTL_OPEN)
			sess_fail(s, -1, sid, c.owner, SHOAL_ERR_CLOSED, w);
	}
	return SHOAL_OK;
}

/* One frame; data frames join the pending batch, which runs now unless
 * `batch` (then the caller flushes after draining its links). Anything
 * else runs the pending batch first: control and expert requests keep
 * their order with the data of their sessions. */
static shoal_err stage_handle(shoal_dist_stage *s, shoal_xfer_link *from, const shoal_xfer_frame *f,
                              bool batch, char *why, size_t why_len)
{
	const shoal_xfer_hdr *h = &f->hdr;
	/* The link checked its own plan; this stage's weights belong to cfg's
	 * plan, and a link may already be on another one (DESIGN invariant 4). */
	if (shoal_xfer_kind_is_data(h->kind) &&
	    (memcmp(h->digest, s->cfg.digest, SHOAL_DIGEST_BYTES) || h->epoch != s->cfg.epoch)) {
		s->met.dropped++;
		char theirs[5], ours[5]; /* digest prefixes */
		shoal_hex_encode(h->digest, 2, theirs);
		shoal_hex_encode(s->cfg.digest, 2, ours);
		uint64_t held;
		if (shoal_log_limit_pass(&s->log_plan, SHOAL_LOG_LIMIT_US, &held))
			SHOAL_LOG_W(
			    LOG_PART,
			    "layers [%u, %u): dropped a %s frame of plan %s../epoch %llu, "
			    "this stage is on %s../epoch %llu (and %llu such frame(s) since "
			    "the last line)",
			    s->cfg.layer_begin, s->cfg.layer_end, shoal_xfer_kind_name(h->kind),
			    theirs, (unsigned long long)h->epoch, ours,
			    (unsigned long long)s->cfg.epoch, (unsigned long long)held);
		return SHOAL_OK;
	}
	bool data = h->kind == SHOAL_XFER_KIND_HIDDEN || h->kind == SHOAL_XFER_KIND_TOKEN;
	shoal_err e;
	if (s->cfg.tp_n > 1) {
		/* invariant 9: every member runs the same batches, in order */
		batch = false;
		if (s->cfg.tp_me == 0 && (data || h->kind == SHOAL_XFER_KIND_SESSION) &&
		    !dist__tp_relay(s, f, why, why_len))
			return relay_failed(s, f, why);
	}
	if (data) {
		e = take_frame(s, f, why, why_len);
		return e || batch ? e : flush(s, why, why_len);
	}
	if ((e = flush(s, why, why_len)))
		return e;
	switch (h->kind) {
	case SHOAL_XFER_KIND_SESSION:
		return handle_ctl(s, f, why, why_len);
	case SHOAL_XFER_KIND_EXPERT_REQ:
		return dist__experts_serve(s, from, f, why, why_len);
	case SHOAL_XFER_KIND_ERROR:
		SHOAL_LOG_W(LOG_PART, "peer error: %.*s", (int)h->payload_len,
		            (const char *)f->payload);
		return SHOAL_OK;
	default:
		s->met.dropped++;
		uint64_t held;
		if (shoal_log_limit_pass(&s->log_frame, SHOAL_LOG_LIMIT_US, &held))
			SHOAL_LOG_W(LOG_PART,
			            "layers [%u, %u): dropped an unexpected %s frame (and %llu "
			            "such since the last line)",
			            s->cfg.layer_begin, s->cfg.layer_end,
			            shoal_xfer_kind_name(h->kind), (unsigned long long)held);
		return SHOAL_OK;
	}
}

shoal_err shoal_dist_stage_handle(shoal_dist_stage *s, shoal_xfer_link *from,
                                  const shoal_xfer_frame *f, char *why, size_t why_len)
{
	return stage_handle(s, from, f, false, why, why_len);
}

shoal_err shoal_dist_stage_take(shoal_dist_stage *s, shoal_xfer_link *from,
                                const shoal_xfer_frame *f, char *why, size_t why_len)
{
	return stage_handle(s, from, f, true, why, why_len);
}

shoal_err shoal_dist_stage_flush(shoal_dist_stage *s, char *why, size_t why_len)
{
	errs_retry(s);
	return flush(s, why, why_len);
}

static shoal_err stage_handle_cb(void *obj, shoal_xfer_link *from, const shoal_xfer_frame *f,
                                 char *why, size_t why_len)
{
	return stage_handle(obj, from, f, true, why, why_len);
}

shoal_err shoal_dist_stage_poll(shoal_dist_stage *s, shoal_xfer_link *const *links, uint32_t n,
                                int timeout_ms, char *why, size_t why_len)
{
	shoal_err e = dist__poll(links, n, timeout_ms, stage_handle_cb, s, &s->met.dropped,
	                         LOG_PART, why, why_len);
	shoal_err f = flush(s, why, why_len); /* what arrived together runs together */
	return e ? e : f;
}

uint32_t shoal_dist_stage_keep_owners(shoal_dist_stage *s,
                                      const uint8_t (*owners)[SHOAL_PEER_ID_LEN], size_t n_owners)
{
	uint32_t n = 0;
	for (uint32_t i = 0; s && i < s->cfg.max_sessions; i++) {
		bool keep = false;
		for (size_t j = 0; j < n_owners && !keep; j++)
			keep = !memcmp(s->sess[i].owner, owners[j], SHOAL_PEER_ID_LEN);
		if (s->sess[i].used && !keep) {
			SHOAL_LOG_I(LOG_PART,
			            "layers [%u, %u): session %016llx freed: its owner left",
			            s->cfg.layer_begin, s->cfg.layer_end,
			            (unsigned long long)s->sess[i].sid);
			sess_forget(s, &s->sess[i], "its owner had left this peer's view");
			n++;
		}
	}
	return n;
}

void shoal_dist_stage_metrics_get(const shoal_dist_stage *s, shoal_dist_stage_metrics *m)
{
	*m = s->met;
	m->prefix_evictions = s->pc.evictions;
	dist__pcache_size(&s->pc, &m->prefix_entries, &m->prefix_tokens, &m->prefix_bytes);
}

void shoal_dist_stage_plan(const shoal_dist_stage *s, uint8_t digest[SHOAL_DIGEST_BYTES],
                           uint64_t *epoch)
{
	memcpy(digest, s->cfg.digest, SHOAL_DIGEST_BYTES);
	*epoch = s->cfg.epoch;
}

/* ---- creation --------------------------------------------------------------------- */

void shoal_dist_stage_free(shoal_dist_stage *s)
{
	if (!s)
		return;
	if (s->sess)
		for (uint32_t i = 0; i < s->cfg.max_sessions; i++) {
			shoal_sampler_free(s->sess[i].smp);
			dist__grammar_close(&s->sess[i]);
			dist__mtp_close(&s->sess[i]);
			free(s->sess[i].hist);
			free(s->sess[i].ptail);
		}
	shoal_mtp_free(s->mtp);
	free(s->rchoice);
	free(s->mtp_h);
	free(s->mtp_next);
	dist__gvocab_fini(&s->gv[0]);
	dist__gvocab_fini(&s->gv[1]);
	free(s->sess);
	dist__pcache_fini(&s->pc);
	shoal_engine_free(s->e);
	shoal_engine_free(s->e2);
	free(s->mid);
	free(s->mask);
	free(s->xpeer);
	free(s->tok);
	free(s->hin);
	free(s->hout);
	free(s->slot);
	free(s->pos);
	free(s->row_sess);
	free(s->want);
	free(s->tags);
	free(s->logits);
	free(s->res);
	free(s->reply);
	free(s->rtags);
	free(s->otags);
	free(s->rdone);
	free(s->wsess);
	free(s->top_ids);
	free(s->top_lps);
	free(s->ex_ids);
	free(s->ex_w);
	free(s->ex_contrib);
	free(s->ex_out);
	free(s->ex_slot);
	free(s->ex_req);
	free(s->xx);
	free(s->xroute);
	free(s->xtags);
	free(s);
}

shoal_err shoal_dist_stage_new(const shoal_model *m, const shoal_dist_stage_config *cfg,
                               shoal_dist_stage **out, char *why, size_t why_len)
{
	*out = NULL;
	if (!cfg->link || cfg->max_sessions == 0 || cfg->max_sessions > DIST__MAX_SESSIONS ||
	    cfg->max_rows == 0 ||
	    (cfg->expert_mask && !cfg->expert_peer && cfg->layer_begin < cfg->layer_end))
		return shoal_why(why, why_len, SHOAL_ERR_INVAL,
		                 "stage config: link, 1..%u sessions, rows, mask with peers",
		                 DIST__MAX_SESSIONS);
	if (cfg->tp_n > 1 &&
	    (cfg->tp_n > SHOAL_DIST_TP_MAX || cfg->tp_me >= cfg->tp_n || cfg->expert_mask ||
	     !cfg->tp_send || !cfg->tp_recv || (cfg->tp_me == 0 && !cfg->tp_relay) ||
	     cfg->layer_begin >= cfg->layer_end ||
	     (cfg->tp_head &&
	      (cfg->tp_root >= cfg->tp_n || cfg->has_head != (cfg->tp_me == cfg->tp_root)))))
		return shoal_why(
		    why, why_len, SHOAL_ERR_INVAL,
		    "group stage config: 2..%u members, layers, links, no expert mask, "
		    "a split head's root the one with the head",
		    SHOAL_DIST_TP_MAX);
	shoal_dist_stage *s = calloc(1, sizeof *s);
	if (!s)
		return SHOAL_ERR_NOMEM;
	shoal_err err = SHOAL_ERR_NOMEM;
	s->cfg = *cfg;
	s->cfg.tp_head = cfg->tp_n > 1 && cfg->tp_head;
	s->m = m;
	const shoal_hparams *hp = &m->hp;
	s->d = hp->n_embd;
	s->n_vocab = hp->n_vocab;
	s->n_layer = hp->n_layer;
	s->n_expert = hp->n_expert;
	s->k = hp->n_expert_used ? hp->n_expert_used : 1;
	s->R = cfg->max_rows;
	/* logits rows per run: a row per session, and one step's drafts */
	s->n_lrows = cfg->max_sessions + SHOAL_DIST_DRAFT_MAX;
	size_t nm = (size_t)s->n_layer * (s->n_expert ? s->n_expert : 1);
	size_t R = s->R, d = s->d, k = s->k, S = cfg->max_sessions;
	s->mask = malloc(nm);
	s->xpeer = malloc(nm);
	s->sess = calloc(S, sizeof *s->sess);
	if (!s->mask || !s->xpeer || !s->sess)
		goto fail;
	memset(s->xpeer, -1, nm);
	if (cfg->expert_mask && s->n_expert)
		memcpy(s->mask, cfg->expert_mask, nm);
	else
		memset(s->mask, 1, nm);
	for (size_t i = 0; i < nm; i++) {
		if (s->mask[i] || !cfg->expert_peer)
			continue;
		const uint8_t *p = cfg->expert_peer + i * SHOAL_PEER_ID_LEN;
		uint32_t x = 0;
		while (x < s->n_xpeers && memcmp(s->xpeers[x], p, SHOAL_PEER_ID_LEN))
			x++;
		if (x == s->n_xpeers) {
			if (x == DIST__MAX_XPEERS) {
				err = shoal_why(why, why_len, SHOAL_ERR_RANGE,
				                "more than %u expert peers", DIST__MAX_XPEERS);
				goto fail;
			}
			memcpy(s->xpeers[s->n_xpeers++], p, SHOAL_PEER_ID_LEN);
		}
		s->xpeer[i] = (int8_t)x;
	}
	shoal_engine_config ec = shoal_engine_config_default(m);
	shoal_backend_opts bo = {.name = cfg->backend};
	err = shoal_backend_pick(&bo, &ec.backend, why, why_len);
	if (err)
		goto fail;
	ec.n_threads = cfg->n_threads ? cfg->n_threads : 1;
	ec.n_ctx = cfg->n_ctx;
	ec.max_sessions = cfg->max_sessions;
	ec.max_rows = cfg->max_rows;
	ec.layer_begin = cfg->layer_begin;
	ec.layer_end = cfg->layer_end;
	ec.has_embd = cfg->has_embd;
	ec.has_head = cfg->has_head || (cfg->tp_n > 1 && cfg->tp_head);
	ec.expert_mask = cfg->expert_mask;
	ec.tensor_held = cfg->tensor_held;
	ec.tensor_held_ctx = cfg->tensor_held_ctx;
	ec.moe_hook = (shoal_engine_moe_hook){
	    .ctx = s, .dispatch = dist__experts_dispatch, .collect = dist__experts_collect};
	if (cfg->tp_n > 1) {
		ec.moe_hook = (shoal_engine_moe_hook){0};
		ec.tp = (shoal_engine_tp){
		    .n_members = cfg->tp_n,
		    .member = cfg->tp_me,
		    .weights = cfg->tp_w,
		    .split_head = cfg->tp_head,
		    .head_root = cfg->tp_root,
		    .link = {.ctx = s, .exchange = dist__tp_exchange, .gather = dist__tp_gather}};
	}
	bool split = cfg->device_end > cfg->layer_begin && cfg->device_end < cfg->layer_end;
	if (split && cfg->tp_n > 1) {
		err = shoal_why(why, why_len, SHOAL_ERR_INVAL,
		                "a tensor group's stage cannot be split across devices");
		goto fail;
	}
	shoal_engine_config ec2 = ec;
	if (split) { /* [device_end, layer_end) on the CPU, the head there */
		ec.layer_end = cfg->device_end;
		ec.has_head = false;
		ec2.layer_begin = cfg->device_end;
		ec2.has_embd = false;
		shoal_backend_opts cpu = {.name = "cpu"};
		if ((err = shoal_backend_pick(&cpu, &ec2.backend, why, why_len)) ||
		    (err = shoal_engine_new(m, &ec2, &s->e2, why, why_len)))
			goto fail;
		if (!(s->mid = malloc(R * d * sizeof *s->mid))) {
			err = SHOAL_ERR_NOMEM;
			goto fail;
		}
	}
	err = shoal_engine_new(m, &ec, &s->e, why, why_len);
	if (err)
		goto fail;
	/* a group's members could hold different sessions: no cache there */
	if ((err = dist__pcache_init(&s->pc, cfg->max_sessions,
	                             cfg->tp_n > 1 ? 0 : cfg->prefix_bytes)))
		goto fail;
	dist__prefix_salt(cfg->model_id, cfg->layer_begin, cfg->layer_end,
	                  split ? cfg->device_end : cfg->layer_end, cfg->backend,
	                  (uint32_t)ec.kv_type, s->pc.salt);
	err = SHOAL_ERR_NOMEM;
	s->tok = malloc(R * sizeof *s->tok);
	s->hin = malloc(R * d * sizeof *s->hin);
	s->hout = malloc(R * d * sizeof *s->hout);
	s->slot = malloc(R * sizeof *s->slot);
	s->pos = malloc(R * sizeof *s->pos);
	s->row_sess = malloc(R * sizeof *s->row_sess);
	s->want = calloc(R, 1);
	s->tags = calloc(R, sizeof *s->tags);
	s->ex_ids = malloc(R * k * sizeof *s->ex_ids);
	s->ex_w = malloc(R * k * sizeof *s->ex_w);
	s->ex_contrib = malloc(R * k * d * sizeof *s->ex_contrib);
	s->ex_out = malloc(R * k * d * sizeof *s->ex_out);
	s->ex_slot = malloc(R * k * sizeof *s->ex_slot);
	s->ex_req = malloc(s->n_expert ? s->n_expert : 1);
	s->xx = malloc(R * d * sizeof *s->xx);
	s->xroute = malloc(R * k * sizeof *s->xroute);
	s->xtags = calloc(R, sizeof *s->xtags);
	if (!s->tok || !s->hin || !s->hout || !s->slot || !s->pos || !s->row_sess || !s->want ||
	    !s->tags || !s->ex_ids || !s->ex_w || !s->ex_contrib || !s->ex_out || !s->ex_slot ||
	    !s->ex_req || !s->xx || !s->xroute || !s->xtags)
		goto fail;
	if (cfg->has_head) {
		size_t L = s->n_lrows;
		s->logits = malloc(L * s->n_vocab * sizeof *s->logits);
		s->res = malloc(L * RES_WORDS * sizeof *s->res);
		s->reply = malloc(L * (RES_WORDS + 1) * sizeof *s->reply); /* + a guess */
		s->rtags = calloc(L, sizeof *s->rtags);
		s->otags = calloc(L, sizeof *s->otags);
		s->rdone = calloc(L, 1);
		s->wsess = calloc(L, sizeof *s->wsess);
		s->top_ids = malloc(SHOAL_DIST_MAX_LOGPROBS * sizeof *s->top_ids);
		s->top_lps = malloc(SHOAL_DIST_MAX_LOGPROBS * sizeof *s->top_lps);
		if (!s->logits || !s->res || !s->reply || !s->rtags || !s->otags || !s->rdone ||
		    !s->wsess || !s->top_ids || !s->top_lps)
			goto fail;
		for (size_t i = 0; i < S; i++)
			if (!(s->sess[i].hist = malloc(2 * SHOAL_DIST_TAIL_MAX * sizeof(int32_t))))
				goto fail;
	}
	if (cfg->has_head && m->nextn) { /* MTP guesses may be asked for */
		s->rchoice = malloc(R * sizeof *s->rchoice);
		s->mtp_h = malloc(R * d * sizeof *s->mtp_h);
		s->mtp_next = malloc(R * sizeof *s->mtp_next);
		if (!s->rchoice || !s->mtp_h || !s->mtp_next)
			goto fail;
		for (size_t i = 0; i < S; i++)
			if (!(s->sess[i].ptail = malloc(SHOAL_DIST_TAIL_MAX * sizeof(int32_t))))
				goto fail;
	}
	*out = s;
	return SHOAL_OK;
fail:
	shoal_dist_stage_free(s);
	return err;
}

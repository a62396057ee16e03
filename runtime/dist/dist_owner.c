/*
 * runtime/dist/dist_owner.c: the session owner: opens a session along the
 * stages, sends the prompt to stage 0 in frames, then feeds each sampled
 * token back until max_tokens or the caller stops, and reports tokens
 * with their logprobs.
 *
 * Part: runtime/ (distributed inference, protocol in dist.h). Divisions:
 * sessions, results, entry points, creation.
 */
#include <stdlib.h>
#include <stdio.h>
#include <string.h>

#include "base/log.h"
#include "runtime/dist/dist_impl.h"

#define LOG_PART "dist"

typedef struct owner_sess {
	bool used, done;
	uint64_t sid;
	shoal_err result;
	char why[SHOAL_XFER_REASON_MAX + 1];
	shoal_gen_seq q; /* steps, positions and stops, as a local run's */
	uint32_t step0;  /* a replay: the tokens generated before it */
	uint32_t logprobs;
	shoal_dist_token_fn on_token;
	void *ctx;
	uint64_t t_sent; /* when the latest token went to stage 0 */
	bool held;       /* next_id waits to go with the other sessions' */
	int32_t next_id;
	/* the prefix cache: every id fed, (cap) of them: the prompt, then the
	 * tokens fed back; the prompt waits in it for the stages' MATCH */
	int32_t *fed;
	uint32_t n_fed, cap;
	bool matching;   /* OPEN sent with hashes, MATCH not come yet */
	uint32_t cached; /* prompt positions the stages reused */
	/* the step in flight: the positions of its rows (the fed token and
	 * its drafts), the results not come yet, whether its outcome is known
	 * (a draft missed, or the last row came: later rows are ignored) */
	uint32_t v_lo, v_hi, due;
	bool closed;
	bool planned;       /* the step in flight was planned by sp (not the prompt's) */
	uint32_t kept;      /* drafts of the step kept so far */
	shoal_draft_ctl sp; /* speculation (runtime/engine/draft_ctl.h) */
	uint64_t draft_ns;  /* the drafting of the step in flight (a draft model's run) */
	bool mtp_off;       /* the last stage was told: no MTP guesses (SPEC) */
} owner_sess;

struct shoal_dist_owner {
	shoal_dist_owner_config cfg;
	owner_sess *sess;
	uint32_t counter;
	shoal_xfer_row *rows; /* (max_rows) */
	int32_t *next;        /* (max_rows) the next tokens of a release, batched */
	owner_sess **next_ss; /* (max_rows) whose */
	uint8_t *next_fed;    /* (max_rows) the row is its session's fed token (not a draft) */
	int32_t top_ids[SHOAL_DIST_MAX_LOGPROBS];
	float top_lps[SHOAL_DIST_MAX_LOGPROBS];
	int32_t ctl[SHOAL_DIST_CTL_MAX_WORDS];
	uint8_t hashes[SHOAL_DIST_PREFIX_MAX_BLOCKS * SHOAL_DIST_PREFIX_HASH];
	/* per-row and per-frame lines, one a second (base/log.h) */
	shoal_log_limit log_result, log_plan, log_ctl, log_busy;
	shoal_dist_owner_metrics met;
};

/* ---- sessions ---------------------------------------------------------------- */

static owner_sess *find(shoal_dist_owner *o, uint64_t sid)
{
	for (uint32_t i = 0; i < o->cfg.max_sessions; i++)
		if (o->sess[i].used && o->sess[i].sid == sid)
			return &o->sess[i];
	return NULL;
}

static shoal_err send_ctl(shoal_dist_owner *o, uint64_t sid, dist__ctl *c, char *why,
                          size_t why_len)
{
	memcpy(c->owner, o->cfg.self, SHOAL_PEER_ID_LEN);
	return dist__ctl_send(o->cfg.link(o->cfg.link_ctx, o->cfg.first), sid, c, o->ctl,
	                      (uint32_t)(sizeof o->ctl / 4), o->cfg.timeout_ms, why, why_len);
}

/* Rows [0, n) of o->rows, ids[n], to stage 0 in one TOKEN frame. */
static shoal_err send_rows(shoal_dist_owner *o, const int32_t *ids, uint32_t n, char *why,
                           size_t why_len)
{
	shoal_xfer_link *k = o->cfg.link(o->cfg.link_ctx, o->cfg.first);
	if (!k)
		return shoal_why(why, why_len, SHOAL_ERR_NOTFOUND, "no link to stage 0");
	shoal_xfer_hdr h = {.kind = SHOAL_XFER_KIND_TOKEN,
	                    .dtype = SHOAL_XFER_DTYPE_I32,
	                    .dim = 1,
	                    .n_rows = n,
	                    .rows = o->rows,
	                    .payload_len = n * 4u};
	struct iovec v = {.iov_base = (void *)ids, .iov_len = (size_t)n * 4u};
	shoal_err e = shoal_xfer_link_send(k, &h, &v, 1, o->cfg.timeout_ms, why, why_len);
	if (!e)
		o->met.token_frames++;
	return e;
}

/* Token ids at positions pos0.. of session sid to stage 0. */
static shoal_err send_ids(shoal_dist_owner *o, uint64_t sid, const int32_t *ids, uint32_t n,
                          uint32_t pos0, char *why, size_t why_len)
{
	for (uint32_t r = 0; r < n; r++)
		o->rows[r] = (shoal_xfer_row){.session = sid, .pos = pos0 + r};
	return send_rows(o, ids, n, why, why_len);
}

/* End session ss with result e (reason w); tell the stages to free it. */
static void finish(shoal_dist_owner *o, owner_sess *ss, shoal_err e, const char *w)
{
	if (ss->done)
		return;
	ss->done = true;
	ss->result = e;
	snprintf(ss->why, sizeof ss->why, "%s", w ? w : "");
	dist__ctl c = {.op = SHOAL_DIST_CTL_CLOSE};
	if (ss->fed && e == SHOAL_OK) { /* the stages keep the KV of its whole blocks */
		uint32_t nb = ss->n_fed / SHOAL_DIST_PREFIX_BLOCK;
		c.n_hash = nb < SHOAL_DIST_PREFIX_MAX_BLOCKS ? nb : SHOAL_DIST_PREFIX_MAX_BLOCKS;
		dist__prefix_chain_all(ss->fed, c.n_hash, o->hashes);
		c.hash = o->hashes;
	}
	char why[SHOAL_WHY_LEN];
	if (send_ctl(o, ss->sid, &c, why, sizeof why))
		SHOAL_LOG_W(LOG_PART, "session %016llx: close: %s", (unsigned long long)ss->sid,
		            why);
}

/* ---- results ------------------------------------------------------------------- */

/* The batched next tokens [0, n) to stage 0; a failed send ends their
 * sessions. */
static shoal_err send_next(shoal_dist_owner *o, uint32_t n, char *why, size_t why_len)
{
	uint64_t now = dist__now_ns();
	for (uint32_t i = 0; i < n; i++) {
		owner_sess *ss = o->next_ss[i];
		if (!o->next_fed[i])
			continue;
		ss->t_sent = now;
		ss->held = false;
		if (ss->fed && ss->n_fed < ss->cap)
			ss->fed[ss->n_fed++] = o->next[i];
	}
	shoal_err e = send_rows(o, o->next, n, why, why_len);
	for (uint32_t i = 0; e && i < n; i++)
		finish(o, o->next_ss[i], e, why);
	return e;
}

/* An MTP session: whether the result of the step being planned should
 * carry a guess (the step after drafts), told the last stage when that
 * changes, ahead of the step's rows (dist.h "MTP guesses"). A SPEC that
 * cannot be sent changes speed only (guesses or not; the same tokens):
 * the step's own send then finds the link's fault. */
static void mtp_tell(shoal_dist_owner *o, owner_sess *ss)
{
	bool want = shoal_draft_ctl_will_draft(&ss->sp);
	if (want != ss->mtp_off)
		return;
	dist__ctl c = {.op = SHOAL_DIST_CTL_SPEC, .want_mtp = want};
	char why[SHOAL_WHY_LEN];
	if (send_ctl(o, ss->sid, &c, why, sizeof why) == SHOAL_OK)
		ss->mtp_off = !want;
}

/* Session ss's next step: its fed token at the current position, then
 * the drafts that fit room rows of the frame, to o->next from row n;
 * returns the rows added. */
static uint32_t plan_step(shoal_dist_owner *o, owner_sess *ss, uint32_t n, uint32_t room)
{
	uint32_t pos = shoal_gen_seq_pos(&ss->q), step = shoal_gen_seq_step(&ss->q);
	/* drafts never reach past max_tokens, the context or a frame */
	uint32_t left = ss->q.lim.max_tokens - step - 1;
	if (room - 1 < left)
		left = room - 1;
	if (o->cfg.n_ctx && (pos + 1 >= o->cfg.n_ctx || o->cfg.n_ctx - 1 - pos < left))
		left = pos + 1 >= o->cfg.n_ctx ? 0 : o->cfg.n_ctx - 1 - pos;
	uint64_t t0 = dist__now_ns();
	uint32_t nd = shoal_draft_ctl_plan(&ss->sp, left, t0);
	ss->draft_ns = dist__now_ns() - t0; /* the step's time counts it */
	shoal_draft_ctl_planned(&ss->sp, t0 + ss->draft_ns);
	ss->planned = ss->sp.dr.ops != NULL;
	if (shoal_mtp_carry_is(&ss->sp.dr))
		mtp_tell(o, ss);
	ss->v_lo = pos;
	ss->v_hi = pos + nd;
	ss->due = nd + 1;
	ss->closed = false;
	ss->kept = 0;
	if (nd) {
		o->met.drafted += nd;
		o->met.spec_steps++;
	}
	for (uint32_t j = 0; j <= nd; j++) {
		o->rows[n + j] = (shoal_xfer_row){.session = ss->sid, .pos = pos + j};
		o->next[n + j] = j ? ss->sp.draft[j - 1] : ss->next_id;
		o->next_ss[n + j] = ss;
		o->next_fed[n + j] = !j;
	}
	return nd + 1;
}

/* Decoding sessions go in step: a session's next token is held while
 * another session is decoding with its token on the way, then all the
 * held ones go to stage 0 as one frame, so the rows of concurrent
 * sessions travel together (DESIGN section 2, step 3). A hold lasts at
 * most one pass through the pipeline; a session in its prefill is not
 * waited for. */
static shoal_err release(shoal_dist_owner *o, char *why, size_t why_len)
{
	for (uint32_t i = 0; i < o->cfg.max_sessions; i++) {
		const owner_sess *ss = &o->sess[i];
		/* decoding, or its step's rejected rows still to come */
		if (ss->used && !ss->done && (!ss->held || ss->due) && shoal_gen_seq_step(&ss->q))
			return SHOAL_OK;
	}
	uint32_t n = 0;
	shoal_err e;
	for (uint32_t i = 0; i < o->cfg.max_sessions; i++) {
		owner_sess *ss = &o->sess[i];
		if (!ss->used || ss->done || !ss->held)
			continue;
		/* a step's rows go in one frame: a draft or two, else a frame
		 * of its own */
		if (o->cfg.max_rows - n < 3 && n) {
			if ((e = send_next(o, n, why, why_len)))
				return e;
			n = 0;
		}
		n += plan_step(o, ss, n, o->cfg.max_rows - n);
	}
	return n ? send_next(o, n, why, why_len) : SHOAL_OK;
}

static shoal_err handle_results(shoal_dist_owner *o, const shoal_xfer_frame *f, char *why,
                                size_t why_len)
{
	const shoal_xfer_hdr *h = &f->hdr;
	bool guess = h->dim % 2; /* an MTP guess last (dist.h) */
	if (h->dim < 2 || (h->dim - 2) / 2 > SHOAL_DIST_MAX_LOGPROBS) {
		o->met.dropped++;
		SHOAL_LOG_W(LOG_PART, "dropped a result frame of %u words per row", h->dim);
		return SHOAL_OK;
	}
	uint32_t K = (h->dim - 2) / 2;
	uint64_t now = dist__now_ns();
	for (uint32_t r = 0; r < h->n_rows; r++) {
		owner_sess *ss = find(o, h->rows[r].session);
		uint32_t pos = h->rows[r].pos;
		if (ss && ss->done && ss->due && pos >= ss->v_lo && pos <= ss->v_hi) {
			ss->due--; /* the rows after the one that ended it */
			continue;
		}
		if (!ss || ss->done || !ss->due || pos < ss->v_lo || pos > ss->v_hi ||
		    (!ss->closed && pos != shoal_gen_seq_pos(&ss->q)) || K < ss->logprobs) {
			o->met.dropped++;
			uint64_t held;
			if (shoal_log_limit_pass(&o->log_result, SHOAL_LOG_LIMIT_US, &held))
				SHOAL_LOG_W(LOG_PART,
				            "dropped a result for session %016llx at %u (and %llu "
				            "such since the last line)",
				            (unsigned long long)h->rows[r].session, pos,
				            (unsigned long long)held);
			continue;
		}
		ss->due--;
		if (ss->closed) /* a row after a draft that missed: nothing kept */
			continue;
		const uint8_t *p = f->payload + (size_t)r * h->dim * 4u;
		shoal_dist_token t = {.sid = ss->sid,
		                      .step = ss->step0 + shoal_gen_seq_step(&ss->q),
		                      .n_top = ss->logprobs,
		                      .top_ids = o->top_ids,
		                      .top_lps = o->top_lps,
		                      .cached = ss->cached};
		memcpy(&t.id, p, 4);
		memcpy(&t.logprob, p + 4, 4);
		for (uint32_t j = 0; j < ss->logprobs; j++) {
			memcpy(&o->top_ids[j], p + 8 + 8 * j, 4);
			memcpy(&o->top_lps[j], p + 12 + 8 * j, 4);
		}
		if (t.id < 0) { /* a drafted row's "no token" that turned out to be ours */
			finish(o, ss, SHOAL_ERR_UNSUPPORTED,
			       "structured output: no token of the vocabulary continues the "
			       "reply's grammar");
			continue;
		}
		if (shoal_gen_seq_step(&ss->q) && pos == ss->v_lo) {
			o->met.last_step_ns = now - ss->t_sent + ss->draft_ns;
			o->met.step_ns += o->met.last_step_ns;
			o->met.steps++;
		}
		o->met.tokens++;
		/* the stop conditions of the generation loop (generate.h): an
		 * end-of-generation token ends the session unseen */
		bool go = shoal_gen_seq_accept(&ss->q, t.id) == SHOAL_GEN_STOP_NONE;
		int stop = go && ss->on_token ? ss->on_token(ss->ctx, &t) : 0;
		if (go)
			shoal_draft_ctl_token(&ss->sp, t.id);
		if (shoal_gen_seq_next(&ss->q, stop) != SHOAL_GEN_STOP_NONE) {
			finish(o, ss, SHOAL_OK, NULL);
			continue;
		}
		uint32_t j = pos - ss->v_lo; /* the row's place in the step */
		if (j < ss->v_hi - ss->v_lo && t.id == ss->sp.draft[j]) {
			/* the draft fed at pos + 1 was this very choice: its row's
			 * result is the next token's, and its KV is the run's */
			ss->kept++;
			o->met.accepted++;
			if (ss->fed && ss->n_fed < ss->cap)
				ss->fed[ss->n_fed++] = t.id;
			continue;
		}
		ss->closed = true;
		ss->held = true;
		ss->next_id = t.id;
		if (shoal_mtp_carry_is(&ss->sp.dr)) { /* the guess at the token after t.id */
			int32_t g = -1;
			if (guess)
				memcpy(&g, p + 8 + 8 * K, 4);
			shoal_mtp_carry_set(&ss->sp.dr, t.id, g);
		}
		if (ss->planned && shoal_draft_ctl_done(&ss->sp, ss->kept, now))
			o->met.spec_pauses++;
	}
	return release(o, why, why_len);
}

/* The prompt from position p0 to stage 0, in frames of max_rows. */
static shoal_err send_prompt(shoal_dist_owner *o, owner_sess *ss, const int32_t *prompt,
                             uint32_t p0, char *why, size_t why_len)
{
	shoal_err e = SHOAL_OK;
	uint32_t n;
	for (; !e && (n = shoal_gen_seq_chunk(&ss->q, p0, o->cfg.max_rows)); p0 += n)
		e = send_ids(o, ss->sid, prompt + p0, n, p0, why, why_len);
	ss->t_sent = dist__now_ns();
	if (!e) /* the drafter's own prompt work while the stages compute it */
		shoal_draft_ctl_prepare(&ss->sp);
	return e;
}

/* Every stage holds the first m blocks: the prompt from there on. */
static shoal_err on_match(shoal_dist_owner *o, owner_sess *ss, uint32_t m, char *why,
                          size_t why_len)
{
	ss->matching = false;
	uint32_t n_prompt = ss->q.n_prompt;
	if ((uint64_t)m * SHOAL_DIST_PREFIX_BLOCK >= n_prompt) { /* not what we sent */
		finish(o, ss, SHOAL_ERR_PROTO, "a prefix match past the prompt");
		return release(o, why, why_len);
	}
	ss->cached = m * SHOAL_DIST_PREFIX_BLOCK;
	char w[SHOAL_WHY_LEN];
	shoal_err e = send_prompt(o, ss, ss->fed, ss->cached, w, sizeof w);
	if (e)
		finish(o, ss, e, w);
	return SHOAL_OK;
}

/* ---- entry points ------------------------------------------------------------------ */

shoal_err shoal_dist_owner_handle(shoal_dist_owner *o, shoal_xfer_link *from,
                                  const shoal_xfer_frame *f, char *why, size_t why_len)
{
	(void)from;
	const shoal_xfer_hdr *h = &f->hdr;
	if (shoal_xfer_kind_is_data(h->kind) &&
	    (memcmp(h->digest, o->cfg.digest, SHOAL_DIGEST_BYTES) || h->epoch != o->cfg.epoch)) {
		o->met.dropped++;
		uint64_t held;
		if (shoal_log_limit_pass(&o->log_plan, SHOAL_LOG_LIMIT_US, &held))
			SHOAL_LOG_W(
			    LOG_PART,
			    "owner: dropped a %s frame of another plan (and %llu such since "
			    "the last line)",
			    shoal_xfer_kind_name(h->kind), (unsigned long long)held);
		return SHOAL_OK;
	}
	if (h->kind == SHOAL_XFER_KIND_SESSION) {
		dist__ctl c;
		char w[SHOAL_WHY_LEN] = "";
		owner_sess *ss = find(o, h->rows[0].session);
		bool ok = !dist__ctl_decode(f, &c, w, sizeof w) && ss &&
		          !memcmp(c.owner, o->cfg.self, SHOAL_PEER_ID_LEN);
		if (ok && c.op == SHOAL_DIST_CTL_MATCH && ss->matching && !ss->done)
			return on_match(o, ss, c.n_hash, why, why_len);
		if (!ok || c.op != SHOAL_DIST_CTL_ERROR) {
			o->met.dropped++;
			uint64_t held;
			if (shoal_log_limit_pass(&o->log_ctl, SHOAL_LOG_LIMIT_US, &held))
				SHOAL_LOG_W(
				    LOG_PART,
				    "dropped a control frame: %s (and %llu such since the last "
				    "line)",
				    w[0] ? w : "not ours", (unsigned long long)held);
			return SHOAL_OK;
		}
		uint64_t held;
		if (c.status != SHOAL_ERR_BUSY)
			SHOAL_LOG_W(LOG_PART, "session %016llx: %s", (unsigned long long)ss->sid,
			            c.reason);
		else if (shoal_log_limit_pass(&o->log_busy, SHOAL_LOG_LIMIT_US, &held))
			SHOAL_LOG_I(
			    LOG_PART,
			    "session %016llx: %s (queued again; %llu such refusals since the "
			    "last line)",
			    (unsigned long long)ss->sid, c.reason, (unsigned long long)held);
		finish(o, ss, (shoal_err)c.status, c.reason);
		return release(o, why, why_len); /* the others no longer wait for it */
	}
	if (h->kind == SHOAL_XFER_KIND_TOKEN)
		return handle_results(o, f, why, why_len);
	if (h->kind == SHOAL_XFER_KIND_ERROR) {
		SHOAL_LOG_W(LOG_PART, "peer error: %.*s", (int)h->payload_len,
		            (const char *)f->payload);
		return SHOAL_OK;
	}
	o->met.dropped++;
	SHOAL_LOG_W(LOG_PART, "owner: dropped an unexpected %s frame",
	            shoal_xfer_kind_name(h->kind));
	return SHOAL_OK;
}

static shoal_err owner_handle_cb(void *obj, shoal_xfer_link *from, const shoal_xfer_frame *f,
                                 char *why, size_t why_len)
{
	return shoal_dist_owner_handle(obj, from, f, why, why_len);
}

shoal_err shoal_dist_owner_poll(shoal_dist_owner *o, shoal_xfer_link *const *links, uint32_t n,
                                int timeout_ms, char *why, size_t why_len)
{
	return dist__poll(links, n, timeout_ms, owner_handle_cb, o, &o->met.dropped, LOG_PART, why,
	                  why_len);
}

/* shoal_dist_owner_start; *taken: the request's drafter is the session's
 * (or freed). */
static shoal_err owner_start(shoal_dist_owner *o, const shoal_dist_request *req, uint64_t *sid,
                             bool *taken, char *why, size_t why_len)
{
	const shoal_sampler_params *sp = &req->sampler;
	if (!req->n_prompt || !req->max_tokens || req->logprobs > SHOAL_DIST_MAX_LOGPROBS)
		return shoal_why(why, why_len, SHOAL_ERR_INVAL,
		                 "a request needs a prompt, max_tokens, logprobs <= %u",
		                 SHOAL_DIST_MAX_LOGPROBS);
	bool pen = (sp->repeat_penalty != 1.0f || sp->presence_penalty != 0.0f ||
	            sp->frequency_penalty != 0.0f) &&
	           sp->repeat_last_n != 0;
	if (pen && (sp->repeat_last_n < 0 || (uint32_t)sp->repeat_last_n > SHOAL_DIST_TAIL_MAX))
		return shoal_why(why, why_len, SHOAL_ERR_UNSUPPORTED,
		                 "repetition penalty over %d tokens (at most %u)",
		                 sp->repeat_last_n, SHOAL_DIST_TAIL_MAX);
	if (sp->n_grammar && req->first_step > SHOAL_DIST_REPLAY_MAX)
		return shoal_why(why, why_len, SHOAL_ERR_UNSUPPORTED,
		                 "a constrained run replayed after %u tokens (at most %u)",
		                 req->first_step, SHOAL_DIST_REPLAY_MAX);
	if (sp->n_grammar && req->first_step > req->n_prompt)
		return shoal_why(why, why_len, SHOAL_ERR_INVAL, "first step past the prompt");
	if (sp->n_grammar) { /* a stage would drop a bad one unseen: say it here */
		char gw[SHOAL_WHY_LEN];
		if (shoal_grammar_check(sp->grammar, sp->n_grammar, gw, sizeof gw))
			return shoal_why(why, why_len, SHOAL_ERR_INVAL, "%s", gw);
	}
	owner_sess *ss = NULL;
	for (uint32_t i = 0; i < o->cfg.max_sessions && !ss; i++)
		if (!o->sess[i].used)
			ss = &o->sess[i];
	if (!ss)
		return shoal_why(why, why_len, SHOAL_ERR_BUSY, "all %u sessions in use",
		                 o->cfg.max_sessions);
	memset(ss, 0, sizeof *ss);
	*taken = true;
	if (shoal_draft_ctl_init(&ss->sp, req->drafter, req->draft_max, req->prompt, req->n_prompt,
	                         req->max_tokens))
		return shoal_why(why, why_len, SHOAL_ERR_NOMEM, "out of memory");
	ss->sid = (uint64_t)o->cfg.self[0] << 56 | (uint64_t)o->cfg.self[1] << 48 |
	          (uint64_t)o->cfg.self[2] << 40 | (uint64_t)o->cfg.self[3] << 32 | ++o->counter;
	ss->used = true;
	shoal_gen_seq_init(&ss->q, req->n_prompt,
	                   &(shoal_gen_limits){.max_tokens = req->max_tokens, .eog = req->eog});
	ss->step0 = req->first_step;
	ss->v_lo = ss->v_hi = req->n_prompt - 1; /* the first result: the prompt's last row */
	ss->due = 1;
	ss->logprobs = req->logprobs;
	ss->on_token = req->on_token;
	ss->ctx = req->ctx;
	*sid = ss->sid;
	uint32_t tail = req->n_prompt < SHOAL_DIST_TAIL_MAX ? req->n_prompt : SHOAL_DIST_TAIL_MAX;
	/* MTP guesses: the last stage's layer needs every prompt row, so such
	 * a session starts from position 0, never from kept prefix blocks */
	bool mtp = shoal_mtp_carry_is(&ss->sp.dr);
	dist__ctl c = {.op = SHOAL_DIST_CTL_OPEN,
	               .want_mtp = mtp,
	               .n_prompt = req->n_prompt,
	               .max_tokens = req->max_tokens,
	               .logprobs = req->logprobs,
	               .no_logprob = req->no_logprob,
	               .first_step = req->first_step,
	               .sp = *sp,
	               .n_tail = tail,
	               .tail = req->prompt + (req->n_prompt - tail)};
	if (sp->n_grammar) { /* the stage rebuilds the grammar's state from these */
		c.n_done = req->first_step;
		c.done = req->prompt + (req->n_prompt - req->first_step);
	}
	if (!pen) /* repeat_last_n must pass the stages' check; unused without a penalty */
		c.sp.repeat_last_n = 0;
	if (o->cfg.prefix_cache) { /* keep what is fed; hash the prompt's whole blocks */
		/* the prompt whole (it waits for MATCH); of the reply, no more
		 * than the hashes can cover */
		uint32_t lim = SHOAL_DIST_PREFIX_MAX_BLOCKS * SHOAL_DIST_PREFIX_BLOCK;
		uint64_t cap =
		    (uint64_t)req->n_prompt + (req->max_tokens < lim ? req->max_tokens : lim);
		ss->cap = cap < UINT32_MAX ? (uint32_t)cap : UINT32_MAX;
		if (!(ss->fed = malloc((size_t)ss->cap * sizeof *ss->fed))) {
			ss->used = false;
			shoal_draft_ctl_fini(&ss->sp);
			return SHOAL_ERR_NOMEM;
		}
		memcpy(ss->fed, req->prompt, (size_t)req->n_prompt * sizeof *ss->fed);
		ss->n_fed = req->n_prompt;
		uint32_t nb = mtp ? 0 : (req->n_prompt - 1) / SHOAL_DIST_PREFIX_BLOCK;
		c.n_hash = nb < SHOAL_DIST_PREFIX_MAX_BLOCKS ? nb : SHOAL_DIST_PREFIX_MAX_BLOCKS;
		c.hash = o->hashes;
		c.want_match = ss->matching = c.n_hash > 0;
		dist__prefix_chain_all(req->prompt, c.n_hash, o->hashes);
	}
	shoal_err e = send_ctl(o, ss->sid, &c, why, why_len);
	if (!e && !ss->matching)
		e = send_prompt(o, ss, req->prompt, 0, why, why_len);
	ss->t_sent = dist__now_ns();
	if (e)
		finish(o, ss, e, why);
	return SHOAL_OK;
}

shoal_err shoal_dist_owner_start(shoal_dist_owner *o, const shoal_dist_request *req, uint64_t *sid,
                                 char *why, size_t why_len)
{
	bool taken = false;
	shoal_err e = owner_start(o, req, sid, &taken, why, why_len);
	if (!taken && req->drafter.ops && req->drafter.ops->free)
		req->drafter.ops->free(req->drafter.self);
	return e;
}

bool shoal_dist_owner_done(shoal_dist_owner *o, uint64_t sid, shoal_err *result, char *why,
                           size_t why_len)
{
	owner_sess *ss = find(o, sid);
	if (!ss) {
		*result = shoal_why(why, why_len, SHOAL_ERR_NOTFOUND, "no session %016llx",
		                    (unsigned long long)sid);
		return true;
	}
	if (!ss->done)
		return false;
	*result = ss->result ? shoal_why(why, why_len, ss->result, "%s", ss->why) : SHOAL_OK;
	ss->used = false;
	free(ss->fed);
	ss->fed = NULL;
	shoal_draft_ctl_fini(&ss->sp);
	return true;
}

void shoal_dist_owner_cancel(shoal_dist_owner *o, uint64_t sid)
{
	owner_sess *ss = find(o, sid);
	if (!ss)
		return;
	finish(o, ss, SHOAL_ERR_STATE, "cancelled");
	ss->used = false;
	free(ss->fed);
	ss->fed = NULL;
	shoal_draft_ctl_fini(&ss->sp);
	char why[SHOAL_WHY_LEN];
	if (release(o, why, sizeof why)) /* the others no longer wait for it */
		SHOAL_LOG_W(LOG_PART, "after a cancel: %s", why);
}

shoal_err shoal_dist_owner_generate(shoal_dist_owner *o, const shoal_dist_request *req,
                                    shoal_xfer_link *const *links, uint32_t n, int timeout_ms,
                                    char *why, size_t why_len)
{
	uint64_t sid;
	shoal_err e = shoal_dist_owner_start(o, req, &sid, why, why_len);
	if (e)
		return e;
	shoal_err res;
	uint64_t seen = o->met.tokens, t_last = dist__now_ns();
	while (!shoal_dist_owner_done(o, sid, &res, why, why_len)) {
		e = shoal_dist_owner_poll(o, links, n, 50, why, why_len);
		owner_sess *ss = find(o, sid);
		if (e) {
			finish(o, ss, e, why);
			continue;
		}
		if (o->met.tokens != seen) {
			seen = o->met.tokens;
			t_last = dist__now_ns();
		} else if (dist__now_ns() - t_last > (uint64_t)timeout_ms * 1000000u) {
			finish(o, ss, SHOAL_ERR_TIMEOUT, "no token from the last stage in time");
		}
	}
	return res;
}

void shoal_dist_owner_metrics_get(const shoal_dist_owner *o, shoal_dist_owner_metrics *m)
{
	*m = o->met;
}

/* ---- creation ----------------------------------------------------------------------- */

void shoal_dist_owner_free(shoal_dist_owner *o)
{
	if (!o)
		return;
	for (uint32_t i = 0; o->sess && i < o->cfg.max_sessions; i++) {
		free(o->sess[i].fed);
		shoal_draft_ctl_fini(&o->sess[i].sp);
	}
	free(o->sess);
	free(o->rows);
	free(o->next);
	free(o->next_ss);
	free(o->next_fed);
	free(o);
}

shoal_err shoal_dist_owner_new(const shoal_dist_owner_config *cfg, shoal_dist_owner **out,
                               char *why, size_t why_len)
{
	*out = NULL;
	if (!cfg->link || !cfg->max_sessions || !cfg->max_rows ||
	    cfg->max_rows > SHOAL_XFER_MAX_ROWS_DEFAULT)
		return shoal_why(why, why_len, SHOAL_ERR_INVAL,
		                 "owner config: link, sessions, 1..%u rows per frame",
		                 SHOAL_XFER_MAX_ROWS_DEFAULT);
	shoal_dist_owner *o = calloc(1, sizeof *o);
	if (!o)
		return SHOAL_ERR_NOMEM;
	o->cfg = *cfg;
	/* session ids of a restarted owner differ from its last life's, which
	 * stages may still hold */
	o->counter = (uint32_t)(dist__now_ns() / 1000u);
	o->sess = calloc(cfg->max_sessions, sizeof *o->sess);
	o->rows = calloc(cfg->max_rows, sizeof *o->rows);
	o->next = calloc(cfg->max_rows, sizeof *o->next);
	o->next_ss = calloc(cfg->max_rows, sizeof *o->next_ss);
	o->next_fed = calloc(cfg->max_rows, 1);
	if (!o->sess || !o->rows || !o->next || !o->next_ss || !o->next_fed) {
		shoal_dist_owner_free(o);
		return SHOAL_ERR_NOMEM;
	}
	*out = o;
	return SHOAL_OK;
}

/*
 * tests/helpers/dist_cluster.c: a cluster of distributed-inference peers in one
 * process for tests and benchmarks: an owner, stages and expert servers,
 * each stage on its own thread, over real loopback TCP xfer links; and the
 * single-engine reference run they are compared with.
 *
 * Divisions: links and peers, the reference, the cluster.
 */
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tests/helpers/dist_cluster.h"
#include "runtime/cpu/backend_cpu.h"

const uint8_t DC_DIGEST[SHOAL_DIGEST_BYTES] = {0xd1, 0x57, 3, 4};
const uint8_t DC_OTHER[SHOAL_DIGEST_BYTES] = {0xee, 0xee};

/* ---- links and peers ------------------------------------------------------- */

static int dc_admit_all(void *ctx, const uint8_t id[SHOAL_PEER_ID_LEN], const char *addr,
                        const uint8_t *tok, size_t n)
{
	(void)ctx, (void)id, (void)addr, (void)tok, (void)n;
	return 1;
}

static shoal_xfer_listener *dc_g_lis;

typedef struct dc_conn_job {
	shoal_xfer_config cfg;
	shoal_xfer_link *link;
	shoal_err e;
	char why[SHOAL_WHY_LEN];
} dc_conn_job;

static void *dc_conn_main(void *p)
{
	dc_conn_job *j = p;
	j->e = shoal_xfer_link_connect(&j->cfg, "127.0.0.1", shoal_xfer_listener_port(dc_g_lis),
	                               (const uint8_t *)"t", 1, &j->link, j->why, sizeof j->why);
	return NULL;
}

shoal_xfer_link *dc_lookup(void *ctx, const uint8_t id[SHOAL_PEER_ID_LEN])
{
	dc_peer *p = ctx;
	for (uint32_t i = 0; i < p->n; i++)
		if (!memcmp(p->tab_id[i], id, SHOAL_PEER_ID_LEN))
			return p->links[i];
	return NULL;
}

/* Connect a to b (a connects, b accepts); each side files its end. */
int dc_connect_pair(dc_peer *a, dc_peer *b, uint32_t max_frame)
{
	dc_conn_job j = {0};
	shoal_xfer_config_default(&j.cfg);
	j.cfg.verbs = NULL;
	j.cfg.max_frame = max_frame;
	memcpy(j.cfg.self_id, a->id, SHOAL_PEER_ID_LEN);
	pthread_t th;
	pthread_create(&th, NULL, dc_conn_main, &j);
	shoal_xfer_link *acc = NULL;
	char why[SHOAL_WHY_LEN];
	shoal_err e = shoal_xfer_listener_accept(dc_g_lis, 5000, &acc, why, sizeof why);
	pthread_join(th, NULL);
	if (e || j.e) {
		fprintf(stderr, "link: %s / %s\n", e ? why : "", j.why);
		shoal_xfer_link_free(acc);
		shoal_xfer_link_free(j.link);
		return -1;
	}
	shoal_xfer_link_set_plan(j.link, DC_DIGEST, DC_EPOCH);
	shoal_xfer_link_set_plan(acc, DC_DIGEST, DC_EPOCH);
	memcpy(a->tab_id[a->n], b->id, SHOAL_PEER_ID_LEN);
	a->links[a->n++] = j.link;
	memcpy(b->tab_id[b->n], a->id, SHOAL_PEER_ID_LEN);
	b->links[b->n++] = acc;
	return 0;
}

static void *dc_peer_main(void *arg)
{
	dc_peer *p = arg;
	char why[SHOAL_WHY_LEN];
	while (!atomic_load(&p->stop)) {
		shoal_err e = shoal_dist_stage_poll(p->st, p->links, p->n, 20, why, sizeof why);
		if (e) {
			fprintf(stderr, "stage thread: %s\n", why);
			break;
		}
	}
	return NULL;
}

/* ---- the dc_reference: one engine, the loop of `shoal run` ------------------------ */

int dc_reference(const shoal_model *m, const int32_t *prompt, uint32_t np, uint32_t n_gen,
                 const shoal_sampler_params *sp, dc_run_out *out)
{
	shoal_engine_config c = shoal_engine_config_default(m);
	c.backend = shoal_backend_cpu();
	c.n_ctx = 128;
	c.max_rows = 64;
	shoal_engine *e = NULL;
	shoal_sampler *smp = NULL;
	char why[SHOAL_WHY_LEN];
	uint32_t V = m->hp.n_vocab;
	float *logits = malloc((size_t)V * sizeof *logits);
	int32_t hist[256];
	if (shoal_engine_new(m, &c, &e, why, sizeof why) || shoal_sampler_new(sp, V, &smp)) {
		fprintf(stderr, "reference: %s\n", why);
		return -1;
	}
	uint32_t slot, pos[64], sess[64] = {0};
	uint8_t want[64];
	shoal_engine_session_open(e, &slot);
	for (uint32_t r = 0; r < np; r++) {
		pos[r] = r;
		sess[r] = slot;
		want[r] = r == np - 1;
		hist[r] = prompt[r];
	}
	shoal_engine_batch b = {.n_rows = np,
	                        .tokens = prompt,
	                        .session = sess,
	                        .pos = pos,
	                        .want_logits = want,
	                        .logits = logits};
	int rc = shoal_engine_run(e, &b, why, sizeof why) ? -1 : 0;
	uint32_t nh = np;
	out->n = 0;
	for (uint32_t t = 0; !rc && t < n_gen; t++) {
		int32_t id = shoal_sampler_sample(smp, logits, hist, nh, t);
		hist[nh++] = id;
		out->id[t] = id;
		shoal_logprobs_top(logits, V, id, &out->lp[t], DC_K_TOP, out->top_id[t],
		                   out->top_lp[t]);
		out->n++;
		uint32_t p1 = nh - 1;
		uint8_t w1 = 1;
		shoal_engine_batch b1 = {.n_rows = 1,
		                         .tokens = &id,
		                         .session = sess,
		                         .pos = &p1,
		                         .want_logits = &w1,
		                         .logits = logits};
		if (t + 1 < n_gen && shoal_engine_run(e, &b1, why, sizeof why))
			rc = -1;
	}
	shoal_sampler_free(smp);
	shoal_engine_free(e);
	free(logits);
	return rc;
}

int dc_collect_token(void *ctx, const shoal_dist_token *t)
{
	dc_run_out *o = ctx;
	if (o->n >= DC_MAX_TOK)
		return 1;
	o->id[o->n] = t->id;
	o->lp[o->n] = t->logprob;
	for (uint32_t j = 0; j < DC_K_TOP && j < t->n_top; j++) {
		o->top_id[o->n][j] = t->top_ids[j];
		o->top_lp[o->n][j] = t->top_lps[j];
	}
	o->n++;
	return 0;
}

/* ---- the dc_cluster ------------------------------------------------------------------ */

static void dc_id_of(uint8_t id[SHOAL_PEER_ID_LEN], uint8_t v)
{
	memset(id, v, SHOAL_PEER_ID_LEN);
}

/* Stages split the layers at cuts[] (n_st stages); with n_ex > 0 the
 * experts are split: the stages hold x % (n_ex + 1) == 0, server s the
 * experts with x % (n_ex + 1) == s + 1. */
static int up(dc_cluster *c, const shoal_model *m, const uint32_t *cuts, uint32_t n_st,
              uint32_t n_ex, uint32_t max_frame, uint32_t owner_rows, bool intruder);

const uint32_t *dc_device_end;
const char *dc_backend;
bool dc_prefix;

int dc_cluster_up(dc_cluster *c, const shoal_model *m, const uint32_t *cuts, uint32_t n_st,
                  uint32_t n_ex, uint32_t max_frame, uint32_t owner_rows, bool intruder)
{
	memset(c, 0, sizeof *c);
	return up(c, m, cuts, n_st, n_ex, max_frame, owner_rows, intruder);
}

int dc_cluster_up_group(dc_cluster *c, const shoal_model *m, const uint32_t *cuts, uint32_t n_st,
                        uint32_t tp_stage, const uint64_t *w, uint32_t tp_n, uint32_t max_frame)
{
	memset(c, 0, sizeof *c);
	if (tp_n < 2 || tp_n > 4 || tp_stage >= n_st)
		return -1;
	c->tp_stage = tp_stage;
	c->tp_n = tp_n;
	memcpy(c->tp_w, w, tp_n * sizeof *w);
	return up(c, m, cuts, n_st, 0, max_frame, 64, false);
}

/* Stage config sc for member j of the group (0: the entry, st[tp_stage]). */
static void group_member(dc_cluster *c, uint32_t j, bool last, shoal_dist_stage_config *sc)
{
	sc->tp_n = c->tp_n;
	sc->tp_me = j;
	memcpy(sc->tp_w, c->tp_w, sizeof c->tp_w);
	for (uint32_t k = 0; k < c->tp_n; k++)
		memcpy(sc->tp_peer[k], c->gl[k].id, SHOAL_PEER_ID_LEN);
	sc->has_head = last && j == 1;
	sc->tp_out = last ? j == 1 : j == 0;
	sc->tp_head = last; /* the head split, member 1 gathers (dist.h 10) */
	sc->tp_root = 1;
	sc->tp_relay = dc_lookup;
	sc->tp_relay_ctx = &c->st[c->tp_stage];
	sc->tp_send = sc->tp_recv = dc_lookup;
	sc->tp_send_ctx = sc->tp_recv_ctx = &c->gl[j];
	sc->tp_spin_us = 20;
	sc->expert_mask = NULL;
	sc->expert_peer = NULL;
}

static int up(dc_cluster *c, const shoal_model *m, const uint32_t *cuts, uint32_t n_st,
              uint32_t n_ex, uint32_t max_frame, uint32_t owner_rows, bool intruder)
{
	c->m = m;
	c->n_st = n_st;
	c->n_ex = n_ex;
	char why[SHOAL_WHY_LEN];
	shoal_xfer_config lc;
	shoal_xfer_config_default(&lc);
	lc.verbs = NULL;
	lc.max_frame = max_frame;
	dc_id_of(lc.self_id, 0x99);
	if (shoal_xfer_listener_new(&lc, "127.0.0.1", 0, dc_admit_all, NULL, &dc_g_lis, why,
	                            sizeof why))
		return -1;
	dc_id_of(c->owner.id, 0x10);
	dc_id_of(c->intruder.id, 0x40);
	for (uint32_t i = 0; i < n_st; i++)
		dc_id_of(c->st[i].id, (uint8_t)(0x20 + i));
	for (uint32_t i = 0; i < n_ex; i++)
		dc_id_of(c->ex[i].id, (uint8_t)(0x30 + i));
	int rc = dc_connect_pair(&c->owner, &c->st[0], max_frame);
	for (uint32_t i = 0; !rc && i + 1 < n_st; i++)
		rc = dc_connect_pair(&c->st[i], &c->st[i + 1], max_frame);
	if (!rc && n_st > 1)
		rc = dc_connect_pair(&c->st[n_st - 1], &c->owner, max_frame);
	for (uint32_t i = 0; !rc && i < n_st; i++)
		for (uint32_t s = 0; !rc && s < n_ex; s++)
			rc = dc_connect_pair(&c->st[i], &c->ex[s], max_frame);
	if (!rc && intruder) { /* link 0 on the plan, link 1 wholly on DC_OTHER */
		dc_peer *v = &c->st[n_st > 1 ? 1 : 0];
		rc = dc_connect_pair(&c->intruder, v, max_frame);
		if (!rc)
			rc = dc_connect_pair(&c->intruder, v, max_frame);
		if (!rc) {
			shoal_xfer_link_set_plan(c->intruder.links[1], DC_OTHER, DC_EPOCH);
			shoal_xfer_link_set_plan(v->links[v->n - 1], DC_OTHER, DC_EPOCH);
		}
	}
	/* a group: the entry relays to each member, every pair has a slice
	 * link, and the sampling member (tp[0]) reaches the owner */
	uint32_t k = c->tp_stage;
	if (c->tp_n > 1) {
		memcpy(c->gl[0].id, c->st[k].id, SHOAL_PEER_ID_LEN);
		for (uint32_t j = 0; j + 1 < c->tp_n; j++) {
			dc_id_of(c->tp[j].id, (uint8_t)(0x50 + j));
			memcpy(c->gl[j + 1].id, c->tp[j].id, SHOAL_PEER_ID_LEN);
		}
		for (uint32_t j = 0; !rc && j + 1 < c->tp_n; j++)
			rc = dc_connect_pair(&c->st[k], &c->tp[j], max_frame);
		for (uint32_t a = 0; !rc && a < c->tp_n; a++)
			for (uint32_t b = a + 1; !rc && b < c->tp_n; b++)
				rc = dc_connect_pair(&c->gl[a], &c->gl[b], max_frame);
		if (!rc && k + 1 == n_st)
			rc = dc_connect_pair(&c->tp[0], &c->owner, max_frame);
	}
	if (rc)
		return -1;
	uint32_t L = m->hp.n_layer, E = m->hp.n_expert;
	if (n_ex) {
		c->mask_st = calloc((size_t)L * E, 1);
		c->xpeer = calloc((size_t)L * E, 16);
		for (uint32_t l = 0; l < L; l++)
			for (uint32_t x = 0; x < E; x++) {
				uint32_t who = x % (n_ex + 1);
				c->mask_st[l * E + x] = who == 0;
				if (who)
					dc_id_of(c->xpeer + ((size_t)l * E + x) * 16,
					         (uint8_t)(0x30 + who - 1));
			}
		for (uint32_t s = 0; s < n_ex; s++) {
			c->mask_ex[s] = calloc((size_t)L * E, 1);
			for (uint32_t l = 0; l < L; l++)
				for (uint32_t x = 0; x < E; x++)
					c->mask_ex[s][l * E + x] = x % (n_ex + 1) == s + 1;
		}
	}
	for (uint32_t i = 0; i < n_st + n_ex; i++) {
		dc_peer *p = i < n_st ? &c->st[i] : &c->ex[i - n_st];
		shoal_dist_stage_config sc = {.n_threads = 1,
		                              .n_ctx = 128,
		                              .max_sessions = 2,
		                              .max_rows = 64,
		                              .link = dc_lookup,
		                              .link_ctx = p,
		                              .timeout_ms = 5000,
		                              .epoch = DC_EPOCH};
		memcpy(sc.digest, DC_DIGEST, SHOAL_DIGEST_BYTES);
		memcpy(sc.self, p->id, SHOAL_PEER_ID_LEN);
		if (i < n_st) {
			sc.layer_begin = i ? cuts[i - 1] : 0;
			sc.layer_end = i + 1 < n_st ? cuts[i] : L;
			sc.has_embd = i == 0;
			sc.has_head = i + 1 == n_st;
			if (i + 1 < n_st)
				memcpy(sc.next, c->st[i + 1].id, SHOAL_PEER_ID_LEN);
			sc.expert_mask = c->mask_st;
			sc.expert_peer = c->xpeer;
			sc.device_end = dc_device_end ? dc_device_end[i] : 0;
			sc.backend = dc_backend;
			sc.prefix_bytes = dc_prefix ? UINT64_MAX : 0;
		} else {
			sc.expert_mask = c->mask_ex[i - n_st];
		}
		if (c->tp_n > 1 && i == k)
			group_member(c, 0, k + 1 == n_st, &sc);
		if (shoal_dist_stage_new(m, &sc, &p->st, why, sizeof why)) {
			fprintf(stderr, "stage %u: %s\n", i, why);
			return -1;
		}
		pthread_create(&p->th, NULL, dc_peer_main, p);
		p->running = true;
		for (uint32_t j = 1; i == k && j < c->tp_n; j++) { /* the group's other members */
			dc_peer *q = &c->tp[j - 1];
			shoal_dist_stage_config qc = sc;
			qc.link_ctx = q;
			memcpy(qc.self, q->id, SHOAL_PEER_ID_LEN);
			group_member(c, j, k + 1 == n_st, &qc);
			if (shoal_dist_stage_new(m, &qc, &q->st, why, sizeof why)) {
				fprintf(stderr, "member %u: %s\n", j, why);
				return -1;
			}
			pthread_create(&q->th, NULL, dc_peer_main, q);
			q->running = true;
		}
	}
	shoal_dist_owner_config oc = {.max_sessions = 2,
	                              .max_rows = owner_rows,
	                              .link = dc_lookup,
	                              .link_ctx = &c->owner,
	                              .timeout_ms = 5000,
	                              .epoch = DC_EPOCH,
	                              .prefix_cache = dc_prefix};
	memcpy(oc.digest, DC_DIGEST, SHOAL_DIGEST_BYTES);
	memcpy(oc.self, c->owner.id, SHOAL_PEER_ID_LEN);
	memcpy(oc.first, c->st[0].id, SHOAL_PEER_ID_LEN);
	return shoal_dist_owner_new(&oc, &c->own, why, sizeof why) ? -1 : 0;
}

void dc_cluster_stop(dc_cluster *c)
{
	for (uint32_t j = 0; j + 1 < c->tp_n; j++) {
		atomic_store(&c->tp[j].stop, 1);
		if (c->tp[j].running)
			pthread_join(c->tp[j].th, NULL);
		c->tp[j].running = false;
	}
	for (uint32_t i = 0; i < c->n_st + c->n_ex; i++) {
		dc_peer *p = i < c->n_st ? &c->st[i] : &c->ex[i - c->n_st];
		atomic_store(&p->stop, 1);
		if (p->running)
			pthread_join(p->th, NULL);
		p->running = false;
	}
}

static void dc_peer_free(dc_peer *p)
{
	shoal_dist_stage_free(p->st);
	for (uint32_t i = 0; i < p->n; i++)
		shoal_xfer_link_free(p->links[i]);
}

void dc_cluster_down(dc_cluster *c)
{
	dc_cluster_stop(c);
	for (uint32_t i = 0; i < c->n_st; i++)
		dc_peer_free(&c->st[i]);
	for (uint32_t i = 0; i < c->n_ex; i++)
		dc_peer_free(&c->ex[i]);
	dc_peer_free(&c->owner);
	dc_peer_free(&c->intruder);
	for (uint32_t j = 0; j + 1 < c->tp_n; j++)
		dc_peer_free(&c->tp[j]);
	for (uint32_t j = 0; j < c->tp_n; j++)
		dc_peer_free(&c->gl[j]);
	shoal_dist_owner_free(c->own);
	shoal_xfer_listener_free(dc_g_lis);
	dc_g_lis = NULL;
	free(c->mask_st);
	free(c->xpeer);
	for (uint32_t s = 0; s < 3; s++)
		free(c->mask_ex[s]);
}

uint64_t dc_link_count(dc_peer *p, const uint8_t *to, int sent, unsigned kind)
{
	shoal_xfer_link *l = dc_lookup(p, to);
	shoal_xfer_metrics mt;
	if (!l)
		return ~0ull;
	shoal_xfer_link_metrics(l, &mt);
	return sent ? mt.frames_sent[kind] : mt.frames_recv[kind];
}

int dc_same_run(const dc_run_out *a, const dc_run_out *b)
{
	if (a->n != b->n)
		return 0;
	for (uint32_t t = 0; t < a->n; t++)
		if (a->id[t] != b->id[t] || memcmp(&a->lp[t], &b->lp[t], 4) ||
		    memcmp(a->top_id[t], b->top_id[t], sizeof a->top_id[t]) ||
		    memcmp(a->top_lp[t], b->top_lp[t], sizeof a->top_lp[t])) {
			fprintf(stderr, "step %u: id %d vs %d, lp %.9g vs %.9g\n", t, a->id[t],
			        b->id[t], a->lp[t], b->lp[t]);
			return 0;
		}
	return 1;
}

shoal_model *dc_open_model(const char *name)
{
	char path[1024];
	const char *dir = getenv("SHOAL_DATA");
	snprintf(path, sizeof path, "%s/models/%s", dir ? dir : "tests/data", name);
	shoal_model *m = NULL;
	char why[SHOAL_WHY_LEN];
	if (shoal_model_open(path, &m, why, sizeof why)) {
		fprintf(stderr, "%s: %s\n", path, why);
		return NULL;
	}
	return m;
}

int dc_cluster_matches(const shoal_model *m, const int32_t *prompt, uint32_t np, uint32_t n_gen,
                       const uint32_t *cuts, uint32_t n_st, uint32_t n_ex,
                       const shoal_sampler_params *sp, const char *what)
{
	dc_run_out want, got;
	memset(&got, 0, sizeof got);
	if (dc_reference(m, prompt, np, n_gen, sp, &want))
		return 0;
	dc_cluster c;
	if (dc_cluster_up(&c, m, cuts, n_st, n_ex, SHOAL_XFER_MAX_FRAME_DEFAULT, 64, false)) {
		fprintf(stderr, "%s: the cluster did not come up\n", what);
		return 0;
	}
	shoal_dist_request rq = {.prompt = prompt,
	                         .n_prompt = np,
	                         .max_tokens = n_gen,
	                         .logprobs = DC_K_TOP,
	                         .sampler = *sp,
	                         .on_token = dc_collect_token,
	                         .ctx = &got};
	char why[SHOAL_WHY_LEN] = "";
	shoal_err e =
	    shoal_dist_owner_generate(c.own, &rq, c.owner.links, c.owner.n, 10000, why, sizeof why);
	uint64_t remote = 0;
	dc_cluster_stop(&c);
	for (uint32_t i = 0; i < n_st; i++)
		for (uint32_t s = 0; s < n_ex; s++)
			remote +=
			    dc_link_count(&c.st[i], c.ex[s].id, 1, SHOAL_XFER_KIND_EXPERT_REQ);
	dc_cluster_down(&c);
	if (e) {
		fprintf(stderr, "%s: generate: %s: %s\n", what, shoal_strerror(e), why);
		return 0;
	}
	if (n_ex && remote == 0) {
		fprintf(stderr, "%s: no expert request left the stages\n", what);
		return 0;
	}
	int same = dc_same_run(&want, &got);
	if (!same)
		fprintf(stderr, "%s: tokens or logprobs differ from one engine\n", what);
	return same;
}

int dc_moe_modes(const shoal_model *m, const int32_t *prompt, uint32_t np, uint32_t n_gen,
                 const uint32_t three[2], const char *name)
{
	shoal_sampler_params greedy = shoal_sampler_defaults(), seeded = greedy;
	greedy.temp = 0.0f;
	seeded.seed = 77;
	const uint32_t two[] = {2};
	char what[160];
	int fails = 0;
	snprintf(what, sizeof what, "%s, 3 stages", name);
	fails += !dc_cluster_matches(m, prompt, np, n_gen, three, 3, 0, &greedy, what);
	fails += !dc_cluster_matches(m, prompt, np, n_gen, three, 3, 0, &seeded, what);
	/* one stage keeps some experts, two expert peers hold the rest */
	snprintf(what, sizeof what, "%s, experts on 3 peers", name);
	fails += !dc_cluster_matches(m, prompt, np, n_gen, NULL, 1, 2, &greedy, what);
	/* both at once */
	snprintf(what, sizeof what, "%s, 2 stages + 2 expert peers", name);
	fails += !dc_cluster_matches(m, prompt, np, n_gen, two, 2, 2, &seeded, what);
	return fails;
}

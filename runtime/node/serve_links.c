/*
 * runtime/node/serve_links.c: the data plane's links and helper threads: the
 * xfer listener on an accept thread (so that a peer's connection to its
 * own listener completes its handshake while the data thread waits),
 * admission tokens, the links by (peer, role), the expert thread, and the
 * threads' start and stop.
 *
 * Links are keyed by (peer, role). The role says which object on the far
 * side gets the frames: STAGE (token ids from an owner, hidden states from
 * the previous stage, session control; the data thread's stage), OWNER
 * (results from the last stage; the data thread's owner) or EXPERTS
 * (EXPERT_REQ frames to a peer that holds experts of a stage's layers; the
 * expert thread's server, so that two peers that serve each other's
 * experts never wait on each other's stage). A link is admitted only with
 * token = BLAKE2b-256 keyed by the cluster key over ("shoal-data-v1",
 * connector id, plan digest, role) + the role byte.
 */
#include "config.h"

#include "runtime/node/serve_impl.h"

#include <errno.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <sodium.h>

#include "base/hex.h"
#include "base/log.h"
#include "base/thread.h"

void serve__free_assign(shoal_serve_assign *a)
{
	if (!a)
		return;
	shoal_dist_stage_free(a->stage);
	shoal_dist_stage_free(a->experts);
	free(a);
}

/* ------------------------------------------------------- admission tokens */

void serve__token(const shoal_serve *cl, const uint8_t peer[SHOAL_PEER_ID_LEN],
                  const uint8_t digest[SHOAL_DIGEST_BYTES], int role,
                  uint8_t out[SHOAL_LINK_TOKEN_LEN])
{
	shoal_weights_link_token(&cl->key, peer, digest, role, out);
}

int serve__admit(void *ctx, const uint8_t peer[SHOAL_PEER_ID_LEN], const char *addr,
                 const uint8_t *token, size_t token_len)
{
	shoal_serve *cl = ctx;
	uint8_t digest[SHOAL_DIGEST_BYTES], want[SHOAL_LINK_TOKEN_LEN];
	if (token_len != 33 || (token[SHOAL_LINK_TOKEN_ROLE] != SHOAL_SERVE_ROLE_STAGE &&
	                        token[SHOAL_LINK_TOKEN_ROLE] != SHOAL_SERVE_ROLE_OWNER &&
	                        token[SHOAL_LINK_TOKEN_ROLE] != SHOAL_SERVE_ROLE_EXPERTS &&
	                        token[SHOAL_LINK_TOKEN_ROLE] != SHOAL_SERVE_ROLE_WEIGHTS &&
	                        token[SHOAL_LINK_TOKEN_ROLE] != SHOAL_SERVE_ROLE_PROBE &&
	                        token[SHOAL_LINK_TOKEN_ROLE] != SHOAL_SERVE_ROLE_TENSOR)) {
		SHOAL_LOG_W("cluster", "data link from %s refused: malformed token", addr);
		return 0;
	}
	pthread_mutex_lock(&cl->mu);
	memcpy(digest, cl->shared_digest, SHOAL_DIGEST_BYTES);
	pthread_mutex_unlock(&cl->mu);
	/* a joiner, and a peer the plan left out, have no plan: the model id */
	if (token[SHOAL_LINK_TOKEN_ROLE] == SHOAL_SERVE_ROLE_WEIGHTS ||
	    token[SHOAL_LINK_TOKEN_ROLE] == SHOAL_SERVE_ROLE_PROBE)
		memcpy(digest, cl->model_id, SHOAL_MODEL_ID_BYTES);
	serve__token(cl, peer, digest, token[SHOAL_LINK_TOKEN_ROLE], want);
	if (sodium_memcmp(want, token, SHOAL_LINK_TOKEN_LEN) != 0) {
		SHOAL_LOG_W("cluster",
		            "data link from %s refused: token not for our plan (other key or plan)",
		            addr);
		return 0;
	}
	cl->admit_role = token[SHOAL_LINK_TOKEN_ROLE];
	return 1;
}

/* ------------------------------------------------------------------- links */

static const shoal_serve_ep *serve_ep_of(const shoal_serve_dt *d,
                                         const uint8_t peer[SHOAL_PEER_ID_LEN])
{
	for (size_t i = 0; i < d->n_eps; i++)
		if (!memcmp(d->eps[i].id, peer, SHOAL_PEER_ID_LEN))
			return &d->eps[i];
	return NULL;
}

/* A link to `peer` broke. Without its goodbye that is evidence the peer
 * died (a crash, a kill, a pulled cable): the node thread declares it
 * dead at once instead of waiting for gossip to suspect it. */
void serve__link_broke(shoal_serve_dt *d, const uint8_t peer[SHOAL_PEER_ID_LEN], uint64_t inc,
                       bool bye, const char *why)
{
	if (bye || !memcmp(peer, d->cl->cfg.self, SHOAL_PEER_ID_LEN))
		return;
	shoal_serve_event ev;
	memset(&ev, 0, sizeof ev);
	ev.kind = SHOAL_SERVE_EV_PEER_GONE;
	memcpy(ev.peer, peer, SHOAL_PEER_ID_LEN);
	ev.inc = inc;
	snprintf(ev.why, sizeof ev.why, "%s", why);
	serve__event_push(d->cl, &ev);
}

/* Out-link i goes (it broke, or its peer said goodbye). */
void serve__out_drop(shoal_serve_dt *d, size_t i)
{
	char why[SHOAL_WHY_LEN];
	snprintf(why, sizeof why, "our data link to it broke: %.*s",
	         SHOAL_WHY_QUOTE(sizeof why, 32), shoal_xfer_link_status(d->out[i].k));
	serve__link_broke(d, d->out[i].peer, d->out[i].inc,
	                  d->out[i].bye || shoal_xfer_link_peer_bye(d->out[i].k), why);
	shoal_xfer_link_free(d->out[i].k);
	d->out[i] = d->out[--d->n_out];
}

shoal_xfer_link *serve__link(void *ctx, const uint8_t peer[SHOAL_PEER_ID_LEN])
{
	shoal_serve_lctx *lc = ctx;
	shoal_serve_dt *d = lc->cl->dt; /* link callbacks run on the data thread */
	if (!d || !d->as)
		return NULL;
	for (size_t i = 0; i < d->n_out; i++)
		if (d->out[i].role == lc->role &&
		    !memcmp(d->out[i].peer, peer, SHOAL_PEER_ID_LEN)) {
			if (shoal_xfer_link_is_open(d->out[i].k))
				return d->out[i].k;
			/* a send failed on it: dial again (the peer may be back) */
			serve__out_drop(d, i);
			break;
		}
	if (d->n_out >= SHOAL_SERVE_LINKS)
		return NULL;
	const shoal_serve_ep *ep = serve_ep_of(d, peer);
	char hex[SHOAL_PEER_ID_HEX_LEN], why[SHOAL_WHY_LEN] = "";
	shoal_hex_encode(peer, 16, hex);
	if (!ep) {
		SHOAL_LOG_W("cluster", "no data endpoint known for peer %.8s", hex);
		return NULL;
	}
	uint8_t tok[SHOAL_LINK_TOKEN_LEN];
	serve__token(lc->cl, lc->cl->cfg.self, d->as->digest, lc->role, tok);
	shoal_xfer_link *k = NULL;
	shoal_err e = shoal_xfer_link_connect(&lc->cl->xcfg, ep->host, ep->port, tok, sizeof tok,
	                                      &k, why, sizeof why);
	if (e != SHOAL_OK) {
		SHOAL_LOG_W("cluster", "data link to %.8s at %s:%u: %s", hex, ep->host,
		            (unsigned)ep->port, why);
		if (e == SHOAL_ERR_CLOSED) { /* nothing listens: that incarnation is gone */
			char w[SHOAL_WHY_LEN];
			snprintf(w, sizeof w, "nothing listens at its data port: %.*s",
			         SHOAL_WHY_QUOTE(sizeof w, 40), why);
			serve__link_broke(d, peer, ep->inc, false, w);
		}
		return NULL;
	}
	shoal_xfer_link_set_plan(k, d->as->digest, d->as->epoch);
	SHOAL_LOG_I("cluster", "data link to %.8s (%s): %s", hex,
	            lc->role == SHOAL_SERVE_ROLE_OWNER    ? "results"
	            : lc->role == SHOAL_SERVE_ROLE_TENSOR ? "tensor slices"
	                                                  : "stage",
	            shoal_xfer_link_status(k));
	memcpy(d->out[d->n_out].peer, peer, SHOAL_PEER_ID_LEN);
	d->out[d->n_out].role = lc->role;
	d->out[d->n_out].inc = ep->inc;
	d->out[d->n_out].bye = false;
	d->out[d->n_out].k = k;
	d->n_out++;
	/* for `shoal status`: one transport line per peer we send to */
	pthread_mutex_lock(&lc->cl->mu);
	size_t j = 0;
	while (j < lc->cl->n_link_status && memcmp(lc->cl->link_peer[j], peer, SHOAL_PEER_ID_LEN))
		j++;
	if (j < SHOAL_SERVE_MAX_PEERS) {
		memcpy(lc->cl->link_peer[j], peer, SHOAL_PEER_ID_LEN);
		snprintf(lc->cl->link_status[j], sizeof lc->cl->link_status[j], "%s",
		         shoal_xfer_link_status(k));
		if (j == lc->cl->n_link_status)
			lc->cl->n_link_status++;
	}
	pthread_mutex_unlock(&lc->cl->mu);
	return k;
}

shoal_xfer_link *serve__no_link(void *ctx, const uint8_t peer[SHOAL_PEER_ID_LEN])
{
	(void)ctx;
	(void)peer;
	return NULL;
}

/* Take the links the accept thread accepted. Data thread. */
void serve__adopt(shoal_serve_dt *d)
{
	shoal_serve *cl = d->cl;
	pthread_mutex_lock(&cl->mu);
	for (size_t i = 0; i < cl->n_acc; i++) {
		if (cl->acc_role[i] == SHOAL_SERVE_ROLE_PROBE) { /* with or without a plan */
			if (d->n_pin < SHOAL_SERVE_MAX_PEERS)
				d->pin[d->n_pin++] = cl->acc[i];
			else
				shoal_xfer_link_free(cl->acc[i]);
		} else if (d->as && d->n_in < SHOAL_SERVE_LINKS) {
			shoal_xfer_link_set_plan(cl->acc[i], d->as->digest, d->as->epoch);
			d->in[d->n_in].k = cl->acc[i];
			d->in[d->n_in].role = cl->acc_role[i];
			shoal_xfer_link_peer(cl->acc[i], d->in[d->n_in].peer);
			const shoal_serve_ep *ep = serve_ep_of(d, d->in[d->n_in].peer);
			d->in[d->n_in].inc = ep ? ep->inc : 0;
			d->in[d->n_in].bye = false;
			d->n_in++;
		} else {
			shoal_xfer_link_free(cl->acc[i]);
		}
	}
	cl->n_acc = 0;
	pthread_mutex_unlock(&cl->mu);
}

shoal_xfer_link *serve__tensor_in(void *ctx, const uint8_t peer[SHOAL_PEER_ID_LEN])
{
	shoal_serve_dt *d = ((shoal_serve *)ctx)->dt;
	for (int pass = 0; d && pass < 2; pass++) {
		for (size_t i = 0; i < d->n_in; i++)
			if (d->in[i].role == SHOAL_SERVE_ROLE_TENSOR &&
			    !memcmp(d->in[i].peer, peer, SHOAL_PEER_ID_LEN))
				return d->in[i].k;
		if (!pass) /* the member dialled us while our stage ran */
			serve__adopt(d);
	}
	return NULL;
}

/* Every link goes, each with a goodbye: the far side must not take our
 * plan change (or our exit) for a death. */
void serve__links_close(shoal_serve_dt *d, const char *why)
{
	for (size_t i = 0; i < d->n_out; i++) {
		shoal_xfer_link_bye(d->out[i].k, why);
		shoal_xfer_link_free(d->out[i].k);
	}
	for (size_t i = 0; i < d->n_in; i++) {
		shoal_xfer_link_bye(d->in[i].k, why);
		shoal_xfer_link_free(d->in[i].k);
	}
	d->n_out = d->n_in = 0;
	pthread_mutex_lock(&d->cl->mu);
	d->cl->n_link_status = 0;
	pthread_mutex_unlock(&d->cl->mu);
}

/* ------------------------------------------------- the accept and expert threads */

void *serve__accept_main(void *arg)
{
	shoal_serve *cl = arg;
	shoal_thread_name("shoal-accept");
	for (;;) {
		pthread_mutex_lock(&cl->mu);
		int stop = cl->stop;
		pthread_mutex_unlock(&cl->mu);
		if (stop)
			break;
		shoal_xfer_link *k = NULL;
		char why[SHOAL_WHY_LEN] = "";
		shoal_err e = shoal_xfer_listener_accept(cl->listener, 200, &k, why, sizeof why);
		if (e == SHOAL_ERR_TIMEOUT)
			continue;
		if (e != SHOAL_OK) {
			SHOAL_LOG_D("cluster", "data accept: %s", why);
			continue;
		}
		if (cl->admit_role == SHOAL_SERVE_ROLE_WEIGHTS) {
			shoal_weights_server_add(cl->wserve, k);
			continue;
		}
		bool experts = cl->admit_role == SHOAL_SERVE_ROLE_EXPERTS;
		pthread_mutex_lock(&cl->mu);
		if (experts && cl->n_xacc < SHOAL_SERVE_LINKS) {
			cl->xacc[cl->n_xacc++] = k;
			k = NULL;
		} else if (!experts && cl->n_acc < SHOAL_SERVE_LINKS) {
			cl->acc[cl->n_acc] = k;
			cl->acc_role[cl->n_acc] = cl->admit_role;
			cl->n_acc++;
			k = NULL;
		}
		pthread_mutex_unlock(&cl->mu);
		shoal_xfer_link_free(k);
		if (experts)
			serve__xwake(cl);
		else
			serve__wake(cl);
	}
	return NULL;
}

/* The expert server and the EXPERTS links: answers each EXPERT_REQ at
 * once, whatever the data thread's stage is doing. */
void *serve__experts_main(void *arg)
{
	shoal_serve *cl = arg;
	shoal_dist_stage *xs = NULL;
	shoal_xfer_link *in[SHOAL_SERVE_LINKS];
	size_t n_in = 0;
	uint8_t digest[SHOAL_DIGEST_BYTES] = {0};
	uint64_t epoch = 0;
	shoal_thread_compute(); /* a stage elsewhere waits on its answers */
	shoal_thread_name("shoal-experts");
	for (;;) {
		pthread_mutex_lock(&cl->mu);
		int stop = cl->stop;
		bool swap = cl->x_pending_set;
		shoal_dist_stage *nx = cl->x_pending;
		cl->x_pending = NULL;
		cl->x_pending_set = false;
		pthread_mutex_unlock(&cl->mu);
		if (stop) {
			shoal_dist_stage_free(nx);
			break;
		}
		if (swap) {
			shoal_dist_stage_free(xs);
			xs = nx;
			if (xs) {
				shoal_dist_stage_plan(xs, digest, &epoch);
				/* links already here may carry the new plan's requests */
				for (size_t i = 0; i < n_in; i++)
					shoal_xfer_link_set_plan(in[i], digest, epoch);
			}
		}
		pthread_mutex_lock(&cl->mu);
		for (size_t i = 0; i < cl->n_xacc; i++) {
			if (n_in < SHOAL_SERVE_LINKS) {
				shoal_xfer_link_set_plan(cl->xacc[i], digest, epoch);
				in[n_in++] = cl->xacc[i];
			} else {
				shoal_xfer_link_free(cl->xacc[i]);
			}
		}
		cl->n_xacc = 0;
		pthread_mutex_unlock(&cl->mu);
		struct pollfd pf[1 + 3 * SHOAL_SERVE_LINKS];
		int np = 0;
		pf[np++] = (struct pollfd){.fd = cl->xwake[0], .events = POLLIN};
		for (size_t i = 0; i < n_in; i++)
			np += shoal_xfer_link_pollfds(in[i], pf + np, 3);
		poll(pf, (nfds_t)np, 200);
		char drain[64];
		while (read(cl->xwake[0], drain, sizeof drain) > 0)
			;
		for (size_t i = 0; i < n_in;) {
			shoal_xfer_frame f;
			char why[SHOAL_WHY_LEN] = "";
			shoal_err e;
			while ((e = shoal_xfer_link_recv(in[i], 0, &f, why, sizeof why)) ==
			           SHOAL_OK ||
			       e == SHOAL_ERR_FORMAT || e == SHOAL_ERR_MISMATCH) {
				if (e != SHOAL_OK)
					SHOAL_LOG_W("cluster", "expert frame dropped: %s", why);
				else if (!xs)
					SHOAL_LOG_W("cluster",
					            "an expert request, but no experts here");
				else if (shoal_dist_stage_handle(xs, in[i], &f, why, sizeof why))
					SHOAL_LOG_W("cluster", "expert server: %s", why);
			}
			if (e != SHOAL_ERR_TIMEOUT) {
				SHOAL_LOG_I("cluster", "expert link closed: %s", why);
				shoal_xfer_link_free(in[i]);
				in[i] = in[--n_in];
			} else {
				i++;
			}
		}
		shoal_dist_stage_metrics xm;
		memset(&xm, 0, sizeof xm);
		if (xs)
			shoal_dist_stage_metrics_get(xs, &xm);
		pthread_mutex_lock(&cl->mu);
		cl->met_experts = xm;
		cl->have_experts = xs != NULL;
		pthread_mutex_unlock(&cl->mu);
	}
	for (size_t i = 0; i < n_in; i++)
		shoal_xfer_link_free(in[i]);
	shoal_dist_stage_free(xs);
	return NULL;
}

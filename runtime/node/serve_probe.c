/*
 * runtime/node/serve_probe.c: data-plane health beside gossip. A peer
 * whose gossip is healthy but whose data plane drops or crawls (a wedged
 * data thread, a data-port firewall or MTU black hole, the test hook's
 * tcp:drop and tcp:delay) is left out of the plan on the evidence of two
 * observers, and comes back once its data plane answers again.
 *
 * Divisions, in order:
 *   - the answer: the data thread echoes PROBE frames on PROBE-role links
 *   - the prober: a thread that probes every peer serving our model
 *   - the votes: which peers two observers find failing (node thread)
 *
 * How it goes (like SWIM's indirect probes, with the data link as the
 * probe's path):
 *   1. Every SHOAL_SERVE_PROBE_MULT base periods, each peer's prober sends
 *      one PROBE frame to every other peer serving our model, over a
 *      PROBE-role data link (admitted with a token over the model id, so a
 *      peer left out of the plan is still probed). The far side's data
 *      thread, the one that runs its stage, echoes it: between its waits,
 *      and between the frames of a long drain (a prompt's frames queued,
 *      one engine run after another) every SHOAL_SERVE_ECHO_EVERY_US, so
 *      that a peer busy computing is not taken for one whose data plane
 *      fails (tests/sh/probe_busy.sh).
 *   2. An echo later than the bound (SHOAL_SERVE_PROBE_FLOOR_MS, or
 *      SHOAL_SERVE_PROBE_STEPS of our stage's measured step time when that
 *      is longer), a link that cannot be made, or one that breaks is a
 *      failed probe; SHOAL_SERVE_PROBE_FAILS in a row make the peer a
 *      data suspect of ours, and one probe answered in time clears it.
 *   3. Our data suspects go into our gossiped record (`dsuspect`).
 *   4. Every peer computes the plan from the gossiped view: a candidate
 *      that SHOAL_SERVE_DSUSPECT_VOTES other candidates name is left out
 *      (serve__dsuspects). No single observer's opinion removes a peer,
 *      and all peers decide alike, since they see the same records. The
 *      names given by a peer that names every other candidate (of 3 or
 *      more) do not count: a peer whose own data plane fails finds every
 *      other failing, and two such peers must not leave the healthy ones
 *      out, even before anyone names them.
 *   5. A prober that was itself stopped (SIGSTOP, a long stall) judges
 *      nobody on the probe that spanned the stop.
 *   6. The echoes answered in time also time the data plane: the least of
 *      a target's last SHOAL_SERVE_DRTT_WINDOW, bucketed, goes into our
 *      record (`dlinks`), and every peer predicts the hops and tensor
 *      rounds of the plan it chose on it (serve_plan.c). Every
 *      SHOAL_SERVE_DRTT_BW_EVERY-th probe carries SHOAL_SERVE_DRTT_BW_BYTES:
 *      its least echo over the least small one's is the time those bytes
 *      took, which gives the link's bandwidth (serve__dtime_note). A large
 *      probe judges nobody (a peer that predates them drops it unanswered;
 *      the small ones judge), and one left unanswered ends them for that
 *      target.
 */
#include "config.h"

#include "runtime/node/serve_impl.h"

#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "base/assert.h"
#include "base/hex.h"
#include "base/log.h"
#include "base/thread.h"
#include "scheduler/view.h" /* the buckets of a round trip */

/* A probe's payload: a nonce (8 bytes); an echo's: the nonce, then the
 * longest engine run of the echoing peer's last minute, in ms (u32 LE). */
#define PROBE_BYTES 8u
#define ECHO_BYTES  12u
/* The prober waits for an echo without sleeping for its first 200 us (as
 * a tensor group's member waits for a slice, SHOAL_SERVE_TP_SPIN_US, and
 * a stage for its next frame, --spin-us), so that its own wake-up (5-50
 * us, far more on a loaded machine) stays out of the round trip it
 * times: a hop of the decode loop does not pay it. 200 us a probe every
 * 5 base periods: 0.04 % of a core per target. */
#define PROBE_SPIN_US 200u
/* An echo is sent with this bound: the prober waits far longer, and the
 * data thread must not stall on a peer that stopped reading. */
#define PROBE_ECHO_MS 100
/* The prober sleeps in slices of 50 ms between rounds, so that a node's
 * stop waits at most that long for it (and a round: a few bounds). */
#define PROBE_SLICE_US 50000u

/* --------------------------------------------------------------- the answer */

int serve__probe_pollfds(const shoal_serve_dt *d, struct pollfd *pf, int cap)
{
	int np = 0;
	for (size_t i = 0; i < d->n_pin && np + 3 <= cap; i++)
		np += shoal_xfer_link_pollfds(d->pin[i], pf + np, 3);
	return np;
}

void serve__probe_answer(shoal_serve_dt *d)
{
	d->echo_us = shoal_clock_now_us();
	for (size_t i = 0; i < d->n_pin;) {
		shoal_xfer_link *k = d->pin[i];
		shoal_xfer_frame f;
		char why[SHOAL_WHY_LEN] = "";
		shoal_err e;
		while ((e = shoal_xfer_link_recv(k, 0, &f, why, sizeof why)) == SHOAL_OK ||
		       e == SHOAL_ERR_FORMAT || e == SHOAL_ERR_MISMATCH) {
			if (e != SHOAL_OK || f.hdr.kind != SHOAL_XFER_KIND_PROBE ||
			    (f.hdr.payload_len != PROBE_BYTES &&
			     f.hdr.payload_len != SHOAL_SERVE_DRTT_BW_BYTES))
				continue;
			uint8_t echo[ECHO_BYTES];
			uint64_t ms = d->run_max_ns / 1000000u;
			uint32_t step_ms = ms < UINT32_MAX ? (uint32_t)ms : UINT32_MAX;
			memcpy(echo, f.payload, PROBE_BYTES);
			for (unsigned b = 0; b < 4; b++)
				echo[PROBE_BYTES + b] = (uint8_t)(step_ms >> (8 * b));
			shoal_xfer_hdr h = {.kind = SHOAL_XFER_KIND_PROBE,
			                    .dtype = SHOAL_XFER_DTYPE_U8};
			struct iovec v = {.iov_base = echo, .iov_len = sizeof echo};
			char w[SHOAL_WHY_LEN];
			if (shoal_xfer_link_send(k, &h, &v, 1, PROBE_ECHO_MS, w, sizeof w) !=
			    SHOAL_OK)
				SHOAL_LOG_D("cluster", "probe echo: %s", w);
		}
		if (e == SHOAL_ERR_TIMEOUT && shoal_xfer_link_is_open(k)) {
			i++;
			continue;
		}
		SHOAL_LOG_D("cluster", "probe link closed: %s", why);
		shoal_xfer_link_free(k);
		d->pin[i] = d->pin[--d->n_pin];
	}
}

void serve__probe_close(shoal_serve_dt *d)
{
	for (size_t i = 0; i < d->n_pin; i++) {
		shoal_xfer_link_bye(d->pin[i], "the node stops");
		shoal_xfer_link_free(d->pin[i]);
	}
	d->n_pin = 0;
}

/* --------------------------------------------------------------- the prober */

typedef struct probe_target {
	shoal_serve_ep ep;
	shoal_xfer_link *k;
	uint32_t fails;   /* probes failed in a row */
	uint32_t step_ms; /* its longest recent engine run, as its latest echo told */
	bool suspect;     /* named in our record */
	bool seen;        /* still in the endpoint table */
	serve__dtime dt;  /* its data link's timing */
	uint32_t sent;    /* probes sent, for SHOAL_SERVE_DRTT_BW_EVERY */
	bool no_big;      /* a large probe went unanswered: no more */
} probe_target;

typedef struct probe_state {
	shoal_serve *cl;
	uint8_t pad[SHOAL_SERVE_DRTT_BW_BYTES]; /* a large probe's payload after its nonce: zeros */
	probe_target t[SHOAL_SERVE_MAX_PEERS];
	size_t n;
	uint64_t nonce;
} probe_state;

enum { PROBE_OK, PROBE_FAIL, PROBE_NONE };

/* How long an echo of t may take: SHOAL_SERVE_PROBE_STEPS of the longer of
 * our step and the one t told, at least SHOAL_SERVE_PROBE_FLOOR_MS, at most
 * a minute. */
static uint32_t probe_bound_ms(uint64_t own_step_ms, const probe_target *t)
{
	uint64_t step = own_step_ms > t->step_ms ? own_step_ms : t->step_ms;
	uint64_t b = SHOAL_SERVE_PROBE_STEPS * step;
	return b > SHOAL_SERVE_PROBE_FLOOR_MS ? (b < 60000u ? (uint32_t)b : 60000u)
	                                      : SHOAL_SERVE_PROBE_FLOOR_MS;
}

/* One echo of t: 1 when it answers `nonce`; its step is noted either way. */
static int probe_echo(probe_target *t, const shoal_xfer_frame *f, const uint8_t *nonce)
{
	if (f->hdr.payload_len != ECHO_BYTES)
		return 0;
	uint32_t ms = 0;
	for (unsigned b = 0; b < 4; b++)
		ms |= (uint32_t)f->payload[PROBE_BYTES + b] << (8 * b);
	t->step_ms = ms;
	return !memcmp(f->payload, nonce, PROBE_BYTES);
}

/* us as a window or record entry keeps it: 1 .. UINT32_MAX */
static uint32_t probe_us32(uint64_t us)
{
	return us ? (us < UINT32_MAX ? (uint32_t)us : UINT32_MAX) : 1;
}

/* The least of w[0..n) (UINT32_MAX when n is 0). */
static uint32_t probe_least(const uint32_t *w, uint32_t n)
{
	uint32_t least = UINT32_MAX;
	for (uint32_t i = 0; i < n; i++)
		if (w[i] < least)
			least = w[i];
	return least;
}

/* us into a window of n_max (*n held, *at the next slot); the least held */
static uint32_t probe_window(uint32_t *w, uint32_t n_max, uint32_t *n, uint32_t *at, uint64_t us)
{
	w[*at] = probe_us32(us);
	*at = (*at + 1) % n_max;
	if (*n < n_max)
		(*n)++;
	return probe_least(w, *n);
}

void serve__dtime_init(serve__dtime *t)
{
	memset(t, 0, sizeof *t);
	t->rtt_b = t->bw_b = SHOAL_BUCKET_NONE;
}

bool serve__dtime_note(serve__dtime *t, bool big, uint64_t us)
{
	uint32_t rtt_b = t->rtt_b, bw_b = t->bw_b;
	if (!big) {
		uint32_t least =
		    probe_window(t->rtt, SHOAL_SERVE_DRTT_WINDOW, &t->n_rtt, &t->at_rtt, us);
		t->rtt_b = shoal_bucket_geo(least, t->rtt_b);
		return t->rtt_b != rtt_b;
	}
	if (!t->n_rtt)
		return false; /* nothing to subtract yet */
	uint32_t lb = probe_window(t->big, SHOAL_SERVE_DRTT_BW_WINDOW, &t->n_big, &t->at_big, us);
	uint32_t ls = probe_least(t->rtt, t->n_rtt);
	/* the large payload's extra time, at least 1 us (a link too fast
	 * for the clock to tell: 64 GB/s, bucketed as measured) */
	uint64_t d = lb > ls ? lb - ls : 1;
	t->bw_b = shoal_bucket_geo((uint64_t)SHOAL_SERVE_DRTT_BW_BYTES * 1000000u / d, t->bw_b);
	return t->bw_b != bw_b;
}

/* One probe of t: PROBE_OK (*rtt_us its round trip), PROBE_FAIL (why says
 * how) or PROBE_NONE (no judgement: the peer said goodbye, or we were
 * stopped). */
static int probe_one(probe_state *ps, probe_target *t, uint64_t own_step_ms, bool big,
                     uint64_t *rtt_us, char *why, size_t why_len)
{
	shoal_serve *cl = ps->cl;
	uint64_t t0 = shoal_clock_now_us();
	uint32_t bound_ms = probe_bound_ms(own_step_ms, t);
	if (!t->k) {
		shoal_xfer_config c = cl->xcfg;
		c.verbs = NULL; /* the probe tests the TCP data port and the data thread */
		c.rdma_hub = NULL;
		c.handshake_ms = (int)bound_ms;
		uint8_t tok[SHOAL_LINK_TOKEN_LEN];
		serve__token(cl, cl->cfg.self, cl->model_id, SHOAL_SERVE_ROLE_PROBE, tok);
		char w[SHOAL_WHY_LEN] = "";
		shoal_err e = shoal_xfer_link_connect(&c, t->ep.host, t->ep.port, tok, sizeof tok,
		                                      &t->k, w, sizeof w);
		if (e != SHOAL_OK) {
			t->k = NULL;
			if (shoal_clock_now_us() - t0 >
			    1000u * (bound_ms + SHOAL_SERVE_PROBE_FLOOR_MS))
				return PROBE_NONE; /* we were stopped meanwhile */
			/* a port that refuses has no process behind it: a peer that
			 * died or is restarting, which membership judges; a gray
			 * failure answers slowly or not at all */
			if (strstr(w, "refused"))
				return PROBE_NONE;
			snprintf(why, why_len, "no data link: %.*s", SHOAL_WHY_QUOTE(why_len, 16),
			         w);
			return PROBE_FAIL;
		}
		t0 = shoal_clock_now_us(); /* the round trip alone is judged */
	}
	uint8_t nonce[PROBE_BYTES];
	uint64_t n = ++ps->nonce;
	memcpy(nonce, &n, sizeof nonce);
	shoal_xfer_hdr h = {.kind = SHOAL_XFER_KIND_PROBE, .dtype = SHOAL_XFER_DTYPE_U8};
	struct iovec v[2] = {
	    {.iov_base = nonce, .iov_len = sizeof nonce},
	    {.iov_base = ps->pad, .iov_len = SHOAL_SERVE_DRTT_BW_BYTES - sizeof nonce}};
	char w[SHOAL_WHY_LEN] = "";
	uint64_t deadline = t0 + 1000u * (uint64_t)bound_ms;
	shoal_err e = shoal_xfer_link_send(t->k, &h, v, big ? 2 : 1, (int)bound_ms, w, sizeof w);
	uint64_t spin_end = shoal_clock_now_us() + PROBE_SPIN_US;
	while (e == SHOAL_OK) {
		uint64_t now = shoal_clock_now_us();
		shoal_xfer_frame f;
		bool spin = now < spin_end && now < deadline;
		e = shoal_xfer_link_recv(
		    t->k, spin || now >= deadline ? 0 : (int)((deadline - now) / 1000u), &f, w,
		    sizeof w);
		if (e == SHOAL_ERR_TIMEOUT && spin && shoal_xfer_link_is_open(t->k)) {
			e = SHOAL_OK; /* spinning: no frame yet */
			continue;
		}
		if (e == SHOAL_OK && f.hdr.kind == SHOAL_XFER_KIND_PROBE) {
			/* ours, or an older probe's late echo: either tells its step,
			 * which may give this probe longer */
			int mine = probe_echo(t, &f, nonce);
			bound_ms = probe_bound_ms(own_step_ms, t);
			deadline = t0 + 1000u * (uint64_t)bound_ms;
			uint64_t now = shoal_clock_now_us();
			if (mine && now <= deadline) {
				*rtt_us = now - t0;
				return PROBE_OK;
			}
			if (mine)
				e = SHOAL_ERR_TIMEOUT; /* answered, but late */
		} else if (e == SHOAL_ERR_FORMAT || e == SHOAL_ERR_MISMATCH ||
		           (e == SHOAL_OK && f.hdr.kind != SHOAL_XFER_KIND_ERROR)) {
			e = SHOAL_OK; /* an older probe's late echo: wait on */
		} else if (e == SHOAL_OK) {
			e = SHOAL_ERR_CLOSED; /* the peer's goodbye or error */
		}
	}
	bool bye = shoal_xfer_link_peer_bye(t->k);
	if (e != SHOAL_ERR_TIMEOUT) { /* the link is gone: dial again next time */
		shoal_xfer_link_free(t->k);
		t->k = NULL;
	}
	if (bye || shoal_clock_now_us() > deadline + 1000u * SHOAL_SERVE_PROBE_FLOOR_MS)
		return PROBE_NONE;
	if (e == SHOAL_ERR_TIMEOUT)
		snprintf(why, why_len, "no echo within %u ms", bound_ms);
	else
		snprintf(why, why_len, "link: %.*s", SHOAL_WHY_QUOTE(why_len, 8), w);
	return PROBE_FAIL;
}

/* Our suspects and round trips into the shared lists the record is filled
 * from. */
static void probe_publish(probe_state *ps)
{
	shoal_serve *cl = ps->cl;
	pthread_mutex_lock(&cl->mu);
	cl->n_dsus = 0;
	for (size_t i = 0; i < ps->n && cl->n_dsus < SHOAL_RECORD_MAX_DSUSPECT; i++)
		if (ps->t[i].suspect)
			memcpy(cl->dsus[cl->n_dsus++].b, ps->t[i].ep.id, SHOAL_PEER_ID_LEN);
	cl->n_dlinks = 0;
	for (size_t i = 0; i < ps->n && cl->n_dlinks < SHOAL_RECORD_MAX_DLINKS; i++) {
		const probe_target *t = &ps->t[i];
		if (t->dt.rtt_b == SHOAL_BUCKET_NONE)
			continue;
		shoal_record_dlink *d = &cl->dlinks[cl->n_dlinks++];
		memset(d, 0, sizeof *d);
		memcpy(d->peer.b, t->ep.id, SHOAL_PEER_ID_LEN);
		d->rtt_us = probe_us32(shoal_bucket_geo_value(t->dt.rtt_b));
		d->bw_bytes_s =
		    t->dt.bw_b == SHOAL_BUCKET_NONE ? 0 : shoal_bucket_geo_value(t->dt.bw_b);
	}
	cl->dsus_version++;
	pthread_mutex_unlock(&cl->mu);
}

/* The targets follow the endpoint table (every peer serving our model, left
 * out or not); returns whether a suspect went. */
static bool probe_sync(probe_state *ps, const shoal_serve_ep *eps, size_t n_eps)
{
	bool changed = false;
	for (size_t i = 0; i < ps->n; i++)
		ps->t[i].seen = false;
	for (size_t j = 0; j < n_eps; j++) {
		if (!memcmp(eps[j].id, ps->cl->cfg.self, SHOAL_PEER_ID_LEN))
			continue;
		size_t i = 0;
		while (i < ps->n && memcmp(ps->t[i].ep.id, eps[j].id, SHOAL_PEER_ID_LEN))
			i++;
		if (i == ps->n) {
			if (ps->n == SHOAL_SERVE_MAX_PEERS)
				continue;
			memset(&ps->t[ps->n], 0, sizeof ps->t[ps->n]);
			serve__dtime_init(&ps->t[ps->n].dt);
			ps->n++;
		} else if (ps->t[i].ep.inc != eps[j].inc || ps->t[i].ep.port != eps[j].port ||
		           strcmp(ps->t[i].ep.host, eps[j].host)) {
			shoal_xfer_link_free(ps->t[i].k); /* a new life: a new link */
			ps->t[i].k = NULL;
			/* and a clean slate: what its old life's data port did is no
			 * evidence against the new one (a peer that died and came back
			 * would otherwise stay named, and left out, by its old failures) */
			changed |= ps->t[i].suspect || ps->t[i].dt.rtt_b != SHOAL_BUCKET_NONE;
			ps->t[i].suspect = false;
			ps->t[i].fails = 0;
			serve__dtime_init(&ps->t[i].dt); /* its new path is timed anew */
			ps->t[i].no_big = false;
		}
		ps->t[i].ep = eps[j];
		ps->t[i].seen = true;
	}
	for (size_t i = 0; i < ps->n;) {
		if (ps->t[i].seen) {
			i++;
			continue;
		}
		changed |= ps->t[i].suspect || ps->t[i].dt.rtt_b != SHOAL_BUCKET_NONE;
		shoal_xfer_link_free(ps->t[i].k);
		ps->t[i] = ps->t[--ps->n];
	}
	return changed;
}

/* One round: every target probed once. */
static void probe_round(probe_state *ps)
{
	shoal_serve *cl = ps->cl;
	shoal_serve_ep eps[SHOAL_SERVE_MAX_PEERS];
	pthread_mutex_lock(&cl->mu);
	size_t n_eps = cl->n_eps;
	memcpy(eps, cl->eps, n_eps * sizeof eps[0]);
	uint64_t step_ms = cl->met_stage.last_run_ns / 1000000u;
	pthread_mutex_unlock(&cl->mu);
	bool changed = probe_sync(ps, eps, n_eps);
	for (size_t i = 0; i < ps->n; i++) {
		probe_target *t = &ps->t[i];
		char why[SHOAL_WHY_LEN] = "", hex[SHOAL_PEER_ID_HEX_LEN];
		pthread_mutex_lock(&cl->mu);
		int stop = cl->stop;
		pthread_mutex_unlock(&cl->mu);
		if (stop) /* the node stops: at most one probe's bound more */
			break;
		uint64_t rtt_us = 0;
		/* a large probe once a small one's round trip is known */
		bool big = t->dt.n_rtt && !t->no_big &&
		           t->sent % SHOAL_SERVE_DRTT_BW_EVERY == SHOAL_SERVE_DRTT_BW_EVERY - 1;
		t->sent++;
		int r = probe_one(ps, t, step_ms, big, &rtt_us, why, sizeof why);
		shoal_hex_encode(t->ep.id, SHOAL_PEER_ID_LEN, hex);
		if (big && r != PROBE_OK) { /* judges nobody (invariant 6) */
			t->no_big = r == PROBE_FAIL;
			continue;
		}
		if (r == PROBE_OK) {
			t->fails = 0;
			changed |= serve__dtime_note(&t->dt, big, rtt_us);
			if (t->suspect) {
				t->suspect = false;
				changed = true;
				SHOAL_LOG_I("cluster",
				            "peer %.8s answers over the data plane again", hex);
			}
		} else if (r == PROBE_FAIL) {
			t->fails++;
			SHOAL_LOG_D("cluster", "data probe of %.8s failed (%u in a row): %s", hex,
			            t->fails, why);
			if (!t->suspect && t->fails >= SHOAL_SERVE_PROBE_FAILS) {
				t->suspect = true;
				changed = true;
				SHOAL_LOG_W(
				    "cluster",
				    "peer %.8s: its data plane fails (%u probes in a row: %s); "
				    "telling the cluster",
				    hex, t->fails, why);
			}
		}
	}
	if (changed)
		probe_publish(ps);
}

void *serve__probe_main(void *arg)
{
	shoal_serve *cl = arg;
	probe_state *ps = calloc(1, sizeof *ps);
	if (!ps) {
		SHOAL_LOG_E("cluster", "data prober: out of memory");
		return NULL;
	}
	ps->cl = cl;
	shoal_thread_name("shoal-probe");
	uint64_t period_us =
	    1000ull * SHOAL_SERVE_PROBE_MULT * (cl->cfg.base_ms ? cl->cfg.base_ms : 100u);
	uint64_t next = shoal_clock_now_us();
	for (;;) {
		pthread_mutex_lock(&cl->mu);
		int stop = cl->stop;
		pthread_mutex_unlock(&cl->mu);
		if (stop)
			break;
		uint64_t now = shoal_clock_now_us();
		if (now < next) { /* the monotonic clock, in slices: a stop is seen soon */
			uint64_t w = next - now;
			usleep((useconds_t)(w < PROBE_SLICE_US ? w : PROBE_SLICE_US));
			continue;
		}
		probe_round(ps);
		next = now + period_us;
	}
	for (size_t i = 0; i < ps->n; i++) {
		shoal_xfer_link_bye(ps->t[i].k, "the node stops");
		shoal_xfer_link_free(ps->t[i].k);
	}
	free(ps);
	return NULL;
}

/* ---------------------------------------------------------------- the votes */

size_t serve__dsuspect_votes(const shoal_swim_member *const *all, size_t n, size_t i,
                             const bool *mute, char *names, size_t names_len)
{
	size_t votes = 0, o = 0;
	if (names_len)
		names[0] = '\0';
	for (size_t j = 0; j < n; j++) {
		const shoal_record *r = &all[j]->record;
		if (j == i || (mute && mute[j]))
			continue;
		for (uint32_t k = 0; k < r->n_dsuspect && k < SHOAL_RECORD_MAX_DSUSPECT; k++) {
			if (memcmp(r->dsuspect[k].b, all[i]->record.id.b, SHOAL_PEER_ID_LEN))
				continue;
			votes++;
			if (o < names_len) {
				int w = snprintf(names + o, names_len - o, "%s%s", o ? ", " : "",
				                 r->name);
				o = w < 0 ? names_len : o + (size_t)w;
			}
			break;
		}
	}
	return votes;
}

/* Whether all[j] names every other candidate: its own data plane is then
 * the likelier broken one (with 3 or more candidates). */
static bool probe_names_all(const shoal_swim_member *const *all, size_t n, size_t j)
{
	const shoal_record *r = &all[j]->record;
	if (n < 3)
		return false;
	for (size_t i = 0; i < n; i++) {
		if (i == j)
			continue;
		uint32_t k = 0;
		while (k < r->n_dsuspect && k < SHOAL_RECORD_MAX_DSUSPECT &&
		       memcmp(r->dsuspect[k].b, all[i]->record.id.b, SHOAL_PEER_ID_LEN))
			k++;
		if (k == r->n_dsuspect || k == SHOAL_RECORD_MAX_DSUSPECT)
			return false;
	}
	return true;
}

size_t serve__dsuspects(const shoal_swim_member *const *all, size_t n, bool *out)
{
	bool mute[SHOAL_SERVE_MAX_PEERS] = {false};
	size_t nx = 0;
	SHOAL_ASSERT(n <= SHOAL_SERVE_MAX_PEERS);
	for (size_t j = 0; j < n; j++)
		mute[j] = probe_names_all(all, n, j);
	for (size_t i = 0; i < n; i++) {
		out[i] =
		    serve__dsuspect_votes(all, n, i, mute, NULL, 0) >= SHOAL_SERVE_DSUSPECT_VOTES;
		nx += out[i];
	}
	return nx;
}

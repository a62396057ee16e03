/*
 * tests/helpers/sim_net.c: the in-memory transport and virtual clock for many SWIM
 * peers (see tests/helpers/sim_net.h).
 *
 * Divisions: generator, event heap, the ops a peer sees, peers, running.
 */
#include "tests/helpers/sim_net.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum { EV_TICK, EV_MSG };

struct ev {
	uint64_t t, seq;
	int kind;
	uint32_t to, gen;
	uint8_t *buf;
	size_t len;
	uint32_t from;
};

struct peer {
	sim_net *net;
	uint32_t idx, gen;
	shoal_swim *sw;
	shoal_peer_id id;
	uint64_t rng;
	int muted;
	int side; /* messages pass only between peers on the same side */
	char ep[32];
};

struct sim_net {
	sim_net_config cfg;
	uint64_t now, seq, rng;
	uint64_t last_read; /* the latest time a peer read (clock_read_us) */
	struct ev *h;
	size_t hn, hcap;
	struct peer *p;
	size_t n, cap;
	uint32_t sched_version;
	uint64_t msgs, bytes;
	shoal_swim_ops ops;
};

/* ==== generator (splitmix64) ============================================ */

static uint64_t mix(uint64_t *s)
{
	uint64_t z = (*s += 0x9e3779b97f4a7c15ull);
	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
	z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
	return z ^ (z >> 31);
}

static double unit(uint64_t *s)
{
	return (double)(mix(s) >> 11) / 9007199254740992.0;
}

/* ==== event heap ========================================================== */

static int ev_less(const struct ev *a, const struct ev *b)
{
	return a->t < b->t || (a->t == b->t && a->seq < b->seq);
}

static void push(sim_net *net, struct ev e)
{
	if (net->hn == net->hcap) {
		size_t cap = net->hcap ? 2 * net->hcap : 1024;
		struct ev *h = realloc(net->h, cap * sizeof *h);
		if (!h) {
			free(e.buf);
			return;
		}
		net->h = h;
		net->hcap = cap;
	}
	e.seq = net->seq++;
	size_t i = net->hn++;
	while (i > 0) {
		size_t up = (i - 1) / 2;
		if (!ev_less(&e, &net->h[up]))
			break;
		net->h[i] = net->h[up];
		i = up;
	}
	net->h[i] = e;
}

static struct ev pop(sim_net *net)
{
	struct ev top = net->h[0], last = net->h[--net->hn];
	size_t i = 0;
	for (;;) {
		size_t c = 2 * i + 1;
		if (c >= net->hn)
			break;
		if (c + 1 < net->hn && ev_less(&net->h[c + 1], &net->h[c]))
			c++;
		if (!ev_less(&net->h[c], &last))
			break;
		net->h[i] = net->h[c];
		i = c;
	}
	if (net->hn)
		net->h[i] = last;
	return top;
}

/* ==== the ops a peer sees ================================================= */

static uint64_t op_now(void *ctx)
{
	sim_net *net = ((struct peer *)ctx)->net;
	uint64_t t = net->now;
	if (net->cfg.clock_read_us && net->last_read + net->cfg.clock_read_us > t)
		t = net->last_read + net->cfg.clock_read_us;
	net->last_read = t;
	return t;
}

static uint64_t op_rand(void *ctx)
{
	return mix(&((struct peer *)ctx)->rng);
}

/* With $SIM_NET_DUMP set to a directory, the first 256 messages are
 * written there, one file each: a seed corpus for tests/fuzz/fuzz_wire.c. */
static void dump(sim_net *net, const uint8_t *buf, size_t len)
{
	const char *dir = getenv("SIM_NET_DUMP");
	char path[512];
	if (!dir || net->msgs > 256)
		return;
	snprintf(path, sizeof path, "%s/sim-%03llu.msgpack", dir, (unsigned long long)net->msgs);
	FILE *f = fopen(path, "wb");
	if (!f)
		return;
	fwrite(buf, 1, len, f);
	fclose(f);
}

static shoal_err op_send(void *ctx, const char *ep, const uint8_t *buf, size_t len)
{
	struct peer *p = ctx;
	sim_net *net = p->net;
	unsigned long to;
	char *end;
	if (strncmp(ep, "sim://", 6))
		return SHOAL_ERR_INVAL;
	to = strtoul(ep + 6, &end, 10);
	if (*end || to >= net->n)
		return SHOAL_ERR_INVAL;
	net->msgs++;
	net->bytes += len;
	dump(net, buf, len);
	if (p->muted || net->p[to].muted || !net->p[to].sw || p->side != net->p[to].side)
		return SHOAL_OK;
	if (net->cfg.loss > 0 && unit(&net->rng) < net->cfg.loss)
		return SHOAL_OK;
	struct ev e = {.kind = EV_MSG, .to = (uint32_t)to, .from = p->idx, .len = len};
	uint32_t span = net->cfg.lat_max_us - net->cfg.lat_min_us;
	e.t = net->now + net->cfg.lat_min_us + (span ? mix(&net->rng) % (span + 1) : 0);
	e.buf = malloc(len ? len : 1);
	if (!e.buf)
		return SHOAL_ERR_NOMEM;
	memcpy(e.buf, buf, len);
	push(net, e);
	return SHOAL_OK;
}

/* ==== peers =============================================================== */

sim_net *sim_net_new(const sim_net_config *c, size_t max_peers)
{
	sim_net *net = calloc(1, sizeof *net);
	if (!net)
		return NULL;
	net->cfg = *c;
	net->rng = c->seed ^ 0x5117ull;
	net->sched_version = 1;
	net->p = calloc(max_peers ? max_peers : 1, sizeof *net->p);
	if (!net->p) {
		free(net);
		return NULL;
	}
	net->cap = max_peers;
	net->ops = (shoal_swim_ops){
	    .now_us = op_now,
	    .rand64 = op_rand,
	    .send = op_send,
	};
	return net;
}

void sim_net_free(sim_net *net)
{
	if (!net)
		return;
	for (size_t i = 0; i < net->n; i++)
		shoal_swim_free(net->p[i].sw);
	for (size_t i = 0; i < net->hn; i++)
		free(net->h[i].buf);
	free(net->h);
	free(net->p);
	free(net);
}

static int start(sim_net *net, struct peer *p, uint64_t incarnation, long seed_peer)
{
	shoal_record r;
	char why[SHOAL_WHY_LEN];
	shoal_record_init(&r);
	r.id = p->id;
	snprintf(r.name, sizeof r.name, "p%u", p->idx);
	snprintf(r.ctl_endpoint, sizeof r.ctl_endpoint, "%s", p->ep);
	snprintf(r.cluster, sizeof r.cluster, "sim");
	snprintf(r.sw_version, sizeof r.sw_version, "0.1.0");
	r.proto_version = 1;
	r.sched_version = net->sched_version;
	r.mem_total = (uint64_t)(16 + p->idx % 4 * 16) << 30;
	r.mem_weights = r.mem_total / 4 * 3;
	r.cores = 8;
	p->gen++;
	p->rng = net->cfg.seed * 1000003u + p->idx * 7919u + p->gen;
	if (shoal_swim_new(&net->cfg.swim, &r, incarnation, &net->ops, p, &p->sw, why,
	                   sizeof why)) {
		fprintf(stderr, "sim: peer %u: %s\n", p->idx, why);
		return -1;
	}
	if (seed_peer >= 0)
		shoal_swim_join(p->sw, net->p[seed_peer].ep);
	push(net, (struct ev){.t = net->now, .kind = EV_TICK, .to = p->idx, .gen = p->gen});
	return 0;
}

long sim_net_add(sim_net *net, uint64_t incarnation, long seed_peer)
{
	if (net->n == net->cap)
		return -1;
	struct peer *p = &net->p[net->n];
	memset(p, 0, sizeof *p);
	p->net = net;
	p->idx = (uint32_t)net->n;
	uint64_t s = net->cfg.seed * 31 + p->idx;
	uint64_t a = mix(&s), b = mix(&s);
	memcpy(p->id.b, &a, 8);
	memcpy(p->id.b + 8, &b, 8);
	snprintf(p->ep, sizeof p->ep, "sim://%u", p->idx);
	net->n++;
	if (start(net, p, incarnation, seed_peer)) {
		net->n--;
		return -1;
	}
	return (long)p->idx;
}

void sim_net_kill(sim_net *net, size_t i)
{
	shoal_swim_free(net->p[i].sw);
	net->p[i].sw = NULL;
	net->p[i].gen++;
}

int sim_net_restart(sim_net *net, size_t i, uint64_t incarnation, long seed_peer)
{
	if (net->p[i].sw)
		sim_net_kill(net, i);
	return start(net, &net->p[i], incarnation, seed_peer);
}

void sim_net_mute(sim_net *net, size_t i, int on)
{
	net->p[i].muted = on;
}

void sim_net_set_side(sim_net *net, size_t i, int side)
{
	net->p[i].side = side;
}

void sim_net_set_loss(sim_net *net, double loss)
{
	net->cfg.loss = loss;
}

void sim_net_set_sched_version(sim_net *net, uint32_t v)
{
	net->sched_version = v;
}

/* ==== running ============================================================== */

void sim_net_run_until(sim_net *net, uint64_t t_us)
{
	while (net->hn && net->h[0].t <= t_us) {
		struct ev e = pop(net);
		struct peer *p = &net->p[e.to];
		net->now = e.t;
		if (e.kind == EV_MSG) {
			if (p->sw && !p->muted)
				shoal_swim_receive(p->sw, net->p[e.from].ep, e.buf, e.len, NULL, 0);
			free(e.buf);
			continue;
		}
		if (!p->sw || e.gen != p->gen)
			continue; /* the tick of a killed (or restarted) life */
		shoal_swim_tick(p->sw);
		/* Next tick when the peer has work, at most one base period
		 * away (so receive-side timers are seen in time). */
		uint64_t base = net->cfg.swim.base_us ? net->cfg.swim.base_us : 100000;
		uint64_t next = shoal_swim_next_wakeup_us(p->sw);
		if (next > net->now + base)
			next = net->now + base;
		if (next <= net->now)
			next = net->now + 1;
		if (net->cfg.tick_late_us)
			next += mix(&net->rng) % (net->cfg.tick_late_us + 1);
		push(net, (struct ev){.t = next, .kind = EV_TICK, .to = e.to, .gen = e.gen});
	}
	if (t_us > net->now)
		net->now = t_us;
}

uint64_t sim_net_now(const sim_net *net)
{
	return net->now;
}

uint64_t sim_net_period_us(const sim_net *net)
{
	uint64_t base = net->cfg.swim.base_us ? net->cfg.swim.base_us : 100000;
	return 5 * base; /* PROBE_MULT of net/swim.c */
}

size_t sim_net_n(const sim_net *net)
{
	return net->n;
}

int sim_net_running(const sim_net *net, size_t i)
{
	return net->p[i].sw != NULL;
}

shoal_swim *sim_net_swim(sim_net *net, size_t i)
{
	return net->p[i].sw;
}

const shoal_peer_id *sim_net_id(const sim_net *net, size_t i)
{
	return &net->p[i].id;
}

int sim_net_converged(sim_net *net)
{
	size_t live = 0;
	for (size_t i = 0; i < net->n; i++)
		live += net->p[i].sw && !net->p[i].muted;
	for (size_t i = 0; i < net->n; i++) {
		struct peer *p = &net->p[i];
		if (!p->sw || p->muted)
			continue;
		if (shoal_swim_count(p->sw, SHOAL_SWIM_STATE_ALIVE) != live)
			return 0;
		for (size_t j = 0; j < net->n; j++) {
			struct peer *q = &net->p[j];
			shoal_swim_brief b, own;
			if (j == i || !q->sw || q->muted)
				continue;
			if (shoal_swim_lookup(q->sw, &q->id, &own))
				return 0;
			if (shoal_swim_lookup(p->sw, &q->id, &b) ||
			    b.state != SHOAL_SWIM_STATE_ALIVE || b.incarnation != own.incarnation ||
			    b.record_version != own.record_version)
				return 0;
		}
	}
	return 1;
}

size_t sim_net_count_seen_as(sim_net *net, size_t i, shoal_swim_state s)
{
	size_t c = 0;
	for (size_t j = 0; j < net->n; j++) {
		shoal_swim_brief b;
		if (j == i || !net->p[j].sw)
			continue;
		if (!shoal_swim_lookup(net->p[j].sw, &net->p[i].id, &b) && b.state == s)
			c++;
	}
	return c;
}

uint64_t sim_net_msgs(const sim_net *net)
{
	return net->msgs;
}

uint64_t sim_net_bytes(const sim_net *net)
{
	return net->bytes;
}

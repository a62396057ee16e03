/*
 * net/ctl.c: ZeroMQ control-plane sockets, CURVE and the ZAP handler (see
 * ctl.h).
 *
 * Divisions, in order: helpers; ZAP handler and monitor; the ROUTER side
 * (new/free/poll/reply); DEALERs (send/expire); the blocking client.
 *
 * Invariants:
 *   1. Keyed: every socket of ours is CURVE; the ROUTER asks ZAP about each
 *      client, and ZAP says 200 only for mechanism CURVE with exactly the
 *      derived client public key (sodium_memcmp, constant time).
 *   2. Nothing read from a socket is trusted: frame counts and sizes are
 *      checked before the payload reaches on_message; bad frames are dropped
 *      with a rate-limited log line.
 *   3. Sends never block (ZMQ_DONTWAIT); a full queue drops the message.
 *      The ROUTER's queue to a client holds a whole run's replies
 *      (SHOAL_CTL_ROUTER_SNDHWM), so a client that reads loses none.
 * Every send passes the fault-injection test hook (net/fault.h, "ctl").
 */
#include "net/ctl.h"

#include <errno.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <sodium.h>
#include <zmq.h>

#include "base/clock.h"
#include "base/log.h"
#include "net/fault.h"

#define SHOAL_CTL_ZAP_ENDPOINT "inproc://zeromq.zap.01" /* fixed by RFC 27 */
#define SHOAL_CTL_MON_ENDPOINT "inproc://shoal-ctl-monitor"
#define SHOAL_CTL_ZAP_DOMAIN   "shoal"
#define SHOAL_CTL_MAX_DEALERS  512 /* 64 peers x 8 endpoints (link probes) */
#define SHOAL_CTL_MAX_POLL     64  /* extra fds the caller may pass */
/* Messages delivered per poll call: a flood of 10k messages/s must not
 * starve the SWIM timers; 256 per call at a >= 10 ms tick still drains
 * 25k messages/s. */
#define SHOAL_CTL_BURST 256
/* A DEALER queue of 64 messages is ~ 16 protocol periods of gossip to one
 * peer; beyond that the peer is unreachable and old gossip is useless. */
#define SHOAL_CTL_SNDHWM 64
/* The ROUTER's queue to one client must hold a whole run's replies: a
 * RUN_TOKEN per token and the RUN_END. A ROUTER drops what does not fit
 * without a word, and its idea of how full the queue is only moves when
 * the node thread processes ZeroMQ's commands (at most once a ms while it
 * sends): a node thread that sent a run's tokens in one burst (they
 * waited in the event ring while it was busy or off its core) lost the
 * 65th and later messages at 64, the RUN_END first among them, and the
 * client waited 60 s for it (issue 35; tests/sh/ctl_burst.sh). 2^17 is a
 * run at a 128k-token context with its RUN_END and room for gossip
 * replies; ZeroMQ allocates a queue as it fills, so an honest client that
 * reads costs nothing for it, and one that never reads holds at most
 * that many of its own replies (~10-30 MB at 100-200 bytes each). */
#define SHOAL_CTL_ROUTER_SNDHWM (1 << 17)
/* Reconnect after 100 ms, backing off to 1 s: with 100 ms, TESTNET.md
 * (section 2.4) saw a DEALER reconnect ~0.15 s after its ROUTER restarted;
 * the 1 s cap keeps a dead peer to at most one connection attempt/s. */
#define SHOAL_CTL_RECONNECT_MS     100
#define SHOAL_CTL_RECONNECT_MAX_MS 1000
/* One log line per kind per second: a misconfigured peer retrying every
 * 100 ms would otherwise write 36k lines an hour. */
#define SHOAL_CTL_LOG_EVERY_MS 1000
/* The ROUTER drops a connection after this long without traffic (and tells
 * the other side, by the heartbeat TTL, to do the same), at least 3
 * heartbeats. A dropped client loses every reply still due: ZeroMQ
 * reconnects it under a new routing id, and the ROUTER silently discards
 * what we send to the old one (the blocking client below then reports the
 * lost connection, with the run finished here). At --gossip-ms 50, 3
 * heartbeats are 300 ms, less than a blocked client may wait to be
 * scheduled on a loaded 2-vCPU machine (dist_bench on the 1.17 GB fixture
 * lost runs so; so does a client stopped for 0.6 s). 10 s outlasts such
 * stalls and stays below the owner's 30 s silence limit and the client's
 * 60 s; our DEALERs keep 3 heartbeats, so the peer that sends still
 * notices a cut link within 3 (TESTNET.md 2.4). */
#define SHOAL_CTL_ROUTER_TIMEOUT_MIN_MS 10000

typedef struct shoal_ctl_dealer {
	char *endpoint;
	void *sock;
	uint64_t last_used_ms;
} shoal_ctl_dealer;

enum { SHOAL_CTL_LOG_DROP, SHOAL_CTL_LOG_ZAP, SHOAL_CTL_LOG_HS, SHOAL_CTL_LOG__COUNT };

struct shoal_ctl {
	void *zctx;
	void *router;
	void *zap;     /* REP, NULL when insecure */
	void *monitor; /* PAIR: handshake failures, closed connections */
	int keyed;
	shoal_key_curve curve;
	char bound[128];
	uint16_t port;
	int heartbeat_ms;
	void (*on_message)(void *ud, const shoal_ctl_route *from, const uint8_t *buf, size_t len);
	void (*on_disconnect)(void *ud, int fd);
	void *ud;
	shoal_ctl_dealer *dealers;
	size_t n_dealers;
	shoal_ctl_stats stats;
	uint64_t log_last_ms[SHOAL_CTL_LOG__COUNT];
	uint64_t log_suppressed[SHOAL_CTL_LOG__COUNT];
};

struct shoal_ctl_client {
	void *zctx;
	void *sock;
	void *monitor; /* PAIR for the DEALER's connection events, or NULL */
	int keyed;
	int handshaken;      /* a handshake succeeded: later losses are a dropped connection */
	int opened;          /* a TCP socket was made: the host name resolved */
	uint64_t delayed_ms; /* when the pending TCP connect began, 0 if none */
};

/* ------------------------------------------------------------------ helpers */

/* 1 if a line of this kind may be logged now; counts the ones it eats. */
static int ctl_log_ok(shoal_ctl *ctl, int kind, uint64_t *suppressed)
{
	uint64_t now = shoal_clock_now_ms();
	if (ctl->log_last_ms[kind] && now - ctl->log_last_ms[kind] < SHOAL_CTL_LOG_EVERY_MS) {
		ctl->log_suppressed[kind]++;
		return 0;
	}
	ctl->log_last_ms[kind] = now;
	*suppressed = ctl->log_suppressed[kind];
	ctl->log_suppressed[kind] = 0;
	return 1;
}

static void ctl_drop(shoal_ctl *ctl, const char *addr, const char *reason)
{
	uint64_t sup;
	ctl->stats.dropped++;
	if (ctl_log_ok(ctl, SHOAL_CTL_LOG_DROP, &sup))
		SHOAL_LOG_W("ctl", "dropped a message from %s: %s (%llu more not logged)",
		            addr && *addr ? addr : "?", reason, (unsigned long long)sup);
}

static int ctl_setint(void *s, int opt, int v)
{
	return zmq_setsockopt(s, opt, &v, sizeof v);
}

/* Options every socket of ours gets; hwm: its send queue's bound in
 * messages (per connection); heartbeat_ms 0: no heartbeats, else the
 * connection is dropped after timeout_ms without traffic. */
static int ctl_common_opts(void *s, int hwm, int heartbeat_ms, int timeout_ms)
{
	int64_t maxmsg = SHOAL_CTL_MAX_MSG;
	if (ctl_setint(s, ZMQ_LINGER, 0) || ctl_setint(s, ZMQ_SNDHWM, hwm) ||
	    zmq_setsockopt(s, ZMQ_MAXMSGSIZE, &maxmsg, sizeof maxmsg) ||
	    ctl_setint(s, ZMQ_RECONNECT_IVL, SHOAL_CTL_RECONNECT_MS) ||
	    ctl_setint(s, ZMQ_RECONNECT_IVL_MAX, SHOAL_CTL_RECONNECT_MAX_MS))
		return -1;
	if (heartbeat_ms > 0 && (ctl_setint(s, ZMQ_HEARTBEAT_IVL, heartbeat_ms) ||
	                         ctl_setint(s, ZMQ_HEARTBEAT_TIMEOUT, timeout_ms) ||
	                         ctl_setint(s, ZMQ_HEARTBEAT_TTL, timeout_ms)))
		return -1;
	return 0;
}

static int ctl_client_opts(void *s, const shoal_key_curve *keys)
{
	if (!keys)
		return 0;
	if (zmq_setsockopt(s, ZMQ_CURVE_SERVERKEY, keys->server_public, SHOAL_KEY_BYTES) ||
	    zmq_setsockopt(s, ZMQ_CURVE_PUBLICKEY, keys->client_public, SHOAL_KEY_BYTES) ||
	    zmq_setsockopt(s, ZMQ_CURVE_SECRETKEY, keys->client_secret, SHOAL_KEY_BYTES))
		return -1;
	return 0;
}

/* Receive every remaining frame of a message and discard it. */
static void ctl_discard_rest(void *s)
{
	int more = 0;
	size_t ml = sizeof more;
	while (zmq_getsockopt(s, ZMQ_RCVMORE, &more, &ml) == 0 && more) {
		zmq_msg_t m;
		zmq_msg_init(&m);
		if (zmq_msg_recv(&m, s, ZMQ_DONTWAIT) < 0) {
			zmq_msg_close(&m);
			return;
		}
		zmq_msg_close(&m);
		ml = sizeof more;
	}
}

/* -------------------------------------------------- ZAP handler and monitor */

/* Serve one ZAP request (RFC 27): frames version, request id, domain,
 * address, identity, mechanism, credentials...; reply version, request id,
 * status code, status text, user id, metadata. */
static void ctl_zap_serve(shoal_ctl *ctl)
{
	zmq_msg_t f[8];
	int n = 0, more = 1;
	while (more) {
		zmq_msg_t m;
		zmq_msg_init(&m);
		if (zmq_msg_recv(&m, ctl->zap, ZMQ_DONTWAIT) < 0) {
			zmq_msg_close(&m);
			break;
		}
		more = zmq_msg_more(&m);
		if (n < 8)
			f[n++] = m;
		else
			zmq_msg_close(&m);
	}
	if (n == 0)
		return;
	const char *status = "400", *text = "client key does not prove the cluster key";
	char addr[64] = "?";
	if (n >= 6) {
		size_t al = zmq_msg_size(&f[3]);
		if (al >= sizeof addr)
			al = sizeof addr - 1;
		memcpy(addr, zmq_msg_data(&f[3]), al);
		addr[al] = '\0';
		size_t ml = zmq_msg_size(&f[5]);
		int is_curve = ml == 5 && !memcmp(zmq_msg_data(&f[5]), "CURVE", 5);
		if (is_curve && n >= 7 && zmq_msg_size(&f[6]) == SHOAL_KEY_BYTES &&
		    sodium_memcmp(zmq_msg_data(&f[6]), ctl->curve.client_public, SHOAL_KEY_BYTES) ==
		        0) {
			status = "200";
			text = "OK";
		} else if (!is_curve) {
			text = "mechanism is not CURVE";
		}
	} else {
		text = "malformed ZAP request";
	}
	if (status[0] == '2') {
		ctl->stats.zap_allowed++;
		SHOAL_LOG_D("ctl", "admitted a client from %s", addr);
	} else {
		uint64_t sup;
		ctl->stats.zap_denied++;
		if (ctl_log_ok(ctl, SHOAL_CTL_LOG_ZAP, &sup))
			SHOAL_LOG_W("ctl", "refused a client from %s: %s (%llu more not logged)",
			            addr, text, (unsigned long long)sup);
	}
	if (n >= 2) {
		const char *ver = "1.0";
		zmq_send(ctl->zap, ver, 3, ZMQ_SNDMORE);
		zmq_send(ctl->zap, zmq_msg_data(&f[1]), zmq_msg_size(&f[1]), ZMQ_SNDMORE);
		zmq_send(ctl->zap, status, 3, ZMQ_SNDMORE);
		zmq_send(ctl->zap, text, strlen(text), ZMQ_SNDMORE);
		zmq_send(ctl->zap, "", 0, ZMQ_SNDMORE);
		zmq_send(ctl->zap, "", 0, 0);
	} else {
		/* A REP socket must answer before it can read again. */
		zmq_send(ctl->zap, "", 0, 0);
	}
	for (int i = 0; i < n; i++)
		zmq_msg_close(&f[i]);
}

/* Read one monitor event: frame 1 is u16 event + u32 value, frame 2 the
 * endpoint. Returns the event id, 0 if none. */
static int ctl_monitor_read(void *mon, char *addr, size_t addr_cap, int32_t *value)
{
	zmq_msg_t m;
	zmq_msg_init(&m);
	if (zmq_msg_recv(&m, mon, ZMQ_DONTWAIT) < 0) {
		zmq_msg_close(&m);
		return 0;
	}
	uint16_t ev = 0;
	*value = -1;
	if (zmq_msg_size(&m) >= 2)
		memcpy(&ev, zmq_msg_data(&m), 2);
	if (zmq_msg_size(&m) >= 6)
		memcpy(value, (const uint8_t *)zmq_msg_data(&m) + 2, 4);
	int more = zmq_msg_more(&m);
	zmq_msg_close(&m);
	if (addr_cap)
		addr[0] = '\0';
	if (more) {
		zmq_msg_init(&m);
		if (zmq_msg_recv(&m, mon, 0) >= 0 && addr_cap) {
			size_t l = zmq_msg_size(&m);
			if (l >= addr_cap)
				l = addr_cap - 1;
			memcpy(addr, zmq_msg_data(&m), l);
			addr[l] = '\0';
		}
		zmq_msg_close(&m);
		ctl_discard_rest(mon);
	}
	return ev;
}

static void ctl_monitor_serve(shoal_ctl *ctl)
{
	char addr[128];
	int ev;
	int32_t value;
	while ((ev = ctl_monitor_read(ctl->monitor, addr, sizeof addr, &value)) != 0) {
		if (ev == ZMQ_EVENT_DISCONNECTED && ctl->on_disconnect)
			ctl->on_disconnect(ctl->ud, value);
		if (ev == ZMQ_EVENT_HANDSHAKE_FAILED_PROTOCOL ||
		    ev == ZMQ_EVENT_HANDSHAKE_FAILED_NO_DETAIL) {
			uint64_t sup;
			ctl->stats.handshake_failed++;
			if (ctl_log_ok(ctl, SHOAL_CTL_LOG_HS, &sup))
				SHOAL_LOG_W("ctl",
				            "CURVE handshake failed on %s (a peer with another "
				            "cluster key?) (%llu more not logged)",
				            addr, (unsigned long long)sup);
		}
	}
}

/* ---------------------------------------------------------- the ROUTER side */

shoal_err shoal_ctl_new(const shoal_ctl_config *cfg, shoal_ctl **out, char *why, size_t why_len)
{
	shoal_err e = SHOAL_ERR_IO;
	*out = NULL;
	shoal_ctl *ctl = calloc(1, sizeof *ctl);
	if (!ctl)
		return SHOAL_ERR_NOMEM;
	ctl->on_message = cfg->on_message;
	ctl->on_disconnect = cfg->on_disconnect;
	ctl->ud = cfg->ud;
	ctl->heartbeat_ms = cfg->heartbeat_ms > 0 ? cfg->heartbeat_ms : 1000;
	ctl->zctx = zmq_ctx_new();
	if (!ctl->zctx) {
		shoal_why(why, why_len, SHOAL_ERR_IO, "zmq_ctx_new: %s", zmq_strerror(errno));
		goto fail;
	}
	if (cfg->key) {
		ctl->keyed = 1;
		if (sodium_init() < 0 || shoal_key_derive(cfg->key, &ctl->curve) != SHOAL_OK) {
			shoal_why(why, why_len, SHOAL_ERR_IO, "cannot derive CURVE keys");
			goto fail;
		}
		/* The ZAP handler must be bound before the ROUTER accepts. */
		ctl->zap = zmq_socket(ctl->zctx, ZMQ_REP);
		if (!ctl->zap || ctl_setint(ctl->zap, ZMQ_LINGER, 0) ||
		    zmq_bind(ctl->zap, SHOAL_CTL_ZAP_ENDPOINT)) {
			shoal_why(why, why_len, SHOAL_ERR_IO, "ZAP handler: %s",
			          zmq_strerror(errno));
			goto fail;
		}
	}
	ctl->router = zmq_socket(ctl->zctx, ZMQ_ROUTER);
	int rt_ms = 3 * ctl->heartbeat_ms > SHOAL_CTL_ROUTER_TIMEOUT_MIN_MS
	                ? 3 * ctl->heartbeat_ms
	                : SHOAL_CTL_ROUTER_TIMEOUT_MIN_MS;
	if (!ctl->router ||
	    ctl_common_opts(ctl->router, SHOAL_CTL_ROUTER_SNDHWM, ctl->heartbeat_ms, rt_ms) ||
	    ctl_setint(ctl->router, ZMQ_ROUTER_HANDOVER, 1)) {
		shoal_why(why, why_len, SHOAL_ERR_IO, "ROUTER socket: %s", zmq_strerror(errno));
		goto fail;
	}
	if (ctl->keyed) {
		if (ctl_setint(ctl->router, ZMQ_CURVE_SERVER, 1) ||
		    zmq_setsockopt(ctl->router, ZMQ_CURVE_SECRETKEY, ctl->curve.server_secret,
		                   SHOAL_KEY_BYTES) ||
		    zmq_setsockopt(ctl->router, ZMQ_ZAP_DOMAIN, SHOAL_CTL_ZAP_DOMAIN,
		                   strlen(SHOAL_CTL_ZAP_DOMAIN))) {
			shoal_why(why, why_len, SHOAL_ERR_IO, "CURVE server: %s",
			          zmq_strerror(errno));
			goto fail;
		}
	}
	/* failed handshakes (a peer with another key) and closed connections
	 * (a client that went away) */
	if (zmq_socket_monitor(ctl->router, SHOAL_CTL_MON_ENDPOINT,
	                       ZMQ_EVENT_HANDSHAKE_FAILED_NO_DETAIL |
	                           ZMQ_EVENT_HANDSHAKE_FAILED_PROTOCOL | ZMQ_EVENT_DISCONNECTED) ==
	    0) {
		ctl->monitor = zmq_socket(ctl->zctx, ZMQ_PAIR);
		if (ctl->monitor && zmq_connect(ctl->monitor, SHOAL_CTL_MON_ENDPOINT) != 0) {
			zmq_close(ctl->monitor);
			ctl->monitor = NULL;
		}
	}
	if (zmq_bind(ctl->router, cfg->listen) != 0) {
		e = SHOAL_ERR_IO;
		shoal_why(why, why_len, e, "cannot listen on %s: %s", cfg->listen,
		          zmq_strerror(errno));
		goto fail;
	}
	size_t bl = sizeof ctl->bound;
	if (zmq_getsockopt(ctl->router, ZMQ_LAST_ENDPOINT, ctl->bound, &bl) != 0)
		snprintf(ctl->bound, sizeof ctl->bound, "%s", cfg->listen);
	const char *colon = strrchr(ctl->bound, ':');
	ctl->port = colon ? (uint16_t)atoi(colon + 1) : 0;
	*out = ctl;
	return SHOAL_OK;
fail:
	shoal_ctl_free(ctl);
	return e;
}

void shoal_ctl_free(shoal_ctl *ctl)
{
	if (!ctl)
		return;
	for (size_t i = 0; i < ctl->n_dealers; i++) {
		zmq_close(ctl->dealers[i].sock);
		free(ctl->dealers[i].endpoint);
	}
	free(ctl->dealers);
	if (ctl->router) {
		if (ctl->monitor)
			zmq_socket_monitor(ctl->router, NULL, 0);
		zmq_close(ctl->router);
	}
	if (ctl->monitor)
		zmq_close(ctl->monitor);
	if (ctl->zap)
		zmq_close(ctl->zap);
	if (ctl->zctx)
		zmq_ctx_term(ctl->zctx);
	sodium_memzero(&ctl->curve, sizeof ctl->curve);
	free(ctl);
}

const char *shoal_ctl_bound(const shoal_ctl *ctl)
{
	return ctl->bound;
}

uint16_t shoal_ctl_port(const shoal_ctl *ctl)
{
	return ctl->port;
}

/* Receive one message from the ROUTER (with_route) or a DEALER and hand it
 * to on_message. Returns 0 when nothing was waiting. */
static int ctl_recv_one(shoal_ctl *ctl, void *s, int with_route, const char *endpoint)
{
	shoal_ctl_route route;
	zmq_msg_t m;
	route.len = 0;
	route.endpoint = endpoint;
	route.peer_addr[0] = '\0';
	route.fd = -1;
	zmq_msg_init(&m);
	if (zmq_msg_recv(&m, s, ZMQ_DONTWAIT) < 0) {
		zmq_msg_close(&m);
		return 0;
	}
	const char *pa = zmq_msg_gets(&m, "Peer-Address");
	if (pa)
		snprintf(route.peer_addr, sizeof route.peer_addr, "%s", pa);
	if (with_route) {
		size_t idl = zmq_msg_size(&m);
		int more = zmq_msg_more(&m);
		if (idl == 0 || idl > sizeof route.id || !more) {
			zmq_msg_close(&m);
			ctl_discard_rest(s);
			ctl_drop(ctl, route.peer_addr, "bad routing frame");
			return 1;
		}
		memcpy(route.id, zmq_msg_data(&m), idl);
		route.len = idl;
		zmq_msg_close(&m);
		zmq_msg_init(&m);
		if (zmq_msg_recv(&m, s, ZMQ_DONTWAIT) < 0) {
			zmq_msg_close(&m);
			return 1;
		}
	}
	if (zmq_msg_more(&m)) {
		zmq_msg_close(&m);
		ctl_discard_rest(s);
		ctl_drop(ctl, route.peer_addr, "more than one frame");
		return 1;
	}
	if (zmq_msg_size(&m) == 0) {
		zmq_msg_close(&m);
		ctl_drop(ctl, route.peer_addr, "empty frame");
		return 1;
	}
	ctl->stats.recv++;
	if (with_route) /* the socket it came on, matched by on_disconnect */
		route.fd = zmq_msg_get(&m, ZMQ_SRCFD);
	ctl->on_message(ctl->ud, &route, zmq_msg_data(&m), zmq_msg_size(&m));
	zmq_msg_close(&m);
	return 1;
}

shoal_err shoal_ctl_poll(shoal_ctl *ctl, int timeout_ms, shoal_ctl_fd *fds, int nfds)
{
	if (nfds > SHOAL_CTL_MAX_POLL)
		nfds = SHOAL_CTL_MAX_POLL;
	size_t cap = 3 + (size_t)nfds + ctl->n_dealers;
	zmq_pollitem_t stack_items[3 + SHOAL_CTL_MAX_POLL + 32];
	zmq_pollitem_t *items = stack_items;
	if (cap > sizeof stack_items / sizeof stack_items[0]) {
		items = calloc(cap, sizeof *items);
		if (!items)
			return SHOAL_ERR_NOMEM;
	}
	int n = 0, i_router, i_zap = -1, i_mon = -1, i_fd0, i_dealer0;
	items[n] = (zmq_pollitem_t){.socket = ctl->router, .events = ZMQ_POLLIN};
	i_router = n++;
	if (ctl->zap) {
		items[n] = (zmq_pollitem_t){.socket = ctl->zap, .events = ZMQ_POLLIN};
		i_zap = n++;
	}
	if (ctl->monitor) {
		items[n] = (zmq_pollitem_t){.socket = ctl->monitor, .events = ZMQ_POLLIN};
		i_mon = n++;
	}
	i_fd0 = n;
	for (int i = 0; i < nfds; i++) {
		fds[i].revents = 0;
		items[n++] = (zmq_pollitem_t){.fd = fds[i].fd, .events = fds[i].events};
	}
	i_dealer0 = n;
	size_t nd = ctl->n_dealers;
	for (size_t i = 0; i < nd; i++)
		items[n++] = (zmq_pollitem_t){.socket = ctl->dealers[i].sock, .events = ZMQ_POLLIN};
	int rc = zmq_poll(items, n, timeout_ms);
	if (rc < 0) {
		if (items != stack_items)
			free(items);
		return errno == EINTR ? SHOAL_OK : SHOAL_ERR_IO;
	}
	for (int i = 0; i < nfds; i++)
		fds[i].revents = items[i_fd0 + i].revents;
	if (i_zap >= 0 && (items[i_zap].revents & ZMQ_POLLIN))
		for (int k = 0; k < 64; k++) {
			int ev = 0;
			size_t el = sizeof ev;
			ctl_zap_serve(ctl);
			if (zmq_getsockopt(ctl->zap, ZMQ_EVENTS, &ev, &el) || !(ev & ZMQ_POLLIN))
				break;
		}
	if (i_mon >= 0 && (items[i_mon].revents & ZMQ_POLLIN))
		ctl_monitor_serve(ctl);
	if (items[i_router].revents & ZMQ_POLLIN)
		for (int k = 0; k < SHOAL_CTL_BURST; k++)
			if (!ctl_recv_one(ctl, ctl->router, 1, NULL))
				break;
	/* on_message may have added dealers: only walk the ones we polled.
	 * It never removes any (only shoal_ctl_expire does). */
	for (size_t i = 0; i < nd && i < ctl->n_dealers; i++)
		if (items[i_dealer0 + (int)i].revents & ZMQ_POLLIN)
			for (int k = 0; k < SHOAL_CTL_BURST; k++)
				if (!ctl_recv_one(ctl, ctl->dealers[i].sock, 0,
				                  ctl->dealers[i].endpoint))
					break;
	if (items != stack_items)
		free(items);
	return SHOAL_OK;
}

shoal_err shoal_ctl_reply(shoal_ctl *ctl, const shoal_ctl_route *to, const void *buf, size_t len)
{
	if (to->len == 0) {
		if (!to->endpoint)
			return SHOAL_ERR_INVAL;
		return shoal_ctl_send(ctl, to->endpoint, buf, len);
	}
	void *copy;
	if (shoal_fault_message("ctl", "reply", &buf, &len, &copy)) /* test hook */
		return SHOAL_OK;
	int bad = zmq_send(ctl->router, to->id, to->len, ZMQ_SNDMORE | ZMQ_DONTWAIT) < 0 ||
	          zmq_send(ctl->router, buf, len, ZMQ_DONTWAIT) < 0;
	free(copy);
	if (bad) {
		ctl->stats.dropped++;
		return SHOAL_ERR_BUSY;
	}
	ctl->stats.sent++;
	return SHOAL_OK;
}

/* ------------------------------------------------------------------ DEALERs */

static shoal_ctl_dealer *ctl_dealer_get(shoal_ctl *ctl, const char *endpoint)
{
	for (size_t i = 0; i < ctl->n_dealers; i++)
		if (!strcmp(ctl->dealers[i].endpoint, endpoint))
			return &ctl->dealers[i];
	if (ctl->n_dealers >= SHOAL_CTL_MAX_DEALERS)
		return NULL;
	shoal_ctl_dealer *grown =
	    realloc(ctl->dealers, (ctl->n_dealers + 1) * sizeof *ctl->dealers);
	if (!grown)
		return NULL;
	ctl->dealers = grown;
	void *s = zmq_socket(ctl->zctx, ZMQ_DEALER);
	if (!s)
		return NULL;
	if (ctl_common_opts(s, SHOAL_CTL_SNDHWM, ctl->heartbeat_ms, 3 * ctl->heartbeat_ms) ||
	    ctl_client_opts(s, ctl->keyed ? &ctl->curve : NULL) || zmq_connect(s, endpoint) != 0) {
		SHOAL_LOG_W("ctl", "cannot connect to %s: %s", endpoint, zmq_strerror(errno));
		zmq_close(s);
		return NULL;
	}
	char *ep = strdup(endpoint);
	if (!ep) {
		zmq_close(s);
		return NULL;
	}
	shoal_ctl_dealer *d = &ctl->dealers[ctl->n_dealers++];
	d->endpoint = ep;
	d->sock = s;
	d->last_used_ms = shoal_clock_now_ms();
	return d;
}

shoal_err shoal_ctl_send(shoal_ctl *ctl, const char *endpoint, const void *buf, size_t len)
{
	shoal_ctl_dealer *d = ctl_dealer_get(ctl, endpoint);
	if (!d) {
		ctl->stats.dropped++;
		return SHOAL_ERR_IO;
	}
	d->last_used_ms = shoal_clock_now_ms();
	void *copy;
	if (shoal_fault_message("ctl", "send", &buf, &len, &copy)) /* test hook */
		return SHOAL_OK;
	int bad = zmq_send(d->sock, buf, len, ZMQ_DONTWAIT) < 0;
	free(copy);
	if (bad) {
		ctl->stats.dropped++;
		return SHOAL_ERR_BUSY;
	}
	ctl->stats.sent++;
	return SHOAL_OK;
}

void shoal_ctl_expire(shoal_ctl *ctl, uint64_t now_ms, uint64_t idle_ms)
{
	size_t j = 0;
	for (size_t i = 0; i < ctl->n_dealers; i++) {
		shoal_ctl_dealer *d = &ctl->dealers[i];
		if (now_ms > d->last_used_ms && now_ms - d->last_used_ms > idle_ms) {
			SHOAL_LOG_D("ctl", "closing idle connection to %s", d->endpoint);
			zmq_close(d->sock);
			free(d->endpoint);
			continue;
		}
		ctl->dealers[j++] = *d;
	}
	ctl->n_dealers = j;
}

void shoal_ctl_get_stats(const shoal_ctl *ctl, shoal_ctl_stats *out)
{
	*out = ctl->stats;
	out->dealers = ctl->n_dealers;
}

/* -------------------------------------------------------- blocking client */

#define SHOAL_CTL_CLIENT_MON_ENDPOINT "inproc://shoal-client-monitor"
/* A TCP connect that has no answer after 5 s is given up: a lost SYN is
 * sent again after 1 s and then 2 s more (Linux's initial RTO, doubling),
 * so 5 s covers three tries; a host that is up answers the first within
 * milliseconds on a LAN. Without it a silent host costs the kernel's ~2 min. */
#define SHOAL_CTL_CLIENT_CONNECT_MS 5000
/* The connection events the client turns into errors (see client_event). */
#define SHOAL_CTL_CLIENT_EVENTS                                                                    \
	(ZMQ_EVENT_CONNECT_DELAYED | ZMQ_EVENT_CLOSED | ZMQ_EVENT_CONNECT_RETRIED |                \
	 ZMQ_EVENT_DISCONNECTED | ZMQ_EVENT_HANDSHAKE_SUCCEEDED |                                  \
	 ZMQ_EVENT_HANDSHAKE_FAILED_NO_DETAIL | ZMQ_EVENT_HANDSHAKE_FAILED_PROTOCOL |              \
	 ZMQ_EVENT_HANDSHAKE_FAILED_AUTH)

shoal_err shoal_ctl_client_new(const char *endpoint, const shoal_key_curve *keys,
                               shoal_ctl_client **out, char *why, size_t why_len)
{
	shoal_err e = SHOAL_ERR_IO;
	*out = NULL;
	shoal_ctl_client *c = calloc(1, sizeof *c);
	if (!c)
		return SHOAL_ERR_NOMEM;
	c->keyed = keys != NULL;
	c->zctx = zmq_ctx_new();
	if (!c->zctx)
		goto fail;
	c->sock = zmq_socket(c->zctx, ZMQ_DEALER);
	if (!c->sock || ctl_common_opts(c->sock, SHOAL_CTL_SNDHWM, 0, 0) ||
	    ctl_setint(c->sock, ZMQ_CONNECT_TIMEOUT, SHOAL_CTL_CLIENT_CONNECT_MS) ||
	    ctl_client_opts(c->sock, keys)) {
		shoal_why(why, why_len, e, "client socket: %s", zmq_strerror(errno));
		goto fail;
	}
	if (zmq_socket_monitor(c->sock, SHOAL_CTL_CLIENT_MON_ENDPOINT, SHOAL_CTL_CLIENT_EVENTS) ==
	    0) {
		c->monitor = zmq_socket(c->zctx, ZMQ_PAIR);
		if (c->monitor && zmq_connect(c->monitor, SHOAL_CTL_CLIENT_MON_ENDPOINT) != 0) {
			zmq_close(c->monitor);
			c->monitor = NULL;
		}
	}
	if (zmq_connect(c->sock, endpoint) != 0) {
		e = SHOAL_ERR_INVAL;
		shoal_why(why, why_len, e, "cannot connect to %s: %s", endpoint,
		          zmq_strerror(errno));
		goto fail;
	}
	*out = c;
	return SHOAL_OK;
fail:
	shoal_ctl_client_free(c);
	return e;
}

void shoal_ctl_client_free(shoal_ctl_client *c)
{
	if (!c)
		return;
	if (c->sock) {
		if (c->monitor)
			zmq_socket_monitor(c->sock, NULL, 0);
		zmq_close(c->sock);
	}
	if (c->monitor)
		zmq_close(c->monitor);
	if (c->zctx)
		zmq_ctx_term(c->zctx);
	free(c);
}

shoal_err shoal_ctl_client_send(shoal_ctl_client *c, const void *const *bufs, const size_t *lens,
                                int n)
{
	/* The test hook (net/fault.h) acts on the last part, or drops them all. */
	const void *last = n > 0 ? bufs[n - 1] : NULL;
	size_t last_len = n > 0 ? lens[n - 1] : 0;
	void *copy = NULL;
	if (n > 0 && shoal_fault_message("ctl", "client", &last, &last_len, &copy))
		return SHOAL_OK;
	shoal_err e = SHOAL_OK;
	for (int i = 0; i < n && !e; i++)
		if (zmq_send(c->sock, i + 1 < n ? bufs[i] : last, i + 1 < n ? lens[i] : last_len,
		             i + 1 < n ? ZMQ_SNDMORE : 0) < 0)
			e = SHOAL_ERR_IO;
	free(copy);
	return e;
}

/* One connection event of the DEALER: SHOAL_OK to keep waiting, else the
 * error that ends the wait, in plain words. libzmq reports (4.3, seen on
 * loopback):
 *   refused          CONNECT_DELAYED, CLOSED, CONNECT_RETRIED (where the
 *                    refusal is immediate, CLOSED, CONNECT_RETRIED)
 *   no answer        CONNECT_DELAYED, CLOSED, CONNECT_RETRIED CONNECT_MS later
 *   bad host name    CONNECT_RETRIED alone (no socket was made)
 *   another key      HANDSHAKE_FAILED_NO_DETAIL: the server cannot open
 *                    our HELLO, which is sealed to another server key,
 *                    and closes; so does a keyed server to a plain client
 *   forged client    HANDSHAKE_FAILED_AUTH (ZAP said 400)
 *   lost after use   DISCONNECTED after HANDSHAKE_SUCCEEDED: what the
 *                    peer still had for us is gone with the connection
 *                    (the ROUTER routes by connection, see ROUTER_TIMEOUT)
 * Every one but the last repeats at each reconnect; the first ends it. */
static shoal_err ctl_client_event(shoal_ctl_client *c, int ev, int32_t value, char *why,
                                  size_t why_len)
{
	uint64_t now = shoal_clock_now_ms();
	switch (ev) {
	case ZMQ_EVENT_CONNECT_DELAYED:
		c->delayed_ms = now;
		c->opened = 1;
		return SHOAL_OK;
	case ZMQ_EVENT_CLOSED:
		c->opened = 1;
		return SHOAL_OK;
	case ZMQ_EVENT_CONNECT_RETRIED:
		if (c->handshaken)
			return SHOAL_OK; /* DISCONNECTED said it */
		if (!c->opened)
			return shoal_why(why, why_len, SHOAL_ERR_NOTFOUND,
			                 "cannot resolve the host name");
		if (c->delayed_ms && now - c->delayed_ms + 100 >= SHOAL_CTL_CLIENT_CONNECT_MS)
			return shoal_why(
			    why, why_len, SHOAL_ERR_TIMEOUT,
			    "no answer to connecting in %d s (host down or unreachable?)",
			    SHOAL_CTL_CLIENT_CONNECT_MS / 1000);
		return shoal_why(why, why_len, SHOAL_ERR_IO,
		                 "nothing is listening there (connection refused)");
	case ZMQ_EVENT_HANDSHAKE_SUCCEEDED:
		c->handshaken = 1;
		return SHOAL_OK;
	case ZMQ_EVENT_HANDSHAKE_FAILED_AUTH:
		return shoal_why(why, why_len, SHOAL_ERR_AUTH,
		                 "the peer refused our key (ZAP status %u: not this cluster's key)",
		                 (unsigned)value);
	case ZMQ_EVENT_HANDSHAKE_FAILED_NO_DETAIL:
	case ZMQ_EVENT_HANDSHAKE_FAILED_PROTOCOL:
		if (c->keyed)
			return shoal_why(
			    why, why_len, SHOAL_ERR_AUTH,
			    "the peer refused our key (it closed the connection during "
			    "the CURVE handshake: another cluster key, or an --insecure "
			    "node?)");
		return shoal_why(why, why_len, SHOAL_ERR_AUTH,
		                 "the peer refused us without a key (it closed the connection "
		                 "during the handshake: it needs --key with its cluster key)");
	case ZMQ_EVENT_DISCONNECTED:
		if (!c->handshaken)
			return SHOAL_OK; /* a handshake failure said it */
		return shoal_why(why, why_len, SHOAL_ERR_CLOSED,
		                 "the peer closed the connection (did the node stop?)");
	default:
		return SHOAL_OK;
	}
}

shoal_err shoal_ctl_client_recv(shoal_ctl_client *c, int timeout_ms, uint8_t **buf, size_t *len,
                                char *why, size_t why_len)
{
	*buf = NULL;
	*len = 0;
	uint64_t deadline = shoal_clock_now_ms() + (uint64_t)(timeout_ms > 0 ? timeout_ms : 0);
	for (;;) {
		zmq_pollitem_t it[2] = {{.socket = c->sock, .events = ZMQ_POLLIN},
		                        {.socket = c->monitor, .events = ZMQ_POLLIN}};
		uint64_t now = shoal_clock_now_ms();
		if (now >= deadline)
			return shoal_why(why, why_len, SHOAL_ERR_TIMEOUT, "no answer in %d ms",
			                 timeout_ms);
		int rc = zmq_poll(it, c->monitor ? 2 : 1, (long)(deadline - now));
		if (rc < 0 && errno != EINTR)
			return shoal_why(why, why_len, SHOAL_ERR_IO, "poll: %s",
			                 zmq_strerror(errno));
		/* messages first: what arrived before a loss is delivered */
		if (it[0].revents & ZMQ_POLLIN) {
			zmq_msg_t m;
			zmq_msg_init(&m);
			if (zmq_msg_recv(&m, c->sock, ZMQ_DONTWAIT) < 0) {
				zmq_msg_close(&m);
				continue;
			}
			int more = zmq_msg_more(&m);
			size_t l = zmq_msg_size(&m);
			uint8_t *b = malloc(l ? l : 1);
			if (!b) {
				zmq_msg_close(&m);
				return SHOAL_ERR_NOMEM;
			}
			memcpy(b, zmq_msg_data(&m), l);
			zmq_msg_close(&m);
			if (more)
				ctl_discard_rest(c->sock);
			*buf = b;
			*len = l;
			return SHOAL_OK;
		}
		if (c->monitor && (it[1].revents & ZMQ_POLLIN)) {
			char addr[128];
			int32_t value;
			int ev = ctl_monitor_read(c->monitor, addr, sizeof addr, &value);
			shoal_err e = ctl_client_event(c, ev, value, why, why_len);
			if (e != SHOAL_OK)
				return e;
		}
	}
}

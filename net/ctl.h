/*
 * net/ctl.h: the control-plane transport: ZeroMQ sockets with CURVE.
 *
 * Part: net/. Each peer binds one ROUTER (it receives everything there)
 * and opens one DEALER per remote control endpoint it sends to. With a
 * cluster key, every socket uses CURVE with the keys of net/key.h and a
 * ZAP handler, served from shoal_ctl_poll, admits only clients that present
 * the derived client public key, i.e. that hold the cluster key. Without a
 * key (--insecure) the NULL mechanism is used and anybody may talk.
 *
 * Messages are single frames (msgpack bytes; the codec is net/wire.h).
 * A reply to a message that came through the ROUTER goes back through the
 * ROUTER on the same connection (shoal_ctl_reply); this is how `shoal
 * status` and the link probes get answers.
 *
 * Also here: a small blocking client (shoal_ctl_client_*) for the CLI and
 * tests, which talks to one node's ROUTER through its own ZeroMQ context.
 */
#ifndef SHOAL_NET_CTL_H
#define SHOAL_NET_CTL_H

#include <stddef.h>
#include <stdint.h>

#include "base/err.h"
#include "net/key.h"

/* The documented default control port: `--peer HOST` means HOST:47470.
 * (Unassigned by IANA; 4747x keeps shoal's ports together.) */
#define SHOAL_CTL_DEFAULT_PORT 47470
#define SHOAL_CTL_ROUTE_MAX    256 /* a ZeroMQ routing id is at most 255 bytes */
/* Largest message a ROUTER accepts: a full-state push-pull of 64 peers of
 * about 12 KiB of record each is ~800 KiB; a bandwidth probe is 64 KiB.
 * 4 MiB leaves room and bounds what a client can make us buffer. */
#define SHOAL_CTL_MAX_MSG (4u << 20)

typedef struct shoal_ctl shoal_ctl;

/* Where a message came from: the ROUTER routing id of the sender's
 * connection (len > 0), or a DEALER of ours (len == 0, endpoint set). */
typedef struct shoal_ctl_route {
	uint8_t id[SHOAL_CTL_ROUTE_MAX];
	size_t len;
	const char *endpoint; /* for DEALER replies: borrowed, valid during the callback */
	char peer_addr[64];   /* the remote IP as ZeroMQ reports it ("" if unknown) */
	int fd; /* the ROUTER connection's socket (-1 if unknown): on_disconnect's key */
} shoal_ctl_route;

typedef struct shoal_ctl_config {
	/* ZeroMQ endpoint to bind the ROUTER to, e.g. "tcp://0.0.0.0:47470" or
	 * "tcp://127.0.0.1:*" (ephemeral). Required. */
	const char *listen;
	/* Cluster key, or NULL for the insecure NULL mechanism. Borrowed. */
	const shoal_key *key;
	/* ZMTP heartbeat interval in ms (0 = 1000); a DEALER's timeout is 3x
	 * that: two lost heartbeats are tolerated, the third closes the
	 * connection. The ROUTER's is at least 10 s (ctl.c says why). */
	int heartbeat_ms;
	/* Called for each received message. Required. buf and route are
	 * borrowed for the call only. May call shoal_ctl_send/_reply. */
	void (*on_message)(void *ud, const shoal_ctl_route *from, const uint8_t *buf, size_t len);
	/* Optional: the ROUTER connection whose socket was `fd` (a route's fd)
	 * closed: its client went away (killed, or its connection broke).
	 * The number may be reused by a later connection. */
	void (*on_disconnect)(void *ud, int fd);
	void *ud;
} shoal_ctl_config;

/* Bind the ROUTER (and the ZAP handler when keyed). *out is owned by the
 * caller (shoal_ctl_free). */
shoal_err shoal_ctl_new(const shoal_ctl_config *cfg, shoal_ctl **out, char *why, size_t why_len);
/* Close every socket (linger 0) and the context. NULL is a no-op. */
void shoal_ctl_free(shoal_ctl *ctl);

/* The endpoint actually bound, e.g. "tcp://127.0.0.1:41234". */
const char *shoal_ctl_bound(const shoal_ctl *ctl);
uint16_t shoal_ctl_port(const shoal_ctl *ctl);

/* Queue buf[len] to the ROUTER at `endpoint` through our DEALER for it
 * (created on first use). Never blocks: SHOAL_ERR_BUSY when that DEALER's
 * queue is full (the message is dropped). buf is copied. */
shoal_err shoal_ctl_send(shoal_ctl *ctl, const char *endpoint, const void *buf, size_t len);
/* Answer the sender of a received message (see shoal_ctl_route). */
shoal_err shoal_ctl_reply(shoal_ctl *ctl, const shoal_ctl_route *to, const void *buf, size_t len);

/* An extra descriptor for shoal_ctl_poll (discovery sockets, listeners). */
typedef struct shoal_ctl_fd {
	int fd;
	short events;  /* POLLIN */
	short revents; /* out */
} shoal_ctl_fd;

/* Wait up to timeout_ms for traffic on our sockets or on fds[nfds], serve
 * pending ZAP requests, deliver up to a bounded number of messages to
 * on_message, and fill fds[i].revents. Returns SHOAL_OK also on EINTR (the
 * caller checks its stop flag). */
shoal_err shoal_ctl_poll(shoal_ctl *ctl, int timeout_ms, shoal_ctl_fd *fds, int nfds);

/* Close DEALERs idle for more than idle_ms (monotonic ms clock). */
void shoal_ctl_expire(shoal_ctl *ctl, uint64_t now_ms, uint64_t idle_ms);

typedef struct shoal_ctl_stats {
	uint64_t zap_allowed, zap_denied; /* CURVE clients admitted / refused by key */
	uint64_t handshake_failed;        /* handshakes that failed before ZAP (wrong server key) */
	uint64_t dropped;                 /* malformed frames, full queues */
	uint64_t recv, sent;
	uint64_t dealers; /* open now */
} shoal_ctl_stats;
void shoal_ctl_get_stats(const shoal_ctl *ctl, shoal_ctl_stats *out);

/* ---- blocking client (CLI, tests) ---- */

typedef struct shoal_ctl_client shoal_ctl_client;

/* Connect a DEALER to `endpoint`. keys: the CURVE keys to present
 * (server_public, client_public, client_secret are used), or NULL for the
 * NULL mechanism. Tests pass deliberately wrong keys here. */
shoal_err shoal_ctl_client_new(const char *endpoint, const shoal_key_curve *keys,
                               shoal_ctl_client **out, char *why, size_t why_len);
void shoal_ctl_client_free(shoal_ctl_client *c);
/* Send n frames as one message (a well-formed request is one frame). */
shoal_err shoal_ctl_client_send(shoal_ctl_client *c, const void *const *bufs, const size_t *lens,
                                int n);
/* Wait up to timeout_ms for one message; *buf is malloc'd, owned by the
 * caller. Ends early, with a reason in plain words, when the connection
 * cannot serve: SHOAL_ERR_AUTH the server refused our credentials during
 * the handshake, SHOAL_ERR_IO nothing listens there (connection refused),
 * SHOAL_ERR_NOTFOUND the host name does not resolve, SHOAL_ERR_CLOSED the
 * server closed an established connection (what it still owed us is
 * lost). SHOAL_ERR_TIMEOUT when nothing came, or a TCP connect had no
 * answer within 5 s. */
shoal_err shoal_ctl_client_recv(shoal_ctl_client *c, int timeout_ms, uint8_t **buf, size_t *len,
                                char *why, size_t why_len);

#endif

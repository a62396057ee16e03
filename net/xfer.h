/*
 * net/xfer.h: the data plane: links between two peers that move frames
 * (hidden states, tokens, expert requests and replies) over TCP, upgraded
 * to RDMA when both ends offer it and the queue pair comes up.
 *
 * Part: net/ (DESIGN.md section 6). A link starts as a TCP connection. The
 * connector presents an admission token (issued over the authenticated
 * control plane) in HELLO; the acceptor's callback judges it. Until then a
 * connection costs the acceptor an fd and 320 bytes, and the listener
 * reads the HELLOs of all its connections at once, so connections that
 * know no key (idle, slow, garbage) cannot delay one that does. Both HELLOs
 * carry capabilities; when both offer RDMA the queue-pair details travel
 * in RDMA_QP frames over the same TCP connection, a PROBE round trip runs
 * over the queue pair, and only then does the link switch. Whatever the
 * transport, the upper layer uses shoal_xfer_link_send / _recv, and
 * shoal_xfer_link_status says which transport and why.
 *
 * A link is used by one thread at a time. Nothing allocates per frame:
 * buffers are sized from max_frame at connect time and reused.
 */
#ifndef SHOAL_NET_XFER_H
#define SHOAL_NET_XFER_H

#include <poll.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/uio.h>

#include "base/err.h"
#include "net/verbs.h"
#include "net/xfer_frame.h"

/* 1 MiB: 64 rows x 4096 f32 (1 MiB) would not fit with its header, but the
 * decode case (a few rows x 4096-8192 f32, 16-32 KiB each) does with room
 * for a 16-row batch of 8192 f32 (512 KiB). Prefill batches larger than
 * max_frame are split by the caller into several frames. */
#define SHOAL_XFER_MAX_FRAME_DEFAULT (1u << 20)
/* 256 rows of tags = 4 KiB of header, more than any decode batch. */
#define SHOAL_XFER_MAX_ROWS_DEFAULT 256u
/* 256 rows x top-8 experts = 2048 routes (24 KiB). */
#define SHOAL_XFER_MAX_ROUTES_DEFAULT 2048u
/* 16 receive slots (+ 16/4 = 4 send slots) x 1 MiB = 20 MiB registered per
 * link; 16 - 2 = 14 frames in flight (one slot is held by the frame being
 * read, one kept for credit returns) cover a 14-deep burst of decode
 * steps without waiting for credits. Links that move only decode-sized
 * frames can lower max_frame to 64 KiB: 1.25 MiB per link. */
#define SHOAL_XFER_RDMA_SLOTS_DEFAULT 16u
/* Handshake: 10x a cross-subnet RTT budget of 200 ms; a LAN does it in < 5 ms. */
#define SHOAL_XFER_HANDSHAKE_MS_DEFAULT 2000
/* Connections a listener holds before their HELLO is whole. A peer's HELLO
 * arrives one RTT after its connection (< 5 ms on a LAN), so it is pushed
 * out (the oldest goes when the set is full) only by 64 newer connections
 * within that RTT; 64 x 320 bytes. Links a peer needs: its stage
 * neighbours and expert users, a handful. */
#define SHOAL_XFER_PENDING_MAX 64

/* The operator's RDMA choices (shoal node --rdma-*). All zero: device,
 * port and GID by the link's interface (net/rdma_select.h), hop limit 64,
 * traffic class 0, service level 0. */
typedef struct shoal_xfer_rdma_opts {
	const char *device; /* --rdma-device: this device for every link */
	int gid_plus1;      /* --rdma-gid N as N + 1; 0: the GID by the rule */
	uint8_t hop_limit;  /* --rdma-hop-limit: routed RoCE v2 (0: 64) */
	uint8_t tclass;     /* --rdma-tclass: DSCP << 2, the fabric's lossless class */
	uint8_t sl;         /* --rdma-sl: service level */
} shoal_xfer_rdma_opts;

/* The RDMA devices a node's links share: one context, protection domain,
 * registered pool and completion queue per device (net/xfer_rdma.c).
 * Thread-safe. _free drops the creator's reference: the devices stay
 * until their last link is freed. */
typedef struct shoal_xfer_rdma_hub shoal_xfer_rdma_hub;
shoal_xfer_rdma_hub *shoal_xfer_rdma_hub_new(void); /* NULL: no memory */
void shoal_xfer_rdma_hub_free(shoal_xfer_rdma_hub *h);

typedef struct shoal_xfer_config {
	uint32_t max_frame;                 /* largest frame received and sent, header included */
	uint32_t max_rows;                  /* row tags per frame */
	uint32_t max_routes;                /* expert routes per frame */
	int handshake_ms;                   /* bound on HELLO + RDMA negotiation */
	uint8_t self_id[SHOAL_PEER_ID_LEN]; /* our peer id, sent in HELLO */
	/* RDMA offer: verbs NULL = not offered. verbs_ctx is passed to
	 * verbs->netif, ->devices and ->open; rdma the operator's choices;
	 * rdma_hub the shared devices (NULL: the link opens its own). rdma_slots
	 * is the receive ring (>= 2). spin_us: poll the CQ this long before
	 * blocking on the completion channel (0: block at once; peers share
	 * cores). */
	const shoal_verbs_ops *verbs;
	void *verbs_ctx;
	shoal_xfer_rdma_opts rdma;
	shoal_xfer_rdma_hub *rdma_hub;
	uint32_t rdma_slots;
	uint32_t spin_us;
} shoal_xfer_config;

/* Defaults above; verbs = shoal_verbs_ibv() (NULL without RDMA support). */
void shoal_xfer_config_default(shoal_xfer_config *cfg);

/* The acceptor's question "is `token` valid for peer `peer` (connecting
 * from `addr`, e.g. "127.0.0.1:40512")?". Return 1 to admit, 0 to refuse.
 * Called on the accepting thread; the buffers are borrowed for the call. */
typedef int (*shoal_xfer_admit_fn)(void *ctx, const uint8_t peer[SHOAL_PEER_ID_LEN],
                                   const char *addr, const uint8_t *token, size_t token_len);

typedef struct shoal_xfer_listener shoal_xfer_listener;
typedef struct shoal_xfer_link shoal_xfer_link;

/* Listen on host:port (port 0: pick one; see _port). cfg is copied (its
 * rdma.device string, verbs_ctx and rdma_hub are borrowed for the
 * listener's life).
 * admit must not be NULL; ctx is borrowed for the listener's life. */
shoal_err shoal_xfer_listener_new(const shoal_xfer_config *cfg, const char *host, uint16_t port,
                                  shoal_xfer_admit_fn admit, void *ctx, shoal_xfer_listener **out,
                                  char *why, size_t why_len);
void shoal_xfer_listener_free(shoal_xfer_listener *l);
uint16_t shoal_xfer_listener_port(const shoal_xfer_listener *l);
/* Readable: a new connection waits. Connections in handshake are read only
 * inside _accept: an event loop must call it at least every handshake_ms. */
int shoal_xfer_listener_fd(const shoal_xfer_listener *l);

/* Wait up to timeout_ms (-1: forever) for the first connection whose
 * HELLO is admitted, or for one connection to be dropped. Meanwhile new
 * connections join the pending set (at most SHOAL_XFER_PENDING_MAX; when
 * full, the oldest is dropped with an ERROR frame, SHOAL_ERR_BUSY) and the
 * bytes of all pending ones are read as they come, never blocking on one.
 * Each connection's handshake is bounded by cfg.handshake_ms from its
 * accept: a HELLO not whole by then is dropped (SHOAL_ERR_TIMEOUT), one
 * that is no HELLO (SHOAL_ERR_PROTO) or whose peer closed
 * (SHOAL_ERR_CLOSED) at once; a refused token (SHOAL_ERR_AUTH) too.
 * A drop: an ERROR frame to the peer (not when it closed), a log line,
 * the fd closed, the code and reason here; the next call goes on with the
 * rest. An admitted HELLO gets HELLO_ACK and the RDMA negotiation on this
 * thread (only key holders get that far). The new link is the caller's
 * (free with shoal_xfer_link_free); pending connections are the
 * listener's (closed by _free). */
shoal_err shoal_xfer_listener_accept(shoal_xfer_listener *l, int timeout_ms, shoal_xfer_link **out,
                                     char *why, size_t why_len);

/* Connect to host:port, present token[token_len] (copied; <= 64 bytes),
 * and run the connector's handshake. Blocks up to cfg.handshake_ms plus
 * the TCP connect. SHOAL_ERR_AUTH when the acceptor refused the token;
 * SHOAL_ERR_CLOSED when nothing listens there (connection refused). */
shoal_err shoal_xfer_link_connect(const shoal_xfer_config *cfg, const char *host, uint16_t port,
                                  const uint8_t *token, size_t token_len, shoal_xfer_link **out,
                                  char *why, size_t why_len);

void shoal_xfer_link_free(shoal_xfer_link *k); /* NULL-safe; closes both transports */

/* A deliberate close: an ERROR frame with code SHOAL_ERR_CLOSED and the
 * reason to the peer (best effort, bounded), then the link is closed. The
 * peer tells it from a crash: a link that breaks without it is evidence
 * that the peer died. NULL-safe; free the link after. */
void shoal_xfer_link_bye(shoal_xfer_link *k, const char *reason);
/* 0 once the link is closed (a failed send or receive, a bye). */
int shoal_xfer_link_is_open(const shoal_xfer_link *k);
/* 1 when the peer said goodbye (an ERROR frame with SHOAL_ERR_CLOSED was
 * received, or found waiting when a send failed): the link's end was
 * deliberate, not evidence of a death. NULL-safe. */
int shoal_xfer_link_peer_bye(const shoal_xfer_link *k);

/* The plan the link's data frames belong to: sent in every data frame and
 * required of every received one (invariant 9). Until set, data frames
 * are refused both ways with SHOAL_ERR_STATE / dropped as MISMATCH. */
void shoal_xfer_link_set_plan(shoal_xfer_link *k, const uint8_t digest[SHOAL_DIGEST_BYTES],
                              uint64_t epoch);

/* Send one frame: hdr's kind, dtype, layers, dim, rows, routes/n_aux (the
 * link fills digest, epoch for data kinds, seq and payload_len) and the
 * payload gathered from iov[iovcnt] (read during the call only; no copy on
 * TCP, one copy into registered memory on RDMA). Blocks up to timeout_ms
 * (-1: forever) for socket space or RDMA credits.
 *   SHOAL_ERR_RANGE/INVAL: the frame is not valid or too large; nothing sent.
 *   SHOAL_ERR_TIMEOUT: nothing was sent, the link is intact; or (after a
 *     partial write) the link is closed, as the reason says.
 *   SHOAL_ERR_CLOSED/IO: the link is closed (see _status). */
shoal_err shoal_xfer_link_send(shoal_xfer_link *k, const shoal_xfer_hdr *hdr,
                               const struct iovec *iov, int iovcnt, int timeout_ms, char *why,
                               size_t why_len);

/* A received frame; everything points into the link's buffers and stays
 * valid until the next _recv or _free on this link. */
typedef struct shoal_xfer_frame {
	shoal_xfer_hdr hdr;
	const uint8_t *payload; /* (hdr.payload_len) bytes, 16-byte aligned */
} shoal_xfer_frame;

/* Wait up to timeout_ms (-1: forever) for the next frame. Never busy-polls.
 *   SHOAL_OK: *f holds a frame (ERROR frames from the peer included).
 *   SHOAL_ERR_TIMEOUT: nothing yet; a partly received frame is kept.
 *   SHOAL_ERR_FORMAT: a well-delimited frame broke invariants 3-8; it was
 *     dropped, the link stays up (the next frame can be read).
 *   SHOAL_ERR_MISMATCH: a data frame of another plan (digest or epoch); it
 *     was dropped, the link stays up (normal around a re-plan).
 *   SHOAL_ERR_PROTO: framing broke (magic, version, length, seq): the link
 *     sends an ERROR frame, logs, and closes.
 *   SHOAL_ERR_CLOSED/IO: the peer went away / the transport failed. */
shoal_err shoal_xfer_link_recv(shoal_xfer_link *k, int timeout_ms, shoal_xfer_frame *f, char *why,
                               size_t why_len);

/* The fds an event loop polls for POLLIN before calling _recv; returns
 * how many (at most 3). TCP: the socket. RDMA: the completion channel, a
 * self-pipe that stays readable while frames wait that a send took off
 * the completion queue, and the TCP socket. Readable means "call _recv
 * with timeout 0 until SHOAL_ERR_TIMEOUT"; that drain also re-arms them. */
int shoal_xfer_link_pollfds(const shoal_xfer_link *k, struct pollfd *pf, int cap);

/* "tcp" or "rdma". */
const char *shoal_xfer_link_transport(const shoal_xfer_link *k);
/* One line for `shoal status`: "rdma (mlx5_0 port 1 gid 3 to rdma_en2
 * port 1 gid 1)", "tcp (peer offers no rdma)", "tcp (no RDMA device on
 * en5 (devices: ...))", "tcp (no rdma device: ibv_get_device_list: ...)",
 * or "closed (why)". Borrowed from the link. */
const char *shoal_xfer_link_status(const shoal_xfer_link *k);
void shoal_xfer_link_peer(const shoal_xfer_link *k, uint8_t peer[SHOAL_PEER_ID_LEN]);
uint32_t shoal_xfer_link_max_send(const shoal_xfer_link *k); /* min of both max_frame */

/* Counters, exact: a frame is counted once it was wholly handed to the
 * transport (sent) or delivered by _recv (received); bytes are whole
 * frames, header included. Handshake frames count under their kinds;
 * CREDIT frames are the RDMA transport's own. */
typedef struct shoal_xfer_metrics {
	uint64_t frames_sent[SHOAL_XFER_KIND__COUNT];
	uint64_t bytes_sent[SHOAL_XFER_KIND__COUNT];
	uint64_t frames_recv[SHOAL_XFER_KIND__COUNT];
	uint64_t bytes_recv[SHOAL_XFER_KIND__COUNT];
	uint64_t rejected;     /* frames dropped as FORMAT or MISMATCH */
	uint64_t credit_waits; /* RDMA sends that had to wait for a credit */
	/* RDMA sends posted, of them signaled (a completion asked) and
	 * inline, and the queue pair's inline bytes (0: none) */
	uint64_t rdma_sends, rdma_signaled, rdma_inline;
	uint32_t rdma_max_inline;
} shoal_xfer_metrics;

void shoal_xfer_link_metrics(const shoal_xfer_link *k, shoal_xfer_metrics *m);

#endif

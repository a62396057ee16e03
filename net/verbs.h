/*
 * net/verbs.h: the thin, verbs-shaped interface the RDMA transport uses.
 *
 * Part: net/ (data plane). One const ops table per provider: the real one
 * over libibverbs (verbs_ibv.c, built only with SHOAL_HAVE_RDMA; rdma-core
 * on Linux, Apple's RDMA over Thunderbolt on macOS 26.2+) and the in-process
 * double of the tests (tests/helpers/verbs_double.c). Handles are the
 * provider's own objects behind void pointers. Each member says whether it
 * may block and who owns what; none may be NULL. The transport serialises
 * its calls per device (one mutex per device, net/xfer_rdma.c).
 */
#ifndef SHOAL_NET_VERBS_H
#define SHOAL_NET_VERBS_H

#include <stddef.h>
#include <stdint.h>

#include "base/err.h"
#include "net/rdma_select.h"

/* The port, GID and path a link uses: what the peer needs to address us
 * and what INIT -> RTR -> RTS set. */
typedef struct shoal_verbs_port {
	char name[64];   /* device name, e.g. "mlx5_0", "rdma_en3" */
	uint8_t port;    /* port number used (1-based, as in verbs) */
	uint16_t lid;    /* InfiniBand LID; 0 on RoCE / Thunderbolt */
	uint8_t gid[16]; /* GID at gid_index */
	int gid_index;
	uint32_t mtu; /* active MTU in bytes (256..4096) */
	/* the GRH of routed RoCE v2 and the RC retry policy */
	uint8_t hop_limit;     /* 1 stays on the subnet; 64 crosses routers */
	uint8_t traffic_class; /* DSCP << 2 | ECN: the lossless class of a PFC fabric */
	uint8_t sl;            /* service level (InfiniBand; RoCE maps it to a priority) */
	uint8_t rnr_retry;     /* 0..6; 7 ("forever") is never used */
} shoal_verbs_port;

/* What INIT -> RTR needs about the remote queue pair. */
typedef struct shoal_verbs_remote {
	uint32_t qpn, psn;
	uint16_t lid;
	uint8_t gid[16];
	uint32_t mtu; /* path MTU: min of both ends */
} shoal_verbs_remote;

enum { SHOAL_VERBS_WC_SEND = 0, SHOAL_VERBS_WC_RECV = 1 };

/* post_send flags */
enum {
	SHOAL_VERBS_SEND_SIGNALED = 1, /* a completion when done (errors always complete) */
	SHOAL_VERBS_SEND_INLINE = 2,   /* bytes copied at post: len <= the QP's max_inline */
};

/* One work completion. status 0 is success; others are the provider's
 * codes, named by wc_status_str. */
typedef struct shoal_verbs_wc {
	uint64_t wr_id;
	int status;
	int opcode; /* SHOAL_VERBS_WC_SEND or _RECV; undefined when status != 0 */
	uint32_t byte_len;
} shoal_verbs_wc;

/* The OS address of a link: its interface and the local address. */
typedef struct shoal_verbs_netif {
	char ifname[32];  /* "en3", "ens1f0" */
	uint8_t addr[16]; /* IPv6, or IPv4-mapped ::ffff:a.b.c.d */
} shoal_verbs_netif;

typedef struct shoal_verbs_ops {
	const char *name;
	/* The interface and local address of connected socket fd (getsockname
	 * + getifaddrs). ctx is the provider's (the config's verbs_ctx). */
	shoal_err (*netif)(void *ctx, int fd, shoal_verbs_netif *out, char *why, size_t why_len);
	/* Every port of every device, with its GID table (type and netdev of
	 * each entry where the OS says), into ports[cap]; *n how many. May
	 * block briefly (opens each device). On failure, why says which call
	 * failed, e.g. "ibv_get_device_list: Function not implemented". */
	shoal_err (*devices)(void *ctx, shoal_rdma_port_desc *ports, size_t cap, size_t *n,
	                     char *why, size_t why_len);
	/* Open device `name` (from devices). */
	shoal_err (*open)(void *ctx, const char *name, void **dev, char *why, size_t why_len);
	void (*close)(void *dev); /* NULL-safe; after every child object is gone */
	shoal_err (*alloc_pd)(void *dev, void **pd, char *why, size_t why_len);
	void (*dealloc_pd)(void *pd);
	/* Register [addr, addr + len) for local write (receives). The memory
	 * stays the caller's and must outlive the MR. */
	shoal_err (*reg_mr)(void *pd, void *addr, size_t len, void **mr, char *why, size_t why_len);
	void (*dereg_mr)(void *mr);
	/* A CQ of `depth` entries with a completion channel; *fd is the
	 * channel's non-blocking fd (owned by the CQ) that becomes readable
	 * after arm_cq when a completion arrives. */
	shoal_err (*create_cq)(void *dev, int depth, void **cq, int *fd, char *why, size_t why_len);
	void (*destroy_cq)(void *cq);
	/* An RC queue pair on pd whose send and receive completions go to cq.
	 * *max_inline: in, the inline bytes asked for; out, what the QP
	 * grants (0: none). A device that cannot grant the ask fails. */
	shoal_err (*create_qp)(void *pd, void *cq, uint32_t max_send, uint32_t max_recv,
	                       uint32_t *max_inline, void **qp, uint32_t *qpn, char *why,
	                       size_t why_len);
	void (*destroy_qp)(void *qp); /* its completions still in the CQ go too */
	/* RESET -> INIT (port, pkey 0, access: local write), INIT -> RTR
	 * (path MTU, dest QPN, RQ PSN, LID or GID with port's hop limit,
	 * traffic class and SL, min_rnr_timer), RTR -> RTS (SQ PSN, timeout,
	 * retry_cnt, port's rnr_retry). Non-blocking. */
	shoal_err (*qp_init)(void *qp, const shoal_verbs_port *port, char *why, size_t why_len);
	shoal_err (*qp_rtr)(void *qp, const shoal_verbs_port *port, const shoal_verbs_remote *r,
	                    char *why, size_t why_len);
	shoal_err (*qp_rts)(void *qp, const shoal_verbs_port *port, uint32_t psn, char *why,
	                    size_t why_len);
	/* Post one receive / one send of [addr, addr + len) inside mr (flags:
	 * SHOAL_VERBS_SEND_*). Non-blocking; the buffer is the NIC's until its
	 * completion (or a later signaled one), except an inline send's. */
	shoal_err (*post_recv)(void *qp, void *mr, uint64_t wr_id, void *addr, uint32_t len,
	                       char *why, size_t why_len);
	shoal_err (*post_send)(void *qp, void *mr, uint64_t wr_id, const void *addr, uint32_t len,
	                       int flags, char *why, size_t why_len);
	/* Up to n completions into wc; returns how many (0: none), < 0 on a
	 * CQ failure. Non-blocking. */
	int (*poll_cq)(void *cq, shoal_verbs_wc *wc, int n);
	/* Ask for one event on the channel fd at the next completion. */
	shoal_err (*arm_cq)(void *cq, char *why, size_t why_len);
	/* After the channel fd polled readable: consume and acknowledge the
	 * event (ibv_get_cq_event + ibv_ack_cq_events). Non-blocking. */
	shoal_err (*take_event)(void *cq, char *why, size_t why_len);
	const char *(*wc_status_str)(int status); /* static string, never NULL */
} shoal_verbs_ops;

/* The libibverbs provider, or NULL when built without SHOAL_HAVE_RDMA. */
const shoal_verbs_ops *shoal_verbs_ibv(void);

#endif

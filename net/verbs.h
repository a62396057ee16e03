/*
 * net/verbs.h: the thin, verbs-shaped interface the RDMA transport uses.
 *
 * Part: net/ (data plane). One const ops table per provider: the real one
 * over libibverbs (verbs_ibv.c, built only with SHOAL_HAVE_RDMA; rdma-core
 * on Linux, Apple's RDMA over Thunderbolt on macOS 26.2+) and the in-process
 * double of the tests (tests/helpers/verbs_double.c). Handles are the provider's own
 * objects behind void pointers. Each member says whether it may block and
 * who owns what; none may be NULL. A provider is used by one thread per
 * device at a time; the transport never calls it concurrently on one QP.
 */
#ifndef SHOAL_NET_VERBS_H
#define SHOAL_NET_VERBS_H

#include <stddef.h>
#include <stdint.h>

#include "base/err.h"

/* The port of an opened device: what the peer needs to address us. */
typedef struct shoal_verbs_port {
	char name[64];   /* device name, e.g. "mlx5_0", "rdma_en3" */
	uint8_t port;    /* port number used (1-based, as in verbs) */
	uint16_t lid;    /* InfiniBand LID; 0 on RoCE / Thunderbolt */
	uint8_t gid[16]; /* GID at gid_index; all zero when unused */
	int gid_index;
	uint32_t mtu; /* active MTU in bytes (256..4096) */
} shoal_verbs_port;

/* What INIT -> RTR needs about the remote queue pair. */
typedef struct shoal_verbs_remote {
	uint32_t qpn, psn;
	uint16_t lid;
	uint8_t gid[16];
	uint32_t mtu; /* path MTU: min of both ends */
} shoal_verbs_remote;

enum { SHOAL_VERBS_WC_SEND = 0, SHOAL_VERBS_WC_RECV = 1 };

/* One work completion. status 0 is success; others are the provider's
 * codes, named by wc_status_str. */
typedef struct shoal_verbs_wc {
	uint64_t wr_id;
	int status;
	int opcode; /* SHOAL_VERBS_WC_SEND or _RECV; undefined when status != 0 */
	uint32_t byte_len;
} shoal_verbs_wc;

typedef struct shoal_verbs_ops {
	const char *name;
	/* Open device `want` (NULL: the first one with an active port) and
	 * query its port into *port. ctx is the provider's (the config's
	 * verbs_ctx). May block briefly. On failure, why says which call
	 * failed, e.g. "ibv_get_device_list: Function not implemented". */
	shoal_err (*open)(void *ctx, const char *want, void **dev, shoal_verbs_port *port,
	                  char *why, size_t why_len);
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
	/* An RC queue pair on pd whose send and receive completions go to cq. */
	shoal_err (*create_qp)(void *pd, void *cq, uint32_t max_send, uint32_t max_recv, void **qp,
	                       uint32_t *qpn, char *why, size_t why_len);
	void (*destroy_qp)(void *qp);
	/* RESET -> INIT (port, pkey 0, access: local write), INIT -> RTR
	 * (path MTU, dest QPN, RQ PSN, LID or GID, max_dest_rd_atomic,
	 * min_rnr_timer), RTR -> RTS (SQ PSN, timeout, retry_cnt, rnr_retry,
	 * max_rd_atomic). Non-blocking. */
	shoal_err (*qp_init)(void *qp, const shoal_verbs_port *port, char *why, size_t why_len);
	shoal_err (*qp_rtr)(void *qp, const shoal_verbs_port *port, const shoal_verbs_remote *r,
	                    char *why, size_t why_len);
	shoal_err (*qp_rts)(void *qp, uint32_t psn, char *why, size_t why_len);
	/* Post one receive / one signaled send of [addr, addr + len) inside
	 * mr. Non-blocking; the buffer is the NIC's until its completion. */
	shoal_err (*post_recv)(void *qp, void *mr, uint64_t wr_id, void *addr, uint32_t len,
	                       char *why, size_t why_len);
	shoal_err (*post_send)(void *qp, void *mr, uint64_t wr_id, const void *addr, uint32_t len,
	                       char *why, size_t why_len);
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

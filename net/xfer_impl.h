/*
 * net/xfer_impl.h: what the data plane's files share (xfer__ names):
 * the transport ops table that the link (xfer.c) drives, and the
 * constructors of the two transports (xfer_tcp.c, xfer_rdma.c).
 *
 * Part: net/. Not for use outside net/xfer*.c.
 */
#ifndef SHOAL_NET_XFER_IMPL_H
#define SHOAL_NET_XFER_IMPL_H

#include <poll.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/uio.h>

#include "base/err.h"
#include "net/verbs.h"
#include "net/xfer.h"
#include "net/xfer_frame.h"

/* A transport moves whole frames. The link encodes and validates them;
 * the transport only checks framing (shoal_xfer_frame_peek). */
typedef struct xfer__transport_ops {
	const char *name; /* "tcp", "rdma" */
	/* Send one frame gathered from iov[iovcnt] (total bytes; iov[0] is at
	 * least the fixed header). May block up to timeout_ms (-1: forever).
	 * *partial is set when some bytes left and the stream is now broken.
	 * The iov memory is the caller's and is not kept. */
	shoal_err (*send)(void *t, const struct iovec *iov, int iovcnt, size_t total,
	                  int timeout_ms, int *partial, char *why, size_t why_len);
	/* Receive one whole frame: *buf (borrowed until the next recv or free)
	 * holds *len bytes that passed the framing check. May block up to
	 * timeout_ms; on timeout a partial frame is kept for the next call. */
	shoal_err (*recv)(void *t, int timeout_ms, const uint8_t **buf, size_t *len, char *why,
	                  size_t why_len);
	/* The fds to poll for POLLIN; returns how many were written. */
	int (*pollfds)(void *t, struct pollfd *pf, int cap);
	/* Frames the transport sent or consumed on its own (RDMA credits). */
	void (*own_counts)(void *t, uint64_t *sent, uint64_t *recv, uint64_t *credit_waits);
	void (*free)(void *t); /* NULL-safe; TCP closes its fd */
} xfer__transport_ops;

/* ---- tcp (xfer_tcp.c) ---- */
typedef struct xfer__tcp xfer__tcp;
extern const xfer__transport_ops xfer__tcp_ops;

/* Wrap a connected socket (now the transport's) with buffers for frames
 * up to max_frame. Sets O_NONBLOCK and TCP_NODELAY. */
shoal_err xfer__tcp_new(int fd, uint32_t max_frame, xfer__tcp **out, char *why, size_t why_len);
int xfer__tcp_fd(const xfer__tcp *t);
/* Bytes read from the socket but not yet handed out as a frame. */
size_t xfer__tcp_pending(const xfer__tcp *t);
/* FD_CLOEXEC (and O_NONBLOCK when asked, SO_NOSIGPIPE where it exists) on
 * a new fd; 0 or -1 with errno. */
int xfer__fd_setup(int fd, int nonblock);
/* Connected / listening sockets for host:port (numeric or name). */
shoal_err xfer__tcp_connect(const char *host, uint16_t port, int timeout_ms, int *fd, char *why,
                            size_t why_len);
shoal_err xfer__tcp_listen(const char *host, uint16_t port, int *fd, uint16_t *bound, char *why,
                           size_t why_len);

/* ---- rdma (xfer_rdma.c) ---- */
typedef struct xfer__rdma xfer__rdma;
extern const xfer__transport_ops xfer__rdma_ops;

/* Choose the device, port and GID for the link whose TCP socket is fd
 * (net/rdma_select.h) and open the device (shared through cfg's hub): the
 * offer in HELLO. *dev_name ("mlx5_0 port 1 gid 3") is the transport's.
 * On failure the reason names what is missing ("no RDMA device on en5
 * (devices: ...)", "no rdma device: ibv_get_device_list: ..."). */
shoal_err xfer__rdma_open(const shoal_xfer_config *cfg, int fd, xfer__rdma **out,
                          const char **dev_name, char *why, size_t why_len);
/* PD, registered ring of cfg.rdma_slots + send slots of slot_size bytes,
 * CQ with channel, QP in INIT; fills what the peer needs. */
shoal_err xfer__rdma_setup(xfer__rdma *r, uint32_t slot_size, shoal_xfer_qp_info *local, char *why,
                           size_t why_len);
/* Post the receive ring, INIT -> RTR -> RTS towards remote. watch is the
 * link's TCP transport (borrowed): its EOF means the peer is gone, bytes
 * on it (in the socket or already buffered) that the peer spoke there. */
shoal_err xfer__rdma_connect(xfer__rdma *r, const shoal_xfer_qp_info *remote,
                             const xfer__tcp *watch, char *why, size_t why_len);

/* The link switched to RDMA: arm the completion channel, so that the fds
 * of pollfds announce the first frame. */
void xfer__rdma_arm(xfer__rdma *r);
/* Sends posted, of them signaled and inline, and the QP's inline bytes. */
void xfer__rdma_sends(const xfer__rdma *r, uint64_t *sends, uint64_t *signaled, uint64_t *inlined,
                      uint32_t *max_inline);

#endif

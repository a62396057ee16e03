/*
 * net/xfer_tcp.c: the TCP transport of the data plane: length-prefixed
 * frames on a persistent, non-blocking, TCP_NODELAY socket.
 *
 * Part: net/. One receive buffer of max_frame bytes per link, allocated at
 * creation and reused; sends gather header + payload with writev (no copy).
 * Waits are poll() with the remaining timeout, never a spin. Partial reads
 * are kept across calls (a timeout mid-frame loses nothing); a partial
 * write is finished within the timeout or breaks the stream. Every frame
 * is sealed with two CRC-32C (xfer_frame.h: the header's, checked before
 * its length is trusted, and the rest's, before the frame is handed out).
 * The fault-injection test hook (net/fault.h, link "tcp") acts on the
 * sealed bytes, as the wire would.
 * Divisions: sockets, send, receive, ops table.
 */
#include "net/xfer_impl.h"

#include <errno.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "base/assert.h"
#include "base/clock.h"
#include "net/fault.h"

struct xfer__tcp {
	int fd;
	uint32_t max_frame;
	uint8_t *rx;      /* (max_frame) bytes: the frame being received, then the next */
	size_t rx_have;   /* bytes in rx */
	size_t rx_done;   /* bytes of rx handed out by the last recv (consumed next call) */
	uint32_t rx_need; /* whole frame length once the header is in; 0 before */
};

/* Portable to macOS (the Apple RDMA peers): no SOCK_CLOEXEC/SOCK_NONBLOCK
 * socket flags, no MSG_NOSIGNAL there (SO_NOSIGPIPE instead). */
#ifndef MSG_NOSIGNAL
#define MSG_NOSIGNAL 0
#endif

int xfer__fd_setup(int fd, int nonblock)
{
	int fl = fcntl(fd, F_GETFD), one = 1;
	if (fl < 0 || fcntl(fd, F_SETFD, fl | FD_CLOEXEC))
		return -1;
	if (nonblock) {
		fl = fcntl(fd, F_GETFL);
		if (fl < 0 || fcntl(fd, F_SETFL, fl | O_NONBLOCK))
			return -1;
	}
#ifdef SO_NOSIGPIPE
	setsockopt(fd, SOL_SOCKET, SO_NOSIGPIPE, &one, sizeof one);
#endif
	(void)one;
	return 0;
}

/* Milliseconds left until deadline (-1: none), for poll(). */
static int left_ms(int64_t deadline)
{
	if (deadline < 0)
		return -1;
	int64_t l = deadline - (int64_t)shoal_clock_now_ms();
	return l < 0 ? 0 : (int)l;
}

/* Wait for `events` on fd. SHOAL_OK when ready, TIMEOUT, or IO. */
static shoal_err wait_fd(int fd, short events, int64_t deadline, char *why, size_t why_len)
{
	for (;;) {
		struct pollfd p = {.fd = fd, .events = events};
		int n = poll(&p, 1, left_ms(deadline));
		if (n > 0)
			return SHOAL_OK;
		if (n == 0)
			return shoal_why(why, why_len, SHOAL_ERR_TIMEOUT, "timed out");
		if (errno != EINTR)
			return shoal_why(why, why_len, SHOAL_ERR_IO, "poll: %s", strerror(errno));
	}
}

/* ---- sockets --------------------------------------------------------- */

static shoal_err resolve(const char *host, uint16_t port, int passive, struct addrinfo **res,
                         char *why, size_t why_len)
{
	struct addrinfo hints = {.ai_family = AF_UNSPEC, .ai_socktype = SOCK_STREAM};
	char ps[8];
	snprintf(ps, sizeof ps, "%u", port);
	if (passive)
		hints.ai_flags = AI_PASSIVE;
	int rc = getaddrinfo(host, ps, &hints, res);
	if (rc)
		return shoal_why(why, why_len, SHOAL_ERR_NOTFOUND, "getaddrinfo %s: %s",
		                 host ? host : "*", gai_strerror(rc));
	return SHOAL_OK;
}

shoal_err xfer__tcp_connect(const char *host, uint16_t port, int timeout_ms, int *out, char *why,
                            size_t why_len)
{
	struct addrinfo *res;
	shoal_err e = resolve(host, port, 0, &res, why, why_len);
	if (e)
		return e;
	int64_t deadline = timeout_ms < 0 ? -1 : (int64_t)shoal_clock_now_ms() + timeout_ms;
	e = shoal_why(why, why_len, SHOAL_ERR_IO, "no address for %s", host);
	for (struct addrinfo *a = res; a; a = a->ai_next) {
		int fd = socket(a->ai_family, a->ai_socktype, 0);
		if (fd < 0 || xfer__fd_setup(fd, 1)) {
			e = shoal_why(why, why_len, SHOAL_ERR_IO, "socket: %s", strerror(errno));
			if (fd >= 0)
				close(fd);
			continue;
		}
		if (connect(fd, a->ai_addr, a->ai_addrlen) == 0 || errno == EINPROGRESS) {
			int err = 0;
			socklen_t el = sizeof err;
			e = wait_fd(fd, POLLOUT, deadline, why, why_len);
			if (!e && getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &el) == 0 && !err) {
				*out = fd;
				freeaddrinfo(res);
				return SHOAL_OK;
			}
			if (!e) /* CLOSED: nothing listens there (the peer is gone) */
				e = shoal_why(why, why_len,
				              err == ECONNREFUSED ? SHOAL_ERR_CLOSED : SHOAL_ERR_IO,
				              "connect %s:%u: %s", host, port, strerror(err));
		} else {
			e = shoal_why(why, why_len,
			              errno == ECONNREFUSED ? SHOAL_ERR_CLOSED : SHOAL_ERR_IO,
			              "connect %s:%u: %s", host, port, strerror(errno));
		}
		close(fd);
	}
	freeaddrinfo(res);
	return e;
}

shoal_err xfer__tcp_listen(const char *host, uint16_t port, int *out, uint16_t *bound, char *why,
                           size_t why_len)
{
	struct addrinfo *res;
	shoal_err e = resolve(host, port, 1, &res, why, why_len);
	if (e)
		return e;
	int fd = socket(res->ai_family, SOCK_STREAM, 0);
	int one = 1;
	if (fd < 0 || xfer__fd_setup(fd, 1)) {
		e = shoal_why(why, why_len, SHOAL_ERR_IO, "socket: %s", strerror(errno));
		goto fail;
	}
	setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
	/* Backlog 128: a peer is dialled by a handful (its stage neighbours and
	 * expert users), but a burst of connections that know no key can come
	 * between two wake-ups of the listener (which then takes them all into
	 * its pending set, xfer.c); a full queue drops the SYN of a real peer,
	 * which retries only 1 s later. */
	if (bind(fd, res->ai_addr, res->ai_addrlen) || listen(fd, 128)) {
		e = shoal_why(why, why_len, SHOAL_ERR_IO, "bind/listen %s:%u: %s",
		              host ? host : "*", port, strerror(errno));
		goto fail;
	}
	struct sockaddr_storage ss;
	socklen_t sl = sizeof ss;
	getsockname(fd, (struct sockaddr *)&ss, &sl);
	*bound = ntohs(ss.ss_family == AF_INET6 ? ((struct sockaddr_in6 *)&ss)->sin6_port
	                                        : ((struct sockaddr_in *)&ss)->sin_port);
	*out = fd;
	freeaddrinfo(res);
	return SHOAL_OK;
fail:
	if (fd >= 0)
		close(fd);
	freeaddrinfo(res);
	return e;
}

shoal_err xfer__tcp_new(int fd, uint32_t max_frame, xfer__tcp **out, char *why, size_t why_len)
{
	xfer__tcp *t = calloc(1, sizeof *t);
	if (!t)
		return SHOAL_ERR_NOMEM;
	t->fd = fd;
	t->max_frame = max_frame;
	/* 16-byte aligned, so a frame at offset 0 has an aligned payload. */
	if (posix_memalign((void **)&t->rx, 64, max_frame)) {
		t->rx = NULL;
		goto fail;
	}
	int one = 1;
	int fl = fcntl(fd, F_GETFL);
	/* A unix socket (tests/fuzz/fuzz_xfer_stream.c) has no Nagle to turn off. */
	if (fl < 0 || fcntl(fd, F_SETFL, fl | O_NONBLOCK) ||
	    (setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one) && errno != EOPNOTSUPP)) {
		shoal_why(why, why_len, SHOAL_ERR_IO, "socket options: %s", strerror(errno));
		t->fd = -1; /* the caller still owns fd on failure */
		free(t->rx);
		free(t);
		return SHOAL_ERR_IO;
	}
	*out = t;
	return SHOAL_OK;
fail:
	free(t);
	return shoal_why(why, why_len, SHOAL_ERR_NOMEM, "no memory for a %u-byte frame buffer",
	                 max_frame);
}

int xfer__tcp_fd(const xfer__tcp *t)
{
	return t->fd;
}

size_t xfer__tcp_pending(const xfer__tcp *t)
{
	return t->rx_have - t->rx_done;
}

/* ---- send ------------------------------------------------------------ */

/* 16 iovecs: header + up to 15 payload pieces (a frame is rarely more
 * than header + one tensor); more is refused by the link. One more here:
 * the sealed copy of the fixed header goes apart from the rest of iov[0]. */
#define XFER_TCP_IOV_MAX 16

static void put32le(uint8_t *p, uint32_t v)
{
	for (int i = 0; i < 4; i++)
		p[i] = (uint8_t)(v >> (8 * i));
}

/* Write iov[iovcnt] (total bytes, iov is consumed) by deadline. */
static shoal_err tcp_write(xfer__tcp *t, struct iovec *iov, int iovcnt, size_t total,
                           int64_t deadline, int *partial, char *why, size_t why_len)
{
	size_t sent = 0;
	int first = 0;
	while (sent < total) {
		struct msghdr mh = {.msg_iov = iov + first, .msg_iovlen = (size_t)(iovcnt - first)};
		ssize_t n = sendmsg(t->fd, &mh, MSG_NOSIGNAL);
		if (n < 0) {
			if (errno == EINTR)
				continue;
			if (errno == EAGAIN || errno == EWOULDBLOCK) {
				shoal_err e = wait_fd(t->fd, POLLOUT, deadline, why, why_len);
				if (e) {
					*partial = sent > 0;
					if (e == SHOAL_ERR_TIMEOUT)
						shoal_why(why, why_len, e,
						          "send timed out after %zu of %zu bytes",
						          sent, total);
					return e;
				}
				continue;
			}
			*partial = sent > 0;
			if (errno == EPIPE || errno == ECONNRESET)
				return shoal_why(why, why_len, SHOAL_ERR_CLOSED,
				                 "peer closed the connection (send: %s)",
				                 strerror(errno));
			return shoal_why(why, why_len, SHOAL_ERR_IO, "send: %s", strerror(errno));
		}
		sent += (size_t)n;
		/* Skip the iovecs written in full, trim the one written in part. */
		size_t adv = (size_t)n;
		while (first < iovcnt && adv >= iov[first].iov_len)
			adv -= iov[first++].iov_len;
		if (first < iovcnt) {
			iov[first].iov_base = (uint8_t *)iov[first].iov_base + adv;
			iov[first].iov_len -= adv;
		}
	}
	return SHOAL_OK;
}

/* The test hook's faults on a sealed frame iov[iovcnt] of total bytes. */
static shoal_err tcp_send_faulty(xfer__tcp *t, const shoal_fault *f, struct iovec *iov, int iovcnt,
                                 size_t total, int64_t deadline, int *partial, char *why,
                                 size_t why_len)
{
	if (f->kind == SHOAL_FAULT_DROP)
		return SHOAL_OK;
	if (f->kind == SHOAL_FAULT_DELAY) {
		shoal_fault_sleep(f->delay_ms);
		return tcp_write(t, iov, iovcnt, total, deadline, partial, why, why_len);
	}
	if (f->kind == SHOAL_FAULT_TRUNCATE) { /* a prefix of 1..total-1 bytes, then EOF */
		size_t cut = 1 + f->pick % (total - 1), left = cut;
		int n = 0;
		while (left) {
			if (iov[n].iov_len > left)
				iov[n].iov_len = left;
			left -= iov[n++].iov_len;
		}
		shoal_err e = tcp_write(t, iov, n, cut, deadline, partial, why, why_len);
		shutdown(t->fd, SHUT_WR);
		return e;
	}
	uint8_t *flat = malloc(total); /* corrupt: one bit of a copy */
	if (!flat)
		return shoal_why(why, why_len, SHOAL_ERR_NOMEM, "test hook: no memory");
	size_t at = 0;
	for (int i = 0; i < iovcnt; i++) {
		memcpy(flat + at, iov[i].iov_base, iov[i].iov_len);
		at += iov[i].iov_len;
	}
	shoal_fault_flip(flat, total, f->pick);
	struct iovec one = {.iov_base = flat, .iov_len = total};
	shoal_err e = tcp_write(t, &one, 1, total, deadline, partial, why, why_len);
	free(flat);
	return e;
}

static shoal_err tcp_send(void *tp, const struct iovec *iov_in, int iovcnt, size_t total,
                          int timeout_ms, int *partial, char *why, size_t why_len)
{
	xfer__tcp *t = tp;
	struct iovec iov[XFER_TCP_IOV_MAX + 1];
	uint8_t hdr[SHOAL_XFER_HDR_SIZE];
	*partial = 0;
	if (iovcnt > XFER_TCP_IOV_MAX)
		return shoal_why(why, why_len, SHOAL_ERR_RANGE, "%d iovecs (max %d)", iovcnt,
		                 XFER_TCP_IOV_MAX);
	/* the link's own frame: its encoded header in iov[0] */
	SHOAL_ASSERT(iovcnt >= 1 && iov_in[0].iov_len >= SHOAL_XFER_HDR_SIZE);
	/* Seal a copy of the header: the caller's iovecs are read only. */
	memcpy(hdr, iov_in[0].iov_base, SHOAL_XFER_HDR_SIZE);
	int n = 0;
	iov[n++] = (struct iovec){.iov_base = hdr, .iov_len = SHOAL_XFER_HDR_SIZE};
	if (iov_in[0].iov_len > SHOAL_XFER_HDR_SIZE)
		iov[n++] =
		    (struct iovec){.iov_base = (uint8_t *)iov_in[0].iov_base + SHOAL_XFER_HDR_SIZE,
		                   .iov_len = iov_in[0].iov_len - SHOAL_XFER_HDR_SIZE};
	size_t sum = iov_in[0].iov_len;
	for (int i = 1; i < iovcnt; i++) {
		SHOAL_ASSERT(iov_in[i].iov_base != NULL || iov_in[i].iov_len == 0);
		sum += iov_in[i].iov_len;
		if (iov_in[i].iov_len)
			iov[n++] = iov_in[i];
	}
	SHOAL_ASSERT(sum == total); /* the link counts its own pieces */
	uint32_t body = 0;
	for (int i = 1; i < n; i++)
		body = shoal_xfer_crc32c(body, iov[i].iov_base, iov[i].iov_len);
	put32le(hdr + SHOAL_XFER_OFF_BODY_CRC, body);
	put32le(hdr + SHOAL_XFER_OFF_HEAD_CRC, shoal_xfer_frame_head_crc(hdr));
	int64_t deadline = timeout_ms < 0 ? -1 : (int64_t)shoal_clock_now_ms() + timeout_ms;
	shoal_fault f;
	if (shoal_fault_next("tcp", shoal_xfer_kind_name(hdr[6]), &f))
		return tcp_send_faulty(t, &f, iov, n, total, deadline, partial, why, why_len);
	return tcp_write(t, iov, n, total, deadline, partial, why, why_len);
}

/* ---- receive --------------------------------------------------------- */

static shoal_err tcp_recv(void *tp, int timeout_ms, const uint8_t **buf, size_t *len, char *why,
                          size_t why_len)
{
	xfer__tcp *t = tp;
	int64_t deadline = timeout_ms < 0 ? -1 : (int64_t)shoal_clock_now_ms() + timeout_ms;
	if (t->rx_done) { /* drop the frame handed out last time */
		memmove(t->rx, t->rx + t->rx_done, t->rx_have - t->rx_done);
		t->rx_have -= t->rx_done;
		t->rx_done = 0;
	}
	for (;;) {
		if (!t->rx_need && t->rx_have >= SHOAL_XFER_HDR_SIZE) {
			uint32_t fl;
			shoal_err e = shoal_xfer_frame_peek(t->rx, t->rx_have, t->max_frame, &fl,
			                                    why, why_len);
			if (!e)
				e = shoal_xfer_frame_check_head(t->rx, why, why_len);
			if (e)
				return e;
			t->rx_need = fl;
		}
		if (t->rx_need && t->rx_have >= t->rx_need) {
			shoal_err e = shoal_xfer_frame_check_body(t->rx, t->rx_need, why, why_len);
			if (e)
				return e;
			*buf = t->rx;
			*len = t->rx_need;
			t->rx_done = t->rx_need;
			t->rx_need = 0;
			return SHOAL_OK;
		}
		/* Read what is there (it may include the start of the next frame);
		 * the frame being read starts at 0 and is <= max_frame, so it fits. */
		ssize_t n = read(t->fd, t->rx + t->rx_have, t->max_frame - t->rx_have);
		if (n > 0) {
			t->rx_have += (size_t)n;
			continue;
		}
		if (n == 0) {
			if (t->rx_have)
				return shoal_why(why, why_len, SHOAL_ERR_CLOSED,
				                 "peer closed mid-frame (got %zu of %u bytes)",
				                 t->rx_have,
				                 t->rx_need ? t->rx_need : SHOAL_XFER_HDR_SIZE);
			return shoal_why(why, why_len, SHOAL_ERR_CLOSED,
			                 "peer closed the connection");
		}
		if (errno == EINTR)
			continue;
		if (errno != EAGAIN && errno != EWOULDBLOCK) {
			if (errno == ECONNRESET)
				return shoal_why(why, why_len, SHOAL_ERR_CLOSED,
				                 "peer reset the connection");
			return shoal_why(why, why_len, SHOAL_ERR_IO, "read: %s", strerror(errno));
		}
		shoal_err e = wait_fd(t->fd, POLLIN, deadline, why, why_len);
		if (e)
			return e;
	}
}

static int tcp_pollfds(void *tp, struct pollfd *pf, int cap)
{
	xfer__tcp *t = tp;
	if (cap < 1)
		return 0;
	pf[0] = (struct pollfd){.fd = t->fd, .events = POLLIN};
	return 1;
}

static void tcp_own_counts(void *tp, uint64_t *sent, uint64_t *recv, uint64_t *waits)
{
	*sent = *recv = *waits = 0;
}

static void tcp_free(void *tp)
{
	xfer__tcp *t = tp;
	if (!t)
		return;
	if (t->fd >= 0)
		close(t->fd);
	free(t->rx);
	free(t);
}

/* ---- ops table ------------------------------------------------------- */

const xfer__transport_ops xfer__tcp_ops = {
    .name = "tcp",
    .send = tcp_send,
    .recv = tcp_recv,
    .pollfds = tcp_pollfds,
    .own_counts = tcp_own_counts,
    .free = tcp_free,
};

/*
 * net/keycheck.c: the key check datagrams and their UDP socket (see
 * keycheck.h). Divisions: the codec, the socket, the client's question.
 */
#include "net/keycheck.h"

#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <poll.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "base/clock.h"
#include "net/endpoint.h"

#define KC_MAGIC   "SHKC"
#define KC_VERSION 1
#define KC_FP_LEN  16
#define KC_HEADER  (4 + 1 + 1 + KC_FP_LEN)

/* ---- the codec ---------------------------------------------------------- */

static int kc_fp_ok(const char *fp, size_t n)
{
	if (n != KC_FP_LEN)
		return 0;
	if (memcmp(fp, SHOAL_KEYCHECK_NOKEY, KC_FP_LEN) == 0)
		return 1;
	for (size_t i = 0; i < n; i++)
		if (!((fp[i] >= '0' && fp[i] <= '9') || (fp[i] >= 'a' && fp[i] <= 'f')))
			return 0;
	return 1;
}

/* printable ASCII only: the fields end up in logs */
static int kc_text_ok(const uint8_t *s, size_t n)
{
	for (size_t i = 0; i < n; i++)
		if (s[i] < 0x20 || s[i] > 0x7e)
			return 0;
	return 1;
}

size_t shoal_keycheck_encode(const shoal_keycheck_msg *m, uint8_t *buf, size_t cap)
{
	size_t nc = strlen(m->cluster), ne = strlen(m->endpoint);
	if (nc > 255 || ne > 255 || !kc_fp_ok(m->fp, strlen(m->fp)) ||
	    (m->kind != SHOAL_KEYCHECK_ASK && m->kind != SHOAL_KEYCHECK_ANSWER))
		return 0;
	size_t need = KC_HEADER + 1 + nc + 1 + ne;
	if (need > cap)
		return 0;
	uint8_t *p = buf;
	memcpy(p, KC_MAGIC, 4);
	p += 4;
	*p++ = KC_VERSION;
	*p++ = m->kind;
	memcpy(p, m->fp, KC_FP_LEN);
	p += KC_FP_LEN;
	*p++ = (uint8_t)nc;
	memcpy(p, m->cluster, nc);
	p += nc;
	*p++ = (uint8_t)ne;
	memcpy(p, m->endpoint, ne);
	return need;
}

/* One length-prefixed text field at *p (end e) into out[256]. */
static int kc_field(const uint8_t **p, const uint8_t *e, char out[256])
{
	if (*p >= e)
		return -1;
	size_t n = **p;
	(*p)++;
	if ((size_t)(e - *p) < n || !kc_text_ok(*p, n))
		return -1;
	memcpy(out, *p, n);
	out[n] = '\0';
	*p += n;
	return 0;
}

shoal_err shoal_keycheck_decode(const uint8_t *buf, size_t len, shoal_keycheck_msg *m, char *why,
                                size_t why_len)
{
	memset(m, 0, sizeof *m);
	if (len < KC_HEADER + 2 || memcmp(buf, KC_MAGIC, 4) != 0)
		return shoal_why(why, why_len, SHOAL_ERR_FORMAT, "not a key check (%zu bytes)",
		                 len);
	if (buf[4] != KC_VERSION)
		return shoal_why(why, why_len, SHOAL_ERR_FORMAT,
		                 "key check version %u (we speak %u)", (unsigned)buf[4],
		                 (unsigned)KC_VERSION);
	m->kind = buf[5];
	if (m->kind != SHOAL_KEYCHECK_ASK && m->kind != SHOAL_KEYCHECK_ANSWER)
		return shoal_why(why, why_len, SHOAL_ERR_FORMAT, "key check of kind %u",
		                 (unsigned)m->kind);
	if (!kc_fp_ok((const char *)buf + 6, KC_FP_LEN))
		return shoal_why(why, why_len, SHOAL_ERR_FORMAT,
		                 "key check with a bad fingerprint");
	memcpy(m->fp, buf + 6, KC_FP_LEN);
	m->fp[KC_FP_LEN] = '\0';
	const uint8_t *p = buf + KC_HEADER, *e = buf + len;
	if (kc_field(&p, e, m->cluster) || kc_field(&p, e, m->endpoint) || p != e)
		return shoal_why(why, why_len, SHOAL_ERR_FORMAT,
		                 "key check with a truncated or unprintable field");
	return SHOAL_OK;
}

const char *shoal_keycheck_says(const char *fp, char *buf, size_t cap)
{
	if (!strcmp(fp, SHOAL_KEYCHECK_NOKEY))
		snprintf(buf, cap, "no key (--insecure)");
	else
		snprintf(buf, cap, "key fingerprint %s", fp);
	return buf;
}

int shoal_keycheck_same(const shoal_keycheck_msg *a, const shoal_keycheck_msg *b)
{
	return strcmp(a->fp, b->fp) == 0;
}

/* ---- the socket --------------------------------------------------------- */

/* "tcp://IP:PORT" -> an IPv4 socket address */
static shoal_err kc_addr(const char *ep, struct sockaddr_in *sa, char *why, size_t why_len)
{
	char ip[64];
	int port = shoal_endpoint_port(ep);
	memset(sa, 0, sizeof *sa);
	sa->sin_family = AF_INET;
	if (shoal_endpoint_ip(ep, ip, sizeof ip) != 0 || port <= 0 || port > 65535 ||
	    (strcmp(ip, "*") != 0 && inet_pton(AF_INET, ip, &sa->sin_addr) != 1))
		return shoal_why(why, why_len, SHOAL_ERR_INVAL, "%s: not tcp://IPv4:PORT", ep);
	sa->sin_port = htons((uint16_t)port);
	return SHOAL_OK;
}

shoal_err shoal_keycheck_open(const char *ctl_bound, int *fd, char *why, size_t why_len)
{
	struct sockaddr_in sa;
	*fd = -1;
	shoal_err e = kc_addr(ctl_bound, &sa, why, why_len);
	if (e)
		return e;
	int s = socket(AF_INET, SOCK_DGRAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
	if (s < 0)
		return shoal_why(why, why_len, SHOAL_ERR_IO, "UDP socket: %s", strerror(errno));
	if (bind(s, (struct sockaddr *)&sa, sizeof sa) != 0) {
		int err = errno;
		close(s);
		return shoal_why(why, why_len, SHOAL_ERR_IO, "cannot bind UDP port %u: %s",
		                 (unsigned)ntohs(sa.sin_port), strerror(err));
	}
	*fd = s;
	return SHOAL_OK;
}

shoal_err shoal_keycheck_send(int fd, const char *to, const shoal_keycheck_msg *m, char *why,
                              size_t why_len)
{
	struct sockaddr_in sa;
	shoal_err e = kc_addr(to, &sa, why, why_len);
	if (e)
		return e;
	uint8_t buf[SHOAL_KEYCHECK_MAX];
	size_t n = shoal_keycheck_encode(m, buf, sizeof buf);
	if (!n)
		return shoal_why(why, why_len, SHOAL_ERR_INVAL, "key check fields too long");
	if (sendto(fd, buf, n, 0, (struct sockaddr *)&sa, sizeof sa) != (ssize_t)n)
		return shoal_why(why, why_len, SHOAL_ERR_IO, "key check to %s: %s", to,
		                 strerror(errno));
	return SHOAL_OK;
}

shoal_err shoal_keycheck_recv(int fd, shoal_keycheck_msg *m, char *from, size_t from_cap, char *why,
                              size_t why_len)
{
	uint8_t buf[SHOAL_KEYCHECK_MAX + 1];
	struct sockaddr_in sa;
	socklen_t sl = sizeof sa;
	ssize_t n = recvfrom(fd, buf, sizeof buf, 0, (struct sockaddr *)&sa, &sl);
	if (n < 0) {
		if (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR)
			return SHOAL_ERR_BUSY;
		return shoal_why(why, why_len, SHOAL_ERR_IO, "key check: %s", strerror(errno));
	}
	if (from_cap) {
		char ip[INET_ADDRSTRLEN] = "?";
		inet_ntop(AF_INET, &sa.sin_addr, ip, sizeof ip);
		snprintf(from, from_cap, "%s:%u", ip, (unsigned)ntohs(sa.sin_port));
	}
	if ((size_t)n > SHOAL_KEYCHECK_MAX)
		return shoal_why(why, why_len, SHOAL_ERR_FORMAT, "key check over %d bytes",
		                 SHOAL_KEYCHECK_MAX);
	return shoal_keycheck_decode(buf, (size_t)n, m, why, why_len);
}

/* ---- the client's question ---------------------------------------------- */

shoal_err shoal_keycheck_ask(const char *to, const shoal_keycheck_msg *mine, int timeout_ms,
                             shoal_keycheck_msg *theirs, char *why, size_t why_len)
{
	int s = socket(AF_INET, SOCK_DGRAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
	if (s < 0)
		return shoal_why(why, why_len, SHOAL_ERR_IO, "UDP socket: %s", strerror(errno));
	shoal_keycheck_msg ask = *mine;
	ask.kind = SHOAL_KEYCHECK_ASK;
	uint64_t deadline = shoal_clock_now_ms() + (uint64_t)(timeout_ms > 0 ? timeout_ms : 0);
	uint64_t next_send = 0;
	shoal_err e = SHOAL_OK;
	for (;;) {
		uint64_t now = shoal_clock_now_ms();
		if (now >= deadline) {
			e = shoal_why(why, why_len, SHOAL_ERR_TIMEOUT,
			              "no key check answer from %s in %d ms", to, timeout_ms);
			break;
		}
		if (now >= next_send) {
			/* datagrams get lost: ask again every 250 ms */
			e = shoal_keycheck_send(s, to, &ask, why, why_len);
			if (e)
				break;
			next_send = now + 250;
		}
		uint64_t until = next_send < deadline ? next_send : deadline;
		struct pollfd pf = {.fd = s, .events = POLLIN};
		if (poll(&pf, 1, (int)(until - now)) <= 0)
			continue;
		e = shoal_keycheck_recv(s, theirs, NULL, 0, why, why_len);
		if (e == SHOAL_ERR_BUSY || (e == SHOAL_OK && theirs->kind != SHOAL_KEYCHECK_ANSWER))
			continue;
		if (e == SHOAL_ERR_FORMAT)
			continue; /* not the answer: keep waiting for it */
		break;
	}
	close(s);
	return e;
}

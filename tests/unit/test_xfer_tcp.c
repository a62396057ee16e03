/*
 * tests/unit/test_xfer_tcp.c: data-plane links over loopback TCP: admission by
 * token (good, bad, missing), frames of every size intact and in order,
 * exact per-kind counters, partial reads and writes, EINTR, timeouts, peer
 * close, and a corpus of bad frames written by a raw socket that did the
 * handshake by hand (wrong magic, version, digest, seq, oversized,
 * truncated), each rejected as xfer.h documents.
 */
#include "net/xfer.h"

#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <time.h>
#include <unistd.h>
#include <netinet/in.h>
#include <arpa/inet.h>

#include "base/log.h"
#include "tests/unit/test.h"
#include "tests/unit/test_xfer_util.h"

static const uint8_t DIGEST[SHOAL_DIGEST_BYTES] = {1, 2, 3, 4, 5, 6, 7, 8};

typedef struct conn_job {
	shoal_xfer_config cfg;
	uint16_t port;
	const uint8_t *token;
	size_t token_len;
	shoal_xfer_link *link;
	shoal_err e;
	char why[SHOAL_WHY_LEN];
	pthread_t th;
} conn_job;

static void *conn_main(void *p)
{
	conn_job *j = p;
	j->e = shoal_xfer_link_connect(&j->cfg, "127.0.0.1", j->port, j->token, j->token_len,
	                               &j->link, j->why, sizeof j->why);
	return NULL;
}

/* A connected pair: *a accepted (peer 0xaa side), *b connected (0xbb). */
static shoal_err pair(shoal_xfer_listener *l, const uint8_t *tok, size_t tn, shoal_xfer_link **a,
                      shoal_xfer_link **b, char *why_a, char *why_b)
{
	conn_job j = {.port = shoal_xfer_listener_port(l), .token = tok, .token_len = tn};
	cfg_small(&j.cfg, 0xbb);
	pthread_create(&j.th, NULL, conn_main, &j);
	shoal_err e = shoal_xfer_listener_accept(l, 3000, a, why_a, 256);
	pthread_join(j.th, NULL);
	*b = j.link;
	snprintf(why_b, 256, "%s", j.why);
	return e ? e : j.e;
}

static shoal_xfer_listener *listener(int *calls)
{
	shoal_xfer_config c;
	shoal_xfer_listener *l = NULL;
	char why[SHOAL_WHY_LEN];
	cfg_small(&c, 0xaa);
	if (shoal_xfer_listener_new(&c, "127.0.0.1", 0, admit, calls, &l, why, sizeof why))
		fprintf(stderr, "listener: %s\n", why);
	return l;
}

static void test_admission_and_one_frame(void)
{
	int calls = 0;
	shoal_xfer_listener *l = listener(&calls);
	ASSERT_TRUE(l != NULL);
	shoal_xfer_link *a = NULL, *b = NULL;
	char wa[SHOAL_WHY_LEN] = "", wb[SHOAL_WHY_LEN] = "";
	shoal_err e = pair(l, TOKEN, sizeof TOKEN, &a, &b, wa, wb);
	if (e)
		fprintf(stderr, "accept: %s / connect: %s\n", wa, wb);
	ASSERT_EQ(e, SHOAL_OK);
	ASSERT_EQ(calls, 1);
	ASSERT_STR_EQ(shoal_xfer_link_transport(a), "tcp");
	ASSERT_STR_EQ(shoal_xfer_link_status(a), "tcp (rdma not configured)");
	uint8_t id[SHOAL_PEER_ID_LEN];
	shoal_xfer_link_peer(a, id);
	ASSERT_EQ(id[0], 0xbb);
	shoal_xfer_link_peer(b, id);
	ASSERT_EQ(id[0], 0xaa);

	/* Before a plan is set, data frames are refused on send. */
	static float h[4096];
	for (int i = 0; i < 4096; i++)
		h[i] = (float)i - 100.5f;
	shoal_xfer_row row = {77, 12};
	shoal_xfer_hdr hd = {.kind = SHOAL_XFER_KIND_HIDDEN,
	                     .dtype = SHOAL_XFER_DTYPE_F32,
	                     .layer_first = 0,
	                     .layer_end = 8,
	                     .dim = 4096,
	                     .n_rows = 1,
	                     .rows = &row};
	struct iovec v = {.iov_base = h, .iov_len = sizeof h};
	char why[SHOAL_WHY_LEN];
	ASSERT_EQ(shoal_xfer_link_send(b, &hd, &v, 1, 1000, why, sizeof why), SHOAL_ERR_STATE);
	shoal_xfer_link_set_plan(a, DIGEST, 3);
	shoal_xfer_link_set_plan(b, DIGEST, 3);
	ASSERT_EQ(shoal_xfer_link_send(b, &hd, &v, 1, 1000, why, sizeof why), SHOAL_OK);

	/* The fd an event loop would poll says there is something. */
	struct pollfd pf[2];
	int n = shoal_xfer_link_pollfds(a, pf, 2);
	ASSERT_EQ(n, 1);
	ASSERT_EQ(poll(pf, 1, 2000), 1);

	shoal_xfer_frame f;
	ASSERT_EQ(shoal_xfer_link_recv(a, 1000, &f, why, sizeof why), SHOAL_OK);
	ASSERT_EQ(f.hdr.kind, SHOAL_XFER_KIND_HIDDEN);
	ASSERT_EQ(f.hdr.n_rows, 1);
	ASSERT_U64_EQ(f.hdr.rows[0].session, 77);
	ASSERT_EQ(f.hdr.rows[0].pos, 12);
	ASSERT_EQ(f.hdr.payload_len, sizeof h);
	ASSERT_EQ((uintptr_t)f.payload % 16, 0);
	ASSERT_MEM_EQ(f.payload, h, sizeof h);

	/* Exact counters: the handshake frames and one hidden frame each way. */
	shoal_xfer_metrics ma, mb;
	shoal_xfer_link_metrics(a, &ma);
	shoal_xfer_link_metrics(b, &mb);
	ASSERT_U64_EQ(mb.frames_sent[SHOAL_XFER_KIND_HIDDEN], 1);
	ASSERT_U64_EQ(ma.frames_recv[SHOAL_XFER_KIND_HIDDEN], 1);
	ASSERT_U64_EQ(mb.bytes_sent[SHOAL_XFER_KIND_HIDDEN], 96 + 16 + sizeof h);
	ASSERT_U64_EQ(ma.bytes_recv[SHOAL_XFER_KIND_HIDDEN], 96 + 16 + sizeof h);
	ASSERT_U64_EQ(mb.frames_sent[SHOAL_XFER_KIND_HELLO], 1);
	ASSERT_U64_EQ(ma.frames_recv[SHOAL_XFER_KIND_HELLO], 1);
	ASSERT_U64_EQ(ma.frames_sent[SHOAL_XFER_KIND_HELLO_ACK], 1);
	ASSERT_U64_EQ(ma.frames_sent[SHOAL_XFER_KIND_HIDDEN], 0);
	ASSERT_U64_EQ(ma.rejected, 0);

	/* Nothing more: a bounded wait that does not spin. */
	clock_t c0 = clock();
	int64_t t0 = now_ms();
	ASSERT_EQ(shoal_xfer_link_recv(a, 150, &f, why, sizeof why), SHOAL_ERR_TIMEOUT);
	ASSERT_GE(now_ms() - t0, 140);
	ASSERT_TRUE((double)(clock() - c0) / CLOCKS_PER_SEC < 0.05); /* CPU, not wall time */

	/* Too big for the link (the peer's max_frame is 128 KiB): refused
	 * before a byte moves, and the link stays usable. */
	static uint8_t huge[1 << 17];
	shoal_xfer_hdr hb = {.kind = SHOAL_XFER_KIND_HIDDEN,
	                     .dtype = SHOAL_XFER_DTYPE_U8,
	                     .layer_first = 0,
	                     .layer_end = 1,
	                     .dim = sizeof huge,
	                     .n_rows = 1,
	                     .rows = &row};
	struct iovec vb = {huge, sizeof huge};
	ASSERT_EQ(shoal_xfer_link_send(b, &hb, &vb, 1, 1000, why, sizeof why), SHOAL_ERR_RANGE);
	ASSERT_TRUE(strstr(why, "max 131072") != NULL);
	ASSERT_EQ(shoal_xfer_link_send(b, &hd, &v, 1, 1000, why, sizeof why), SHOAL_OK);
	ASSERT_EQ(shoal_xfer_link_recv(a, 1000, &f, why, sizeof why), SHOAL_OK);
	ASSERT_MEM_EQ(f.payload, h, sizeof h);

	/* Peer close. */
	shoal_xfer_link_free(b);
	ASSERT_EQ(shoal_xfer_link_recv(a, 1000, &f, why, sizeof why), SHOAL_ERR_CLOSED);
	ASSERT_TRUE(strstr(why, "peer closed") != NULL);
	ASSERT_TRUE(strstr(shoal_xfer_link_status(a), "closed (") != NULL);
	shoal_xfer_link_free(a);
	shoal_xfer_listener_free(l);
}

static void test_bad_and_missing_token(void)
{
	int calls = 0;
	shoal_xfer_listener *l = listener(&calls);
	ASSERT_TRUE(l != NULL);
	shoal_xfer_link *a = NULL, *b = NULL;
	char wa[SHOAL_WHY_LEN] = "", wb[SHOAL_WHY_LEN] = "";
	static const uint8_t bad[] = "forged";
	ASSERT_EQ(pair(l, bad, sizeof bad, &a, &b, wa, wb), SHOAL_ERR_AUTH);
	ASSERT_TRUE(a == NULL && b == NULL);
	ASSERT_TRUE(strstr(wa, "not valid for peer bbbb") != NULL);
	ASSERT_TRUE(strstr(wb, "peer: admission token not valid") != NULL);
	ASSERT_EQ(calls, 1);
	ASSERT_EQ(pair(l, NULL, 0, &a, &b, wa, wb), SHOAL_ERR_AUTH);
	ASSERT_TRUE(strstr(wb, "no admission token") != NULL);
	ASSERT_EQ(calls, 1); /* refused before the callback */
	shoal_xfer_listener_free(l);
}

/* ---- a raw peer that speaks the handshake by hand ---- */

static size_t frame(uint8_t *buf, size_t cap, shoal_xfer_hdr *h, const void *p)
{
	size_t head;
	if (shoal_xfer_frame_encode_head(h, buf, cap, &head))
		return 0;
	memcpy(buf + head, p, h->payload_len);
	shoal_xfer_frame_seal(buf, head + h->payload_len); /* as the TCP transport does */
	return head + h->payload_len;
}

typedef struct raw_job {
	uint16_t port;
	int fd;
	pthread_t th;
} raw_job;

static void *raw_main(void *p)
{
	raw_job *j = p;
	struct sockaddr_in sa = {.sin_family = AF_INET, .sin_port = htons(j->port)};
	inet_pton(AF_INET, "127.0.0.1", &sa.sin_addr);
	int fd = socket(AF_INET, SOCK_STREAM, 0);
	if (connect(fd, (struct sockaddr *)&sa, sizeof sa)) {
		close(fd);
		j->fd = -1;
		return NULL;
	}
	uint8_t blk[256], buf[1024];
	shoal_xfer_hello hl = {.max_frame = 1 << 17, .token_len = sizeof TOKEN};
	memset(hl.peer, 0xbb, SHOAL_PEER_ID_LEN);
	memcpy(hl.token, TOKEN, sizeof TOKEN);
	shoal_xfer_hdr h = {.kind = SHOAL_XFER_KIND_HELLO, .seq = 0};
	h.payload_len = (uint32_t)shoal_xfer_hello_encode(&hl, blk, sizeof blk);
	size_t n = frame(buf, sizeof buf, &h, blk);
	if (write_all(fd, buf, n) || read_frame(fd, buf, sizeof buf) != SHOAL_XFER_KIND_HELLO_ACK) {
		close(fd);
		fd = -1;
	}
	j->fd = fd;
	return NULL;
}

/* An accepted link *a and the raw socket that is its peer (seq 1 next). */
static int raw_pair(shoal_xfer_listener *l, shoal_xfer_link **a)
{
	raw_job j = {.port = shoal_xfer_listener_port(l)};
	char why[SHOAL_WHY_LEN];
	pthread_create(&j.th, NULL, raw_main, &j);
	shoal_err e = shoal_xfer_listener_accept(l, 3000, a, why, sizeof why);
	pthread_join(j.th, NULL);
	if (e) {
		fprintf(stderr, "raw accept: %s\n", why);
		if (j.fd >= 0)
			close(j.fd);
		return -1;
	}
	shoal_xfer_link_set_plan(*a, DIGEST, 3);
	return j.fd;
}

static shoal_xfer_row ROW1 = {5, 9};
static float PAY[64];

static shoal_xfer_hdr good_hidden(uint64_t seq)
{
	shoal_xfer_hdr h = {.kind = SHOAL_XFER_KIND_HIDDEN,
	                    .dtype = SHOAL_XFER_DTYPE_F32,
	                    .layer_first = 0,
	                    .layer_end = 4,
	                    .dim = 64,
	                    .n_rows = 1,
	                    .rows = &ROW1,
	                    .payload_len = sizeof PAY,
	                    .epoch = 3,
	                    .seq = seq};
	memcpy(h.digest, DIGEST, SHOAL_DIGEST_BYTES);
	return h;
}

static void test_frames_dropped_link_stays(void)
{
	int calls = 0;
	shoal_xfer_listener *l = listener(&calls);
	shoal_xfer_link *a;
	int fd = raw_pair(l, &a);
	ASSERT_GE(fd, 0);
	uint8_t buf[2048];
	char why[SHOAL_WHY_LEN];
	shoal_xfer_frame f;
	/* seq 1: another plan's digest -> MISMATCH, dropped. */
	shoal_xfer_hdr h = good_hidden(1);
	h.digest[0] ^= 0xff;
	size_t n = frame(buf, sizeof buf, &h, PAY);
	ASSERT_EQ(write_all(fd, buf, n), 0);
	ASSERT_EQ(shoal_xfer_link_recv(a, 2000, &f, why, sizeof why), SHOAL_ERR_MISMATCH);
	ASSERT_TRUE(strstr(why, "plan fe02../epoch 3, the link is on 0102..") != NULL);
	/* seq 2: an older epoch -> MISMATCH. */
	h = good_hidden(2);
	h.epoch = 2;
	n = frame(buf, sizeof buf, &h, PAY);
	ASSERT_EQ(write_all(fd, buf, n), 0);
	ASSERT_EQ(shoal_xfer_link_recv(a, 2000, &f, why, sizeof why), SHOAL_ERR_MISMATCH);
	/* seq 3: lengths that do not follow from the shape -> FORMAT. */
	h = good_hidden(3);
	h.dim = 63;
	n = frame(buf, sizeof buf, &h, PAY);
	ASSERT_EQ(write_all(fd, buf, n), 0);
	ASSERT_EQ(shoal_xfer_link_recv(a, 2000, &f, why, sizeof why), SHOAL_ERR_FORMAT);
	ASSERT_TRUE(strstr(why, "needs") != NULL);
	/* seq 4: fine, and written one byte at a time across a timeout. */
	h = good_hidden(4);
	for (int i = 0; i < 64; i++)
		PAY[i] = (float)i;
	n = frame(buf, sizeof buf, &h, PAY);
	ASSERT_EQ(write_all(fd, buf, 50), 0);
	ASSERT_EQ(shoal_xfer_link_recv(a, 30, &f, why, sizeof why), SHOAL_ERR_TIMEOUT);
	for (size_t i = 50; i < n; i++)
		ASSERT_EQ(write_all(fd, buf + i, 1), 0);
	ASSERT_EQ(shoal_xfer_link_recv(a, 2000, &f, why, sizeof why), SHOAL_OK);
	ASSERT_MEM_EQ(f.payload, PAY, sizeof PAY);
	shoal_xfer_metrics m;
	shoal_xfer_link_metrics(a, &m);
	ASSERT_U64_EQ(m.rejected, 3);
	ASSERT_U64_EQ(m.frames_recv[SHOAL_XFER_KIND_HIDDEN], 1);
	/* An ERROR frame from the peer is delivered as a frame. */
	shoal_xfer_hdr e = {
	    .kind = SHOAL_XFER_KIND_ERROR, .n_aux = SHOAL_ERR_BUSY, .payload_len = 8, .seq = 5};
	n = frame(buf, sizeof buf, &e, "too busy");
	ASSERT_EQ(write_all(fd, buf, n), 0);
	ASSERT_EQ(shoal_xfer_link_recv(a, 2000, &f, why, sizeof why), SHOAL_OK);
	ASSERT_EQ(f.hdr.kind, SHOAL_XFER_KIND_ERROR);
	ASSERT_EQ(f.hdr.n_aux, SHOAL_ERR_BUSY);
	close(fd);
	shoal_xfer_link_free(a);
	shoal_xfer_listener_free(l);
}

/* Framing errors close the link, after an ERROR frame to the peer. */
typedef struct fatal_case {
	const char *name;
	int byte; /* offset to change (-1: none) */
	uint8_t value;
	size_t cut; /* bytes to write then close (0: all) */
	uint64_t seq;
	shoal_err want;
	const char *why_has;
	int unsealed; /* the change is not re-sealed: damage the checksums catch */
} fatal_case;

static void test_fatal_frame_corpus(void)
{
	static const fatal_case cases[] = {
	    {"wrong magic", 0, 'Z', 0, 1, SHOAL_ERR_PROTO, "bad magic"},
	    {"wrong version", 4, 9, 0, 1, SHOAL_ERR_PROTO, "version 9"},
	    {"oversized", 11, 0x7f, 0, 1, SHOAL_ERR_PROTO, "exceeds the maximum"},
	    {"seq gap", -1, 0, 0, 7, SHOAL_ERR_PROTO, "seq 7, expected 1"},
	    {"truncated then close", -1, 0, 130, 1, SHOAL_ERR_CLOSED, "mid-frame"},
	    {"half a header then close", -1, 0, 20, 1, SHOAL_ERR_CLOSED, "mid-frame"},
	    {"garbage", -2, 0, 0, 1, SHOAL_ERR_PROTO, "bad magic"},
	    {"a header bit flipped", 60, 0x40, 0, 1, SHOAL_ERR_PROTO, "header checksum", 1},
	    {"a payload bit flipped", 200, 0x01, 0, 1, SHOAL_ERR_PROTO, "hidden frame checksum", 1},
	};
	int calls = 0;
	shoal_xfer_listener *l = listener(&calls);
	shoal_log_level lv = shoal_log_get_level();
	for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
		const fatal_case *c = &cases[i];
		shoal_xfer_link *a;
		int fd = raw_pair(l, &a);
		ASSERT_GE(fd, 0);
		uint8_t buf[2048];
		char why[SHOAL_WHY_LEN] = "";
		shoal_xfer_hdr h = good_hidden(c->seq);
		size_t n = frame(buf, sizeof buf, &h, PAY);
		if (c->byte >= 0 && c->unsealed)
			buf[c->byte] ^= c->value;
		else if (c->byte >= 0) {
			buf[c->byte] = c->value;
			shoal_xfer_frame_seal(buf, n);
		}
		if (c->byte == -2)
			for (size_t k = 0; k < n; k++)
				buf[k] = (uint8_t)(k * 131 + 7);
		ASSERT_EQ(write_all(fd, buf, c->cut ? c->cut : n), 0);
		if (c->cut)
			shutdown(fd, SHUT_WR);
		shoal_xfer_frame f;
		shoal_log_set_level(SHOAL_LOG_ERROR); /* the expected warnings */
		shoal_err e = shoal_xfer_link_recv(a, 2000, &f, why, sizeof why);
		shoal_log_set_level(lv);
		if (e != c->want || !strstr(why, c->why_has))
			fprintf(stderr, "case '%s': %s \"%s\"\n", c->name, shoal_strerror(e), why);
		ASSERT_EQ(e, c->want);
		ASSERT_TRUE(strstr(why, c->why_has) != NULL);
		ASSERT_TRUE(strncmp(shoal_xfer_link_status(a), "closed (", 8) == 0);
		/* Closed for good, and the peer was told why (PROTO only). */
		ASSERT_EQ(shoal_xfer_link_recv(a, 10, &f, why, sizeof why), SHOAL_ERR_CLOSED);
		if (c->want == SHOAL_ERR_PROTO) {
			ASSERT_EQ(read_frame(fd, buf, sizeof buf), SHOAL_XFER_KIND_ERROR);
			ASSERT_EQ(buf[68], SHOAL_ERR_PROTO);
		}
		close(fd);
		shoal_xfer_link_free(a);
	}
	shoal_xfer_listener_free(l);
}

/* Before admission: garbage instead of HELLO, a HELLO whose block lies
 * about its token, a peer that says nothing. Each is refused, with an
 * ERROR frame where the peer can read one, within the handshake bound. */
typedef struct pre_job {
	uint16_t port;
	int mode; /* 0 garbage, 1 bad hello block, 2 silent */
	int got_kind, got_code;
	pthread_t th;
} pre_job;

static void *pre_main(void *p)
{
	pre_job *j = p;
	struct sockaddr_in sa = {.sin_family = AF_INET, .sin_port = htons(j->port)};
	inet_pton(AF_INET, "127.0.0.1", &sa.sin_addr);
	int fd = socket(AF_INET, SOCK_STREAM, 0);
	uint8_t buf[1024];
	j->got_kind = -1;
	if (connect(fd, (struct sockaddr *)&sa, sizeof sa)) {
		close(fd);
		return NULL;
	}
	if (j->mode == 0) {
		memset(buf, 'G', 200);
		write_all(fd, buf, 200);
	} else if (j->mode == 1) {
		uint8_t blk[SHOAL_XFER_HELLO_SIZE] = {0};
		blk[12] = 40; /* token_len 40 in a block that has none */
		shoal_xfer_hdr h = {.kind = SHOAL_XFER_KIND_HELLO, .payload_len = sizeof blk};
		write_all(fd, buf, frame(buf, sizeof buf, &h, blk));
	}
	j->got_kind = read_frame(fd, buf, sizeof buf);
	j->got_code = buf[68];
	close(fd);
	return NULL;
}

static void test_refused_before_admission(void)
{
	int calls = 0;
	shoal_xfer_config c;
	shoal_xfer_listener *l;
	char why[SHOAL_WHY_LEN];
	cfg_small(&c, 0xaa);
	c.handshake_ms = 200;
	ASSERT_EQ(shoal_xfer_listener_new(&c, "127.0.0.1", 0, admit, &calls, &l, why, sizeof why),
	          SHOAL_OK);
	static const shoal_err want[3] = {SHOAL_ERR_PROTO, SHOAL_ERR_PROTO, SHOAL_ERR_TIMEOUT};
	static const char *const has[3] = {"bad magic", "hello token of 40 bytes", "timed out"};
	shoal_log_level lv = shoal_log_get_level();
	for (int m = 0; m < 3; m++) {
		pre_job j = {.port = shoal_xfer_listener_port(l), .mode = m};
		shoal_xfer_link *a = NULL;
		pthread_create(&j.th, NULL, pre_main, &j);
		int64_t t0 = now_ms();
		shoal_log_set_level(SHOAL_LOG_ERROR);
		shoal_err e = shoal_xfer_listener_accept(l, 2000, &a, why, sizeof why);
		shoal_log_set_level(lv);
		pthread_join(j.th, NULL);
		if (e != want[m] || !strstr(why, has[m]))
			fprintf(stderr, "mode %d: %s \"%s\"\n", m, shoal_strerror(e), why);
		ASSERT_EQ(e, want[m]);
		ASSERT_TRUE(strstr(why, has[m]) != NULL);
		ASSERT_TRUE(a == NULL);
		ASSERT_LT(now_ms() - t0, 1500);
		ASSERT_EQ(j.got_kind, SHOAL_XFER_KIND_ERROR);
		ASSERT_EQ(j.got_code, want[m]);
	}
	ASSERT_EQ(calls, 0);
	shoal_xfer_listener_free(l);
}

/* ---- streams ---- */

static volatile sig_atomic_t alarms;
static void on_alarm(int s)
{
	alarms++;
}

typedef struct stream_job {
	shoal_xfer_link *link;
	int n;
	shoal_err e;
	char why[SHOAL_WHY_LEN];
} stream_job;

static size_t frame_floats(int i)
{
	/* 0..32767 floats (0..128 KiB - a bit), a different size each time. */
	return (size_t)((i * 7919u) % (32768 - 64));
}

static void *sender_main(void *p)
{
	stream_job *j = p;
	static float data[32768];
	for (int i = 0; i < j->n && !j->e; i++) {
		size_t nf = frame_floats(i) + 1;
		for (size_t k = 0; k < nf; k++)
			data[k] = (float)(i * 3 + (int)k);
		shoal_xfer_row row = {(uint64_t)i, (uint32_t)i};
		shoal_xfer_hdr h = {.kind = SHOAL_XFER_KIND_HIDDEN,
		                    .dtype = SHOAL_XFER_DTYPE_F32,
		                    .layer_first = 1,
		                    .layer_end = 2,
		                    .dim = (uint32_t)nf,
		                    .n_rows = 1,
		                    .rows = &row};
		/* Two iovecs, to exercise the gather. */
		struct iovec v[2] = {{data, nf / 2 * 4}, {data + nf / 2, (nf - nf / 2) * 4}};
		j->e = shoal_xfer_link_send(j->link, &h, v, 2, 5000, j->why, sizeof j->why);
	}
	return NULL;
}

static void test_stream_in_order_with_eintr(void)
{
	int calls = 0;
	shoal_xfer_listener *l = listener(&calls);
	shoal_xfer_link *a = NULL, *b = NULL;
	char wa[256], wb[256];
	ASSERT_EQ(pair(l, TOKEN, sizeof TOKEN, &a, &b, wa, wb), SHOAL_OK);
	shoal_xfer_link_set_plan(a, DIGEST, 3);
	shoal_xfer_link_set_plan(b, DIGEST, 3);
	/* A 2 ms interval timer without SA_RESTART: poll/read/write see EINTR. */
	struct sigaction sa = {0}, old;
	sa.sa_handler = on_alarm;
	sigaction(SIGALRM, &sa, &old);
	struct itimerval it = {{0, 2000}, {0, 2000}};
	setitimer(ITIMER_REAL, &it, NULL);

	stream_job sj = {.link = b, .n = 300};
	pthread_t th;
	pthread_create(&th, NULL, sender_main, &sj);
	int bad = 0;
	for (int i = 0; i < sj.n; i++) {
		shoal_xfer_frame f;
		char why[SHOAL_WHY_LEN];
		shoal_err e = shoal_xfer_link_recv(a, 5000, &f, why, sizeof why);
		if (e) {
			fprintf(stderr, "frame %d: %s\n", i, why);
			bad++;
			break;
		}
		size_t nf = frame_floats(i) + 1;
		const float *x = (const float *)f.payload;
		if (f.hdr.rows[0].session != (uint64_t)i || f.hdr.dim != nf ||
		    x[0] != (float)(i * 3) || x[nf - 1] != (float)(i * 3 + (int)nf - 1))
			bad++;
	}
	pthread_join(th, NULL);
	struct itimerval off = {{0, 0}, {0, 0}};
	setitimer(ITIMER_REAL, &off, NULL);
	sigaction(SIGALRM, &old, NULL);
	if (sj.e)
		fprintf(stderr, "sender: %s\n", sj.why);
	ASSERT_EQ(sj.e, SHOAL_OK);
	ASSERT_EQ(bad, 0);
	ASSERT_GT(alarms, 0); /* the signals did come */
	shoal_xfer_metrics ma, mb;
	shoal_xfer_link_metrics(a, &ma);
	shoal_xfer_link_metrics(b, &mb);
	ASSERT_U64_EQ(ma.frames_recv[SHOAL_XFER_KIND_HIDDEN], 300);
	ASSERT_U64_EQ(mb.frames_sent[SHOAL_XFER_KIND_HIDDEN], 300);
	ASSERT_U64_EQ(ma.bytes_recv[SHOAL_XFER_KIND_HIDDEN], mb.bytes_sent[SHOAL_XFER_KIND_HIDDEN]);
	shoal_xfer_link_free(a);
	shoal_xfer_link_free(b);
	shoal_xfer_listener_free(l);
}

/* A peer that never reads: the send times out, it does not hang. */
static void test_send_timeout(void)
{
	int calls = 0;
	shoal_xfer_listener *l = listener(&calls);
	shoal_xfer_link *a = NULL, *b = NULL;
	char wa[256], wb[256], why[SHOAL_WHY_LEN] = "";
	ASSERT_EQ(pair(l, TOKEN, sizeof TOKEN, &a, &b, wa, wb), SHOAL_OK);
	shoal_xfer_link_set_plan(b, DIGEST, 3);
	static uint8_t big[(1 << 17) - 256];
	shoal_xfer_row row = {1, 1};
	shoal_xfer_hdr h = {.kind = SHOAL_XFER_KIND_HIDDEN,
	                    .dtype = SHOAL_XFER_DTYPE_U8,
	                    .layer_first = 0,
	                    .layer_end = 1,
	                    .dim = sizeof big,
	                    .n_rows = 1,
	                    .rows = &row};
	struct iovec v = {big, sizeof big};
	shoal_err e = SHOAL_OK;
	int sent = 0;
	int64_t t0 = now_ms();
	while (!e && sent < 10000) {
		e = shoal_xfer_link_send(b, &h, &v, 1, 100, why, sizeof why);
		sent += !e;
	}
	ASSERT_EQ(e, SHOAL_ERR_TIMEOUT);
	ASSERT_GT(sent, 0);
	ASSERT_LT(now_ms() - t0, 10000);
	/* Timed out mid-frame: the stream is broken and the link says so. */
	if (strstr(why, "after 0 of") == NULL)
		ASSERT_TRUE(strncmp(shoal_xfer_link_status(b), "closed (send timed out", 22) == 0);
	shoal_xfer_link_free(a);
	shoal_xfer_link_free(b);
	shoal_xfer_listener_free(l);
}

/* The peer said goodbye and closed while we did not read (a process
 * stopped, or busy computing): our next sends fail, and the link tells
 * that the end was the peer's goodbye, not a crash. A peer that closes
 * without a goodbye is not taken for one. */
static void test_send_after_goodbye(void)
{
	shoal_xfer_listener *l = listener(NULL);
	ASSERT_TRUE(l != NULL);
	char wa[SHOAL_WHY_LEN] = "", wb[SHOAL_WHY_LEN] = "", why[SHOAL_WHY_LEN];
	static float h[1024];
	shoal_xfer_row row = {5, 0};
	shoal_xfer_hdr hd = {.kind = SHOAL_XFER_KIND_HIDDEN,
	                     .dtype = SHOAL_XFER_DTYPE_F32,
	                     .layer_first = 0,
	                     .layer_end = 1,
	                     .dim = 1024,
	                     .n_rows = 1,
	                     .rows = &row};
	struct iovec v = {.iov_base = h, .iov_len = sizeof h};
	for (int bye = 1; bye >= 0; bye--) {
		shoal_xfer_link *a = NULL, *b = NULL;
		ASSERT_EQ(pair(l, TOKEN, sizeof TOKEN, &a, &b, wa, wb), SHOAL_OK);
		shoal_xfer_link_set_plan(b, DIGEST, 1);
		if (bye)
			shoal_xfer_link_bye(a, "the plan changed");
		shoal_xfer_link_free(a);
		usleep(20000);
		ASSERT_EQ(shoal_xfer_link_peer_bye(b), 0); /* nothing read yet */
		shoal_err e = SHOAL_OK;
		for (int i = 0; i < 100 && e == SHOAL_OK; i++) {
			e = shoal_xfer_link_send(b, &hd, &v, 1, 1000, why, sizeof why);
			if (e == SHOAL_OK)
				usleep(2000); /* the peer's RST comes back */
		}
		ASSERT_TRUE(e == SHOAL_ERR_CLOSED || e == SHOAL_ERR_IO);
		ASSERT_EQ(shoal_xfer_link_is_open(b), 0);
		ASSERT_EQ(shoal_xfer_link_peer_bye(b), bye);
		shoal_xfer_link_free(b);
	}
	shoal_xfer_listener_free(l);
}

TEST_MAIN(TEST_CASE(test_admission_and_one_frame), TEST_CASE(test_bad_and_missing_token),
          TEST_CASE(test_refused_before_admission), TEST_CASE(test_frames_dropped_link_stays),
          TEST_CASE(test_fatal_frame_corpus), TEST_CASE(test_stream_in_order_with_eintr),
          TEST_CASE(test_send_timeout), TEST_CASE(test_send_after_goodbye))

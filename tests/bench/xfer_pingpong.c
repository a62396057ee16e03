/*
 * tests/bench/xfer_pingpong.c: latency of one data-plane hop over loopback
 * TCP, for decode-sized frames: 256 B and 1 row x 4096 f32 (16 KiB).
 *
 * Not a test (it asserts nothing): two threads, one link; the client sends
 * a HIDDEN frame, the server echoes it back. Prints the round trip and the
 * one-way estimate (RTT / 2) in microseconds, median and p99, over
 * `iters` round trips after a warm-up; then the same ping-pong over a bare
 * TCP_NODELAY socket pair (blocking write/read of the same bytes), so the
 * difference is what the link adds per hop. Usage: xfer_pingpong [iters]
 */
#include "net/xfer.h"

#include <netinet/in.h>
#include <netinet/tcp.h>
#include <arpa/inet.h>
#include <pthread.h>
#include <sys/socket.h>
#include <unistd.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static const uint8_t TOKEN[] = "bench";
static const uint8_t DIGEST[32] = {9};

static int admit(void *ctx, const uint8_t peer[16], const char *addr, const uint8_t *t, size_t n)
{
	return n == sizeof TOKEN && !memcmp(t, TOKEN, n);
}

static double now_us(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec * 1e6 + ts.tv_nsec / 1e3;
}

static int cmp_d(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;
	return (x > y) - (x < y);
}

typedef struct echo_job {
	shoal_xfer_listener *l;
	int total;
} echo_job;

/* Accept one link and echo `total` frames back. */
static void *echo_main(void *p)
{
	echo_job *j = p;
	shoal_xfer_link *k;
	char why[SHOAL_WHY_LEN];
	if (shoal_xfer_listener_accept(j->l, 5000, &k, why, sizeof why)) {
		fprintf(stderr, "accept: %s\n", why);
		return NULL;
	}
	shoal_xfer_link_set_plan(k, DIGEST, 1);
	for (int i = 0; i < j->total; i++) {
		shoal_xfer_frame f;
		if (shoal_xfer_link_recv(k, 5000, &f, why, sizeof why)) {
			fprintf(stderr, "echo recv: %s\n", why);
			break;
		}
		struct iovec v = {(void *)f.payload, f.hdr.payload_len};
		if (shoal_xfer_link_send(k, &f.hdr, &v, 1, 5000, why, sizeof why)) {
			fprintf(stderr, "echo send: %s\n", why);
			break;
		}
	}
	shoal_xfer_link_free(k);
	return NULL;
}

/* ---- the bare-socket baseline ---- */

static int io_all(int fd, void *p, size_t n, int wr)
{
	uint8_t *b = p;
	while (n) {
		ssize_t k = wr ? write(fd, b, n) : read(fd, b, n);
		if (k <= 0)
			return -1;
		b += k;
		n -= (size_t)k;
	}
	return 0;
}

typedef struct raw_echo {
	int lfd, total;
	size_t size[2];
} raw_echo;

static void *raw_echo_main(void *p)
{
	raw_echo *j = p;
	static uint8_t buf[1 << 16];
	int fd = accept(j->lfd, NULL, NULL), one = 1;
	setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
	for (int s = 0; s < 2; s++)
		for (int i = 0; i < j->total; i++)
			if (io_all(fd, buf, j->size[s], 0) || io_all(fd, buf, j->size[s], 1))
				goto out;
out:
	close(fd);
	return NULL;
}

/* Medians and p99 of the bare ping-pong for both sizes; 0 on success. */
static int raw_baseline(int iters, int warm, const size_t sizes[2], double *rtt)
{
	struct sockaddr_in sa = {.sin_family = AF_INET};
	socklen_t sl = sizeof sa;
	inet_pton(AF_INET, "127.0.0.1", &sa.sin_addr);
	int lfd = socket(AF_INET, SOCK_STREAM, 0), one = 1;
	if (bind(lfd, (struct sockaddr *)&sa, sizeof sa) || listen(lfd, 1) ||
	    getsockname(lfd, (struct sockaddr *)&sa, &sl))
		return -1;
	raw_echo ej = {.lfd = lfd, .total = iters + warm, .size = {sizes[0], sizes[1]}};
	pthread_t th;
	pthread_create(&th, NULL, raw_echo_main, &ej);
	int fd = socket(AF_INET, SOCK_STREAM, 0);
	if (connect(fd, (struct sockaddr *)&sa, sizeof sa))
		return -1;
	setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
	static uint8_t buf[1 << 16];
	for (int s = 0; s < 2; s++) {
		for (int i = 0; i < iters + warm; i++) {
			double t0 = now_us();
			if (io_all(fd, buf, sizes[s], 1) || io_all(fd, buf, sizes[s], 0))
				return -1;
			if (i >= warm)
				rtt[i - warm] = now_us() - t0;
		}
		qsort(rtt, (size_t)iters, sizeof *rtt, cmp_d);
		printf("  %5zu B bare tcp:    rtt median %7.1f us  p99 %7.1f us\n", sizes[s],
		       rtt[iters / 2], rtt[(size_t)(iters * 0.99)]);
	}
	close(fd);
	pthread_join(th, NULL);
	close(lfd);
	return 0;
}

int main(int argc, char **argv)
{
	int iters = argc > 1 ? atoi(argv[1]) : 20000;
	int warm = iters / 10;
	static const size_t sizes[2] = {256, 16384};
	shoal_xfer_config cfg;
	shoal_xfer_config_default(&cfg);
	cfg.verbs = NULL;
	char why[SHOAL_WHY_LEN];
	shoal_xfer_listener *l;
	if (shoal_xfer_listener_new(&cfg, "127.0.0.1", 0, admit, NULL, &l, why, sizeof why)) {
		fprintf(stderr, "listen: %s\n", why);
		return 1;
	}
	echo_job ej = {.l = l, .total = 2 * (iters + warm)};
	pthread_t th;
	pthread_create(&th, NULL, echo_main, &ej);
	shoal_xfer_link *k;
	if (shoal_xfer_link_connect(&cfg, "127.0.0.1", shoal_xfer_listener_port(l), TOKEN,
	                            sizeof TOKEN, &k, why, sizeof why)) {
		fprintf(stderr, "connect: %s\n", why);
		return 1;
	}
	shoal_xfer_link_set_plan(k, DIGEST, 1);
	double *rtt = calloc((size_t)iters, sizeof *rtt);
	static float payload[4096];
	printf("xfer_pingpong: loopback tcp, %d round trips per size (link: %s)\n", iters,
	       shoal_xfer_link_status(k));
	for (int s = 0; s < 2; s++) {
		shoal_xfer_row row = {1, 0};
		/* 256 B: 1 row x 64 f32 is 256 B of payload (+112 B of header). */
		uint32_t dim = (uint32_t)(sizes[s] / 4);
		shoal_xfer_hdr h = {.kind = SHOAL_XFER_KIND_HIDDEN,
		                    .dtype = SHOAL_XFER_DTYPE_F32,
		                    .layer_first = 0,
		                    .layer_end = 1,
		                    .dim = dim,
		                    .n_rows = 1,
		                    .rows = &row};
		struct iovec v = {payload, sizes[s]};
		for (int i = 0; i < iters + warm; i++) {
			shoal_xfer_frame f;
			row.pos = (uint32_t)i;
			double t0 = now_us();
			if (shoal_xfer_link_send(k, &h, &v, 1, 5000, why, sizeof why) ||
			    shoal_xfer_link_recv(k, 5000, &f, why, sizeof why)) {
				fprintf(stderr, "ping: %s\n", why);
				return 1;
			}
			if (i >= warm)
				rtt[i - warm] = now_us() - t0;
		}
		qsort(rtt, (size_t)iters, sizeof *rtt, cmp_d);
		double med = rtt[iters / 2], p99 = rtt[(size_t)(iters * 0.99)];
		printf("  %5zu B payload: rtt median %7.1f us  p99 %7.1f us | one-way median %6.1f "
		       "us  p99 %6.1f us\n",
		       sizes[s], med, p99, med / 2, p99 / 2);
	}
	shoal_xfer_metrics m;
	shoal_xfer_link_metrics(k, &m);
	printf("  frames sent %llu, received %llu (hidden)\n",
	       (unsigned long long)m.frames_sent[SHOAL_XFER_KIND_HIDDEN],
	       (unsigned long long)m.frames_recv[SHOAL_XFER_KIND_HIDDEN]);
	pthread_join(th, NULL);
	shoal_xfer_link_free(k);
	shoal_xfer_listener_free(l);
	if (raw_baseline(iters, warm, sizes, rtt))
		fprintf(stderr, "bare tcp baseline failed\n");
	free(rtt);
	return 0;
}

/*
 * tests/unit/test_xfer_util.h: what the data-plane tests over loopback TCP
 * share: the admission token and callback, a small link configuration,
 * and raw-socket helpers for peers that speak the wire format by hand.
 */
#ifndef SHOAL_TESTS_TEST_XFER_UTIL_H
#define SHOAL_TESTS_TEST_XFER_UTIL_H

#include <stdint.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "net/xfer.h"

static const uint8_t TOKEN[] = "token-for-peer-b";

static inline int64_t now_ms(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

/* Admit exactly peer id [0xbb...] with TOKEN; counts the calls in *(int
 * *)ctx unless ctx is NULL. */
static inline int admit(void *ctx, const uint8_t peer[SHOAL_PEER_ID_LEN], const char *addr,
                        const uint8_t *tok, size_t n)
{
	(void)addr;
	if (ctx)
		(*(int *)ctx)++;
	return peer[0] == 0xbb && n == sizeof TOKEN && !memcmp(tok, TOKEN, n);
}

/* 128 KiB frames, 16 rows, 64 routes, no RDMA, a 3 s handshake. */
static inline void cfg_small(shoal_xfer_config *c, uint8_t id)
{
	shoal_xfer_config_default(c);
	c->verbs = NULL;
	c->max_frame = 1 << 17;
	c->max_rows = 16;
	c->max_routes = 64;
	c->handshake_ms = 3000;
	memset(c->self_id, id, SHOAL_PEER_ID_LEN);
}

static inline int write_all(int fd, const void *p, size_t n)
{
	const uint8_t *b = p;
	while (n) {
		ssize_t k = write(fd, b, n);
		if (k <= 0)
			return -1;
		b += k;
		n -= (size_t)k;
	}
	return 0;
}

/* Read one whole frame from a blocking socket; returns its kind or -1. */
static inline int read_frame(int fd, uint8_t *buf, size_t cap)
{
	size_t have = 0, need = SHOAL_XFER_HDR_SIZE;
	while (have < need) {
		ssize_t k = read(fd, buf + have, need - have);
		if (k <= 0)
			return -1;
		have += (size_t)k;
		if (have == SHOAL_XFER_HDR_SIZE) {
			need = buf[8] | buf[9] << 8 | buf[10] << 16 | (size_t)buf[11] << 24;
			if (need > cap || need < SHOAL_XFER_HDR_SIZE)
				return -1;
		}
	}
	return buf[6];
}

#endif

/*
 * tests/fuzz/fuzz_xfer_stream.c: libFuzzer target for the reassembly of
 * data-plane frames from a TCP byte stream (net/xfer_tcp.c tcp_recv): the
 * stream is written into a socketpair in chunks of fuzzed sizes, each
 * followed by receives that do not wait, then the writer closes. Every
 * frame handed out is a whole frame of its own length, within max_frame,
 * and the frames handed out are, in order, exactly the stream's first
 * bytes; a receive error (bad framing, a checksum, EOF) ends the stream.
 *
 * Input: byte 0 bit 0 says to seal the frames the stream starts with (the
 * fuzzer cannot forge CRC-32C; unsealed, the checks themselves are
 * fuzzed), bytes 1..8 the chunk sizes (1..256 each, in turn), the rest the
 * stream.
 *
 *   make fuzz-build && tests/fuzz/fuzz_xfer_stream -max_total_time=60 CORPUS
 */
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "net/xfer_impl.h"
#include "tests/fuzz/fuzz_seed.h"

#define S_MAX_FRAME 4096u /* the receiver's max_frame: small, so the bound is reached */

static uint32_t get32le(const uint8_t *p)
{
	return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

/* Seal the whole frames at the start of s[n] (stops at the first that is
 * none: too short, or a length outside 96..what is left). */
static void seal_frames(uint8_t *s, size_t n)
{
	size_t o = 0;
	while (n - o >= SHOAL_XFER_HDR_SIZE) {
		uint32_t fl = get32le(s + o + 8);
		if (fl < SHOAL_XFER_HDR_SIZE || fl > n - o)
			return;
		shoal_xfer_frame_seal(s + o, fl);
		o += fl;
	}
}

/* Two sealed frames in one stream: a seed. */
static void seeds(void)
{
	uint8_t s[9 + 2 * 256];
	shoal_xfer_hdr h = {
	    .kind = SHOAL_XFER_KIND_PROBE, .dtype = SHOAL_XFER_DTYPE_U8, .payload_len = 100};
	size_t head, n = 9;
	s[0] = 1;
	for (int i = 1; i < 9; i++)
		s[i] = (uint8_t)(i * 37);
	for (int k = 0; k < 2; k++) {
		if (shoal_xfer_frame_encode_head(&h, s + n, sizeof s - n, &head))
			abort();
		memset(s + n + head, 0x40 + k, h.payload_len);
		n += head + h.payload_len;
		h.kind = SHOAL_XFER_KIND_ERROR;
		h.n_aux = SHOAL_ERR_PROTO;
		h.payload_len = 8;
	}
	fuzz_seed("stream", s, n);
}

/* Each check has its own message: -O1 may merge plain abort() calls, and
 * the stack trace then names the wrong line. */
static void die(const char *what, const char *detail)
{
	fprintf(stderr, "fuzz_xfer_stream: %s: %s\n", what, detail);
	abort();
}

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
	seeds();
	return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	if (size < 9 || size > 9 + 65536)
		return 0;
	int sv[2];
	if (socketpair(AF_UNIX, SOCK_STREAM, 0, sv))
		die("socketpair", strerror(errno));
	size_t n = size - 9;
	uint8_t *s = malloc(n ? n : 1);
	memcpy(s, data + 9, n);
	if (data[0] & 1)
		seal_frames(s, n);
	xfer__tcp *t;
	char why[SHOAL_WHY_LEN];
	if (xfer__tcp_new(sv[0], S_MAX_FRAME, &t, why, sizeof why)) {
		close(sv[0]);
		close(sv[1]);
		free(s);
		return 0;
	}
	size_t written = 0, got = 0; /* stream bytes written, handed out as frames */
	int done = 0;
	for (unsigned c = 0; !done; c++) {
		if (written < n) {
			size_t k = 1 + data[1 + c % 8];
			if (k > n - written)
				k = n - written;
			ssize_t w = write(sv[1], s + written, k);
			if (w < 0 && errno == EINTR)
				continue; /* libFuzzer's -timeout alarm: write again from the same
				             offset */
			if (w <= 0)
				die("write", w ? strerror(errno) : "wrote nothing");
			written += (size_t)w;
		} else {
			close(sv[1]);
			sv[1] = -1;
		}
		for (;;) {
			const uint8_t *buf;
			size_t len;
			why[0] = '\0'; /* an error must say why: no stale message counts */
			shoal_err e = xfer__tcp_ops.recv(t, 0, &buf, &len, why, sizeof why);
			if (e == SHOAL_ERR_TIMEOUT && sv[1] >= 0)
				break;
			if (e) {
				if (!why[0])
					die("an error without a message", shoal_strerror(e));
				if (e == SHOAL_ERR_TIMEOUT) /* closed: never waits */
					die("a wait on a closed stream", why);
				done = 1;
				break;
			}
			if (len < SHOAL_XFER_HDR_SIZE || len > S_MAX_FRAME ||
			    get32le(buf + 8) != len || got + len > written ||
			    memcmp(buf, s + got, len))
				die("a frame that is not the stream's next bytes", "");
			got += len;
		}
	}
	if (sv[1] >= 0)
		close(sv[1]);
	xfer__tcp_ops.free(t);
	free(s);
	return 0;
}

/*
 * tests/fuzz/fuzz_xfer_frame.c: libFuzzer target for the data-plane frame
 * decoder (net/xfer_frame.c): the framing peek, the whole-frame decoder and
 * the HELLO and RDMA_QP payload blocks. Any bytes decode or give an error
 * with a reason; a decoded frame's rows, routes and payload are inside the
 * limits and the input, and its head encodes back to the input's bytes
 * (the paddings and reserved bytes are checked to be zero: one encoding;
 * the TCP transport's checksum fields excepted, which sealing fills so
 * that both checks pass).
 *
 *   make fuzz-build && tests/fuzz/fuzz_xfer_frame -max_total_time=60 CORPUS
 */
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "net/xfer_frame.h"
#include "tests/fuzz/fuzz_seed.h"

#define F_MAX_ROWS   8
#define F_MAX_ROUTES 16
static const shoal_xfer_limits f_lim = {
    .max_frame = 1u << 16, .max_rows = F_MAX_ROWS, .max_routes = F_MAX_ROUTES};

static void seed(const shoal_xfer_hdr *h, const void *payload)
{
	static uint8_t buf[4096];
	size_t head;
	if (shoal_xfer_frame_encode_head(h, buf, sizeof buf, &head) ||
	    head + h->payload_len > sizeof buf)
		abort();
	memcpy(buf + head, payload, h->payload_len);
	fuzz_seed("frame", buf, head + h->payload_len);
}

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
	static const shoal_xfer_row rows[2] = {{.session = 5, .pos = 0}, {.session = 6, .pos = 9}};
	static const shoal_xfer_route routes[3] = {{.row = 0, .expert = 3, .gate = 0.5f},
	                                           {.row = 1, .expert = 1, .gate = 0.25f},
	                                           {.row = 1, .expert = 7, .gate = 0.75f}};
	static float vec[3 * 4];
	for (int i = 0; i < 12; i++)
		vec[i] = (float)i * 0.5f - 2;
	shoal_xfer_hdr h = {.kind = SHOAL_XFER_KIND_HIDDEN,
	                    .dtype = SHOAL_XFER_DTYPE_F32,
	                    .layer_first = 2,
	                    .layer_end = 4,
	                    .dim = 4,
	                    .epoch = 3,
	                    .seq = 1,
	                    .credits = 8,
	                    .n_rows = 2,
	                    .rows = rows,
	                    .payload_len = 2 * 4 * 4};
	memset(h.digest, 0xd1, sizeof h.digest);
	seed(&h, vec);
	h.kind = SHOAL_XFER_KIND_EXPERT_REQ;
	h.n_aux = 3;
	h.routes = routes;
	seed(&h, vec);
	h.kind = SHOAL_XFER_KIND_EXPERT_REP;
	h.payload_len = 3 * 4 * 4;
	seed(&h, vec);
	int32_t toks[2] = {17, 4000};
	h = (shoal_xfer_hdr){.kind = SHOAL_XFER_KIND_TOKEN,
	                     .dtype = SHOAL_XFER_DTYPE_I32,
	                     .layer_first = 4,
	                     .layer_end = 4,
	                     .dim = 1,
	                     .n_rows = 2,
	                     .rows = rows,
	                     .payload_len = sizeof toks};
	seed(&h, toks);
	shoal_xfer_hello hl = {.flags = SHOAL_XFER_HELLO_RDMA,
	                       .max_frame = 1u << 20,
	                       .rdma_slots = 16,
	                       .device = "mlx5_0",
	                       .token_len = 32};
	memset(hl.peer, 0xab, sizeof hl.peer);
	memset(hl.token, 0x5c, hl.token_len);
	uint8_t hb[SHOAL_XFER_HELLO_SIZE + SHOAL_XFER_TOKEN_MAX];
	size_t hn = shoal_xfer_hello_encode(&hl, hb, sizeof hb);
	h = (shoal_xfer_hdr){.kind = SHOAL_XFER_KIND_HELLO,
	                     .dtype = SHOAL_XFER_DTYPE_U8,
	                     .payload_len = (uint32_t)hn};
	seed(&h, hb);
	shoal_xfer_qp_info q = {
	    .qpn = 77, .psn = 123, .lid = 4, .mtu = 4096, .slots = 16, .slot_size = 65536};
	uint8_t qb[SHOAL_XFER_QPINFO_SIZE];
	shoal_xfer_qp_info_encode(&q, qb);
	h = (shoal_xfer_hdr){.kind = SHOAL_XFER_KIND_RDMA_QP,
	                     .dtype = SHOAL_XFER_DTYPE_U8,
	                     .payload_len = sizeof qb};
	seed(&h, qb);
	h = (shoal_xfer_hdr){.kind = SHOAL_XFER_KIND_ERROR,
	                     .dtype = SHOAL_XFER_DTYPE_U8,
	                     .n_aux = SHOAL_ERR_PROTO,
	                     .payload_len = 8};
	seed(&h, "bad plan");
	return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	static shoal_xfer_row rows[F_MAX_ROWS];
	static shoal_xfer_route routes[F_MAX_ROUTES];
	static uint8_t head[SHOAL_XFER_HDR_SIZE + F_MAX_ROWS * SHOAL_XFER_ROW_SIZE +
	                    F_MAX_ROUTES * SHOAL_XFER_ROUTE_SIZE + 16];
	char why[SHOAL_WHY_LEN];
	uint32_t flen = 0;
	shoal_xfer_hdr h;
	const uint8_t *payload = NULL;
	shoal_xfer_hello hl;
	shoal_xfer_qp_info q;

	/* the payload blocks on their own */
	shoal_xfer_hello_decode(data, size, &hl, why, sizeof why);
	if (!shoal_xfer_qp_info_decode(data, size, &q, why, sizeof why)) {
		uint8_t qb[SHOAL_XFER_QPINFO_SIZE];
		shoal_xfer_qp_info_encode(&q, qb);
		if (memcmp(qb, data, sizeof qb))
			abort();
	}
	why[0] = 0;
	if (shoal_xfer_frame_peek(data, size, f_lim.max_frame, &flen, why, sizeof why)) {
		if (!why[0])
			abort();
	} else if (flen < SHOAL_XFER_HDR_SIZE || flen > f_lim.max_frame) {
		abort();
	}
	why[0] = 0;
	if (shoal_xfer_frame_decode(data, size, &f_lim, &h, rows, routes, &payload, why,
	                            sizeof why)) {
		if (!why[0])
			abort();
		return 0;
	}
	if (flen != size || h.n_rows > F_MAX_ROWS || (h.n_rows && h.rows != rows) ||
	    (h.routes && (h.routes != routes || h.n_aux > F_MAX_ROUTES)))
		abort();
	if (payload < data || payload + h.payload_len != data + size)
		abort();
	for (uint32_t i = 0; h.routes && i < h.n_aux; i++)
		if (h.routes[i].row >= h.n_rows || !isfinite(h.routes[i].gate))
			abort();
	/* one encoding, but for the TCP transport's checksums (84..91), which
	 * the decoder leaves alone; sealed, the frame passes both checks */
	size_t hlen;
	const size_t crc = SHOAL_XFER_OFF_HEAD_CRC, after = SHOAL_XFER_OFF_BODY_CRC + 4;
	if (shoal_xfer_frame_encode_head(&h, head, sizeof head, &hlen) ||
	    hlen != (size_t)(payload - data) || memcmp(head, data, crc) ||
	    memcmp(head + after, data + after, hlen - after))
		abort();
	uint8_t *sealed = malloc(size);
	memcpy(sealed, data, size);
	shoal_xfer_frame_seal(sealed, size);
	if (shoal_xfer_frame_check_head(sealed, why, sizeof why) ||
	    shoal_xfer_frame_check_body(sealed, size, why, sizeof why))
		abort();
	free(sealed);
	if (h.kind == SHOAL_XFER_KIND_HELLO || h.kind == SHOAL_XFER_KIND_HELLO_ACK)
		shoal_xfer_hello_decode(payload, h.payload_len, &hl, why, sizeof why);
	return 0;
}

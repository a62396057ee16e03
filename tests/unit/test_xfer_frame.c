/*
 * tests/unit/test_xfer_frame.c: the data-plane frame codec (net/xfer_frame.h):
 * round trips of every kind, the byte layout at fixed offsets, and a
 * corpus of broken frames, each rejected with the error and reason it
 * deserves (invariants 1-8), plus random bytes that must never crash;
 * the frame checksums, and CRC-32C's hardware path against its scalar twin.
 */
#include "net/xfer_frame.h"

#include <stdint.h>
#include <string.h>
#include <time.h>

#include "tests/unit/test.h"

static const shoal_xfer_limits LIM = {.max_frame = 1 << 16, .max_rows = 8, .max_routes = 16};

static uint8_t buf[1 << 17];
static shoal_xfer_row rows_out[8];
static shoal_xfer_route routes_out[16];

/* Encode h + payload into buf; returns the frame length. */
static size_t build(const shoal_xfer_hdr *h, const void *payload)
{
	size_t head;
	if (shoal_xfer_frame_encode_head(h, buf, sizeof buf, &head))
		return 0;
	memcpy(buf + head, payload, h->payload_len);
	return head + h->payload_len;
}

static shoal_err dec(size_t len, shoal_xfer_hdr *h, const uint8_t **pl, char *why)
{
	return shoal_xfer_frame_decode(buf, len, &LIM, h, rows_out, routes_out, pl, why, 160);
}

static const shoal_xfer_row ROWS[3] = {{7, 100}, {0x1122334455667788ull, 0}, {9, 4095}};
static const shoal_xfer_route ROUTES[4] = {
    {0, 3, 0.5f}, {0, 17, 0.25f}, {2, 3, 1.0f}, {1, 60, -2.f}};
static float vecs[4 * 8];

static shoal_xfer_hdr expert_req(void)
{
	shoal_xfer_hdr h = {.kind = SHOAL_XFER_KIND_EXPERT_REQ,
	                    .dtype = SHOAL_XFER_DTYPE_F32,
	                    .layer_first = 5,
	                    .layer_end = 6,
	                    .dim = 8,
	                    .epoch = 42,
	                    .seq = 3,
	                    .n_rows = 3,
	                    .rows = ROWS,
	                    .n_aux = 4,
	                    .routes = ROUTES,
	                    .payload_len = 3 * 8 * 4};
	for (int i = 0; i < 32; i++)
		h.digest[i] = (uint8_t)(i * 7);
	return h;
}

static void test_round_trip_expert_req(void)
{
	for (int i = 0; i < 32; i++)
		vecs[i] = (float)i * 0.5f;
	shoal_xfer_hdr h = expert_req(), g;
	size_t n = build(&h, vecs);
	/* 96 + 3*16 + 4*12 = 192, already a multiple of 16; + 96 payload. */
	ASSERT_EQ(n, 192 + 96);
	const uint8_t *pl;
	char why[SHOAL_WHY_LEN] = "";
	ASSERT_EQ(dec(n, &g, &pl, why), SHOAL_OK);
	ASSERT_EQ(g.kind, SHOAL_XFER_KIND_EXPERT_REQ);
	ASSERT_EQ(g.layer_first, 5);
	ASSERT_EQ(g.layer_end, 6);
	ASSERT_U64_EQ(g.epoch, 42);
	ASSERT_U64_EQ(g.seq, 3);
	ASSERT_MEM_EQ(g.digest, h.digest, 32);
	ASSERT_EQ(g.n_rows, 3);
	ASSERT_U64_EQ(g.rows[1].session, 0x1122334455667788ull);
	ASSERT_EQ(g.rows[2].pos, 4095);
	ASSERT_EQ(g.n_aux, 4);
	ASSERT_EQ(g.routes[3].expert, 60);
	ASSERT_EQ(g.routes[3].row, 1);
	ASSERT_NEAR(g.routes[3].gate, -2.0, 0);
	ASSERT_EQ(pl - buf, 192);
	ASSERT_MEM_EQ(pl, vecs, 96);
}

/* The layout is a wire format: pin some offsets byte by byte. */
static void test_layout_bytes(void)
{
	shoal_xfer_hdr h = expert_req();
	h.credits = 0x01020304;
	size_t n = build(&h, vecs);
	ASSERT_MEM_EQ(buf, "SHXF", 4);
	ASSERT_EQ(buf[4], 1);
	ASSERT_EQ(buf[5], 0);
	ASSERT_EQ(buf[6], SHOAL_XFER_KIND_EXPERT_REQ);
	ASSERT_EQ(buf[8] | buf[9] << 8 | buf[10] << 16, n);
	ASSERT_EQ(buf[16 + 31], (uint8_t)(31 * 7));
	ASSERT_EQ(buf[48], 42);
	ASSERT_EQ(buf[SHOAL_XFER_OFF_CREDITS], 4);
	ASSERT_EQ(buf[SHOAL_XFER_OFF_CREDITS + 3], 1);
	ASSERT_EQ(buf[96], 7);       /* row 0 session, low byte */
	ASSERT_EQ(buf[96 + 8], 100); /* row 0 position */
	ASSERT_EQ(buf[96 + 16], 0x88);
	ASSERT_EQ(buf[96 + 48 + 4], 3); /* route 0 expert */
}

static void test_round_trip_each_kind(void)
{
	static const shoal_xfer_row r1[1] = {{5, 6}};
	int32_t tok[2] = {1234, -1};
	shoal_xfer_hdr hs[] = {
	    {.kind = SHOAL_XFER_KIND_HIDDEN,
	     .dtype = SHOAL_XFER_DTYPE_BF16,
	     .layer_first = 0,
	     .layer_end = 12,
	     .dim = 4,
	     .n_rows = 1,
	     .rows = r1,
	     .payload_len = 8},
	    {.kind = SHOAL_XFER_KIND_TOKEN,
	     .dtype = SHOAL_XFER_DTYPE_I32,
	     .layer_first = 24,
	     .layer_end = 24,
	     .dim = 2,
	     .n_rows = 1,
	     .rows = r1,
	     .payload_len = 8},
	    {.kind = SHOAL_XFER_KIND_EXPERT_REP,
	     .dtype = SHOAL_XFER_DTYPE_F16,
	     .layer_first = 3,
	     .layer_end = 4,
	     .dim = 1,
	     .n_rows = 1,
	     .rows = r1,
	     .n_aux = 2,
	     .routes = ROUTES,
	     .payload_len = 4},
	    {.kind = SHOAL_XFER_KIND_ERROR, .n_aux = SHOAL_ERR_AUTH, .payload_len = 6},
	    {.kind = SHOAL_XFER_KIND_CREDIT, .credits = 9},
	    {.kind = SHOAL_XFER_KIND_RDMA_VERDICT},
	    {.kind = SHOAL_XFER_KIND_PROBE, .dtype = SHOAL_XFER_DTYPE_U8, .payload_len = 3},
	    {.kind = SHOAL_XFER_KIND_SESSION,
	     .dtype = SHOAL_XFER_DTYPE_I32,
	     .dim = 2,
	     .n_rows = 1,
	     .rows = r1,
	     .payload_len = 8},
	};
	for (size_t i = 0; i < sizeof hs / sizeof hs[0]; i++) {
		shoal_xfer_hdr g;
		const uint8_t *pl;
		char why[SHOAL_WHY_LEN] = "";
		const void *p = hs[i].kind == SHOAL_XFER_KIND_ERROR ? (const void *)"denied"
		                                                    : (const void *)tok;
		size_t n = build(&hs[i], p);
		shoal_err e = dec(n, &g, &pl, why);
		if (e)
			fprintf(stderr, "kind %s: %s\n", shoal_xfer_kind_name(hs[i].kind), why);
		ASSERT_EQ(e, SHOAL_OK);
		ASSERT_EQ(g.kind, hs[i].kind);
		ASSERT_EQ(g.payload_len, hs[i].payload_len);
		ASSERT_EQ(g.credits, hs[i].credits);
		ASSERT_EQ((pl - buf) % 16, 0);
		ASSERT_MEM_EQ(pl, p, g.payload_len);
	}
}

static void test_hello_and_qp_blocks(void)
{
	shoal_xfer_hello a = {.flags = SHOAL_XFER_HELLO_RDMA,
	                      .max_frame = 65536,
	                      .rdma_slots = 8,
	                      .token_len = 5},
	                 b;
	memcpy(a.token, "token", 5);
	memcpy(a.device, "mlx5_0", 7);
	a.peer[15] = 0xee;
	uint8_t blk[256];
	char why[SHOAL_WHY_LEN];
	size_t n = shoal_xfer_hello_encode(&a, blk, sizeof blk);
	ASSERT_EQ(n, SHOAL_XFER_HELLO_SIZE + 5);
	ASSERT_EQ(shoal_xfer_hello_decode(blk, n, &b, why, sizeof why), SHOAL_OK);
	ASSERT_STR_EQ(b.device, "mlx5_0");
	ASSERT_EQ(b.peer[15], 0xee);
	ASSERT_MEM_EQ(b.token, "token", 5);
	/* A token length that disagrees with the block, an unterminated name. */
	ASSERT_EQ(shoal_xfer_hello_decode(blk, n - 1, &b, why, sizeof why), SHOAL_ERR_FORMAT);
	memset(blk + 32, 'x', SHOAL_XFER_DEVNAME_MAX);
	ASSERT_EQ(shoal_xfer_hello_decode(blk, n, &b, why, sizeof why), SHOAL_ERR_FORMAT);
	ASSERT_TRUE(strstr(why, "device name") != NULL);

	shoal_xfer_qp_info q = {.qpn = 0x1234,
	                        .psn = 77,
	                        .lid = 3,
	                        .mtu = 4096,
	                        .slots = 16,
	                        .slot_size = 65536},
	                   r;
	q.gid[0] = 0xfe;
	uint8_t qb[SHOAL_XFER_QPINFO_SIZE];
	shoal_xfer_qp_info_encode(&q, qb);
	ASSERT_EQ(shoal_xfer_qp_info_decode(qb, sizeof qb, &r, why, sizeof why), SHOAL_OK);
	ASSERT_EQ(r.qpn, 0x1234);
	ASSERT_EQ(r.mtu, 4096);
	ASSERT_EQ(r.gid[0], 0xfe);
	q.mtu = 1000; /* not a power of two */
	shoal_xfer_qp_info_encode(&q, qb);
	ASSERT_EQ(shoal_xfer_qp_info_decode(qb, sizeof qb, &r, why, sizeof why), SHOAL_ERR_FORMAT);
	q.mtu = 1024;
	q.slots = 1;
	shoal_xfer_qp_info_encode(&q, qb);
	ASSERT_EQ(shoal_xfer_qp_info_decode(qb, sizeof qb, &r, why, sizeof why), SHOAL_ERR_FORMAT);
}

/* Each corpus entry breaks one thing in a valid EXPERT_REQ frame. */
typedef struct bad_case {
	const char *name;
	void (*mutate)(uint8_t *b, size_t *n);
	shoal_err want;
	const char *why_has;
} bad_case;

static void put32(uint8_t *p, uint32_t v)
{
	for (int i = 0; i < 4; i++)
		p[i] = (uint8_t)(v >> (8 * i));
}
static void m_magic(uint8_t *b, size_t *n)
{
	b[0] = 'X';
}
static void m_version(uint8_t *b, size_t *n)
{
	b[4] = 2;
}
static void m_truncated(uint8_t *b, size_t *n)
{
	*n -= 1;
}
static void m_short(uint8_t *b, size_t *n)
{
	*n = 40;
}
static void m_oversized(uint8_t *b, size_t *n)
{
	put32(b + 8, (1 << 16) + 1);
}
static void m_len_small(uint8_t *b, size_t *n)
{
	put32(b + 8, 50);
}
static void m_kind(uint8_t *b, size_t *n)
{
	b[6] = 200;
}
static void m_dtype(uint8_t *b, size_t *n)
{
	b[7] = 99;
}
static void m_rows_max(uint8_t *b, size_t *n)
{
	put32(b + 64, 9);
}
static void m_rows_huge(uint8_t *b, size_t *n)
{
	put32(b + 64, 0xffffffffu);
}
static void m_routes_huge(uint8_t *b, size_t *n)
{
	put32(b + 68, 0x10000000u);
}
static void m_payload_len(uint8_t *b, size_t *n)
{
	put32(b + 12, 95);
}
static void m_dim(uint8_t *b, size_t *n)
{
	put32(b + 76, 0x40000001u);
}
static void m_dim0(uint8_t *b, size_t *n)
{
	put32(b + 76, 0);
}
static void m_layers(uint8_t *b, size_t *n)
{
	b[72] = 6;
}
static void m_reserved(uint8_t *b, size_t *n)
{
	b[93] = 1; /* 84..91 are the TCP transport's checksums */
}
static void m_row_pad(uint8_t *b, size_t *n)
{
	b[96 + 12] = 1;
}
static void m_route_row(uint8_t *b, size_t *n)
{
	put32(b + 96 + 48, 3);
}
static void m_gate_nan(uint8_t *b, size_t *n)
{
	put32(b + 96 + 48 + 8, 0x7fc00000u);
}
static void m_seq_ok(uint8_t *b, size_t *n)
{
	b[56] = 0xff;
} /* seq is the link's business */

static void test_bad_frame_corpus(void)
{
	static const bad_case cases[] = {
	    {"wrong magic", m_magic, SHOAL_ERR_PROTO, "bad magic"},
	    {"wrong version", m_version, SHOAL_ERR_PROTO, "version 2"},
	    {"truncated", m_truncated, SHOAL_ERR_PROTO, "but the frame has"},
	    {"shorter than a header", m_short, SHOAL_ERR_PROTO, "shorter than"},
	    {"oversized", m_oversized, SHOAL_ERR_PROTO, "exceeds the maximum"},
	    {"frame_len below header", m_len_small, SHOAL_ERR_PROTO, "shorter than the header"},
	    {"unknown kind", m_kind, SHOAL_ERR_FORMAT, "unknown frame kind 200"},
	    {"unknown dtype", m_dtype, SHOAL_ERR_FORMAT, "unknown dtype"},
	    {"rows over max", m_rows_max, SHOAL_ERR_FORMAT, "9 rows (max 8)"},
	    {"rows 2^32-1", m_rows_huge, SHOAL_ERR_FORMAT, "rows (max 8)"},
	    {"routes 2^28", m_routes_huge, SHOAL_ERR_FORMAT, "routes (max 16)"},
	    {"payload_len off by one", m_payload_len, SHOAL_ERR_FORMAT, "do not add up"},
	    {"dim overflows the shape", m_dim, SHOAL_ERR_FORMAT, "needs"},
	    {"dim 0", m_dim0, SHOAL_ERR_FORMAT, "dim 0"},
	    {"empty layer range", m_layers, SHOAL_ERR_FORMAT, "layers [6, 6)"},
	    {"reserved header byte", m_reserved, SHOAL_ERR_FORMAT, "reserved"},
	    {"row tag padding", m_row_pad, SHOAL_ERR_FORMAT, "row 0"},
	    {"route names a missing row", m_route_row, SHOAL_ERR_FORMAT, "names row 3 of 3"},
	    {"NaN gate", m_gate_nan, SHOAL_ERR_FORMAT, "non-finite"},
	    {"any seq decodes", m_seq_ok, SHOAL_OK, ""},
	};
	for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
		shoal_xfer_hdr h = expert_req(), g;
		size_t n = build(&h, vecs);
		cases[i].mutate(buf, &n);
		const uint8_t *pl;
		char why[SHOAL_WHY_LEN] = "";
		shoal_err e = dec(n, &g, &pl, why);
		if (e != cases[i].want || !strstr(why, cases[i].why_has))
			fprintf(stderr, "case '%s': got %s \"%s\"\n", cases[i].name,
			        shoal_strerror(e), why);
		ASSERT_EQ(e, cases[i].want);
		ASSERT_TRUE(strstr(why, cases[i].why_has) != NULL);
	}
}

/* Control kinds with bodies they must not have. */
static void test_bad_control_frames(void)
{
	char why[SHOAL_WHY_LEN];
	shoal_xfer_hdr g;
	const uint8_t *pl;
	shoal_xfer_hdr e0 = {.kind = SHOAL_XFER_KIND_ERROR, .n_aux = 0, .payload_len = 2};
	ASSERT_EQ(dec(build(&e0, "no"), &g, &pl, why), SHOAL_ERR_FORMAT);
	shoal_xfer_hdr e1 = {.kind = SHOAL_XFER_KIND_ERROR, .n_aux = 1, .payload_len = 3};
	ASSERT_EQ(dec(build(&e1, "a\0b"), &g, &pl, why), SHOAL_ERR_FORMAT);
	ASSERT_TRUE(strstr(why, "NUL") != NULL);
	shoal_xfer_hdr c = {.kind = SHOAL_XFER_KIND_CREDIT, .payload_len = 1};
	ASSERT_EQ(dec(build(&c, "x"), &g, &pl, why), SHOAL_ERR_FORMAT);
	shoal_xfer_hdr q = {.kind = SHOAL_XFER_KIND_RDMA_QP, .payload_len = 39};
	static uint8_t z[64];
	ASSERT_EQ(dec(build(&q, z), &g, &pl, why), SHOAL_ERR_FORMAT);
	shoal_xfer_hdr t = {.kind = SHOAL_XFER_KIND_TOKEN,
	                    .dtype = SHOAL_XFER_DTYPE_F32,
	                    .dim = 1,
	                    .n_rows = 1,
	                    .rows = ROWS,
	                    .payload_len = 4};
	ASSERT_EQ(dec(build(&t, z), &g, &pl, why), SHOAL_ERR_FORMAT);
	ASSERT_TRUE(strstr(why, "dtype") != NULL);
}

/* A session-control frame: one row, layers [0, 0), I32 words, no routes;
 * it is a data kind (plan-checked), not a TOKEN frame. */
static void test_bad_session_frames(void)
{
	char why[SHOAL_WHY_LEN];
	shoal_xfer_hdr g;
	const uint8_t *pl;
	static const int32_t w[4] = {1, 0, 0, 0};
	ASSERT_TRUE(shoal_xfer_kind_is_data(SHOAL_XFER_KIND_SESSION));
	ASSERT_STR_EQ(shoal_xfer_kind_name(SHOAL_XFER_KIND_SESSION), "session");
	shoal_xfer_hdr ok = {.kind = SHOAL_XFER_KIND_SESSION,
	                     .dtype = SHOAL_XFER_DTYPE_I32,
	                     .dim = 4,
	                     .n_rows = 1,
	                     .rows = ROWS,
	                     .payload_len = 16};
	ASSERT_EQ(dec(build(&ok, w), &g, &pl, why), SHOAL_OK);
	ASSERT_EQ(g.kind, SHOAL_XFER_KIND_SESSION);
	ASSERT_U64_EQ(g.rows[0].session, ROWS[0].session);
	shoal_xfer_hdr two = ok;
	two.n_rows = 2;
	ASSERT_EQ(dec(build(&two, w), &g, &pl, why), SHOAL_ERR_FORMAT);
	ASSERT_TRUE(strstr(why, "session frame with 2 rows") != NULL);
	shoal_xfer_hdr none = ok;
	none.n_rows = 0;
	ASSERT_EQ(dec(build(&none, w), &g, &pl, why), SHOAL_ERR_FORMAT);
	ASSERT_TRUE(strstr(why, "session frame with 0 rows") != NULL);
	shoal_xfer_hdr layer = ok; /* the old reserved layer is no longer a marker */
	layer.layer_first = layer.layer_end = 0xffff;
	ASSERT_EQ(dec(build(&layer, w), &g, &pl, why), SHOAL_ERR_FORMAT);
	ASSERT_TRUE(strstr(why, "layers [65535, 65535)") != NULL);
	shoal_xfer_hdr f32 = ok;
	f32.dtype = SHOAL_XFER_DTYPE_F32;
	ASSERT_EQ(dec(build(&f32, w), &g, &pl, why), SHOAL_ERR_FORMAT);
	ASSERT_TRUE(strstr(why, "dtype") != NULL);
	shoal_xfer_hdr aux = ok;
	aux.n_aux = 1;
	ASSERT_EQ(dec(build(&aux, w), &g, &pl, why), SHOAL_ERR_FORMAT);
	ASSERT_TRUE(strstr(why, "n_aux 1") != NULL);
	shoal_xfer_hdr shape = ok;
	shape.payload_len = 12;
	ASSERT_EQ(dec(build(&shape, w), &g, &pl, why), SHOAL_ERR_FORMAT);
	ASSERT_TRUE(strstr(why, "needs 16") != NULL);
}

/* A tensor group's slice: the batch's rows, one layer, n_aux the round,
 * (1, dim) F32 with dim 0 allowed (a member with no routed slot). */
static void test_gather_frames(void)
{
	char why[SHOAL_WHY_LEN];
	shoal_xfer_hdr g;
	const uint8_t *pl;
	ASSERT_TRUE(shoal_xfer_kind_is_data(SHOAL_XFER_KIND_GATHER));
	ASSERT_STR_EQ(shoal_xfer_kind_name(SHOAL_XFER_KIND_GATHER), "gather");
	shoal_xfer_hdr ok = {.kind = SHOAL_XFER_KIND_GATHER,
	                     .dtype = SHOAL_XFER_DTYPE_F32,
	                     .layer_first = 3,
	                     .layer_end = 4,
	                     .dim = 7,
	                     .n_rows = 2,
	                     .rows = ROWS,
	                     .n_aux = 4,
	                     .payload_len = 28};
	ASSERT_EQ(dec(build(&ok, vecs), &g, &pl, why), SHOAL_OK);
	ASSERT_EQ(g.n_aux, 4);
	ASSERT_EQ(g.dim, 7);
	ASSERT_EQ(g.n_rows, 2);
	ASSERT_U64_EQ(g.rows[1].session, ROWS[1].session);
	ASSERT_TRUE(memcmp(pl, vecs, 28) == 0);
	shoal_xfer_hdr empty = ok; /* no slice of its own this round */
	empty.dim = 0;
	empty.payload_len = 0;
	ASSERT_EQ(dec(build(&empty, vecs), &g, &pl, why), SHOAL_OK);
	ASSERT_EQ(g.payload_len, 0);
	shoal_xfer_hdr bad[5] = {ok, ok, ok, ok, ok};
	bad[0].payload_len = 24; /* not dim x 4 */
	bad[1].dtype = SHOAL_XFER_DTYPE_F16;
	bad[2].n_rows = 0;
	bad[3].layer_end = 3;
	bad[4].dim = 6; /* 28 bytes for 6 floats */
	for (int i = 0; i < 5; i++) {
		ASSERT_EQ(dec(build(&bad[i], vecs), &g, &pl, why), SHOAL_ERR_FORMAT);
		ASSERT_TRUE(strstr(why, "gather frame") != NULL);
	}
}

/* Random bytes, and random flips of a valid frame, never crash and
 * never decode into something with lengths past the buffer. */
static void test_random_bytes_never_crash(void)
{
	uint64_t s = 0x9e3779b97f4a7c15ull;
	int ok = 0;
	for (int it = 0; it < 20000; it++) {
		shoal_xfer_hdr h = expert_req(), g;
		size_t n = build(&h, vecs);
		int flips = 1 + it % 4;
		for (int k = 0; k < flips; k++) {
			s ^= s << 13, s ^= s >> 7, s ^= s << 17;
			buf[s % n] ^= (uint8_t)(s >> 24 | 1);
		}
		if (it % 10 == 0) { /* pure noise with a valid prefix */
			for (size_t i = 16; i < n; i++) {
				s ^= s << 13, s ^= s >> 7, s ^= s << 17;
				buf[i] = (uint8_t)s;
			}
		}
		const uint8_t *pl;
		char why[SHOAL_WHY_LEN];
		if (dec(n, &g, &pl, why) == SHOAL_OK) {
			ok++;
			ASSERT_TRUE(pl >= buf && pl + g.payload_len <= buf + n);
			ASSERT_LE(g.n_rows, LIM.max_rows);
		}
	}
	/* Most flips land in the payload or digest and still decode. */
	ASSERT_GT(ok, 0);
}

/* CRC-32C: the check value of RFC 3720 (iSCSI), chaining over pieces of
 * every alignment equals one pass, and a sealed frame fails both checks
 * once any single bit of it is flipped. */
static void test_checksums(void)
{
	ASSERT_EQ(shoal_xfer_crc32c(0, "123456789", 9), 0xe3069283u);
	ASSERT_EQ(shoal_xfer_crc32c(0, "", 0), 0u);
	uint8_t b[300];
	for (size_t i = 0; i < sizeof b; i++)
		b[i] = (uint8_t)(i * 37 + 11);
	uint32_t whole = shoal_xfer_crc32c(0, b, sizeof b);
	for (size_t cut = 0; cut <= sizeof b; cut += 7)
		ASSERT_EQ(shoal_xfer_crc32c(shoal_xfer_crc32c(0, b, cut), b + cut, sizeof b - cut),
		          whole);
	shoal_xfer_hdr h = {
	    .kind = SHOAL_XFER_KIND_PROBE, .dtype = SHOAL_XFER_DTYPE_U8, .payload_len = 200};
	size_t head;
	ASSERT_EQ(shoal_xfer_frame_encode_head(&h, b, sizeof b, &head), SHOAL_OK);
	size_t n = head + 200;
	shoal_xfer_frame_seal(b, n);
	ASSERT_EQ(shoal_xfer_frame_check_head(b, NULL, 0), SHOAL_OK);
	ASSERT_EQ(shoal_xfer_frame_check_body(b, n, NULL, 0), SHOAL_OK);
	for (size_t bit = 0; bit < 8 * n; bit++) {
		b[bit / 8] ^= (uint8_t)(1u << (bit % 8));
		int bad = shoal_xfer_frame_check_head(b, NULL, 0) != SHOAL_OK ||
		          shoal_xfer_frame_check_body(b, n, NULL, 0) != SHOAL_OK;
		b[bit / 8] ^= (uint8_t)(1u << (bit % 8));
		ASSERT_TRUE(bad);
	}
	/* The decoder leaves the checksum fields to the transport. */
	shoal_xfer_limits lim = {1 << 16, 4, 4};
	shoal_xfer_hdr d;
	const uint8_t *pl;
	ASSERT_EQ(shoal_xfer_frame_decode(b, n, &lim, &d, NULL, NULL, &pl, NULL, 0), SHOAL_OK);
}

/* splitmix64, for the bytes of the CRC comparisons. */
static uint64_t mix64(uint64_t x)
{
	x += 0x9e3779b97f4a7c15ull;
	x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
	x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
	return x ^ (x >> 31);
}

static double now_s(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

/* GB/s of f over n bytes: the best of 5 timings of enough passes for ~2 ms. */
static double crc_gbps(uint32_t (*f)(uint32_t, const void *, size_t), const uint8_t *p, size_t n,
                       uint32_t *sink)
{
	double best = 0;
	for (int rep = 0; rep < 5; rep++) {
		int passes = 0;
		double t0 = now_s(), t;
		do {
			*sink ^= f(*sink, p, n);
			passes++;
		} while ((t = now_s() - t0) < 2e-3);
		double g = (double)n * passes / t / 1e9;
		best = g > best ? g : best;
	}
	return best;
}

/* The CPU's crc32c path (sse4.2 / armv8-crc) against the table code, its
 * twin: every length up to 3 x 256 + 64 (the short blocks and the tails)
 * at every alignment of 16 and random seeds, the edges of the long
 * (24 KiB) blocks, 1 MiB + 3, chained pieces; and both speeds on 1 MiB
 * (printed: the figures of the commit that brought the hardware path). */
static void test_crc32c_hw_matches_scalar(void)
{
	static uint8_t big[(1 << 20) + 64];
	for (size_t i = 0; i < sizeof big; i++)
		big[i] = (uint8_t)mix64(i);
	const char *isa = shoal_xfer_crc32c_isa();
	printf("crc32c: %s\n", isa);
	ASSERT_EQ(shoal_xfer_crc32c_scalar(0, "123456789", 9), 0xe3069283u);
	ASSERT_EQ(shoal_xfer_crc32c(0, "123456789", 9), 0xe3069283u);
	/* RFC 3720 B.4: 32 bytes of zeros, of ones, ascending. */
	uint8_t v[32];
	memset(v, 0, 32);
	ASSERT_EQ(shoal_xfer_crc32c(0, v, 32), 0x8a9136aau);
	memset(v, 0xff, 32);
	ASSERT_EQ(shoal_xfer_crc32c(0, v, 32), 0x62a8ab43u);
	for (int i = 0; i < 32; i++)
		v[i] = (uint8_t)i;
	ASSERT_EQ(shoal_xfer_crc32c(0, v, 32), 0x46dd794eu);
	int bad = 0;
	for (size_t len = 0; len <= 3 * 256 + 64; len++)
		for (size_t al = 0; al < 16; al++) {
			uint32_t seed = (uint32_t)mix64(len * 16 + al);
			const uint8_t *p = big + al + len * 13 % 4096;
			uint32_t hw = shoal_xfer_crc32c(seed, p, len);
			bad += hw != shoal_xfer_crc32c_scalar(seed, p, len);
		}
	ASSERT_EQ(bad, 0);
	static const size_t lens[] = {3 * 8192 - 1,   3 * 8192,     3 * 8192 + 1, 3 * 8192 + 767,
	                              3 * 8192 + 768, 6 * 8192 + 7, 1u << 20,     (1u << 20) + 3};
	for (size_t i = 0; i < sizeof lens / sizeof lens[0]; i++)
		for (size_t al = 0; al < 8; al += 3) {
			uint32_t seed = (uint32_t)mix64(i + 100 * al);
			ASSERT_EQ(shoal_xfer_crc32c(seed, big + al, lens[i]),
			          shoal_xfer_crc32c_scalar(seed, big + al, lens[i]));
		}
	/* Pieces of random sizes chained equal one pass of the twin. */
	uint32_t want = shoal_xfer_crc32c_scalar(0, big, 1 << 20), c = 0;
	size_t at = 0;
	for (uint64_t r = 1; at < (1u << 20); r++) {
		size_t k = (size_t)(mix64(r) % 40000);
		k = k > (1u << 20) - at ? (1u << 20) - at : k;
		c = shoal_xfer_crc32c(c, big + at, k);
		at += k;
	}
	ASSERT_EQ(c, want);
	uint32_t sink = 0;
	double hw = crc_gbps(shoal_xfer_crc32c, big, 1 << 20, &sink);
	double sc = crc_gbps(shoal_xfer_crc32c_scalar, big, 1 << 20, &sink);
	printf("crc32c on 1 MiB: %s %.1f GB/s, scalar %.1f GB/s (%x)\n", isa, hw, sc, sink);
}

TEST_MAIN(TEST_CASE(test_round_trip_expert_req), TEST_CASE(test_layout_bytes),
          TEST_CASE(test_round_trip_each_kind), TEST_CASE(test_hello_and_qp_blocks),
          TEST_CASE(test_bad_frame_corpus), TEST_CASE(test_bad_control_frames),
          TEST_CASE(test_bad_session_frames), TEST_CASE(test_gather_frames),
          TEST_CASE(test_random_bytes_never_crash), TEST_CASE(test_checksums),
          TEST_CASE(test_crc32c_hw_matches_scalar))

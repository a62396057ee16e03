/*
 * net/xfer_frame.c: encoder and defensive decoder of data-plane frames
 * (layout and invariants in xfer_frame.h).
 *
 * Divisions: little-endian helpers, names and sizes, encode, decode,
 * checksums, the hello and qp-info blocks. The encoders assert what only
 * our own code can get wrong (base/assert.h); the decoders judge bytes
 * from the network and return errors.
 */
#include "net/xfer_frame.h"

#include <math.h>
#include <pthread.h>
#include <string.h>

#include "base/assert.h"

/* ---- little-endian helpers ------------------------------------------- */

static void put16(uint8_t *p, uint16_t v)
{
	p[0] = (uint8_t)v;
	p[1] = (uint8_t)(v >> 8);
}
static void put32(uint8_t *p, uint32_t v)
{
	for (int i = 0; i < 4; i++)
		p[i] = (uint8_t)(v >> (8 * i));
}
static void put64(uint8_t *p, uint64_t v)
{
	for (int i = 0; i < 8; i++)
		p[i] = (uint8_t)(v >> (8 * i));
}
static uint16_t get16(const uint8_t *p)
{
	return (uint16_t)(p[0] | (p[1] << 8));
}
static uint32_t get32(const uint8_t *p)
{
	return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}
static uint64_t get64(const uint8_t *p)
{
	return (uint64_t)get32(p) | (uint64_t)get32(p + 4) << 32;
}
static int all_zero(const uint8_t *p, size_t n)
{
	for (size_t i = 0; i < n; i++)
		if (p[i])
			return 0;
	return 1;
}

/* ---- names and sizes ------------------------------------------------- */

const char *shoal_xfer_kind_name(unsigned kind)
{
	static const char *const names[SHOAL_XFER_KIND__COUNT] = {
	    [SHOAL_XFER_KIND_NONE] = "none",
	    [SHOAL_XFER_KIND_HELLO] = "hello",
	    [SHOAL_XFER_KIND_HELLO_ACK] = "hello-ack",
	    [SHOAL_XFER_KIND_ERROR] = "error",
	    [SHOAL_XFER_KIND_HIDDEN] = "hidden",
	    [SHOAL_XFER_KIND_TOKEN] = "token",
	    [SHOAL_XFER_KIND_EXPERT_REQ] = "expert-req",
	    [SHOAL_XFER_KIND_EXPERT_REP] = "expert-rep",
	    [SHOAL_XFER_KIND_CREDIT] = "credit",
	    [SHOAL_XFER_KIND_RDMA_QP] = "rdma-qp",
	    [SHOAL_XFER_KIND_RDMA_VERDICT] = "rdma-verdict",
	    [SHOAL_XFER_KIND_PROBE] = "probe",
	    [SHOAL_XFER_KIND_SESSION] = "session",
	    [SHOAL_XFER_KIND_WEIGHTS] = "weights",
	    [SHOAL_XFER_KIND_GATHER] = "gather",
	};
	return kind < SHOAL_XFER_KIND__COUNT ? names[kind] : "?";
}

size_t shoal_xfer_dtype_size(unsigned dtype)
{
	switch (dtype) {
	case SHOAL_XFER_DTYPE_F32:
	case SHOAL_XFER_DTYPE_I32:
		return 4;
	case SHOAL_XFER_DTYPE_F16:
	case SHOAL_XFER_DTYPE_BF16:
		return 2;
	case SHOAL_XFER_DTYPE_U8:
		return 1;
	default:
		return 0;
	}
}

int shoal_xfer_kind_is_data(unsigned kind)
{
	return (kind >= SHOAL_XFER_KIND_HIDDEN && kind <= SHOAL_XFER_KIND_EXPERT_REP) ||
	       kind == SHOAL_XFER_KIND_SESSION || kind == SHOAL_XFER_KIND_GATHER;
}

int shoal_xfer_kind_has_routes(unsigned kind)
{
	return kind == SHOAL_XFER_KIND_EXPERT_REQ || kind == SHOAL_XFER_KIND_EXPERT_REP;
}

static uint64_t head_len(uint64_t n_rows, uint64_t n_routes)
{
	uint64_t n =
	    SHOAL_XFER_HDR_SIZE + n_rows * SHOAL_XFER_ROW_SIZE + n_routes * SHOAL_XFER_ROUTE_SIZE;
	return (n + 15) & ~(uint64_t)15;
}

uint64_t shoal_xfer_frame_head_len(const shoal_xfer_hdr *h)
{
	return head_len(h->n_rows, shoal_xfer_kind_has_routes(h->kind) ? h->n_aux : 0);
}

/* ---- encode ---------------------------------------------------------- */

shoal_err shoal_xfer_frame_encode_head(const shoal_xfer_hdr *h, uint8_t *buf, size_t cap,
                                       size_t *out_len)
{
	uint32_t n_routes = shoal_xfer_kind_has_routes(h->kind) ? h->n_aux : 0;
	/* our own header: a kind and dtype we know, the rows and routes it counts */
	SHOAL_ASSERT(h->kind != SHOAL_XFER_KIND_NONE && h->kind < SHOAL_XFER_KIND__COUNT);
	SHOAL_ASSERT(h->dtype < SHOAL_XFER_DTYPE__COUNT);
	SHOAL_ASSERT(h->n_rows == 0 || h->rows != NULL);
	SHOAL_ASSERT(n_routes == 0 || h->routes != NULL);
	SHOAL_ASSERT(buf != NULL && out_len != NULL);
	uint64_t head = head_len(h->n_rows, n_routes);
	if (head > cap || head + h->payload_len > UINT32_MAX)
		return SHOAL_ERR_RANGE;
	memset(buf, 0, (size_t)head);
	put32(buf + 0, SHOAL_XFER_MAGIC);
	put16(buf + 4, SHOAL_XFER_VERSION);
	buf[6] = h->kind;
	buf[7] = h->dtype;
	put32(buf + 8, (uint32_t)(head + h->payload_len));
	put32(buf + 12, h->payload_len);
	memcpy(buf + 16, h->digest, SHOAL_DIGEST_BYTES);
	put64(buf + 48, h->epoch);
	put64(buf + 56, h->seq);
	put32(buf + 64, h->n_rows);
	put32(buf + 68, h->n_aux);
	put16(buf + 72, h->layer_first);
	put16(buf + 74, h->layer_end);
	put32(buf + 76, h->dim);
	put32(buf + 80, h->credits);
	uint8_t *p = buf + SHOAL_XFER_HDR_SIZE;
	for (uint32_t i = 0; i < h->n_rows; i++, p += SHOAL_XFER_ROW_SIZE) {
		put64(p, h->rows[i].session);
		put32(p + 8, h->rows[i].pos);
	}
	for (uint32_t i = 0; i < n_routes; i++, p += SHOAL_XFER_ROUTE_SIZE) {
		uint32_t g;
		memcpy(&g, &h->routes[i].gate, 4);
		put32(p, h->routes[i].row);
		put32(p + 4, h->routes[i].expert);
		put32(p + 8, g);
	}
	*out_len = (size_t)head;
	return SHOAL_OK;
}

/* ---- decode ---------------------------------------------------------- */

shoal_err shoal_xfer_frame_peek(const uint8_t *buf, size_t len, uint32_t max_frame,
                                uint32_t *frame_len, char *why, size_t why_len)
{
	if (len < SHOAL_XFER_HDR_SIZE)
		return shoal_why(why, why_len, SHOAL_ERR_PROTO,
		                 "frame of %zu bytes is shorter than the %u-byte header", len,
		                 SHOAL_XFER_HDR_SIZE);
	uint32_t magic = get32(buf);
	if (magic != SHOAL_XFER_MAGIC)
		return shoal_why(why, why_len, SHOAL_ERR_PROTO, "bad magic 0x%08x (want 0x%08x)",
		                 magic, SHOAL_XFER_MAGIC);
	uint16_t ver = get16(buf + 4);
	if (ver != SHOAL_XFER_VERSION)
		return shoal_why(why, why_len, SHOAL_ERR_PROTO,
		                 "frame version %u, this peer speaks %u", ver, SHOAL_XFER_VERSION);
	uint32_t fl = get32(buf + 8);
	if (fl < SHOAL_XFER_HDR_SIZE)
		return shoal_why(why, why_len, SHOAL_ERR_PROTO,
		                 "frame_len %u is shorter than the header", fl);
	if (fl > max_frame)
		return shoal_why(why, why_len, SHOAL_ERR_PROTO,
		                 "frame_len %u exceeds the maximum of %u", fl, max_frame);
	*frame_len = fl;
	return SHOAL_OK;
}

/* A payload that is a one-line reason: at most 255 bytes, no NUL. */
static shoal_err check_reason(const uint8_t *p, uint32_t n, char *why, size_t why_len)
{
	if (n > SHOAL_XFER_REASON_MAX)
		return shoal_why(why, why_len, SHOAL_ERR_FORMAT, "reason of %u bytes (max %u)", n,
		                 SHOAL_XFER_REASON_MAX);
	if (memchr(p, 0, n))
		return shoal_why(why, why_len, SHOAL_ERR_FORMAT, "reason contains a NUL byte");
	return SHOAL_OK;
}

/* Invariants 5-8 for one kind, after the lengths are known to add up. */
static shoal_err check_kind(const shoal_xfer_hdr *h, const uint8_t *payload, char *why,
                            size_t why_len)
{
	unsigned k = h->kind;
	size_t dsz = shoal_xfer_dtype_size(h->dtype);
	if (!shoal_xfer_kind_is_data(k)) {
		if (h->n_rows)
			return shoal_why(why, why_len, SHOAL_ERR_FORMAT, "%s frame with %u rows",
			                 shoal_xfer_kind_name(k), h->n_rows);
	}
	switch (k) {
	case SHOAL_XFER_KIND_HELLO:
	case SHOAL_XFER_KIND_HELLO_ACK:
		if (h->n_aux || h->payload_len < SHOAL_XFER_HELLO_SIZE)
			return shoal_why(why, why_len, SHOAL_ERR_FORMAT,
			                 "%s frame: n_aux %u, payload %u bytes",
			                 shoal_xfer_kind_name(k), h->n_aux, h->payload_len);
		return SHOAL_OK;
	case SHOAL_XFER_KIND_ERROR:
	case SHOAL_XFER_KIND_RDMA_QP:
	case SHOAL_XFER_KIND_RDMA_VERDICT:
		if (h->n_aux >= SHOAL_ERR__COUNT || (k == SHOAL_XFER_KIND_ERROR && !h->n_aux))
			return shoal_why(why, why_len, SHOAL_ERR_FORMAT, "%s frame with status %u",
			                 shoal_xfer_kind_name(k), h->n_aux);
		if (k == SHOAL_XFER_KIND_RDMA_QP && h->n_aux == 0) {
			if (h->payload_len != SHOAL_XFER_QPINFO_SIZE)
				return shoal_why(why, why_len, SHOAL_ERR_FORMAT,
				                 "rdma-qp payload of %u bytes (want %u)",
				                 h->payload_len, SHOAL_XFER_QPINFO_SIZE);
			return SHOAL_OK;
		}
		return check_reason(payload, h->payload_len, why, why_len);
	case SHOAL_XFER_KIND_CREDIT:
		if (h->n_aux || h->payload_len)
			return shoal_why(why, why_len, SHOAL_ERR_FORMAT,
			                 "credit frame with a body");
		return SHOAL_OK;
	case SHOAL_XFER_KIND_WEIGHTS:
		if (h->dtype != SHOAL_XFER_DTYPE_U8 && h->dtype != SHOAL_XFER_DTYPE_NONE)
			return shoal_why(why, why_len, SHOAL_ERR_FORMAT,
			                 "weights frame with dtype %u", h->dtype);
		return SHOAL_OK;
	case SHOAL_XFER_KIND_PROBE:
		if (h->n_aux)
			return shoal_why(why, why_len, SHOAL_ERR_FORMAT,
			                 "probe frame with n_aux %u", h->n_aux);
		return SHOAL_OK;
	default:
		break;
	}
	/* A gather slice: the batch's rows, one layer, dim F32 (0 allowed:
	 * a member with no routed slot); n_aux is the round (its receiver checks it). */
	if (k == SHOAL_XFER_KIND_GATHER) {
		if (h->n_rows == 0 || h->layer_first >= h->layer_end ||
		    h->dtype != SHOAL_XFER_DTYPE_F32 || (uint64_t)h->dim * 4u != h->payload_len)
			return shoal_why(why, why_len, SHOAL_ERR_FORMAT,
			                 "gather frame: %u rows, layers [%u, %u), dtype %u, %u x 4 "
			                 "bytes in %u",
			                 h->n_rows, h->layer_first, h->layer_end, h->dtype, h->dim,
			                 h->payload_len);
		return SHOAL_OK;
	}
	/* Data kinds: rows, a layer range, a typed (n_vec, dim) payload. */
	if (k == SHOAL_XFER_KIND_SESSION && (h->n_rows != 1 || h->layer_first || h->layer_end))
		return shoal_why(why, why_len, SHOAL_ERR_FORMAT,
		                 "session frame with %u rows, layers [%u, %u)", h->n_rows,
		                 h->layer_first, h->layer_end);
	if (h->n_rows == 0)
		return shoal_why(why, why_len, SHOAL_ERR_FORMAT, "%s frame with no rows",
		                 shoal_xfer_kind_name(k));
	if (k == SHOAL_XFER_KIND_TOKEN || k == SHOAL_XFER_KIND_SESSION
	        ? h->layer_first > h->layer_end
	        : h->layer_first >= h->layer_end)
		return shoal_why(why, why_len, SHOAL_ERR_FORMAT, "%s frame with layers [%u, %u)",
		                 shoal_xfer_kind_name(k), h->layer_first, h->layer_end);
	if (!dsz || ((k == SHOAL_XFER_KIND_TOKEN || k == SHOAL_XFER_KIND_SESSION) &&
	             h->dtype != SHOAL_XFER_DTYPE_I32))
		return shoal_why(why, why_len, SHOAL_ERR_FORMAT, "%s frame with dtype %u",
		                 shoal_xfer_kind_name(k), h->dtype);
	if (h->dim == 0)
		return shoal_why(why, why_len, SHOAL_ERR_FORMAT, "%s frame with dim 0",
		                 shoal_xfer_kind_name(k));
	if (shoal_xfer_kind_has_routes(k) && h->n_aux == 0)
		return shoal_why(why, why_len, SHOAL_ERR_FORMAT, "%s frame with no routes",
		                 shoal_xfer_kind_name(k));
	if (!shoal_xfer_kind_has_routes(k) && h->n_aux)
		return shoal_why(why, why_len, SHOAL_ERR_FORMAT, "%s frame with n_aux %u",
		                 shoal_xfer_kind_name(k), h->n_aux);
	/* n_vec and dim are both < 2^32, so their product fits 64 bits; it is
	 * bounded by payload_len (< 2^32) before the multiplication by dsz. */
	uint64_t n_vec = k == SHOAL_XFER_KIND_EXPERT_REP ? h->n_aux : h->n_rows;
	uint64_t elems = n_vec * h->dim;
	if (elems > h->payload_len || elems * dsz != h->payload_len)
		return shoal_why(why, why_len, SHOAL_ERR_FORMAT,
		                 "%s payload of %u bytes, shape (%llu, %u) x %zu needs %llu",
		                 shoal_xfer_kind_name(k), h->payload_len, (unsigned long long)n_vec,
		                 h->dim, dsz, (unsigned long long)(elems * dsz));
	return SHOAL_OK;
}

shoal_err shoal_xfer_frame_decode(const uint8_t *buf, size_t len, const shoal_xfer_limits *lim,
                                  shoal_xfer_hdr *h, shoal_xfer_row *rows, shoal_xfer_route *routes,
                                  const uint8_t **payload, char *why, size_t why_len)
{
	uint32_t fl;
	shoal_err e = shoal_xfer_frame_peek(buf, len, lim->max_frame, &fl, why, why_len);
	if (e)
		return e;
	if (fl != len)
		return shoal_why(why, why_len, SHOAL_ERR_PROTO,
		                 "frame_len %u but the frame has %zu bytes", fl, len);
	memset(h, 0, sizeof *h);
	h->kind = buf[6];
	h->dtype = buf[7];
	h->payload_len = get32(buf + 12);
	memcpy(h->digest, buf + 16, SHOAL_DIGEST_BYTES);
	h->epoch = get64(buf + 48);
	h->seq = get64(buf + 56);
	h->n_rows = get32(buf + 64);
	h->n_aux = get32(buf + 68);
	h->layer_first = get16(buf + 72);
	h->layer_end = get16(buf + 74);
	h->dim = get32(buf + 76);
	h->credits = get32(buf + 80);
	if (!all_zero(buf + 92, 4)) /* 84..91: the transports' checksums */
		return shoal_why(why, why_len, SHOAL_ERR_FORMAT, "reserved header bytes not zero");
	if (h->kind == SHOAL_XFER_KIND_NONE || h->kind >= SHOAL_XFER_KIND__COUNT)
		return shoal_why(why, why_len, SHOAL_ERR_FORMAT, "unknown frame kind %u", h->kind);
	if (h->dtype >= SHOAL_XFER_DTYPE__COUNT)
		return shoal_why(why, why_len, SHOAL_ERR_FORMAT, "unknown dtype %u", h->dtype);
	uint32_t n_routes = shoal_xfer_kind_has_routes(h->kind) ? h->n_aux : 0;
	if (h->n_rows > lim->max_rows)
		return shoal_why(why, why_len, SHOAL_ERR_FORMAT, "%u rows (max %u)", h->n_rows,
		                 lim->max_rows);
	if (n_routes > lim->max_routes)
		return shoal_why(why, why_len, SHOAL_ERR_FORMAT, "%u routes (max %u)", n_routes,
		                 lim->max_routes);
	uint64_t head = head_len(h->n_rows, n_routes);
	if (head + h->payload_len != fl)
		return shoal_why(why, why_len, SHOAL_ERR_FORMAT,
		                 "lengths do not add up: head %llu + payload %u != frame %u",
		                 (unsigned long long)head, h->payload_len, fl);
	const uint8_t *p = buf + SHOAL_XFER_HDR_SIZE;
	for (uint32_t i = 0; i < h->n_rows; i++, p += SHOAL_XFER_ROW_SIZE) {
		rows[i].session = get64(p);
		rows[i].pos = get32(p + 8);
		if (get32(p + 12))
			return shoal_why(why, why_len, SHOAL_ERR_FORMAT,
			                 "row %u: reserved bytes not zero", i);
	}
	for (uint32_t i = 0; i < n_routes; i++, p += SHOAL_XFER_ROUTE_SIZE) {
		uint32_t g = get32(p + 8);
		routes[i].row = get32(p);
		routes[i].expert = get32(p + 4);
		memcpy(&routes[i].gate, &g, 4);
		if (routes[i].row >= h->n_rows)
			return shoal_why(why, why_len, SHOAL_ERR_FORMAT,
			                 "route %u names row %u of %u", i, routes[i].row,
			                 h->n_rows);
		if (!isfinite(routes[i].gate))
			return shoal_why(why, why_len, SHOAL_ERR_FORMAT,
			                 "route %u has a non-finite gate", i);
	}
	if (!all_zero(p, (size_t)(buf + head - p)))
		return shoal_why(why, why_len, SHOAL_ERR_FORMAT, "padding bytes not zero");
	h->rows = h->n_rows ? rows : NULL;
	h->routes = n_routes ? routes : NULL;
	*payload = buf + head;
	return check_kind(h, *payload, why, why_len);
}

/* ---- checksums ------------------------------------------------------ */

/*
 * CRC-32C (Castagnoli, the reflected polynomial 0x82f63b78) two ways, the
 * choice made once, in crc_init:
 *  - scalar: slicing-by-8 tables, 8 bytes per step from 8 KiB of tables;
 *    always compiled, the oracle of test_xfer_frame;
 *  - the CPU's crc32c instruction, 8 bytes per instruction: SSE4.2 on
 *    x86-64 (when cpuid has it), the CRC32 extension on arm64 (when the
 *    compiler targets it, else when HWCAP_CRC32 says so). Each function is
 *    compiled for its ISA by a target attribute, so the default build
 *    runs on any CPU of the architecture.
 * The instruction's latency is 3 cycles and one issues per cycle, so one
 * chain of dependent steps runs at a third of its speed: a block is cut
 * into three thirds whose CRCs run side by side, then joined. Joining
 * moves a CRC past the bytes of the next third: it becomes the CRC that
 * would have run on over that many zero bytes, a linear map of its 32
 * bits, so 4 lookups in a table of the map on each byte of it (crc_shift).
 * Thirds of 8 KiB (a 24 KiB block) pay for the join with 0.02% of the
 * work; thirds of 256 B cover frames from 768 B up to the next 24 KiB.
 * All of it works on the raw register; the public functions invert at
 * both ends.
 */
#define CRC_LONG  8192u /* bytes per third of a long block */
#define CRC_SHORT 256u  /* of a short block */

static uint32_t crc_tab[8][256];   /* tab[0] the byte-wise table, tab[k] k bytes on */
static uint32_t crc_long[4][256];  /* a CRC moved past CRC_LONG zero bytes, per byte */
static uint32_t crc_short[4][256]; /* past CRC_SHORT zero bytes */
static pthread_once_t crc_once = PTHREAD_ONCE_INIT;
static uint32_t (*crc_fast)(uint32_t crc, const uint8_t *b, size_t n);
static const char *crc_isa = "scalar";

static uint32_t crc_scalar_raw(uint32_t crc, const uint8_t *b, size_t n)
{
	for (; n >= 8; b += 8, n -= 8) {
		uint32_t lo = get32(b) ^ crc, hi = get32(b + 4);
		crc = crc_tab[7][lo & 0xff] ^ crc_tab[6][(lo >> 8) & 0xff] ^
		      crc_tab[5][(lo >> 16) & 0xff] ^ crc_tab[4][lo >> 24] ^ crc_tab[3][hi & 0xff] ^
		      crc_tab[2][(hi >> 8) & 0xff] ^ crc_tab[1][(hi >> 16) & 0xff] ^
		      crc_tab[0][hi >> 24];
	}
	while (n--)
		crc = crc_tab[0][(crc ^ *b++) & 0xff] ^ (crc >> 8);
	return crc;
}

/* The raw CRC c moved past as many zero bytes as the table t is for. */
static uint32_t crc_shift(uint32_t (*t)[256], uint32_t c)
{
	return t[0][c & 0xff] ^ t[1][(c >> 8) & 0xff] ^ t[2][(c >> 16) & 0xff] ^ t[3][c >> 24];
}

/* t[k][v]: the CRC (v << 8k) moved past n zero bytes. The map is linear,
 * so it is the XOR of the images of v's bits, each found by running the
 * byte-wise table over the zeros (32 x n steps, once). */
static void crc_shift_table(uint32_t t[4][256], size_t n)
{
	uint32_t img[32];
	for (int i = 0; i < 32; i++) {
		uint32_t c = 1u << i;
		for (size_t k = 0; k < n; k++)
			c = crc_tab[0][c & 0xff] ^ (c >> 8);
		img[i] = c;
	}
	for (int k = 0; k < 4; k++)
		for (uint32_t v = 0; v < 256; v++) {
			uint32_t c = 0;
			for (int j = 0; j < 8; j++)
				if (v >> j & 1)
					c ^= img[8 * k + j];
			t[k][v] = c;
		}
}

static uint64_t get64le(const uint8_t *p)
{
	uint64_t v;
	memcpy(&v, p, 8); /* x86-64 and arm64 are little-endian, as the CRC reads */
	return v;
}

/* Whole blocks of three thirds of THIRD bytes (a multiple of 8) off b[n]
 * into the raw crc, with the table TAB of that shift; STEP8 is the ISA's
 * 8-byte step. Leaves n < 3 THIRD. */
#define CRC_HW_3WAY(STEP8, THIRD, TAB)                                                             \
	for (; n >= 3 * (size_t)(THIRD); b += 3 * (THIRD), n -= 3 * (size_t)(THIRD)) {             \
		uint32_t c1 = 0, c2 = 0;                                                           \
		for (size_t i = 0; i < (THIRD); i += 8) {                                          \
			crc = STEP8(crc, get64le(b + i));                                          \
			c1 = STEP8(c1, get64le(b + (THIRD) + i));                                  \
			c2 = STEP8(c2, get64le(b + 2 * (THIRD) + i));                              \
		}                                                                                  \
		crc = crc_shift(TAB, crc) ^ c1;                                                    \
		crc = crc_shift(TAB, crc) ^ c2;                                                    \
	}

/* The body of an ISA's function on (crc, b, n): bytes up to an 8-byte
 * boundary, long blocks, short blocks, 8-byte steps, the last bytes. */
#define CRC_HW_BODY(STEP8, STEP1)                                                                  \
	for (; n && ((uintptr_t)b & 7); n--)                                                       \
		crc = STEP1(crc, *b++);                                                            \
	CRC_HW_3WAY(STEP8, CRC_LONG, crc_long)                                                     \
	CRC_HW_3WAY(STEP8, CRC_SHORT, crc_short)                                                   \
	for (; n >= 8; b += 8, n -= 8)                                                             \
		crc = STEP8(crc, get64le(b));                                                      \
	while (n--)                                                                                \
		crc = STEP1(crc, *b++);                                                            \
	return crc

#if defined(__x86_64__) && defined(__GNUC__)
#include <nmmintrin.h>
#define CRC_HAVE_HW     "sse4.2"
#define CRC_X86_8(c, v) ((uint32_t)_mm_crc32_u64((c), (v)))
#define CRC_X86_1(c, v) _mm_crc32_u8((c), (v))
__attribute__((target("sse4.2"))) static uint32_t crc_hw_raw(uint32_t crc, const uint8_t *b,
                                                             size_t n)
{
	CRC_HW_BODY(CRC_X86_8, CRC_X86_1);
}
static int crc_hw_usable(void)
{
	__builtin_cpu_init();
	return __builtin_cpu_supports("sse4.2");
}
#elif defined(__aarch64__) && defined(__GNUC__) &&                                                 \
    (defined(__ARM_FEATURE_CRC32) || !defined(__clang__) || __clang_major__ >= 16)
/* arm_acle.h declares the CRC intrinsics for target("+crc") functions in
 * GCC and in clang 16 on; an older clang only when the whole unit targets
 * CRC (macOS does: every Apple arm64 CPU has it). */
#include <arm_acle.h>
#define CRC_HAVE_HW     "armv8-crc"
#define CRC_A64_8(c, v) __crc32cd((c), (v))
#define CRC_A64_1(c, v) __crc32cb((c), (v))
#if defined(__ARM_FEATURE_CRC32)
#define CRC_A64_TARGET
static int crc_hw_usable(void)
{
	return 1;
}
#else
#include <sys/auxv.h>
#ifndef HWCAP_CRC32
#define HWCAP_CRC32 (1 << 7)
#endif
#ifdef __clang__
#define CRC_A64_TARGET __attribute__((target("crc")))
#else
#define CRC_A64_TARGET __attribute__((target("+crc")))
#endif
static int crc_hw_usable(void)
{
	return (getauxval(AT_HWCAP) & HWCAP_CRC32) != 0;
}
#endif
CRC_A64_TARGET static uint32_t crc_hw_raw(uint32_t crc, const uint8_t *b, size_t n)
{
	CRC_HW_BODY(CRC_A64_8, CRC_A64_1);
}
#endif

static void crc_init(void)
{
	for (uint32_t i = 0; i < 256; i++) {
		uint32_t c = i;
		for (int k = 0; k < 8; k++)
			c = (c & 1) ? (c >> 1) ^ 0x82f63b78u : c >> 1;
		crc_tab[0][i] = c;
	}
	for (int t = 1; t < 8; t++)
		for (uint32_t i = 0; i < 256; i++)
			crc_tab[t][i] =
			    (crc_tab[t - 1][i] >> 8) ^ crc_tab[0][crc_tab[t - 1][i] & 0xff];
	crc_fast = crc_scalar_raw;
#ifdef CRC_HAVE_HW
	if (crc_hw_usable()) {
		crc_shift_table(crc_long, CRC_LONG);
		crc_shift_table(crc_short, CRC_SHORT);
		crc_fast = crc_hw_raw;
		crc_isa = CRC_HAVE_HW;
	}
#endif
}

uint32_t shoal_xfer_crc32c(uint32_t crc, const void *p, size_t n)
{
	pthread_once(&crc_once, crc_init);
	return ~crc_fast(~crc, p, n);
}

uint32_t shoal_xfer_crc32c_scalar(uint32_t crc, const void *p, size_t n)
{
	pthread_once(&crc_once, crc_init);
	return ~crc_scalar_raw(~crc, p, n);
}

const char *shoal_xfer_crc32c_isa(void)
{
	pthread_once(&crc_once, crc_init);
	return crc_isa;
}

uint32_t shoal_xfer_frame_head_crc(const uint8_t *hdr)
{
	static const uint8_t zero[4];
	uint32_t c = shoal_xfer_crc32c(0, hdr, SHOAL_XFER_OFF_HEAD_CRC);
	c = shoal_xfer_crc32c(c, zero, 4);
	return shoal_xfer_crc32c(c, hdr + SHOAL_XFER_OFF_HEAD_CRC + 4,
	                         SHOAL_XFER_HDR_SIZE - SHOAL_XFER_OFF_HEAD_CRC - 4);
}

void shoal_xfer_frame_seal(uint8_t *buf, size_t len)
{
	SHOAL_ASSERT(len >= SHOAL_XFER_HDR_SIZE && len <= UINT32_MAX); /* a frame we encoded */
	put32(buf + SHOAL_XFER_OFF_BODY_CRC,
	      shoal_xfer_crc32c(0, buf + SHOAL_XFER_HDR_SIZE, len - SHOAL_XFER_HDR_SIZE));
	put32(buf + SHOAL_XFER_OFF_HEAD_CRC, shoal_xfer_frame_head_crc(buf));
}

shoal_err shoal_xfer_frame_check_head(const uint8_t *hdr, char *why, size_t why_len)
{
	uint32_t want = get32(hdr + SHOAL_XFER_OFF_HEAD_CRC), got = shoal_xfer_frame_head_crc(hdr);
	if (want != got)
		return shoal_why(why, why_len, SHOAL_ERR_PROTO,
		                 "frame header checksum %08x, expected %08x: %s", got, want,
		                 want ? "damaged in transit"
		                      : "none sent (a peer of an older version?)");
	return SHOAL_OK;
}

shoal_err shoal_xfer_frame_check_body(const uint8_t *buf, size_t len, char *why, size_t why_len)
{
	uint32_t want = get32(buf + SHOAL_XFER_OFF_BODY_CRC);
	uint32_t got = shoal_xfer_crc32c(0, buf + SHOAL_XFER_HDR_SIZE, len - SHOAL_XFER_HDR_SIZE);
	if (want != got)
		return shoal_why(why, why_len, SHOAL_ERR_PROTO,
		                 "%s frame checksum %08x, expected %08x: damaged in transit",
		                 shoal_xfer_kind_name(buf[6]), got, want);
	return SHOAL_OK;
}

/* ---- hello and qp-info blocks ---------------------------------------- */

size_t shoal_xfer_hello_encode(const shoal_xfer_hello *hl, uint8_t *buf, size_t cap)
{
	size_t n = SHOAL_XFER_HELLO_SIZE + hl->token_len;
	SHOAL_ASSERT(hl->token_len <= SHOAL_XFER_TOKEN_MAX); /* the caller's own token */
	if (n > cap)
		return 0;
	memset(buf, 0, SHOAL_XFER_HELLO_SIZE);
	put32(buf, hl->flags);
	put32(buf + 4, hl->max_frame);
	put32(buf + 8, hl->rdma_slots);
	put32(buf + 12, hl->token_len);
	memcpy(buf + 16, hl->peer, SHOAL_PEER_ID_LEN);
	size_t dl = strnlen(hl->device, SHOAL_XFER_DEVNAME_MAX - 1);
	memcpy(buf + 32, hl->device, dl);
	memcpy(buf + SHOAL_XFER_HELLO_SIZE, hl->token, hl->token_len);
	return n;
}

shoal_err shoal_xfer_hello_decode(const uint8_t *p, size_t n, shoal_xfer_hello *hl, char *why,
                                  size_t why_len)
{
	if (n < SHOAL_XFER_HELLO_SIZE)
		return shoal_why(why, why_len, SHOAL_ERR_FORMAT, "hello block of %zu bytes", n);
	memset(hl, 0, sizeof *hl);
	hl->flags = get32(p);
	hl->max_frame = get32(p + 4);
	hl->rdma_slots = get32(p + 8);
	hl->token_len = get32(p + 12);
	memcpy(hl->peer, p + 16, SHOAL_PEER_ID_LEN);
	if (hl->flags & ~SHOAL_XFER_HELLO_RDMA)
		return shoal_why(why, why_len, SHOAL_ERR_FORMAT, "hello flags 0x%x", hl->flags);
	if (hl->token_len > SHOAL_XFER_TOKEN_MAX || n != SHOAL_XFER_HELLO_SIZE + hl->token_len)
		return shoal_why(why, why_len, SHOAL_ERR_FORMAT,
		                 "hello token of %u bytes in a %zu-byte block", hl->token_len, n);
	if (hl->max_frame < SHOAL_XFER_HDR_SIZE + SHOAL_XFER_HELLO_SIZE + SHOAL_XFER_TOKEN_MAX)
		return shoal_why(why, why_len, SHOAL_ERR_FORMAT, "hello max_frame %u too small",
		                 hl->max_frame);
	const uint8_t *dev = p + 32;
	if (!memchr(dev, 0, SHOAL_XFER_DEVNAME_MAX))
		return shoal_why(why, why_len, SHOAL_ERR_FORMAT,
		                 "hello device name not terminated");
	for (size_t i = 0; dev[i]; i++)
		if (dev[i] < 0x21 || dev[i] > 0x7e)
			return shoal_why(why, why_len, SHOAL_ERR_FORMAT,
			                 "hello device name has byte 0x%02x", dev[i]);
	memcpy(hl->device, dev, SHOAL_XFER_DEVNAME_MAX);
	memcpy(hl->token, p + SHOAL_XFER_HELLO_SIZE, hl->token_len);
	return SHOAL_OK;
}

void shoal_xfer_qp_info_encode(const shoal_xfer_qp_info *q, uint8_t out[SHOAL_XFER_QPINFO_SIZE])
{
	memset(out, 0, SHOAL_XFER_QPINFO_SIZE);
	put32(out, q->qpn);
	put32(out + 4, q->psn);
	put16(out + 8, q->lid);
	put32(out + 12, q->mtu);
	memcpy(out + 16, q->gid, 16);
	put32(out + 32, q->slots);
	put32(out + 36, q->slot_size);
}

shoal_err shoal_xfer_qp_info_decode(const uint8_t *p, size_t n, shoal_xfer_qp_info *q, char *why,
                                    size_t why_len)
{
	if (n != SHOAL_XFER_QPINFO_SIZE)
		return shoal_why(why, why_len, SHOAL_ERR_FORMAT, "qp info of %zu bytes", n);
	q->qpn = get32(p);
	q->psn = get32(p + 4);
	q->lid = get16(p + 8);
	q->mtu = get32(p + 12);
	memcpy(q->gid, p + 16, 16);
	q->slots = get32(p + 32);
	q->slot_size = get32(p + 36);
	if (get16(p + 10))
		return shoal_why(why, why_len, SHOAL_ERR_FORMAT, "qp info reserved bytes not zero");
	if (q->qpn == 0 || q->qpn > 0xffffff || q->psn > 0xffffff)
		return shoal_why(why, why_len, SHOAL_ERR_FORMAT, "qp info qpn %u psn %u", q->qpn,
		                 q->psn);
	if (q->mtu < 256 || q->mtu > 4096 || (q->mtu & (q->mtu - 1)))
		return shoal_why(why, why_len, SHOAL_ERR_FORMAT, "qp info mtu %u", q->mtu);
	/* 2 slots at least: one for data, one kept for credit returns. */
	if (q->slots < 2 || q->slots > 4096 || q->slot_size < SHOAL_XFER_HDR_SIZE)
		return shoal_why(why, why_len, SHOAL_ERR_FORMAT, "qp info slots %u of %u bytes",
		                 q->slots, q->slot_size);
	return SHOAL_OK;
}

/*
 * net/xfer_frame.h: the data-plane frame, its byte layout and its codec.
 *
 * Part: net/ (the data plane, DESIGN.md section 6). Pure functions, no I/O:
 * the transports (xfer_tcp.c, xfer_rdma.c) move whole frames, the link
 * (xfer.c) encodes and validates them here. Every field is little-endian.
 *
 * Layout (offsets in bytes):
 *
 *   0  u32 magic        0x46584853, the bytes "SHXF"
 *   4  u16 version      SHOAL_XFER_VERSION
 *   6  u8  kind         SHOAL_XFER_KIND_*
 *   7  u8  dtype        SHOAL_XFER_DTYPE_* of the payload (NONE for control)
 *   8  u32 frame_len    whole frame, this header included (the length prefix)
 *  12  u32 payload_len  bytes of the payload at the end of the frame
 *  16  u8  digest[32]   plan digest
 *  48  u64 epoch        plan epoch
 *  56  u64 seq          per link and direction: 0, 1, 2, ...; 0 and not
 *                       counted for ERROR, CREDIT and PROBE
 *  64  u32 n_rows       row tags that follow the header
 *  68  u32 n_aux        EXPERT_*: routes that follow the tags; ERROR and
 *                       RDMA_*: a shoal_err status; GATHER: the round;
 *                       other kinds: 0
 *  72  u16 layer_first  layer range [first, end) the frame belongs to
 *  74  u16 layer_end
 *  76  u32 dim          payload shape (n_vec, dim): see SHOAL_XFER_KIND_*
 *  80  u32 credits      RDMA receive slots returned to the peer (TCP: 0)
 *  84  u32 head_crc     CRC-32C of bytes 0..95, this field as zero
 *  88  u32 body_crc     CRC-32C of bytes 96..frame_len-1
 *                       (set and checked by both transports, TCP and RDMA:
 *                       the TCP checksum is 16 bits and misses what a NIC,
 *                       a middlebox or memory flips; RDMA's fabric checks
 *                       each packet, but not the host memory on either
 *                       side, and a bug or the test hook can post a wrong
 *                       frame. The header's is checked before its length
 *                       or credits are trusted, the body's before the
 *                       frame is handed out; the decoder ignores both)
 *  92  u8  zero[4]      reserved, must be zero
 *  96  row tags         n_rows x 16: u64 session, u32 position, u32 zero
 *      routes           n_routes x 12: u32 row index, u32 expert, f32 gate
 *      zero padding     up to a multiple of 16, so the payload is aligned
 *      payload          payload_len bytes
 *
 * Protocol invariants (the decoder checks 1-8 before any field is used):
 *  1. frame_len >= 96, frame_len <= the receiver's max_frame, and the frame
 *     is exactly frame_len bytes (TCP: the length prefix; RDMA: byte_len).
 *  2. magic and version match; the reserved bytes and paddings are zero.
 *  3. kind is known; n_rows <= max_rows and n_routes <= max_routes.
 *  4. 96 + 16 n_rows + 12 n_routes, rounded up to 16, plus payload_len is
 *     exactly frame_len (computed in 64 bits: no overflow).
 *  5. The payload size follows from the shape: n_vec * dim * dtype_size
 *     (hidden, expert; GATHER: dim * 4, dim >= 0), the hello/qp block size, or <= 255 (reasons).
 *  6. Every route's row index is < n_rows and its gate is finite.
 *  7. Data kinds carry at least one row and layer_first < layer_end
 *     (TOKEN: layer_first <= layer_end). SESSION carries exactly one row,
 *     layers [0, 0), I32 words and no routes.
 *  8. Control kinds (HELLO, HELLO_ACK, ERROR, CREDIT, RDMA_*, PROBE,
 *     WEIGHTS) carry no rows and no routes; WEIGHTS a U8 (or no) payload
 *     whose layout its op (n_aux) defines (runtime/node/weights.h).
 *  9. (link) A data frame's digest and epoch equal the link's plan, and seq
 *     follows the previous frame's; see xfer.h for what a violation does.
 */
#ifndef SHOAL_NET_XFER_FRAME_H
#define SHOAL_NET_XFER_FRAME_H

#include <stddef.h>
#include <stdint.h>

#include "base/err.h"
#include "base/peer_id.h"
#include "scheduler/digest.h"

#define SHOAL_XFER_MAGIC        0x46584853u /* "SHXF" read as a little-endian u32 */
#define SHOAL_XFER_VERSION      1u
#define SHOAL_XFER_HDR_SIZE     96u /* 84 bytes of fields + 12 reserved: a multiple of 16 */
#define SHOAL_XFER_ROW_SIZE     16u /* u64 + u32 + u32 pad keeps tags 8-aligned */
#define SHOAL_XFER_ROUTE_SIZE   12u /* u32 row + u32 expert + f32 gate */
#define SHOAL_XFER_OFF_CREDITS  80u /* where a transport patches the credits field */
#define SHOAL_XFER_OFF_HEAD_CRC 84u /* the transports' checksums */
#define SHOAL_XFER_OFF_BODY_CRC 88u
#define SHOAL_XFER_REASON_MAX   255u /* one log line; fits a u8 length elsewhere */
#define SHOAL_XFER_TOKEN_MAX    64u  /* admission tokens: a 32-byte MAC + 32 of context */
#define SHOAL_XFER_DEVNAME_MAX                                                                     \
	32u                        /* "rdma_en10", "mlx5_0": IB_DEVICE_NAME_MAX is 64, we keep 31  \
	                            */
#define SHOAL_XFER_HELLO_SIZE  64u /* fixed part of the HELLO block, then the token */
#define SHOAL_XFER_QPINFO_SIZE 40u /* see shoal_xfer_qp_info_encode */
/* A reason received in a frame is copied into why[SHOAL_WHY_LEN] whole. */
_Static_assert(SHOAL_XFER_REASON_MAX < SHOAL_WHY_LEN, "a frame's reason fits a reason buffer");

typedef enum shoal_xfer_kind {
	SHOAL_XFER_KIND_NONE = 0,
	SHOAL_XFER_KIND_HELLO,        /* connector -> acceptor: hello block + token */
	SHOAL_XFER_KIND_HELLO_ACK,    /* acceptor -> connector: hello block, no token */
	SHOAL_XFER_KIND_ERROR,        /* n_aux = shoal_err, payload = one-line reason */
	SHOAL_XFER_KIND_HIDDEN,       /* hidden states to the next stage: (n_rows, dim) */
	SHOAL_XFER_KIND_TOKEN,        /* sampled tokens to the owner: (n_rows, dim) I32 */
	SHOAL_XFER_KIND_EXPERT_REQ,   /* routes + expert inputs: (n_rows, dim) */
	SHOAL_XFER_KIND_EXPERT_REP,   /* routes + partial outputs: (n_routes, dim) */
	SHOAL_XFER_KIND_CREDIT,       /* RDMA: only returns credits, never delivered */
	SHOAL_XFER_KIND_RDMA_QP,      /* n_aux = status; payload = qp info or reason */
	SHOAL_XFER_KIND_RDMA_VERDICT, /* n_aux = status; payload = reason (or empty) */
	SHOAL_XFER_KIND_PROBE,        /* upgrade test round trip; opaque U8 payload */
	SHOAL_XFER_KIND_SESSION,      /* a session's open/close/error: (1, dim) I32 words */
	SHOAL_XFER_KIND_WEIGHTS,      /* model bytes: n_aux = op, digest = model id, U8 payload */
	SHOAL_XFER_KIND_GATHER,       /* a tensor group member's slice: n_aux = round, (1, dim) F32,
	                                 dim may be 0 (runtime/dist/dist.h) */
	SHOAL_XFER_KIND__COUNT
} shoal_xfer_kind;

typedef enum shoal_xfer_dtype {
	SHOAL_XFER_DTYPE_NONE = 0,
	SHOAL_XFER_DTYPE_F32,
	SHOAL_XFER_DTYPE_F16,
	SHOAL_XFER_DTYPE_BF16,
	SHOAL_XFER_DTYPE_I32,
	SHOAL_XFER_DTYPE_U8,
	SHOAL_XFER_DTYPE__COUNT
} shoal_xfer_dtype;

/* One row of a batch: which session, which position in its sequence. */
typedef struct shoal_xfer_row {
	uint64_t session;
	uint32_t pos;
} shoal_xfer_row;

/* One (row, expert) pair of an MoE dispatch and its gate weight. */
typedef struct shoal_xfer_route {
	uint32_t row;
	uint32_t expert;
	float gate;
} shoal_xfer_route;

/* A frame's header in host form. rows/routes: on send, the caller's arrays
 * (read during the call); on receive, arrays owned by the link, valid until
 * the next receive. seq and credits are set by the link and transport. */
typedef struct shoal_xfer_hdr {
	uint8_t kind;  /* shoal_xfer_kind */
	uint8_t dtype; /* shoal_xfer_dtype */
	uint16_t layer_first, layer_end;
	uint32_t dim;
	uint8_t digest[SHOAL_DIGEST_BYTES]; /* the plan's; WEIGHTS: the model id */
	uint64_t epoch;
	uint64_t seq;
	uint32_t credits;
	uint32_t n_rows;
	const shoal_xfer_row *rows;     /* (n_rows) */
	uint32_t n_aux;                 /* routes (EXPERT_*) or status (ERROR, RDMA_*) */
	const shoal_xfer_route *routes; /* (n_aux) for EXPERT_*, else NULL */
	uint32_t payload_len;
} shoal_xfer_hdr;

/* What a receiver accepts. */
typedef struct shoal_xfer_limits {
	uint32_t max_frame;
	uint32_t max_rows;
	uint32_t max_routes;
} shoal_xfer_limits;

const char *shoal_xfer_kind_name(unsigned kind); /* "hidden", ...; "?" if unknown */
size_t shoal_xfer_dtype_size(unsigned dtype);    /* 0 if unknown or NONE */
int shoal_xfer_kind_is_data(
    unsigned kind); /* HIDDEN, TOKEN, EXPERT_*, SESSION, GATHER: plan-checked */
int shoal_xfer_kind_has_routes(unsigned kind); /* EXPERT_REQ, EXPERT_REP */

/* Bytes before the payload (header, tags, routes, padding) for h. */
uint64_t shoal_xfer_frame_head_len(const shoal_xfer_hdr *h);

/* Encode everything before the payload into buf[cap]; frame_len becomes
 * head + h->payload_len. Checks only what a bug would get wrong (sizes):
 * SHOAL_ERR_RANGE if it does not fit cap or 32 bits. */
shoal_err shoal_xfer_frame_encode_head(const shoal_xfer_hdr *h, uint8_t *buf, size_t cap,
                                       size_t *head_len);

/* Framing check on the first SHOAL_XFER_HDR_SIZE bytes of a stream or a
 * message: magic, version, max_frame >= frame_len >= 96. On success
 * *frame_len says how many bytes the whole frame has. */
shoal_err shoal_xfer_frame_peek(const uint8_t *buf, size_t len, uint32_t max_frame,
                                uint32_t *frame_len, char *why, size_t why_len);

/* Validate and decode one whole frame buf[len] (invariants 1-8). rows and
 * routes are the caller's arrays of lim->max_rows and lim->max_routes; h's
 * rows/routes point into them, *payload into buf. SHOAL_ERR_FORMAT (or
 * PROTO for framing) with a reason on bad bytes; never reads past len. */
shoal_err shoal_xfer_frame_decode(const uint8_t *buf, size_t len, const shoal_xfer_limits *lim,
                                  shoal_xfer_hdr *h, shoal_xfer_row *rows, shoal_xfer_route *routes,
                                  const uint8_t **payload, char *why, size_t why_len);

/* ---- checksums (the transports': TCP and RDMA) ---- */

/* CRC-32C (Castagnoli) of p[n], continuing crc (0 to start): chaining
 * calls over consecutive pieces gives the CRC of their concatenation. The
 * CPU's crc32c instruction where it has one (SSE4.2, arm64 CRC32), else
 * the scalar twin; thread-safe. */
uint32_t shoal_xfer_crc32c(uint32_t crc, const void *p, size_t n);
/* The same by the table code alone (the tests' oracle). */
uint32_t shoal_xfer_crc32c_scalar(uint32_t crc, const void *p, size_t n);
/* What shoal_xfer_crc32c runs on: "sse4.2", "armv8-crc" or "scalar". */
const char *shoal_xfer_crc32c_isa(void);
/* The head_crc of the header hdr[96] (its own field taken as zero). */
uint32_t shoal_xfer_frame_head_crc(const uint8_t *hdr);
/* Set both checksums of the whole frame buf[len] (len >= 96) in place. */
void shoal_xfer_frame_seal(uint8_t *buf, size_t len);
/* Check the head_crc of hdr[96] (before its frame_len is trusted), and the
 * body_crc of the whole frame buf[len]: SHOAL_ERR_PROTO with a reason when
 * a check fails (the bytes were damaged, or the peer seals no frames). */
shoal_err shoal_xfer_frame_check_head(const uint8_t *hdr, char *why, size_t why_len);
shoal_err shoal_xfer_frame_check_body(const uint8_t *buf, size_t len, char *why, size_t why_len);

/* ---- fixed payload blocks ---- */

/* HELLO / HELLO_ACK block: u32 flags, u32 max_frame, u32 rdma_slots,
 * u32 token_len, u8 peer[16], char device[32] (NUL-padded), token. */
#define SHOAL_XFER_HELLO_RDMA 1u /* flags bit 0: rdma offered on `device` */
typedef struct shoal_xfer_hello {
	uint32_t flags;
	uint32_t max_frame;
	uint32_t rdma_slots;
	uint8_t peer[SHOAL_PEER_ID_LEN];
	char device[SHOAL_XFER_DEVNAME_MAX];
	uint32_t token_len;
	uint8_t token[SHOAL_XFER_TOKEN_MAX];
} shoal_xfer_hello;

size_t shoal_xfer_hello_encode(const shoal_xfer_hello *hl, uint8_t *buf, size_t cap);
shoal_err shoal_xfer_hello_decode(const uint8_t *p, size_t n, shoal_xfer_hello *hl, char *why,
                                  size_t why_len);

/* What one end needs to bring its queue pair to RTR towards the other:
 * u32 qpn, u32 psn, u16 lid, u16 zero, u32 mtu, u8 gid[16], u32 slots,
 * u32 slot_size. The link sends it in an RDMA_QP frame over its TCP
 * connection; the same 40 bytes could travel over the control plane. */
typedef struct shoal_xfer_qp_info {
	uint32_t qpn, psn;
	uint16_t lid;
	uint32_t mtu; /* active path MTU in bytes: 256..4096 */
	uint8_t gid[16];
	uint32_t slots;     /* receive slots posted: the sender's initial credits */
	uint32_t slot_size; /* bytes per receive slot */
} shoal_xfer_qp_info;

void shoal_xfer_qp_info_encode(const shoal_xfer_qp_info *q, uint8_t out[SHOAL_XFER_QPINFO_SIZE]);
shoal_err shoal_xfer_qp_info_decode(const uint8_t *p, size_t n, shoal_xfer_qp_info *q, char *why,
                                    size_t why_len);

#endif

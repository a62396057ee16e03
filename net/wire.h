/*
 * net/wire.h: the control-message codec of membership (msgpack).
 *
 * Part of net/ (DESIGN.md section 3). A message is one msgpack map with a
 * type "t" and a schema version "v"; updates carry a peer's record as a
 * msgpack-encoded bin, so a receiver can keep the exact bytes and decode
 * (validate) them only when the record is newer than what it has.
 *
 * Decoding never trusts the bytes: a structural pre-scan bounds nesting
 * depth and checks every declared length and count against the bytes that
 * remain before msgpack-c builds any object; then every field is checked
 * for type, range and length. Unknown keys are ignored (a newer peer may
 * add some); a missing required key, a wrong type, an unknown message type
 * or schema version is an error with a one-line reason.
 *
 * The check: a message we encode ends in the key "k" with a 4-byte uint32
 * (0xa1 'k' 0xce, then big-endian), the CRC-32C of the whole message with
 * those 4 bytes as zeros. A message that ends so must match it, else it
 * is refused before it is decoded: a flipped bit that would still decode
 * (a byte of a record's model id) is caught. One without it (a hand-made
 * message, an older peer's) is decoded unchecked; a single flipped bit
 * in the key itself leaves the rest intact. On the wire CURVE's MAC
 * catches damage first; the check covers --insecure links and the test
 * hook's corruption, which comes after CURVE (net/fault.h).
 */
#ifndef SHOAL_NET_WIRE_H
#define SHOAL_NET_WIRE_H

#include <stddef.h>
#include <stdint.h>

#include "base/err.h"
#include "net/record.h"

#define SHOAL_WIRE_SCHEMA 1 /* the "v" of every message we send and accept */

/* Limits of what we accept. */
#define SHOAL_WIRE_MAX_DEPTH   8          /* our deepest is 3 (msg > updates > update) */
#define SHOAL_WIRE_MAX_MSG     (8u << 20) /* a push-pull of 4096 peers x ~2 KiB fits */
#define SHOAL_WIRE_MAX_UPDATES 4096       /* members in one push-pull */
/* The largest incarnation a peer takes, gossips or accepts: 2^63 - 1, so
 * that every consumer (JSON's signed integers in `shoal status --json`)
 * shows it as it is; a restart a second would take 2.9e11 years to get
 * there, so a state file beyond it is damaged, and a peer at it stays
 * there instead of wrapping to 0 (issue 35). */
#define SHOAL_WIRE_INC_MAX    ((uint64_t)INT64_MAX)
#define SHOAL_WIRE_MAX_RECORD (32u << 10) /* a full record is ~12 KiB of msgpack */

typedef enum shoal_wire_type {
	SHOAL_WIRE_PING = 1,     /* probe; the receiver answers ACK with the same seq */
	SHOAL_WIRE_ACK = 2,      /* answer to PING (or relayed answer to PING_REQ) */
	SHOAL_WIRE_PING_REQ = 3, /* "probe target for me" (indirect probe) */
	SHOAL_WIRE_PUSHPULL = 4, /* full state; reply=1 asks for the receiver's */
} shoal_wire_type;

/* What one peer says about one member. */
typedef struct shoal_wire_update {
	shoal_peer_id id;
	uint32_t state; /* shoal_swim_state; net/swim.c checks the range */
	uint64_t incarnation;
	uint64_t record_version;
	/* The encoded record, borrowed from the message buffer; NULL if absent. */
	const uint8_t *record;
	size_t record_len;
} shoal_wire_update;

typedef struct shoal_wire_msg {
	uint32_t type;                       /* shoal_wire_type */
	shoal_peer_id from;                  /* the sender */
	char from_ep[SHOAL_RECORD_EP_MAX];   /* the sender's control endpoint */
	uint64_t seq;                        /* PING, ACK, PING_REQ */
	shoal_peer_id target;                /* PING: whom the sender meant; ACK: who answered; */
	                                     /* PING_REQ: whom to probe */
	char target_ep[SHOAL_RECORD_EP_MAX]; /* PING_REQ */
	uint32_t reply;                      /* PUSHPULL: 1 = answer with your state */
	size_t n_updates;
	shoal_wire_update *updates; /* caller-owned array; capacity given to decode */
} shoal_wire_msg;

/* A growable output buffer, reused across messages. */
typedef struct shoal_wire_buf {
	uint8_t *data;
	size_t len, cap;
} shoal_wire_buf;

void shoal_wire_buf_init(shoal_wire_buf *b);
void shoal_wire_buf_fini(shoal_wire_buf *b);
/* Grow b's capacity to at least cap bytes now, so that encoding messages
 * up to cap later allocates nothing. SHOAL_ERR_NOMEM when it cannot. */
shoal_err shoal_wire_buf_reserve(shoal_wire_buf *b, size_t cap);
/* msgpack-c's write callback for a packer over a shoal_wire_buf (data):
 * appends n bytes, doubling the capacity; -1 when out of memory. */
int shoal_wire_buf_write(void *data, const char *p, size_t n);

/* Encode m into b (b->len reset first). The update records are copied. */
shoal_err shoal_wire_encode(const shoal_wire_msg *m, shoal_wire_buf *b);

/* Decode buf[len] into m. m->updates must point to `cap` entries; their
 * record pointers then point into buf, which must outlive their use.
 * Errors: SHOAL_ERR_FORMAT (malformed), SHOAL_ERR_UNSUPPORTED (schema or
 * type we do not speak), SHOAL_ERR_RANGE (more updates than cap). */
shoal_err shoal_wire_decode(const uint8_t *buf, size_t len, shoal_wire_msg *m, size_t cap,
                            char *why, size_t why_len);

/* The record as its own msgpack map. */
shoal_err shoal_wire_record_encode(const shoal_record *r, shoal_wire_buf *b);
shoal_err shoal_wire_record_decode(const uint8_t *buf, size_t len, shoal_record *out, char *why,
                                   size_t why_len);

/* The structural pre-scan alone: exactly one msgpack object of at most
 * max_depth nesting fills buf[len], every length and count fits. */
shoal_err shoal_wire_prescan(const uint8_t *buf, size_t len, unsigned max_depth, char *why,
                             size_t why_len);

#endif

/*
 * base/peer_id.h: the 128-bit peer id, the one type that net/ (membership,
 * records) and scheduler/ (the view and the plan) name peers by.
 *
 * On the wire and in the data-transfer layer (net/xfer.h, runtime/dist/)
 * an id travels as its 16 raw bytes, uint8_t[SHOAL_PEER_ID_LEN], the same
 * bytes as shoal_peer_id.b. The one conversion from those bytes is
 * shoal_peer_id_from_bytes(); the other way is id.b.
 */
#ifndef SHOAL_BASE_PEER_ID_H
#define SHOAL_BASE_PEER_ID_H

#include <stdint.h>

#include "base/err.h"

#define SHOAL_PEER_ID_LEN     16 /* 128-bit id, random, made once per peer */
#define SHOAL_PEER_ID_HEX_LEN (2 * SHOAL_PEER_ID_LEN + 1) /* its hex digits and a NUL */

typedef struct shoal_peer_id {
	uint8_t b[SHOAL_PEER_ID_LEN]; /* big-endian: b[0] is the most significant byte */
} shoal_peer_id;

/* memcmp order of the 16 bytes (<0, 0, >0): the order of the view and of
 * every list the scheduler sees. */
int shoal_peer_id_cmp(const shoal_peer_id *a, const shoal_peer_id *b);
/* The id held in 16 raw bytes (a frame's or a link's peer field). */
shoal_peer_id shoal_peer_id_from_bytes(const uint8_t b[SHOAL_PEER_ID_LEN]);
/* 32 lowercase hex digits and a NUL into out[33]. */
void shoal_peer_id_to_hex(const shoal_peer_id *id, char out[2 * SHOAL_PEER_ID_LEN + 1]);
/* Parse exactly 32 hex digits of either case (NULL is malformed);
 * SHOAL_ERR_FORMAT otherwise. */
shoal_err shoal_peer_id_from_hex(const char *hex, shoal_peer_id *out);

#endif

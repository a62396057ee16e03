/*
 * base/peer_id.c: order, raw bytes and hex form of the peer id (see
 * peer_id.h).
 */
#include "base/peer_id.h"

#include <string.h>

#include "base/hex.h"

int shoal_peer_id_cmp(const shoal_peer_id *a, const shoal_peer_id *b)
{
	return memcmp(a->b, b->b, SHOAL_PEER_ID_LEN);
}

shoal_peer_id shoal_peer_id_from_bytes(const uint8_t b[SHOAL_PEER_ID_LEN])
{
	shoal_peer_id id;
	memcpy(id.b, b, SHOAL_PEER_ID_LEN);
	return id;
}

void shoal_peer_id_to_hex(const shoal_peer_id *id, char out[2 * SHOAL_PEER_ID_LEN + 1])
{
	shoal_hex_encode(id->b, SHOAL_PEER_ID_LEN, out);
}

shoal_err shoal_peer_id_from_hex(const char *hex, shoal_peer_id *out)
{
	if (!hex)
		return SHOAL_ERR_FORMAT;
	return shoal_hex_decode(hex, strlen(hex), out->b, SHOAL_PEER_ID_LEN);
}

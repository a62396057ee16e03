/*
 * net/ctlmsg.h: the node's own control messages, beside membership's.
 *
 * Part: net/. Same envelope as net/wire.h (one msgpack map, type "t",
 * schema "v" = SHOAL_WIRE_SCHEMA) with types from 64 up, which membership
 * never uses, so the node can tell them apart before handing a message to
 * SWIM:
 *   64 STATUS_REQ   {seq}                   `shoal status` asks for the view
 *   65 STATUS_RESP  {seq, json: str}        the view as JSON text (cmd_status.c)
 *   66 LINK_PROBE   {seq, lep, rep, pad: bin}  RTT / bandwidth probe
 *   67 LINK_ACK     {seq, lep, rep, n: u64}    answer, n = pad bytes received
 *   68 RUN_REQ      {seq, typed fields}     `shoal run --peer`: run this prompt
 *   69 RUN_TOKEN    {seq, typed fields}     one generated token (several replies)
 *   70 RUN_END      {seq, typed fields}     the run finished (ok, or why not)
 * The RUN_* fields are net/runmsg.h's, encoded and decoded there; here
 * only their envelope is checked.
 */
#ifndef SHOAL_NET_CTLMSG_H
#define SHOAL_NET_CTLMSG_H

#include <stddef.h>
#include <stdint.h>

#include "base/err.h"
#include "net/wire.h"

#define SHOAL_CTLMSG_FIRST 64
typedef enum shoal_ctlmsg_type {
	SHOAL_CTLMSG_STATUS_REQ = 64,
	SHOAL_CTLMSG_STATUS_RESP = 65,
	SHOAL_CTLMSG_LINK_PROBE = 66,
	SHOAL_CTLMSG_LINK_ACK = 67,
	SHOAL_CTLMSG_RUN_REQ = 68,
	SHOAL_CTLMSG_RUN_TOKEN = 69,
	SHOAL_CTLMSG_RUN_END = 70,
} shoal_ctlmsg_type;

typedef struct shoal_ctlmsg {
	uint32_t type;
	uint64_t seq;
	uint32_t lep, rep; /* LINK_*: local / remote endpoint index of the prober */
	uint64_t n;        /* LINK_ACK: pad bytes the prober sent */
	size_t pad_len;    /* LINK_PROBE (decode only) */
	const char *json;  /* STATUS_RESP: borrowed from the buffer, NOT NUL-terminated */
	size_t json_len;
} shoal_ctlmsg;

/* Encode m into b. For LINK_PROBE, pad_len zero bytes are added. RUN_*
 * messages are net/runmsg.h's to encode: SHOAL_ERR_INVAL here. */
shoal_err shoal_ctlmsg_encode(const shoal_ctlmsg *m, shoal_wire_buf *b);

/* Decode buf[len]. SHOAL_ERR_NOTFOUND: a well-formed envelope whose type is
 * not ours (below 64: give it to membership). Other errors: malformed. For
 * RUN_* only the envelope (type, seq) is read: see shoal_runmsg_decode. */
shoal_err shoal_ctlmsg_decode(const uint8_t *buf, size_t len, shoal_ctlmsg *m, char *why,
                              size_t why_len);

#endif

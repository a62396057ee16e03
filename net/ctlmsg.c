/*
 * net/ctlmsg.c: encoder and checked decoder of the node's control messages
 * (see ctlmsg.h). The bytes are pre-scanned (net/wire.h) before msgpack-c
 * builds objects, so a hostile length cannot make it allocate.
 */
#include "net/ctlmsg.h"

#include <stdlib.h>
#include <string.h>

#include <msgpack.h>

static int ctlmsg_key(msgpack_packer *pk, const char *k)
{
	return msgpack_pack_str_with_body(pk, k, strlen(k));
}

shoal_err shoal_ctlmsg_encode(const shoal_ctlmsg *m, shoal_wire_buf *b)
{
	msgpack_packer pk;
	if (m->type >= SHOAL_CTLMSG_RUN_REQ)
		return SHOAL_ERR_INVAL;
	b->len = 0;
	msgpack_packer_init(&pk, b, shoal_wire_buf_write);
	int n = 3, rc = 0;
	int has_json = m->type == SHOAL_CTLMSG_STATUS_RESP;
	if (has_json)
		n += 1;
	else if (m->type == SHOAL_CTLMSG_LINK_PROBE || m->type == SHOAL_CTLMSG_LINK_ACK)
		n += 3;
	rc |= msgpack_pack_map(&pk, (size_t)n);
	rc |= ctlmsg_key(&pk, "t") | msgpack_pack_uint32(&pk, m->type);
	rc |= ctlmsg_key(&pk, "v") | msgpack_pack_uint32(&pk, SHOAL_WIRE_SCHEMA);
	rc |= ctlmsg_key(&pk, "seq") | msgpack_pack_uint64(&pk, m->seq);
	if (has_json)
		rc |=
		    ctlmsg_key(&pk, "json") | msgpack_pack_str_with_body(&pk, m->json, m->json_len);
	if (m->type == SHOAL_CTLMSG_LINK_PROBE || m->type == SHOAL_CTLMSG_LINK_ACK) {
		rc |= ctlmsg_key(&pk, "lep") | msgpack_pack_uint32(&pk, m->lep);
		rc |= ctlmsg_key(&pk, "rep") | msgpack_pack_uint32(&pk, m->rep);
		if (m->type == SHOAL_CTLMSG_LINK_ACK) {
			rc |= ctlmsg_key(&pk, "n") | msgpack_pack_uint64(&pk, m->n);
		} else {
			rc |= ctlmsg_key(&pk, "pad") | msgpack_pack_bin(&pk, m->pad_len);
			static const char zeros[4096];
			for (size_t off = 0; off < m->pad_len && !rc; off += sizeof zeros) {
				size_t k = m->pad_len - off;
				rc |= msgpack_pack_bin_body(&pk, zeros,
				                            k < sizeof zeros ? k : sizeof zeros);
			}
		}
	}
	return rc ? SHOAL_ERR_NOMEM : SHOAL_OK;
}

static int ctlmsg_is(const msgpack_object *k, const char *name)
{
	size_t l = strlen(name);
	return k->type == MSGPACK_OBJECT_STR && k->via.str.size == l &&
	       !memcmp(k->via.str.ptr, name, l);
}

shoal_err shoal_ctlmsg_decode(const uint8_t *buf, size_t len, shoal_ctlmsg *m, char *why,
                              size_t why_len)
{
	memset(m, 0, sizeof *m);
	shoal_err e = shoal_wire_prescan(buf, len, 4, why, why_len);
	if (e != SHOAL_OK)
		return e;
	msgpack_unpacked up;
	msgpack_unpacked_init(&up);
	size_t off = 0;
	if (msgpack_unpack_next(&up, (const char *)buf, len, &off) != MSGPACK_UNPACK_SUCCESS ||
	    up.data.type != MSGPACK_OBJECT_MAP) {
		msgpack_unpacked_destroy(&up);
		return shoal_why(why, why_len, SHOAL_ERR_FORMAT, "not a msgpack map");
	}
	int have_t = 0, have_v = 0, have_seq = 0;
	uint64_t v = 0;
	const msgpack_object_map *map = &up.data.via.map;
	e = SHOAL_OK;
	for (uint32_t i = 0; i < map->size && e == SHOAL_OK; i++) {
		const msgpack_object *k = &map->ptr[i].key, *o = &map->ptr[i].val;
		int is_u = o->type == MSGPACK_OBJECT_POSITIVE_INTEGER;
		if (ctlmsg_is(k, "t")) {
			if (!is_u || o->via.u64 > UINT32_MAX)
				e = shoal_why(why, why_len, SHOAL_ERR_FORMAT, "bad \"t\"");
			m->type = (uint32_t)o->via.u64;
			have_t = 1;
		} else if (ctlmsg_is(k, "v")) {
			if (!is_u)
				e = shoal_why(why, why_len, SHOAL_ERR_FORMAT, "bad \"v\"");
			v = o->via.u64;
			have_v = 1;
		} else if (ctlmsg_is(k, "seq")) {
			if (!is_u)
				e = shoal_why(why, why_len, SHOAL_ERR_FORMAT, "bad \"seq\"");
			m->seq = o->via.u64;
			have_seq = 1;
		} else if (ctlmsg_is(k, "lep") || ctlmsg_is(k, "rep")) {
			if (!is_u || o->via.u64 > 255)
				e = shoal_why(why, why_len, SHOAL_ERR_FORMAT, "bad endpoint index");
			else if (k->via.str.ptr[0] == 'l')
				m->lep = (uint32_t)o->via.u64;
			else
				m->rep = (uint32_t)o->via.u64;
		} else if (ctlmsg_is(k, "n")) {
			if (!is_u)
				e = shoal_why(why, why_len, SHOAL_ERR_FORMAT, "bad \"n\"");
			m->n = o->via.u64;
		} else if (ctlmsg_is(k, "pad")) {
			if (o->type != MSGPACK_OBJECT_BIN)
				e = shoal_why(why, why_len, SHOAL_ERR_FORMAT, "bad \"pad\"");
			m->pad_len = o->via.bin.size;
		} else if (ctlmsg_is(k, "json")) {
			if (o->type != MSGPACK_OBJECT_STR)
				e = shoal_why(why, why_len, SHOAL_ERR_FORMAT, "bad \"json\"");
			m->json = o->via.str.ptr; /* points into buf: msgpack-c references it */
			m->json_len = o->via.str.size;
		}
	}
	if (e == SHOAL_OK && (!have_t || !have_v))
		e = shoal_why(why, why_len, SHOAL_ERR_FORMAT, "missing \"t\" or \"v\"");
	if (e == SHOAL_OK && m->type < SHOAL_CTLMSG_FIRST)
		e = SHOAL_ERR_NOTFOUND;
	else if (e == SHOAL_OK && v != SHOAL_WIRE_SCHEMA)
		e = shoal_why(why, why_len, SHOAL_ERR_UNSUPPORTED, "schema %llu",
		              (unsigned long long)v);
	else if (e == SHOAL_OK && m->type > SHOAL_CTLMSG_RUN_END)
		e = shoal_why(why, why_len, SHOAL_ERR_UNSUPPORTED, "message type %u", m->type);
	else if (e == SHOAL_OK && !have_seq)
		e = shoal_why(why, why_len, SHOAL_ERR_FORMAT, "missing \"seq\"");
	else if (e == SHOAL_OK && m->type == SHOAL_CTLMSG_STATUS_RESP && !m->json)
		e = shoal_why(why, why_len, SHOAL_ERR_FORMAT, "status without \"json\"");
	msgpack_unpacked_destroy(&up);
	return e;
}

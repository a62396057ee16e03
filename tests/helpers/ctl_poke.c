/*
 * tests/helpers/ctl_poke.c: send a corpus of garbage and truncated control messages
 * to a live node's ROUTER, as a client that HAS the cluster key, then ask
 * for the status to show the node still works. Used by mesh_loopback.sh.
 *
 *   ctl_poke ENDPOINT KEYFILE    prints "sent N bad messages" and the
 *                                status JSON's length; exit 0 if the node
 *                                answered the status request afterwards.
 *
 * Corpus: empty and multi-frame messages, bytes msgpack never uses, maps
 * and strings declaring 4 G entries/bytes, 200-deep nesting, envelopes with
 * missing, mistyped or unknown "t"/"v", and every proper prefix of a valid
 * membership PING and of a valid status request.
 */
#include "config.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "net/ctl.h"
#include "net/ctlmsg.h"
#include "net/key.h"
#include "net/wire.h"

static int sent;

static void send1(shoal_ctl_client *c, const void *b, size_t n)
{
	const void *bufs[1] = {b};
	size_t lens[1] = {n};
	if (shoal_ctl_client_send(c, bufs, lens, 1) == SHOAL_OK)
		sent++;
}

static void send_prefixes(shoal_ctl_client *c, const shoal_wire_buf *b)
{
	for (size_t n = 1; n < b->len; n++)
		send1(c, b->data, n);
}

int main(int argc, char **argv)
{
	if (argc != 3) {
		fprintf(stderr, "usage: ctl_poke ENDPOINT KEYFILE\n");
		return 2;
	}
	char why[SHOAL_WHY_WRAP_LEN] = "";
	shoal_key key;
	shoal_key_curve curve;
	if (shoal_key_read(argv[2], &key, NULL, why, sizeof why) != SHOAL_OK ||
	    shoal_key_derive(&key, &curve) != SHOAL_OK) {
		fprintf(stderr, "ctl_poke: %s\n", why);
		return 1;
	}
	shoal_ctl_client *c = NULL;
	if (shoal_ctl_client_new(argv[1], &curve, &c, why, sizeof why) != SHOAL_OK) {
		fprintf(stderr, "ctl_poke: %s\n", why);
		return 1;
	}
	static const uint8_t never_used[] = {0xc1};
	static const uint8_t huge_map[] = {0xdf, 0xff, 0xff, 0xff, 0xff, 0xa1, 't'};
	static const uint8_t huge_array[] = {0xdd, 0xff, 0xff, 0xff, 0xff, 0x01};
	static const uint8_t huge_str[] = {0x81, 0xdb, 0x7f, 0xff, 0xff, 0xff, 'a', 'b'};
	static const uint8_t huge_bin[] = {0xc6, 0xff, 0xff, 0xff, 0xf0, 0x00};
	static const uint8_t no_t[] = {0x81, 0xa1, 'v', 0x01}; /* {"v":1} */
	static const uint8_t t_str[] = {0x82, 0xa1, 't', 0xa1, 'x', 0xa1, 'v', 0x01};
	static const uint8_t t_neg[] = {0x82, 0xa1, 't', 0xff, 0xa1, 'v', 0x01};
	static const uint8_t bad_v[] = {0x82, 0xa1, 't', 0x01, 0xa1, 'v', 0x63}; /* v=99 */
	static const uint8_t t_unknown[] = {0x82, 0xa1, 't', 0xcc, 0xc8, 0xa1, 'v', 0x01};
	static const uint8_t ping_bare[] = {0x82, 0xa1, 't', 0x01, 0xa1, 'v', 0x01};
	static const uint8_t status_no_seq[] = {0x82, 0xa1, 't', 0x40, 0xa1, 'v', 0x01};
	static const uint8_t two_objects[] = {0x80, 0x80};
	static const uint8_t not_map[] = {0x93, 0x01, 0x02, 0x03};
	const struct {
		const uint8_t *b;
		size_t n;
	} corpus[] = {
	    {never_used, sizeof never_used},
	    {huge_map, sizeof huge_map},
	    {huge_array, sizeof huge_array},
	    {huge_str, sizeof huge_str},
	    {huge_bin, sizeof huge_bin},
	    {no_t, sizeof no_t},
	    {t_str, sizeof t_str},
	    {t_neg, sizeof t_neg},
	    {bad_v, sizeof bad_v},
	    {t_unknown, sizeof t_unknown},
	    {ping_bare, sizeof ping_bare},
	    {status_no_seq, sizeof status_no_seq},
	    {two_objects, sizeof two_objects},
	    {not_map, sizeof not_map},
	};
	for (size_t i = 0; i < sizeof corpus / sizeof corpus[0]; i++)
		send1(c, corpus[i].b, corpus[i].n);
	/* 200-deep nesting: fixarray of 1, 200 times, then nil. */
	uint8_t deep[201];
	memset(deep, 0x91, 200);
	deep[200] = 0xc0;
	send1(c, deep, sizeof deep);
	/* random bytes */
	uint8_t rnd[256];
	uint32_t x = 12345;
	for (size_t i = 0; i < sizeof rnd; i++) {
		x = x * 1103515245u + 12345u;
		rnd[i] = (uint8_t)(x >> 16);
	}
	for (size_t n = 1; n <= sizeof rnd; n *= 2)
		send1(c, rnd, n);
	/* empty frame and a two-frame message */
	send1(c, "", 0);
	const void *two[2] = {ping_bare, ping_bare};
	size_t two_len[2] = {sizeof ping_bare, sizeof ping_bare};
	if (shoal_ctl_client_send(c, two, two_len, 2) == SHOAL_OK)
		sent++;
	/* every proper prefix of a valid PING and of a valid status request */
	shoal_wire_buf b;
	shoal_wire_buf_init(&b);
	shoal_wire_msg ping;
	memset(&ping, 0, sizeof ping);
	ping.type = SHOAL_WIRE_PING;
	memset(ping.from.b, 0xab, sizeof ping.from.b);
	snprintf(ping.from_ep, sizeof ping.from_ep, "tcp://127.0.0.1:9");
	ping.seq = 7;
	memset(ping.target.b, 0xcd, sizeof ping.target.b);
	if (shoal_wire_encode(&ping, &b) == SHOAL_OK)
		send_prefixes(c, &b);
	shoal_ctlmsg req = {.type = SHOAL_CTLMSG_STATUS_REQ, .seq = 99};
	if (shoal_ctlmsg_encode(&req, &b) == SHOAL_OK)
		send_prefixes(c, &b);
	printf("sent %d bad messages\n", sent);
	/* Now a real status request on the same connection must be answered. */
	send1(c, b.data, b.len);
	uint8_t *reply = NULL;
	size_t rl = 0;
	int rc = 1;
	for (int tries = 0; tries < 5; tries++) {
		free(reply);
		reply = NULL;
		if (shoal_ctl_client_recv(c, 3000, &reply, &rl, why, sizeof why) != SHOAL_OK)
			break;
		shoal_ctlmsg m;
		if (shoal_ctlmsg_decode(reply, rl, &m, why, sizeof why) == SHOAL_OK &&
		    m.type == SHOAL_CTLMSG_STATUS_RESP && m.seq == 99) {
			printf("status answered: %zu bytes of JSON\n", m.json_len);
			rc = 0;
			break;
		}
	}
	if (rc)
		fprintf(stderr, "ctl_poke: no status answer after the corpus: %s\n", why);
	free(reply);
	shoal_wire_buf_fini(&b);
	shoal_ctl_client_free(c);
	shoal_key_wipe(&key, sizeof key);
	shoal_key_wipe(&curve, sizeof curve);
	return rc;
}

/*
 * tests/helpers/run_poke.c: send malformed RUN_REQ messages (net/runmsg.h)
 * to a live node that serves a model, as a client that HAS the cluster key;
 * each must be answered by a RUN_END with an error code and a reason, and a
 * valid request afterwards must stream tokens and end with err 0. Used by
 * tests/sh/dist_loopback.sh.
 *
 *   run_poke ENDPOINT KEYFILE    prints one line per case; exit 0 if all held
 */
#include "config.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <msgpack.h>

#include "net/ctl.h"
#include "net/ctlmsg.h"
#include "net/key.h"
#include "net/runmsg.h"
#include "net/wire.h"

/* Send buf[len]; collect replies to seq until RUN_END. Returns the number of
 * RUN_TOKEN replies (-1: no answer, or a bad one); *end the RUN_END's code
 * and reason (copied into err). */
static int run1(shoal_ctl_client *c, uint64_t seq, const void *buf, size_t len, shoal_err *end,
                char *err, size_t err_len)
{
	int tokens = 0;
	*end = SHOAL_OK;
	err[0] = '\0';
	const void *bufs[1] = {buf};
	size_t lens[1] = {len};
	shoal_ctl_client_send(c, bufs, lens, 1);
	for (;;) {
		uint8_t *r = NULL;
		size_t rl = 0;
		char why[SHOAL_WHY_LEN];
		shoal_runmsg a;
		if (shoal_ctl_client_recv(c, 30000, &r, &rl, why, sizeof why) != SHOAL_OK)
			return -1;
		if (shoal_runmsg_decode(r, rl, &a, why, sizeof why) != SHOAL_OK || a.seq != seq) {
			fprintf(stderr, "run_poke: a bad reply: %s\n", why);
			free(r);
			return -1;
		}
		if (a.type == SHOAL_CTLMSG_RUN_TOKEN) {
			tokens++;
			free(r);
			continue;
		}
		*end = a.end.err;
		snprintf(err, err_len, "%.*s", (int)a.end.why_len, a.end.why ? a.end.why : "");
		free(r);
		return a.type == SHOAL_CTLMSG_RUN_END ? tokens : -1;
	}
}

/* A RUN_REQ envelope with seq and n more entries, each packed by the caller. */
static void head(msgpack_packer *pk, uint32_t type, uint64_t seq, uint32_t n)
{
	msgpack_pack_map(pk, 3 + n);
	msgpack_pack_str_with_body(pk, "t", 1);
	msgpack_pack_uint32(pk, type);
	msgpack_pack_str_with_body(pk, "v", 1);
	msgpack_pack_uint32(pk, SHOAL_WIRE_SCHEMA);
	msgpack_pack_str_with_body(pk, "seq", 3);
	msgpack_pack_uint64(pk, seq);
}

static void key(msgpack_packer *pk, const char *k)
{
	msgpack_pack_str_with_body(pk, k, strlen(k));
}

/* A whole request of the nine required fields, one of them replaced:
 * field `bad` (by name) packed by fn instead; NULL bad: all valid. */
typedef void (*pack_fn)(msgpack_packer *pk);
static void request(shoal_wire_buf *b, uint64_t seq, const char *prompt, const char *bad,
                    pack_fn fn)
{
	msgpack_packer pk;
	b->len = 0;
	msgpack_packer_init(&pk, b, shoal_wire_buf_write);
	head(&pk, SHOAL_CTLMSG_RUN_REQ, seq, 9);
	static const char *const names[] = {"prompt", "max_tokens",     "logprobs",
	                                    "temp",   "top_k",          "top_p",
	                                    "min_p",  "repeat_penalty", "seed"};
	for (int i = 0; i < 9; i++) {
		key(&pk, names[i]);
		if (bad && !strcmp(bad, names[i])) {
			fn(&pk);
			continue;
		}
		switch (i) {
		case 0:
			msgpack_pack_str_with_body(&pk, prompt, strlen(prompt));
			break;
		case 1:
			msgpack_pack_uint32(&pk, 5);
			break;
		case 3:
			msgpack_pack_float(&pk, 0);
			break;
		case 5:
		case 7:
			msgpack_pack_float(&pk, 1);
			break;
		default:
			msgpack_pack_uint32(&pk, 0);
		}
	}
}

static void p_int42(msgpack_packer *pk)
{
	msgpack_pack_int32(pk, 42);
}
static void p_neg(msgpack_packer *pk)
{
	msgpack_pack_int32(pk, -1);
}
static void p_1000(msgpack_packer *pk)
{
	msgpack_pack_uint32(pk, 1000);
}
static void p_7(msgpack_packer *pk)
{
	msgpack_pack_float(pk, 7);
}
static void p_huge(msgpack_packer *pk)
{
	msgpack_pack_uint64(pk, 99999999999ull);
}
static void p_str(msgpack_packer *pk)
{
	msgpack_pack_str_with_body(pk, "five", 4);
}
static void p_nil(msgpack_packer *pk)
{
	msgpack_pack_nil(pk);
}

int main(int argc, char **argv)
{
	if (argc != 3) {
		fprintf(stderr, "usage: run_poke ENDPOINT KEYFILE\n");
		return 2;
	}
	shoal_key k;
	shoal_key_curve curve;
	char why[SHOAL_WHY_LEN];
	if (shoal_key_read(argv[2], &k, NULL, why, sizeof why) != SHOAL_OK) {
		fprintf(stderr, "run_poke: %s\n", why);
		return 1;
	}
	shoal_key_derive(&k, &curve);
	shoal_ctl_client *c = NULL;
	if (shoal_ctl_client_new(argv[1], &curve, &c, why, sizeof why) != SHOAL_OK) {
		fprintf(stderr, "run_poke: %s\n", why);
		return 1;
	}
	/* a prompt longer than any test context (256 tokens) */
	static char long_prompt[8192];
	for (size_t n = 0; n + 5 < sizeof long_prompt; n += 5)
		memcpy(long_prompt + n, "word ", 5);
	struct {
		const char *what, *field;
		pack_fn fn;
		const char *prompt;
	} bad[] = {
	    {"prompt not a string", "prompt", p_int42, NULL},
	    {"max_tokens -1", "max_tokens", p_neg, NULL},
	    {"logprobs 1000", "logprobs", p_1000, NULL},
	    {"temp -1", "temp", p_neg, NULL},
	    {"top_p 7", "top_p", p_7, NULL},
	    {"top_k -1", "top_k", p_neg, NULL},
	    {"max_tokens 99999999999", "max_tokens", p_huge, NULL},
	    {"seed a string", "seed", p_str, NULL},
	    {"min_p nil", "min_p", p_nil, NULL},
	    {"a prompt past the context", NULL, NULL, long_prompt},
	};
	shoal_wire_buf b;
	shoal_wire_buf_init(&b);
	int fails = 0;
	uint64_t seq = 100;
	shoal_err end;
	char err[256];
	for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++, seq++) {
		request(&b, seq, bad[i].prompt ? bad[i].prompt : "It is", bad[i].field, bad[i].fn);
		int t = run1(c, seq, b.data, b.len, &end, err, sizeof err);
		int good = t == 0 && end != SHOAL_OK && err[0];
		printf("%s: %s answered %s: %s\n", good ? "ok" : "FAIL", bad[i].what,
		       t < 0 ? "(nothing)" : shoal_strerror(end),
		       err[0] ? err : "without a reason");
		fails += !good;
	}
	/* envelopes that are not requests: an empty map of the RUN_REQ type,
	 * a RUN_TOKEN sent to the peer, a request with a field twice */
	msgpack_packer pk;
	for (int i = 0; i < 3; i++, seq++) {
		b.len = 0;
		msgpack_packer_init(&pk, &b, shoal_wire_buf_write);
		const char *what = i == 0 ? "no fields" : i == 1 ? "a RUN_TOKEN" : "a field twice";
		if (i == 0) {
			head(&pk, SHOAL_CTLMSG_RUN_REQ, seq, 0);
		} else if (i == 1) {
			shoal_run_token tk = {.id = 1, .text = "x", .text_len = 1};
			shoal_runmsg_encode_token(seq, &tk, &b);
		} else {
			head(&pk, SHOAL_CTLMSG_RUN_REQ, seq, 2);
			key(&pk, "prompt");
			msgpack_pack_str_with_body(&pk, "a", 1);
			key(&pk, "prompt");
			msgpack_pack_str_with_body(&pk, "b", 1);
		}
		int t = run1(c, seq, b.data, b.len, &end, err, sizeof err);
		int good = t == 0 && end != SHOAL_OK && err[0];
		printf("%s: %s answered %s: %s\n", good ? "ok" : "FAIL", what,
		       t < 0 ? "(nothing)" : shoal_strerror(end),
		       err[0] ? err : "without a reason");
		fails += !good;
	}
	request(&b, seq, "It is a truth", NULL, NULL);
	int t = run1(c, seq, b.data, b.len, &end, err, sizeof err);
	printf("%s: a valid request afterwards: %d tokens, end %s %s\n",
	       t == 5 && end == SHOAL_OK ? "ok" : "FAIL", t, shoal_strerror(end), err);
	fails += !(t == 5 && end == SHOAL_OK);
	shoal_wire_buf_fini(&b);
	shoal_ctl_client_free(c);
	shoal_key_wipe(&k, sizeof k);
	shoal_key_wipe(&curve, sizeof curve);
	return fails ? 1 : 0;
}

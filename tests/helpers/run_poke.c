/*
 * tests/helpers/run_poke.c: send malformed RUN_REQ messages (net/ctlmsg.h,
 * runtime/node/cluster.h) to a live node that serves a model, as a client that
 * HAS the cluster key; each must be answered by a RUN_END with ok = false
 * and a reason, and a valid request afterwards must stream tokens and end
 * with ok = true. Used by tests/sh/dist_loopback.sh.
 *
 *   run_poke ENDPOINT KEYFILE    prints one line per case; exit 0 if all held
 */
#include "config.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>

#include "net/ctl.h"
#include "net/ctlmsg.h"
#include "net/key.h"
#include "net/wire.h"

/* Send one RUN_REQ with body json; collect replies until RUN_END. Returns
 * the number of RUN_TOKEN replies, *ok the END's "ok", -1 on no answer. */
static int run1(shoal_ctl_client *c, uint64_t seq, const char *json, int *ok, char *err,
                size_t err_len)
{
	shoal_wire_buf b;
	shoal_wire_buf_init(&b);
	shoal_ctlmsg m = {
	    .type = SHOAL_CTLMSG_RUN_REQ, .seq = seq, .json = json, .json_len = strlen(json)};
	int tokens = 0;
	*ok = 0;
	err[0] = '\0';
	if (shoal_ctlmsg_encode(&m, &b) != SHOAL_OK)
		return -1;
	const void *bufs[1] = {b.data};
	size_t lens[1] = {b.len};
	shoal_ctl_client_send(c, bufs, lens, 1);
	shoal_wire_buf_fini(&b);
	for (;;) {
		uint8_t *r = NULL;
		size_t rl = 0;
		char why[256];
		if (shoal_ctl_client_recv(c, 30000, &r, &rl, why, sizeof why) != SHOAL_OK)
			return -1;
		shoal_ctlmsg a;
		if (shoal_ctlmsg_decode(r, rl, &a, why, sizeof why) != SHOAL_OK || a.seq != seq) {
			free(r);
			return -1;
		}
		if (a.type == SHOAL_CTLMSG_RUN_TOKEN) {
			tokens++;
			free(r);
			continue;
		}
		json_t *o = json_loadb(a.json, a.json_len, 0, NULL);
		*ok = json_is_true(json_object_get(o, "ok"));
		const char *e = json_string_value(json_object_get(o, "error"));
		snprintf(err, err_len, "%s", e ? e : "");
		json_decref(o);
		free(r);
		return a.type == SHOAL_CTLMSG_RUN_END ? tokens : -1;
	}
}

int main(int argc, char **argv)
{
	if (argc != 3) {
		fprintf(stderr, "usage: run_poke ENDPOINT KEYFILE\n");
		return 2;
	}
	shoal_key key;
	shoal_key_curve curve;
	char why[256];
	if (shoal_key_read(argv[2], &key, NULL, why, sizeof why) != SHOAL_OK) {
		fprintf(stderr, "run_poke: %s\n", why);
		return 1;
	}
	shoal_key_derive(&key, &curve);
	shoal_ctl_client *c = NULL;
	if (shoal_ctl_client_new(argv[1], &curve, &c, why, sizeof why) != SHOAL_OK) {
		fprintf(stderr, "run_poke: %s\n", why);
		return 1;
	}
	/* a prompt longer than any test context (256 tokens) */
	static char long_req[16384];
	int n = snprintf(long_req, sizeof long_req, "{\"prompt\": \"");
	for (int i = 0; i < 1200; i++)
		n += snprintf(long_req + n, sizeof long_req - (size_t)n, "word ");
	snprintf(long_req + n, sizeof long_req - (size_t)n, "\", \"n\": 4}");
	const char *bad[] = {
	    "not json at all",
	    "[1, 2, 3]",
	    "{}",
	    "{\"prompt\": 42}",
	    "{\"prompt\": \"It is\", \"n\": -1}",
	    "{\"prompt\": \"It is\", \"logprobs\": 1000}",
	    "{\"prompt\": \"It is\", \"temp\": -1.0}",
	    "{\"prompt\": \"It is\", \"top_p\": 7}",
	    "{\"prompt\": \"It is\", \"top_k\": -5}",
	    "{\"prompt\": \"It is\", \"n\": 99999999999}",
	    long_req,
	};
	int fails = 0;
	uint64_t seq = 100;
	for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
		int ok;
		char err[256];
		int t = run1(c, seq++, bad[i], &ok, err, sizeof err);
		int good = t == 0 && !ok && err[0];
		printf("%s: bad request %zu answered %s\n", good ? "ok" : "FAIL", i,
		       t < 0    ? "(nothing)"
		       : err[0] ? err
		                : "without a reason");
		fails += !good;
	}
	int ok;
	char err[256];
	int t = run1(c, seq++, "{\"prompt\": \"It is a truth\", \"n\": 5, \"temp\": 0}", &ok, err,
	             sizeof err);
	printf("%s: a valid request afterwards: %d tokens, ok %d %s\n",
	       t == 5 && ok ? "ok" : "FAIL", t, ok, err);
	fails += !(t == 5 && ok);
	shoal_ctl_client_free(c);
	shoal_key_wipe(&key, sizeof key);
	shoal_key_wipe(&curve, sizeof curve);
	return fails ? 1 : 0;
}

/*
 * runtime/cli/cli_peer.c: what the client commands (`run --peer`,
 * `status`, `chat`) share to reach a peer: the cluster key they talk
 * with and a peer's status over its control port. One meaning for
 * --peer HOST[:PORT] in all of them: a peer's control address.
 *
 * Part: runtime/ (CLI).
 */
#include "config.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "base/statedir.h"
#include "net/ctl.h"
#include "net/ctlmsg.h"
#include "net/keycheck.h"
#include "net/wire.h"
#include "runtime/cli/cli_impl.h"

bool cli__client_key(const char *cmd, const char *key_file, bool insecure, const char *state_dir,
                     shoal_key_curve *curve, shoal_key_curve **keys, char fp[17])
{
	char dir[1024], def[1100], why[SHOAL_WHY_WRAP_LEN] = "";
	struct stat st;
	*keys = NULL;
	memset(curve, 0, sizeof *curve);
	snprintf(fp, 17, "%s", SHOAL_KEYCHECK_NOKEY);
	if (!key_file && !insecure) {
		if (state_dir)
			snprintf(dir, sizeof dir, "%s", state_dir);
		else if (shoal_state_dir_default(dir, sizeof dir) != SHOAL_OK)
			dir[0] = '\0';
		if (dir[0] &&
		    (size_t)snprintf(def, sizeof def, "%s/%s", dir, SHOAL_KEY_DEFAULT_NAME) <
		        sizeof def &&
		    stat(def, &st) == 0)
			key_file = def;
	}
	if (!key_file) {
		if (insecure)
			return true;
		fprintf(stderr,
		        "shoal %s: no cluster key: use --key FILE, make one with `shoal key new`, "
		        "or --insecure for an open cluster\n",
		        cmd);
		return false;
	}
	shoal_key key;
	if (shoal_key_read(key_file, &key, NULL, why, sizeof why) != SHOAL_OK) {
		fprintf(stderr, "shoal %s: %s\n", cmd, why);
		return false;
	}
	shoal_key_derive(&key, curve);
	shoal_key_fingerprint(&key, fp);
	shoal_key_wipe(&key, sizeof key);
	*keys = curve;
	return true;
}

void cli__key_hint(const char *cmd, const char *ep, const char *fp)
{
	char why[SHOAL_WHY_LEN] = "";
	shoal_keycheck_msg mine = {.kind = SHOAL_KEYCHECK_ASK}, theirs;
	snprintf(mine.fp, sizeof mine.fp, "%s", fp);
	if (shoal_keycheck_ask(ep, &mine, SHOAL_CLI_KEYCHECK_MS, &theirs, why, sizeof why) !=
	    SHOAL_OK) {
		fprintf(stderr, "shoal %s: (key check: %s)\n", cmd, why);
		return;
	}
	if (shoal_keycheck_same(&mine, &theirs)) {
		fprintf(stderr, "shoal %s: (key check: the peer holds the same key, %s)\n", cmd,
		        fp);
		return;
	}
	char a[64], b[64];
	fprintf(stderr,
	        "shoal %s: key mismatch: the peer at %s (cluster '%s') holds %s; we hold %s\n", cmd,
	        ep, theirs.cluster, shoal_keycheck_says(theirs.fp, a, sizeof a),
	        shoal_keycheck_says(fp, b, sizeof b));
}

json_t *cli__status_fetch(const char *cmd, const char *ep, const shoal_key_curve *keys,
                          const char *fp, int timeout_ms)
{
	char why[SHOAL_WHY_WRAP_LEN] = "";
	shoal_ctl_client *cl = NULL;
	shoal_wire_buf buf;
	uint8_t *reply = NULL;
	size_t reply_len = 0;
	json_t *root = NULL;
	shoal_wire_buf_init(&buf);
	shoal_ctlmsg req = {.type = SHOAL_CTLMSG_STATUS_REQ, .seq = 1};
	if (shoal_ctl_client_new(ep, keys, &cl, why, sizeof why) != SHOAL_OK ||
	    shoal_ctlmsg_encode(&req, &buf) != SHOAL_OK) {
		fprintf(stderr, "shoal %s: %s\n", cmd, why[0] ? why : "cannot build the request");
		goto out;
	}
	const void *bufs[1] = {buf.data};
	size_t lens[1] = {buf.len};
	shoal_ctlmsg resp;
	shoal_err e = shoal_ctl_client_send(cl, bufs, lens, 1);
	if (!e)
		e = shoal_ctl_client_recv(cl, timeout_ms, &reply, &reply_len, why, sizeof why);
	if (e) {
		fprintf(stderr, "shoal %s: %s: %s\n", cmd, ep, why[0] ? why : "send failed");
		if (e == SHOAL_ERR_AUTH)
			cli__key_hint(cmd, ep, fp);
		goto out;
	}
	if (shoal_ctlmsg_decode(reply, reply_len, &resp, why, sizeof why) != SHOAL_OK ||
	    resp.type != SHOAL_CTLMSG_STATUS_RESP) {
		fprintf(stderr, "shoal %s: bad answer from %s: %s\n", cmd, ep,
		        why[0] ? why : "not a status");
		goto out;
	}
	json_error_t jerr;
	root = json_loadb(resp.json, resp.json_len, 0, &jerr);
	if (!root || !json_is_array(json_object_get(root, "peers"))) {
		fprintf(stderr, "shoal %s: bad JSON from %s: %s\n", cmd, ep, jerr.text);
		json_decref(root);
		root = NULL;
	}
out:
	free(reply);
	shoal_ctl_client_free(cl);
	shoal_wire_buf_fini(&buf);
	return root;
}

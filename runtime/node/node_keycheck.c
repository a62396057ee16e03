/*
 * runtime/node/node_keycheck.c: the node's side of the key check
 * (net/keycheck.h): it answers ASKs on the control port's number, asks
 * its seeds (and peers mDNS finds) until one answers with our key, and
 * logs a mismatch on either side naming the other peer's address and both
 * fingerprints, at most once per peer per SHOAL_NODE_KC_LOG_MULT periods.
 *
 * Part: runtime/ (node). Called by node.c (open, the loop's descriptor,
 * the tick) and node_ctl.c (a peer mDNS found); calls no other node file.
 */
#include "config.h"

#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "base/log.h"
#include "runtime/node/node_impl.h"

static void kc_mine(const shoal_node *n, uint8_t kind, shoal_keycheck_msg *m)
{
	memset(m, 0, sizeof *m);
	m->kind = kind;
	if (n->keyed)
		shoal_key_fingerprint(&n->key, m->fp);
	else
		snprintf(m->fp, sizeof m->fp, "%s", SHOAL_KEYCHECK_NOKEY);
	snprintf(m->cluster, sizeof m->cluster, "%s", n->cluster);
	snprintf(m->endpoint, sizeof m->endpoint, "%s", n->rec.ctl_endpoint);
}

/* May we log about `who` now? One line per peer per window. */
static int kc_log_ok(shoal_node *n, const char *who)
{
	uint64_t now = node__now_us(NULL);
	size_t slot = 0;
	for (size_t i = 0; i < SHOAL_NODE_KC_LOGS; i++) {
		if (!strcmp(n->kc_log[i].who, who)) {
			if (now < n->kc_log[i].until_us)
				return 0;
			slot = i;
			goto take;
		}
		if (n->kc_log[i].until_us < n->kc_log[slot].until_us)
			slot = i; /* the oldest entry gives way */
	}
take:
	snprintf(n->kc_log[slot].who, sizeof n->kc_log[slot].who, "%s", who);
	n->kc_log[slot].until_us = now + SHOAL_NODE_KC_LOG_MULT * n->base_us;
	return 1;
}

void node__keycheck_open(shoal_node *n)
{
	char why[SHOAL_WHY_LEN];
	n->kc_fd = -1;
	if (shoal_keycheck_open(shoal_ctl_bound(n->ctl), &n->kc_fd, why, sizeof why) != SHOAL_OK)
		SHOAL_LOG_W("node",
		            "no key check beside the control port (%s): a peer with "
		            "another key will not be told why it cannot join",
		            why);
}

void node__keycheck_close(shoal_node *n)
{
	if (n->kc_fd >= 0)
		close(n->kc_fd);
	n->kc_fd = -1;
}

void node__keycheck_ask(shoal_node *n, const char *endpoint)
{
	char why[SHOAL_WHY_LEN];
	shoal_keycheck_msg m;
	if (n->kc_fd < 0)
		return;
	kc_mine(n, SHOAL_KEYCHECK_ASK, &m);
	if (shoal_keycheck_send(n->kc_fd, endpoint, &m, why, sizeof why) != SHOAL_OK)
		SHOAL_LOG_D("node", "%s", why);
}

static void kc_answered(shoal_node *n, const shoal_keycheck_msg *t, const shoal_keycheck_msg *o,
                        const char *from)
{
	char a[64], b[64], src[96];
	/* the seed as we named it: the answer's source, or what it advertises */
	snprintf(src, sizeof src, "tcp://%s", from);
	for (size_t i = 0; i < n->n_seeds; i++)
		if (!strcmp(n->seeds[i], src) || !strcmp(n->seeds[i], t->endpoint))
			n->kc_seed_ok[i] = shoal_keycheck_same(t, o) ? 1 : -1;
	if (shoal_keycheck_same(t, o) || !kc_log_ok(n, t->endpoint))
		return;
	SHOAL_LOG_W("node",
	            "key mismatch: the peer at %s (cluster '%s') holds %s; ours is %s: we "
	            "cannot join through it (start this node with that cluster's key)",
	            t->endpoint, t->cluster, shoal_keycheck_says(t->fp, a, sizeof a),
	            shoal_keycheck_says(o->fp, b, sizeof b));
}

static void kc_asked(shoal_node *n, const shoal_keycheck_msg *t, const shoal_keycheck_msg *o,
                     const char *from)
{
	char a[64], b[64], why[SHOAL_WHY_LEN];
	/* answer (o is ours, an ANSWER) where the datagram came from: the
	 * asker's socket */
	char to[96];
	snprintf(to, sizeof to, "tcp://%s", from);
	if (shoal_keycheck_send(n->kc_fd, to, o, why, sizeof why) != SHOAL_OK)
		SHOAL_LOG_D("node", "%s", why);
	if (shoal_keycheck_same(t, o) || !kc_log_ok(n, from))
		return;
	if (!t->endpoint[0]) /* a client command: shoal status, run or chat */
		SHOAL_LOG_W("node",
		            "key mismatch: a client at %s holds %s; ours is %s: it was refused",
		            from, shoal_keycheck_says(t->fp, a, sizeof a),
		            shoal_keycheck_says(o->fp, b, sizeof b));
	else
		SHOAL_LOG_W(
		    "node",
		    "key mismatch: the peer at %s (control %s, cluster '%s') holds %s; ours "
		    "is %s: it cannot join this cluster (give it this cluster's key)",
		    from, t->endpoint, t->cluster, shoal_keycheck_says(t->fp, a, sizeof a),
		    shoal_keycheck_says(o->fp, b, sizeof b));
}

void node__keycheck_serve(shoal_node *n)
{
	char why[SHOAL_WHY_LEN], from[64];
	shoal_keycheck_msg t, o;
	/* a bounded batch per turn, so a flood cannot hold the loop */
	for (int i = 0; i < 16 && n->kc_fd >= 0; i++) {
		shoal_err e = shoal_keycheck_recv(n->kc_fd, &t, from, sizeof from, why, sizeof why);
		if (e == SHOAL_ERR_BUSY)
			return;
		if (e) {
			SHOAL_LOG_D("node", "key check from %s: %s", from, why);
			continue;
		}
		kc_mine(n, SHOAL_KEYCHECK_ANSWER, &o);
		if (t.kind == SHOAL_KEYCHECK_ASK)
			kc_asked(n, &t, &o, from);
		else
			kc_answered(n, &t, &o, from);
	}
}

void node__keycheck_tick(shoal_node *n)
{
	uint64_t now = node__now_us(NULL);
	if (now < n->kc_next_us)
		return;
	n->kc_next_us = now + SHOAL_NODE_KC_ASK_MULT * n->base_us;
	/* seeds until one answers with our key; a mismatched one is asked
	 * again (its operator may restart it with the right key) */
	for (size_t i = 0; i < n->n_seeds; i++)
		if (n->kc_seed_ok[i] <= 0)
			node__keycheck_ask(n, n->seeds[i]);
}

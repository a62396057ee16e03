/*
 * runtime/node/node_ctl.c: what comes to the node thread from outside:
 * membership callbacks (SWIM), peers found by discovery, control messages
 * (status, RUN_REQ, gossip, probes) and a client's disconnect; and the
 * data listener of a node without a model.
 */
#include "config.h"

#include "runtime/node/node_impl.h"

#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include <jansson.h>

#include "base/hex.h"
#include "base/log.h"
#include "net/endpoint.h"
#include "net/ctlmsg.h"
#include "net/runmsg.h"
#include "runtime/node/status_json.h"

shoal_err node__swim_send(void *ctx, const char *endpoint, const uint8_t *buf, size_t len)
{
	shoal_node *n = ctx;
	return shoal_ctl_send(n->ctl, endpoint, buf, len);
}

void node__member_changed(void *ctx, const shoal_swim_member *m, shoal_swim_state old, int is_new)
{
	(void)ctx;
	if (m->is_self)
		return;
	char hex[SHOAL_PEER_ID_HEX_LEN];
	shoal_peer_id_to_hex(&m->id, hex);
	if (is_new)
		SHOAL_LOG_I("node", "peer %s (%.8s) joined: %s, incarnation %llu, at %s%s%s",
		            m->record.name, hex, shoal_swim_state_name(m->state),
		            (unsigned long long)m->incarnation, m->record.ctl_endpoint,
		            m->compatible ? "" : "; incompatible: ",
		            m->compatible ? "" : m->why_incompatible);
	else
		SHOAL_LOG_I("node", "peer %s (%.8s): %s -> %s (incarnation %llu)", m->record.name,
		            hex, shoal_swim_state_name(old), shoal_swim_state_name(m->state),
		            (unsigned long long)m->incarnation);
}

void node__incarnation_changed(void *ctx, uint64_t inc)
{
	shoal_node *n = ctx;
	char why[SHOAL_WHY_LEN];
	if (inc <= n->persisted_inc)
		return;
	n->ident.incarnation = inc;
	if (shoal_identity_save(n->state_dir, &n->ident, why, sizeof why) == SHOAL_OK)
		n->persisted_inc = inc;
	else
		SHOAL_LOG_W("node", "cannot save incarnation %llu: %s", (unsigned long long)inc,
		            why);
	if (n->disc && n->disc->update && n->disc_state)
		n->disc->update(n->disc_state, inc);
}

void node__on_found(void *ud, const shoal_discovery_found *f)
{
	shoal_node *n = ud;
	if (!strcmp(f->id_hex, n->ident.id_hex))
		return; /* our own advertisement */
	if (strcmp(f->cluster, n->cluster)) {
		SHOAL_LOG_D("node", "mDNS: %s is in cluster '%s', not ours", f->endpoint,
		            f->cluster);
		return;
	}
	if (f->open != !n->keyed) {
		SHOAL_LOG_I("node", "mDNS: ignoring %s: it runs %s, we run %s", f->endpoint,
		            f->open ? "--insecure" : "with a key",
		            n->keyed ? "with a key" : "--insecure");
		return;
	}
	shoal_peer_id id;
	shoal_swim_brief b;
	if (shoal_peer_id_from_hex(f->id_hex, &id) == SHOAL_OK &&
	    shoal_swim_lookup(n->sw, &id, &b) == SHOAL_OK && b.state == SHOAL_SWIM_STATE_ALIVE &&
	    b.incarnation >= f->incarnation)
		return; /* known and alive: gossip has it */
	SHOAL_LOG_I("node", "mDNS found peer %.8s at %s; joining through it", f->id_hex,
	            f->endpoint);
	shoal_swim_join(n->sw, f->endpoint);
	node__keycheck_ask(n, f->endpoint);
}

/* The status response: {"self", "cluster", "insecure", "peers": [...]}. */
char *node__status_json(shoal_node *n)
{
	shoal_swim_member *v = NULL;
	size_t nv = 0;
	if (shoal_swim_view(n->sw, &v, &nv) != SHOAL_OK)
		return NULL;
	json_t *root = json_object(), *peers = json_array();
	json_object_set_new(root, "self", json_string(n->ident.id_hex));
	json_object_set_new(root, "name", json_string(n->ident.name));
	json_object_set_new(root, "cluster", json_string(n->cluster));
	json_object_set_new(root, "insecure", json_boolean(!n->keyed));
	if (n->api) { /* for clients given this peer's control address (shoal chat) */
		char host[256] = "", w[SHOAL_WHY_LEN];
		uint16_t port = 0;
		if (shoal_endpoint_split(n->cfg.api, SHOAL_API_DEFAULT_PORT, host, sizeof host,
		                         &port, w, sizeof w) != SHOAL_OK)
			host[0] = '\0';
		json_object_set_new(root, "api",
		                    json_pack("{ss sI sb}", "host", host, "port",
		                              (json_int_t)shoal_api_port(n->api), "key",
		                              n->cfg.api_key != NULL));
	}
	for (size_t i = 0; i < nv; i++) {
		json_t *p = shoal_status_member_json(&v[i]);
		if (p) {
			json_array_append_new(peers, p);
		} else {
			char hex[SHOAL_PEER_ID_HEX_LEN];
			shoal_peer_id_to_hex(&v[i].id, hex);
			SHOAL_LOG_W("node", "status: cannot render peer %.8s (out of memory?)",
			            hex);
		}
	}
	json_object_set_new(root, "peers", peers);
	if (n->cl) {
		json_t *plan = shoal_serve_status_json(n->cl);
		if (plan)
			json_object_set_new(root, "plan", plan);
	} else if (n->wf) {
		shoal_weights_progress pr;
		shoal_weights_get_progress(n->wf, &pr);
		json_object_set_new(root, "weights", shoal_weights_progress_json(&pr));
	}
	shoal_swim_view_free(v);
	char *s = json_dumps(root, JSON_COMPACT);
	json_decref(root);
	return s;
}

static void node_dropped(shoal_node *n, const shoal_ctl_route *from, const char *why)
{
	uint64_t now = node__now_us(NULL);
	if (now >= n->droplog_window_us) {
		n->droplog_window_us = now + SHOAL_NODE_DROPLOG_MULT * n->base_us;
		n->droplog_lines = 0;
	}
	if (n->droplog_lines >= SHOAL_NODE_DROPLOG_BURST) {
		n->droplog_quiet++;
		return;
	}
	n->droplog_lines++;
	SHOAL_LOG_W("node", "dropped a message from %s: %s%s",
	            from->peer_addr[0] ? from->peer_addr : "?", why,
	            n->droplog_quiet ? " (and earlier ones not logged)" : "");
	n->droplog_quiet = 0;
}

/* The RUN_END of a run this node will not start. */
static void node_run_refused(shoal_node *n, const shoal_ctl_route *from, uint64_t seq,
                             shoal_err err, const char *why)
{
	shoal_run_end end = {.err = err, .why = why, .why_len = strlen(why), .text = ""};
	if (shoal_runmsg_encode_end(seq, &end, &n->out) == SHOAL_OK)
		shoal_ctl_reply(n->ctl, from, n->out.data, n->out.len);
}

/* A client connection closed: its runs end and free their sessions. */
void node__on_disconnect(void *ud, int fd)
{
	shoal_node *n = ud;
	if (n->cl)
		shoal_serve_client_gone(n->cl, fd);
}

void node__on_message(void *ud, const shoal_ctl_route *from, const uint8_t *buf, size_t len)
{
	shoal_node *n = ud;
	char why[SHOAL_WHY_LEN] = "";
	shoal_ctlmsg m;
	shoal_err e = shoal_ctlmsg_decode(buf, len, &m, why, sizeof why);
	if (e == SHOAL_ERR_NOTFOUND) {
		/* Membership's; it logs what it drops (rate-limited). */
		shoal_swim_receive(n->sw, NULL, buf, len, why, sizeof why);
		return;
	}
	if (e != SHOAL_OK) {
		node_dropped(n, from, why);
		return;
	}
	shoal_ctlmsg r;
	memset(&r, 0, sizeof r);
	r.seq = m.seq;
	switch (m.type) {
	case SHOAL_CTLMSG_STATUS_REQ: {
		char *js = node__status_json(n);
		if (!js)
			return;
		r.type = SHOAL_CTLMSG_STATUS_RESP;
		r.json = js;
		r.json_len = strlen(js);
		if (shoal_ctlmsg_encode(&r, &n->out) == SHOAL_OK)
			shoal_ctl_reply(n->ctl, from, n->out.data, n->out.len);
		free(js);
		return;
	}
	case SHOAL_CTLMSG_LINK_PROBE:
		r.type = SHOAL_CTLMSG_LINK_ACK;
		r.lep = m.lep;
		r.rep = m.rep;
		r.n = m.pad_len;
		if (shoal_ctlmsg_encode(&r, &n->out) == SHOAL_OK)
			shoal_ctl_reply(n->ctl, from, n->out.data, n->out.len);
		return;
	case SHOAL_CTLMSG_LINK_ACK:
		shoal_linkprobe_ack(n->lp, &m, node__now_us(NULL));
		return;
	case SHOAL_CTLMSG_RUN_REQ:
		if (n->cl) {
			shoal_serve_run_request(n->cl, from, buf, len);
		} else {
			node_run_refused(n, from, m.seq, SHOAL_ERR_STATE,
			                 "this peer serves no model (no --model)");
		}
		return;
	case SHOAL_CTLMSG_RUN_TOKEN:
	case SHOAL_CTLMSG_RUN_END: {
		/* a client waits for an answer to its seq: say why there is none */
		static const char no[] = "a run reply sent to a peer: send RUN_REQ";
		node_dropped(n, from, no);
		node_run_refused(n, from, m.seq, SHOAL_ERR_PROTO, no);
		return;
	}
	default:
		node_dropped(n, from, "a status answer sent to a node");
	}
}

/* Bind the data-plane TCP listener (the data plane itself is a later
 * issue: for now connections are accepted and closed). */
shoal_err node__data_listen(shoal_node *n, char *why, size_t why_len)
{
	char host[64] = "";
	uint16_t port = 0;
	if (n->cfg.data_listen) {
		shoal_err e = shoal_endpoint_split(n->cfg.data_listen, 0, host, sizeof host, &port,
		                                   why, why_len);
		if (e != SHOAL_OK)
			return e;
	} else {
		snprintf(host, sizeof host, "%s", n->listen_ip);
	}
	struct sockaddr_in sa = {.sin_family = AF_INET, .sin_port = htons(port)};
	if (!strcmp(host, "*"))
		snprintf(host, sizeof host, "0.0.0.0");
	if (inet_pton(AF_INET, host, &sa.sin_addr) != 1)
		return shoal_why(why, why_len, SHOAL_ERR_INVAL,
		                 "data listen address '%s' is not an IPv4 address", host);
	int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
	int one = 1;
	if (fd < 0)
		return shoal_why(why, why_len, SHOAL_ERR_IO, "socket: %s", strerror(errno));
	setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
	if (bind(fd, (struct sockaddr *)&sa, sizeof sa) != 0 || listen(fd, 16) != 0) {
		int e = errno;
		close(fd);
		return shoal_why(why, why_len, SHOAL_ERR_IO, "cannot bind data listener %s:%u: %s",
		                 host, (unsigned)port, strerror(e));
	}
	socklen_t sl = sizeof sa;
	getsockname(fd, (struct sockaddr *)&sa, &sl);
	n->data_fd = fd;
	n->data_port = ntohs(sa.sin_port);
	return SHOAL_OK;
}

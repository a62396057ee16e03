/*
 * runtime/node/node_serve.c: the node and its serving state (serve.h): the
 * serving state made from the node's options (with --model at start, or
 * once a peer without the file has its weights cache: node_fetch.c), its
 * planning tick, its replies to clients over the control socket, and the
 * deaths its data links show, handed to membership. Node thread.
 */
#include "config.h"

#include "runtime/node/node_impl.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "base/hex.h"
#include "base/log.h"

static shoal_err node_serve_reply(void *ud, const shoal_ctl_route *to, const void *buf, size_t len)
{
	shoal_node *n = ud;
	return shoal_ctl_reply(n->ctl, to, buf, len);
}

/* Planning and readiness, once per base period: a new plan or readiness
 * is published at once rather than with the next RECORD refresh, so a
 * plan becomes servable within a few gossip rounds. */
void node__serve_tick(shoal_node *n)
{
	shoal_swim_member *v = NULL;
	size_t nv = 0;
	char why[SHOAL_WHY_LEN];
	if (shoal_swim_view(n->sw, &v, &nv) != SHOAL_OK)
		return;
	int republish = shoal_serve_update(n->cl, v, nv);
	shoal_swim_view_free(v);
	if (republish) {
		shoal_serve_fill_record(n->cl, &n->rec, n->si.mem_available);
		if (shoal_swim_set_record(n->sw, &n->rec, why, sizeof why) != SHOAL_OK)
			SHOAL_LOG_W("node", "cannot publish our record: %s", why);
	}
}

/* The cluster saw a data link to a peer break without a goodbye. */
static void node_peer_gone(void *ud, const uint8_t id[SHOAL_PEER_ID_LEN], uint64_t inc,
                           const char *why)
{
	shoal_node *n = ud;
	shoal_peer_id pid;
	char hex[SHOAL_PEER_ID_HEX_LEN];
	memcpy(pid.b, id, SHOAL_PEER_ID_LEN);
	shoal_peer_id_to_hex(&pid, hex);
	if (n->sw && shoal_swim_declare_dead(n->sw, &pid, inc) == SHOAL_OK) {
		SHOAL_LOG_W("node", "peer %.8s is dead: %s", hex, why);
		node__serve_tick(n); /* re-plan now, not at the next period */
	}
}

/* Serve cfg.model: the data listener becomes the cluster's xfer listener
 * on the same address and port (the record already names it). */
shoal_err node__serve_new(shoal_node *n, shoal_wcache *wc, char *why, size_t why_len)
{
	char host[64] = "0.0.0.0";
	struct sockaddr_in sa;
	socklen_t sl = sizeof sa;
	if (getsockname(n->data_fd, (struct sockaddr *)&sa, &sl) == 0)
		inet_ntop(AF_INET, &sa.sin_addr, host, sizeof host);
	close(n->data_fd);
	n->data_fd = -1;
	shoal_serve_config cc = {.model_path = n->cfg.model,
	                         .state_dir = n->state_dir,
	                         .mem_limit = n->cfg.mem_limit,
	                         .ctx = n->cfg.ctx,
	                         .sessions = n->cfg.sessions,
	                         .spread_experts = n->cfg.spread_experts != 0,
	                         .tensor_groups = n->cfg.tensor_groups != 0,
	                         .link_us = n->cfg.link_us,
	                         .backend = n->cfg.backend,
	                         .threads = n->cfg.threads > 0 ? (uint32_t)n->cfg.threads
	                                    : n->si.cores      ? n->si.cores
	                                                       : 1,
	                         .hop_spin_us = n->cfg.spin_us < 0   ? 0u
	                                        : n->cfg.spin_us > 0 ? (uint32_t)n->cfg.spin_us
	                                                             : SHOAL_SERVE_HOP_SPIN_US,
	                         .prefix_bytes = n->cfg.prefix_cache == UINT64_MAX ? 0
	                                         : n->cfg.prefix_cache ? n->cfg.prefix_cache
	                                                               : UINT64_MAX,
	                         .speculate = n->cfg.speculate,
	                         .draft_max = n->cfg.draft_max,
	                         .draft_path = n->cfg.draft,
	                         .key = n->keyed ? &n->key : NULL,
	                         .data_host = host,
	                         .data_port = n->data_port,
	                         .base_ms = (uint32_t)(n->base_us / 1000u),
	                         .rdma = n->cfg.rdma,
	                         .reply = node_serve_reply,
	                         .peer_gone = node_peer_gone,
	                         .wcache = wc,
	                         .cache_max = n->cfg.cache_max ? n->cfg.cache_max
	                                                       : SHOAL_NODE_DEFAULT_CACHE_MAX,
	                         .ud = n};
	memcpy(cc.self, n->ident.id, SHOAL_PEER_ID_LEN);
	shoal_serve *cl = NULL;
	shoal_err e = shoal_serve_new(&cc, &cl, why, why_len);
	n->cl = cl;
	shoal_serve_api_set(&n->api_hub, cl); /* the API's threads reach it from now */
	return e;
}

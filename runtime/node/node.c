/*
 * runtime/node/node.c: the event loop of one peer (see node.h): new/free
 * and the loop.
 *
 * The node thread: zmq_poll over the ROUTER, the DEALERs, the ZAP socket,
 * discovery descriptors and the serving state's event pipe (or, without a
 * model, the data listener), then SWIM's tick. With a model, the data
 * plane runs on the serving state's threads (serve_data.c, serve_links.c).
 * Signals only set *stop; the loop notices within one base period. The
 * node's other jobs: node_record.c (our record and the probes),
 * node_ctl.c (membership, discovery and control messages), node_fetch.c
 * (a peer without the model file; the HTTP API), node_serve.c (the serving
 * state it makes and ticks).
 */
#include "config.h"

#include "runtime/node/node_impl.h"

#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>
#ifdef __GLIBC__ /* from <stdlib.h>'s <features.h> */
#include <malloc.h>
#endif

#include <sodium.h>

#include "base/fmt.h"
#include "base/log.h"
#include "base/statedir.h"
#include "base/thread.h"
#include "net/endpoint.h"

/* ----------------------------------------------------------------- new/free */

shoal_err shoal_node_new(const shoal_node_config *cfg, shoal_node **out, char *why, size_t why_len)
{
	shoal_err e = SHOAL_ERR_NOMEM;
	*out = NULL;
	if (sodium_init() < 0)
		return shoal_why(why, why_len, SHOAL_ERR_IO, "libsodium init failed");
	/* this thread and what it starts (ZeroMQ's threads, the HTTP server's,
	 * the accept and weight threads) wake up for every token but must not
	 * take a core from a stage mid-step; the data and expert threads and
	 * the engines' workers compute (base/thread.h). dist_bench, austen,
	 * 2 stages on 2 cores, 2 runs each: 68.3 and 63.9 us a hop without,
	 * 46.9 and 36.9 with */
	int te = shoal_thread_background();
	if (te)
		SHOAL_LOG_D("node", "background thread policy: %s", strerror(te));
	shoal_node *n = calloc(1, sizeof *n);
	if (!n)
		return SHOAL_ERR_NOMEM;
	n->cfg = *cfg;
	n->lock_fd = -1;
	n->data_fd = -1;
	n->kc_fd = -1;
	shoal_wire_buf_init(&n->out);
	snprintf(n->state_dir, sizeof n->state_dir, "%s", cfg->state_dir);
	snprintf(n->cluster, sizeof n->cluster, "%s",
	         cfg->cluster && *cfg->cluster ? cfg->cluster : SHOAL_NODE_DEFAULT_CLUSTER);
	n->base_us =
	    (uint64_t)(cfg->gossip_ms ? cfg->gossip_ms : SHOAL_NODE_DEFAULT_GOSSIP_MS) * 1000u;
	if (cfg->key) {
		n->key = *cfg->key;
		n->keyed = 1;
	}
	if ((e = shoal_state_dir_ensure(n->state_dir)) != SHOAL_OK) {
		shoal_why(why, why_len, e, "cannot create state dir %s", n->state_dir);
		goto fail;
	}
	if ((e = shoal_state_dir_check(n->state_dir, why, why_len)) != SHOAL_OK)
		goto fail;
	if ((e = shoal_identity_lock(n->state_dir, &n->lock_fd, why, why_len)) != SHOAL_OK)
		goto fail;
	if ((e = shoal_identity_load(n->state_dir, cfg->name, &n->ident, why, why_len)) != SHOAL_OK)
		goto fail;
	n->persisted_inc = n->ident.incarnation;
	/* Control socket. */
	uint16_t port;
	char zep[160];
	if ((e = shoal_endpoint_split(cfg->listen ? cfg->listen : "0.0.0.0", SHOAL_CTL_DEFAULT_PORT,
	                              n->listen_ip, sizeof n->listen_ip, &port, why, why_len)) !=
	    SHOAL_OK)
		goto fail;
	if (!strcmp(n->listen_ip, "*"))
		snprintf(n->listen_ip, sizeof n->listen_ip, "0.0.0.0");
	n->wildcard = !strcmp(n->listen_ip, "0.0.0.0");
	if (port)
		snprintf(zep, sizeof zep, "tcp://%s:%u", n->listen_ip, (unsigned)port);
	else
		snprintf(zep, sizeof zep, "tcp://%s:*", n->listen_ip);
	shoal_ctl_config cc = {.listen = zep,
	                       .key = n->keyed ? &n->key : NULL,
	                       .heartbeat_ms = (int)(2 * n->base_us / 1000u),
	                       .on_message = node__on_message,
	                       .on_disconnect = node__on_disconnect,
	                       .ud = n};
	if ((e = shoal_ctl_new(&cc, &n->ctl, why, why_len)) != SHOAL_OK)
		goto fail;
	node__keycheck_open(n);
	if ((e = node__data_listen(n, why, why_len)) != SHOAL_OK)
		goto fail;
	if ((e = shoal_linkprobe_new(&n->lp)) != SHOAL_OK)
		goto fail;
	/* Machine, record, membership. Loopback interfaces count when we
	 * listen on loopback (or on everything and there is nothing else). */
	shoal_sysinfo_probe(&n->si, !strncmp(n->listen_ip, "127.", 4));
	if (n->si.n_if == 0)
		shoal_sysinfo_probe(&n->si, 1);
	node__record_init(n);
	if (cfg->model && (e = node__serve_new(n, NULL, why, why_len)) != SHOAL_OK)
		goto fail;
	if (!cfg->model && cfg->model_id && (e = node__fetch_new(n, why, why_len)) != SHOAL_OK)
		goto fail;
	if (cfg->api && !cfg->model && !cfg->model_id) {
		e = shoal_why(why, why_len, SHOAL_ERR_INVAL, "--api needs --model or --model-id");
		goto fail;
	}
	node__record_refresh(n);
	n->swim_ops = (shoal_swim_ops){.now_us = node__now_us,
	                               .rand64 = node__rand64,
	                               .send = node__swim_send,
	                               .member_changed = node__member_changed,
	                               .incarnation_changed = node__incarnation_changed};
	shoal_swim_config sc;
	shoal_swim_config_default(&sc);
	sc.base_us = (uint32_t)n->base_us;
	if ((e = shoal_swim_new(&sc, &n->rec, n->ident.incarnation, &n->swim_ops, n, &n->sw, why,
	                        why_len)) != SHOAL_OK)
		goto fail;
	/* Seeds. */
	n->seeds = calloc(cfg->n_seeds ? cfg->n_seeds : 1, sizeof *n->seeds);
	n->kc_seed_ok = calloc(cfg->n_seeds ? cfg->n_seeds : 1, sizeof *n->kc_seed_ok);
	if (!n->seeds || !n->kc_seed_ok) {
		e = SHOAL_ERR_NOMEM;
		goto fail;
	}
	for (size_t i = 0; i < cfg->n_seeds; i++) {
		char ep[SHOAL_RECORD_EP_MAX];
		if ((e = shoal_endpoint_parse(cfg->seeds[i], SHOAL_CTL_DEFAULT_PORT, ep, sizeof ep,
		                              why, why_len)) != SHOAL_OK)
			goto fail;
		if (!(n->seeds[n->n_seeds++] = strdup(ep))) {
			e = SHOAL_ERR_NOMEM;
			goto fail;
		}
	}
	if (cfg->api && (e = node__api_start(n, why, why_len)) != SHOAL_OK)
		goto fail;
	*out = n;
	return SHOAL_OK;
fail:
	shoal_node_free(n);
	return e;
}

void shoal_node_free(shoal_node *n)
{
	if (!n)
		return;
	if (n->disc && n->disc_state)
		n->disc->close(n->disc_state);
	shoal_api_stop(n->api); /* before the cluster its runs use */
	shoal_serve_free(n->cl);
	free(n->status_cache);
	if (n->status_mu_ok)
		pthread_mutex_destroy(&n->status_mu);
	shoal_weights_fetcher_free(n->wf);
	if (n->ctl)
		node__remove_control(n);
	shoal_swim_free(n->sw);
	shoal_ctl_free(n->ctl);
	shoal_linkprobe_free(n->lp);
	if (n->data_fd >= 0)
		close(n->data_fd);
	for (size_t i = 0; i < n->n_seeds; i++)
		free(n->seeds[i]);
	free(n->seeds);
	free(n->kc_seed_ok);
	node__keycheck_close(n);
	shoal_wire_buf_fini(&n->out);
	if (n->lock_fd >= 0)
		close(n->lock_fd);
	shoal_key_wipe(&n->key, sizeof n->key);
	free(n);
}

/* ----------------------------------------------------------------- the loop */

static void node_start_discovery(shoal_node *n)
{
	if (n->cfg.no_mdns) {
		SHOAL_LOG_I("node", "mDNS disabled (--no-mdns); %zu seed(s)", n->n_seeds);
		return;
	}
	const shoal_discovery_ops *ops =
	    n->cfg.discovery ? n->cfg.discovery : &shoal_discovery_dnssd;
	char instance[64], why[SHOAL_WHY_LEN];
	snprintf(instance, sizeof instance, "%.40s-%.8s", n->ident.name, n->ident.id_hex);
	shoal_discovery_config dc = {.instance = instance,
	                             .cluster = n->cluster,
	                             .id_hex = n->ident.id_hex,
	                             .incarnation = n->ident.incarnation,
	                             .port = shoal_ctl_port(n->ctl),
	                             .open = !n->keyed,
	                             .on_found = node__on_found,
	                             .ud = n};
	if (ops->open(&dc, &n->disc_state, why, sizeof why) != SHOAL_OK) {
		SHOAL_LOG_W("node", "%s; continuing with %zu seed(s) and gossip", why, n->n_seeds);
		n->disc_state = NULL;
		return;
	}
	n->disc = ops;
}

/* Hand the heap's free pages back to the system now and then (glibc).
 * The threads that serve runs (the API's, the data thread, the engine's)
 * allocate and free in their own malloc arenas; freed memory in the
 * middle of an arena stays in our RSS until trimmed, so a long-running
 * node's resident size crept up by a few MB over a 10-minute soak while
 * the bytes in use stayed flat (tests/bench/soak.sh HEAPSTATS=1). */
static void node_trim(shoal_node *n)
{
#ifdef __GLIBC__
	uint64_t now = node__now_us(NULL);
	if (now < n->next_trim_us)
		return;
	n->next_trim_us = now + SHOAL_NODE_TRIM_MULT * n->base_us;
	malloc_trim(0);
#else
	(void)n;
#endif
}

/* One loop turn: wait for traffic or the next timer, then do what is due. */
static void node_turn(shoal_node *n, uint64_t *next_probe, uint64_t *next_targets,
                      uint64_t *next_record, uint64_t *next_expire)
{
	uint64_t now = node__now_us(NULL);
	uint64_t wake = shoal_swim_next_wakeup_us(n->sw);
	if (*next_probe < wake)
		wake = *next_probe;
	if (wake > now + n->base_us)
		wake = now + n->base_us;
	int timeout_ms = wake > now ? (int)((wake - now + 999) / 1000) : 0;
	shoal_ctl_fd fds[SHOAL_NODE_MAX_FDS];
	int nfds = 0;
	/* slot 0: the data listener, or the cluster's events when it serves
	 * a model (its data thread owns the listener then) */
	fds[nfds++] = (shoal_ctl_fd){.fd = n->cl ? shoal_serve_event_fd(n->cl) : n->data_fd,
	                             .events = POLLIN};
	int dfds[SHOAL_NODE_MAX_FDS];
	size_t nd = 0;
	if (n->disc)
		nd = n->disc->fds(n->disc_state, dfds, SHOAL_NODE_MAX_FDS - 2);
	for (size_t i = 0; i < nd; i++)
		fds[nfds++] = (shoal_ctl_fd){.fd = dfds[i], .events = POLLIN};
	/* last: the key check, kept out of the discovery loop below */
	int kc = n->kc_fd >= 0 ? nfds : -1;
	if (kc >= 0)
		fds[nfds++] = (shoal_ctl_fd){.fd = n->kc_fd, .events = POLLIN};
	shoal_ctl_poll(n->ctl, timeout_ms, fds, nfds);
	if (kc >= 0) {
		nfds--;
		if (fds[kc].revents & POLLIN)
			node__keycheck_serve(n);
	}
	if (n->cl && (fds[0].revents & POLLIN)) {
		shoal_serve_drain(n->cl);
	} else if (fds[0].revents & POLLIN) {
		int c = accept(n->data_fd, NULL, NULL);
		if (c >= 0)
			close(c); /* membership only (no --model): no data plane */
	}
	for (int i = 1; i < nfds; i++)
		if (fds[i].revents & (POLLIN | POLLHUP | POLLERR))
			n->disc->process(n->disc_state, fds[i].fd);
	shoal_swim_tick(n->sw);
	node__keycheck_tick(n);
	if (node__probe_retake_tick(n))
		*next_record = 0; /* publish the new figure now */
	double ratio;
	if (n->cl && shoal_serve_take_gap(n->cl, &ratio) && node__probe_engine_check(n, ratio))
		*next_record = 0;
	node_trim(n);
	now = node__now_us(NULL);
	if (n->cl && now >= n->next_cluster_us) {
		node__serve_tick(n);
		n->next_cluster_us = now + n->base_us;
	} else if (!n->cl && n->cfg.model_id && !n->cfg.model && now >= n->next_cluster_us) {
		node__fetch_tick(n);
		n->next_cluster_us = now + n->base_us;
	}
	if (n->api && !n->api_named && now >= n->next_status_us)
		node__api_name_from_peers(n);
	if (n->api && now >= n->next_status_us) {
		char *js = node__status_json(n);
		pthread_mutex_lock(&n->status_mu);
		free(n->status_cache);
		n->status_cache = js;
		pthread_mutex_unlock(&n->status_mu);
		n->next_status_us = now + SHOAL_NODE_API_STATUS_MULT * n->base_us;
	}
	if (now >= *next_probe) {
		node__probe_one(n);
		*next_probe = now + SHOAL_NODE_PROBE_MULT * n->base_us;
	}
	if (now >= *next_targets) {
		node__targets(n);
		*next_targets = now + SHOAL_NODE_TARGETS_MULT * n->base_us;
	}
	if (now >= *next_record) {
		char why[SHOAL_WHY_LEN];
		node__record_refresh(n);
		if (shoal_swim_set_record(n->sw, &n->rec, why, sizeof why) != SHOAL_OK)
			SHOAL_LOG_W("node", "cannot publish our record: %s", why);
		*next_record = now + SHOAL_NODE_RECORD_MULT * n->base_us;
	}
	if (now >= *next_expire) {
		shoal_ctl_expire(n->ctl, now / 1000u, SHOAL_NODE_IDLE_MULT * n->base_us / 1000u);
		*next_expire = now + SHOAL_NODE_TARGETS_MULT * n->base_us;
	}
}

shoal_err shoal_node_run(shoal_node *n, volatile sig_atomic_t *stop)
{
	SHOAL_LOG_I("node", "peer %s (%s), incarnation %llu, cluster '%s'%s", n->ident.name,
	            n->ident.id_hex, (unsigned long long)n->ident.incarnation, n->cluster,
	            n->keyed ? "" : ", INSECURE (no key)");
	SHOAL_LOG_I("node", "control %s (advertised %s), data port %u, %u data endpoint(s)",
	            shoal_ctl_bound(n->ctl), n->rec.ctl_endpoint, (unsigned)n->data_port,
	            n->rec.n_data_ep);
	char mt[SHOAL_FMT_BYTES_LEN], ma[SHOAL_FMT_BYTES_LEN];
	SHOAL_LOG_I("node",
	            "memory %s total, %s available; %u cores%s%s; %s/%s; "
	            "compute probe %llu MB/s",
	            shoal_fmt_bytes(mt, sizeof mt, n->rec.mem_total),
	            shoal_fmt_bytes(ma, sizeof ma, n->rec.mem_weights), n->rec.cores,
	            n->rec.n_rdma ? "; RDMA " : "", n->rec.n_rdma ? n->rec.rdma[0] : "", n->rec.os,
	            n->rec.arch, (unsigned long long)n->rec.compute_mb_s);
	if (n->cfg.threads > 0)
		SHOAL_LOG_I("node", "compute threads: %d", n->cfg.threads);
	node__write_control(n);
	node_start_discovery(n);
	for (size_t i = 0; i < n->n_seeds; i++) {
		SHOAL_LOG_I("node", "joining through seed %s", n->seeds[i]);
		shoal_swim_join(n->sw, n->seeds[i]);
	}
	uint64_t now = node__now_us(NULL);
	uint64_t next_probe = now + SHOAL_NODE_PROBE_MULT * n->base_us;
	uint64_t next_targets = now + n->base_us;
	uint64_t next_record = now + SHOAL_NODE_RECORD_MULT * n->base_us;
	uint64_t next_expire = now + SHOAL_NODE_TARGETS_MULT * n->base_us;
	while (!*stop)
		node_turn(n, &next_probe, &next_targets, &next_record, &next_expire);
	SHOAL_LOG_I("node", "leaving the cluster");
	shoal_swim_leave(n->sw);
	uint64_t until = node__now_us(NULL) + shoal_swim_leave_linger_us(n->sw);
	while (node__now_us(NULL) < until)
		node_turn(n, &next_probe, &next_targets, &next_record, &next_expire);
	node__remove_control(n);
	SHOAL_LOG_I("node", "stopped");
	return SHOAL_OK;
}

/*
 * runtime/node/node.c: the event loop of one peer (see node.h).
 *
 * Divisions, in order: helpers (clock, endpoints, control file); the
 * record (machine probe, compute probe hook, endpoints); callbacks from
 * membership, discovery and the control sockets; link probes; new/free;
 * the loop.
 *
 * The node thread: zmq_poll over the ROUTER, the DEALERs, the ZAP socket,
 * discovery descriptors and the cluster's event pipe (or, without a
 * model, the data listener), then SWIM's tick. With a model, the data
 * plane runs on the cluster's threads (runtime/node/cluster_data.c: the
 * data thread with the stage and the session owner, the expert thread,
 * the accept thread). Signals only set *stop; the loop notices within one
 * base period.
 */
#include "config.h"

#include "runtime/node/node.h"

#include <arpa/inet.h>
#include <errno.h>
#include <pthread.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include <jansson.h>
#include <sodium.h>

#include "base/clock.h"
#include "base/fmt.h"
#include "base/hex.h"
#include "base/log.h"
#include "base/statedir.h"
#include "base/thread.h"
#include "net/ctl.h"
#include "net/ctlmsg.h"
#include "net/endpoint.h"
#include "net/identity.h"
#include "net/linkprobe.h"
#include "net/runmsg.h"
#include "net/record.h"
#include "net/swim.h"
#include "runtime/node/status_json.h"
#include "net/sysinfo.h"
#include "net/wire.h"
#include "runtime/node/cluster.h"
#include "runtime/node/weights.h"
#include "runtime/cpu/kernels_probe.h"

/* Versions this node speaks; a peer that differs is kept in the view but
 * left out of plans (net/swim.c says why in `shoal status`). */
/* 5: OPEN's no-logprob bit, a group's head gather (round HEAD); 4: served
 * epochs; 3: OPEN carries the first step */
#define SHOAL_NODE_PROTO_VERSION 5
/* 2: a last-stage tensor group splits the head by vocab rows */
#define SHOAL_NODE_SCHED_VERSION 2

/* Timer multiples of the base period B (100 ms by default):
 * PROBE: one link probe every 2 B; with 3 peers x 1 endpoint pair each
 *   pair is sampled every 600 ms, ~2 small messages/s per peer.
 * TARGETS: rebuild the probe targets from the view every 10 B (1 s), so a
 *   new peer is measured within a second of joining.
 * RECORD: republish our record (available memory, load, links) every
 *   50 B (5 s): each republish is gossiped to everyone, so this bounds the
 *   gossip a node causes to one record per 5 s.
 * IDLE: close a DEALER unused for 600 B (60 s); gossip reaches every live
 *   peer far more often than that. */
#define SHOAL_NODE_PROBE_MULT   2u
#define SHOAL_NODE_TARGETS_MULT 10u
#define SHOAL_NODE_RECORD_MULT  50u
/* the status JSON the HTTP API shows, rebuilt every this many base periods */
#define SHOAL_NODE_API_STATUS_MULT 5u
#define SHOAL_NODE_IDLE_MULT    600u
/* Dropped-message log: at most DROPLOG_BURST lines per DROPLOG_MULT B
 * (10 per 10 s), as membership does, so a flood cannot fill the disk. */
#define SHOAL_NODE_DROPLOG_BURST 10u
#define SHOAL_NODE_DROPLOG_MULT  100u
#define SHOAL_NODE_MAX_FDS       48 /* discovery ops (<= 64 in flight, usually < 10) + listener */

struct shoal_node {
	shoal_node_config cfg;
	char state_dir[1024];
	char cluster[SHOAL_RECORD_NAME_MAX];
	int lock_fd;
	shoal_identity ident;
	shoal_key key;
	int keyed;
	shoal_ctl *ctl;
	shoal_swim *sw;
	shoal_swim_ops swim_ops;
	shoal_linkprobe *lp;
	shoal_sysinfo si;
	shoal_record rec;
	int data_fd;
	uint16_t data_port;
	char listen_ip[64]; /* "0.0.0.0" or a specific address */
	int wildcard;
	const shoal_discovery_ops *disc;
	void *disc_state;
	char **seeds; /* resolved "tcp://IP:PORT" */
	size_t n_seeds;
	uint64_t base_us;
	shoal_wire_buf out;
	uint64_t persisted_inc;
	uint64_t droplog_window_us; /* end of the current log window */
	uint32_t droplog_lines;     /* lines logged in it */
	uint64_t droplog_quiet;     /* drops not logged since the last line */
	shoal_cluster *cl;          /* the model served (NULL: none) */
	/* --model-id without --model: the header job until the cluster exists */
	shoal_weights_fetcher *wf;
	bool fetch_any;           /* adopt the model id the serving peers agree on */
	bool have_fetch_id;
	uint8_t fetch_id[32];
	uint64_t fetch_retry_us;
	uint64_t next_cluster_us;   /* next look at the view for planning */
	shoal_api *api;             /* the HTTP API (NULL: none) */
	bool api_named;             /* it knows the model's name */
	shoal_api_ops api_ops;
	/* the status JSON the API shows, refreshed by the node thread */
	pthread_mutex_t status_mu;
	bool status_mu_ok;
	char *status_cache;
	uint64_t next_status_us;
};

/* ------------------------------------------------------------------ helpers */

static uint64_t shoal_node_now_us(void *ctx)
{
	(void)ctx;
	return shoal_clock_now_us();
}

static uint64_t shoal_node_rand64(void *ctx)
{
	(void)ctx;
	uint64_t v;
	randombytes_buf(&v, sizeof v);
	return v;
}

/* <state>/control: how `shoal status` reaches this node. */
static void shoal_node_write_control(shoal_node *n)
{
	char path[1100], tmp[1110];
	snprintf(path, sizeof path, "%s/%s", n->state_dir, SHOAL_NODE_CONTROL_FILE);
	snprintf(tmp, sizeof tmp, "%s.tmp", path);
	const char *ip = n->wildcard ? "127.0.0.1" : n->listen_ip;
	FILE *f = fopen(tmp, "w");
	if (!f) {
		SHOAL_LOG_W("node", "cannot write %s: %s", tmp, strerror(errno));
		return;
	}
	fprintf(f,
	        "# written by the running `shoal node`; read by `shoal status`\n"
	        "endpoint tcp://%s:%u\ninsecure %d\npid %ld\n",
	        ip, (unsigned)shoal_ctl_port(n->ctl), n->keyed ? 0 : 1, (long)getpid());
	if (fclose(f) != 0 || rename(tmp, path) != 0)
		SHOAL_LOG_W("node", "cannot write %s: %s", path, strerror(errno));
}

static void shoal_node_remove_control(shoal_node *n)
{
	char path[1100];
	snprintf(path, sizeof path, "%s/%s", n->state_dir, SHOAL_NODE_CONTROL_FILE);
	unlink(path);
}

/* --------------------------------------------------------------- the record */

/* The compute probe: runtime/cpu/kernels_probe.h measures the best kernel
 * table's quantized mat-vec (decode, memory-bound: GB/s) and mat-mul
 * (prefill: GFLOP/s) on one thread. SHOAL_NODE_PROBE_MS = 150 ms: a start-up
 * cost nobody notices, long enough for a few passes over a matrix larger
 * than the caches. */
#define SHOAL_NODE_PROBE_MS 150u

/* The figures are kept in the state directory (SHOAL_NODE_PROBE_FILE: one
 * line "shoal-probe 3 ISA MB_S MFLOPS UNIX_SECONDS PREFETCH", the last the
 * weight prefetch the probe chose, kernels.h; a line of an older version is
 * measured again: version 3 came with the AVX-512 row-group kernels, whose
 * mat-mul is ~3x version 2's, so an upgraded peer must not publish its old
 * figure; bump it whenever the kernels' speed changes that much) and used
 * again by the
 * next start on the same kernels within SHOAL_NODE_PROBE_KEEP_S, unless
 * --reprobe: a restarted peer then publishes the record it had, so its
 * peers' plan still holds and a restart changes no plan (a new measurement
 * differs by a few percent and may tip the layer split). */
#define SHOAL_NODE_PROBE_FILE   "probe"
#define SHOAL_NODE_PROBE_KEEP_S (7u * 24 * 3600)

static bool shoal_node_probe_load(const char *dir, shoal_record *r)
{
	char path[1100], isa[32], pf[8];
	snprintf(path, sizeof path, "%s/%s", dir, SHOAL_NODE_PROBE_FILE);
	FILE *f = fopen(path, "r");
	if (!f)
		return false;
	unsigned long long mb = 0, mf = 0, at = 0;
	int k = fscanf(f, "shoal-probe 3 %31s %llu %llu %llu %7s", isa, &mb, &mf, &at, pf);
	fclose(f);
	time_t now = time(NULL);
	if (k != 5 || strcmp(isa, shoal_kernels_best()->isa) || !mb || !mf ||
	    at > (unsigned long long)now ||
	    (unsigned long long)now - at > SHOAL_NODE_PROBE_KEEP_S ||
	    (strcmp(pf, "l1") && strcmp(pf, "l2")))
		return false;
	if (!shoal_kernels_prefetch_fixed())
		shoal_kernels_set_prefetch(!strcmp(pf, "l2"));
	r->compute_mb_s = mb;
	r->compute_mflops = mf;
	SHOAL_LOG_I("node",
	            "compute probe (%s, kept from %llu s ago; --reprobe measures again): "
	            "%.2f GB/s mat-vec, %.2f GFLOP/s mat-mul, weight prefetch %s",
	            isa, (unsigned long long)now - at, (double)mb / 1000.0, (double)mf / 1000.0,
	            shoal_kernels_prefetch());
	return true;
}

static void shoal_node_compute_probe(const char *dir, bool reprobe, shoal_record *r)
{
	if (!reprobe && shoal_node_probe_load(dir, r))
		return;
	shoal_kernels_probe_result res;
	if (shoal_kernels_probe(NULL, SHOAL_NODE_PROBE_MS, &res) != SHOAL_OK) {
		SHOAL_LOG_W("node", "compute probe failed (out of memory); publishing 0");
		return;
	}
	r->compute_mb_s = (uint64_t)(res.gemv_gbps * 1000.0);     /* GB/s -> MB/s */
	r->compute_mflops = (uint64_t)(res.gemm_gflops * 1000.0); /* GFLOP/s -> MFLOP/s */
	SHOAL_LOG_I("node",
	            "compute probe (%s, %u ms): %.2f GB/s mat-vec, %.2f GFLOP/s mat-mul, "
	            "weight prefetch %s (the other: %.2f GB/s)",
	            res.isa ? res.isa : "?", res.elapsed_ms, res.gemv_gbps, res.gemm_gflops,
	            res.prefetch, res.gemv_gbps_other);
	char path[1100], line[160], why[300];
	snprintf(path, sizeof path, "%s/%s", dir, SHOAL_NODE_PROBE_FILE);
	int n = snprintf(line, sizeof line, "shoal-probe 3 %s %llu %llu %llu %s\n",
	                 res.isa ? res.isa : "?", (unsigned long long)r->compute_mb_s,
	                 (unsigned long long)r->compute_mflops, (unsigned long long)time(NULL),
	                 res.prefetch);
	if (n > 0 && (size_t)n < sizeof line &&
	    shoal_file_replace(path, line, (size_t)n, false, why, sizeof why) != SHOAL_OK)
		SHOAL_LOG_D("node", "cannot keep the compute figures: %s", why);
}

/* Fill the static parts of our record: identity, versions, endpoints,
 * machine. */
static void shoal_node_record_init(shoal_node *n)
{
	shoal_record *r = &n->rec;
	shoal_record_init(r);
	r->id = shoal_peer_id_from_bytes(n->ident.id);
	shoal_record_strcpy(r->name, sizeof r->name, n->ident.name);
	shoal_record_strcpy(r->cluster, sizeof r->cluster, n->cluster);
	shoal_record_strcpy(r->sw_version, sizeof r->sw_version, PACKAGE_VERSION);
	r->proto_version = SHOAL_NODE_PROTO_VERSION;
	r->sched_version = SHOAL_NODE_SCHED_VERSION;
	/* Control endpoint: our address if bound to one, else the first
	 * non-loopback interface (loopback when there is none). */
	const char *ip = n->listen_ip;
	if (n->wildcard) {
		ip = "127.0.0.1";
		for (uint32_t i = 0; i < n->si.n_if; i++)
			if (strcmp(n->si.ifs[i].kind, "loopback")) {
				ip = n->si.ifs[i].addr;
				break;
			}
	}
	snprintf(r->ctl_endpoint, sizeof r->ctl_endpoint, "tcp://%s:%u", ip,
	         (unsigned)shoal_ctl_port(n->ctl));
	/* Data endpoints: one per interface when the data listener is on the
	 * wildcard address, else just its address. */
	char dip[64] = "";
	struct sockaddr_in sa;
	socklen_t sl = sizeof sa;
	if (getsockname(n->data_fd, (struct sockaddr *)&sa, &sl) == 0)
		inet_ntop(AF_INET, &sa.sin_addr, dip, sizeof dip);
	if (dip[0] && strcmp(dip, "0.0.0.0")) {
		shoal_record_endpoint *e = &r->data_ep[r->n_data_ep++];
		shoal_record_strcpy(e->kind, sizeof e->kind,
		                    !strncmp(dip, "127.", 4) ? "loopback" : "other");
		for (uint32_t i = 0; i < n->si.n_if; i++)
			if (!strcmp(n->si.ifs[i].addr, dip)) {
				shoal_record_strcpy(e->kind, sizeof e->kind, n->si.ifs[i].kind);
				shoal_record_strcpy(e->ifname, sizeof e->ifname, n->si.ifs[i].name);
			}
		snprintf(e->addr, sizeof e->addr, "tcp://%s:%u", dip, (unsigned)n->data_port);
	} else {
		for (uint32_t i = 0; i < n->si.n_if && r->n_data_ep < SHOAL_RECORD_MAX_DATA_EP;
		     i++) {
			shoal_record_endpoint *e = &r->data_ep[r->n_data_ep++];
			shoal_record_strcpy(e->kind, sizeof e->kind, n->si.ifs[i].kind);
			shoal_record_strcpy(e->ifname, sizeof e->ifname, n->si.ifs[i].name);
			snprintf(e->addr, sizeof e->addr, "tcp://%s:%u", n->si.ifs[i].addr,
			         (unsigned)n->data_port);
		}
	}
	r->cores = n->si.cores;
	shoal_record_strcpy(r->os, sizeof r->os, n->si.os);
	shoal_record_strcpy(r->arch, sizeof r->arch, n->si.arch);
	r->n_rdma = n->si.n_rdma;
	for (uint32_t i = 0; i < n->si.n_rdma && i < SHOAL_RECORD_MAX_RDMA; i++)
		shoal_record_strcpy(r->rdma[i], sizeof r->rdma[i], n->si.rdma[i]);
	/* models: not advertised yet (open work of the elastic-cluster issue:
	 * weights for a peer without the file); peers match by model id. */
	r->n_models = 0;
	shoal_node_compute_probe(n->state_dir, n->cfg.reprobe, r);
}

/* The parts that change: memory available, load, links. */
static void shoal_node_record_refresh(shoal_node *n)
{
	shoal_sysinfo_refresh(&n->si);
	n->rec.mem_total = n->si.mem_total;
	n->rec.mem_weights = n->si.mem_available;
	n->rec.load_permille = n->si.load_permille;
	n->rec.n_links =
	    (uint32_t)shoal_linkprobe_links(n->lp, n->rec.links, SHOAL_RECORD_MAX_LINKS);
	if (n->cl)
		shoal_cluster_fill_record(n->cl, &n->rec, n->si.mem_available);
}

/* ------------------------------------------------------------- callbacks */

static shoal_err shoal_node_swim_send(void *ctx, const char *endpoint, const uint8_t *buf,
                                      size_t len)
{
	shoal_node *n = ctx;
	return shoal_ctl_send(n->ctl, endpoint, buf, len);
}

static void shoal_node_member_changed(void *ctx, const shoal_swim_member *m, shoal_swim_state old,
                                      int is_new)
{
	(void)ctx;
	if (m->is_self)
		return;
	char hex[33];
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

static void shoal_node_incarnation_changed(void *ctx, uint64_t inc)
{
	shoal_node *n = ctx;
	char why[256];
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

static void shoal_node_on_found(void *ud, const shoal_discovery_found *f)
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
}

/* The status response: {"self", "cluster", "insecure", "peers": [...]}. */
static char *shoal_node_status_json(shoal_node *n)
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
	for (size_t i = 0; i < nv; i++) {
		json_t *p = shoal_status_member_json(&v[i]);
		if (p) {
			json_array_append_new(peers, p);
		} else {
			char hex[33];
			shoal_peer_id_to_hex(&v[i].id, hex);
			SHOAL_LOG_W("node", "status: cannot render peer %.8s (out of memory?)",
			            hex);
		}
	}
	json_object_set_new(root, "peers", peers);
	if (n->cl) {
		json_t *plan = shoal_cluster_status_json(n->cl);
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

static void shoal_node_dropped(shoal_node *n, const shoal_ctl_route *from, const char *why)
{
	uint64_t now = shoal_node_now_us(NULL);
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
static void shoal_node_run_refused(shoal_node *n, const shoal_ctl_route *from, uint64_t seq,
                                   shoal_err err, const char *why)
{
	shoal_run_end end = {.err = err, .why = why, .why_len = strlen(why), .text = ""};
	if (shoal_runmsg_encode_end(seq, &end, &n->out) == SHOAL_OK)
		shoal_ctl_reply(n->ctl, from, n->out.data, n->out.len);
}

/* A client connection closed: its runs end and free their sessions. */
static void shoal_node_on_disconnect(void *ud, int fd)
{
	shoal_node *n = ud;
	if (n->cl)
		shoal_cluster_client_gone(n->cl, fd);
}

static void shoal_node_on_message(void *ud, const shoal_ctl_route *from, const uint8_t *buf,
                                  size_t len)
{
	shoal_node *n = ud;
	char why[200] = "";
	shoal_ctlmsg m;
	shoal_err e = shoal_ctlmsg_decode(buf, len, &m, why, sizeof why);
	if (e == SHOAL_ERR_NOTFOUND) {
		/* Membership's; it logs what it drops (rate-limited). */
		shoal_swim_receive(n->sw, NULL, buf, len, why, sizeof why);
		return;
	}
	if (e != SHOAL_OK) {
		shoal_node_dropped(n, from, why);
		return;
	}
	shoal_ctlmsg r;
	memset(&r, 0, sizeof r);
	r.seq = m.seq;
	switch (m.type) {
	case SHOAL_CTLMSG_STATUS_REQ: {
		char *js = shoal_node_status_json(n);
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
		shoal_linkprobe_ack(n->lp, &m, shoal_node_now_us(NULL));
		return;
	case SHOAL_CTLMSG_RUN_REQ:
		if (n->cl) {
			shoal_cluster_run_request(n->cl, from, buf, len);
		} else {
			shoal_node_run_refused(n, from, m.seq, SHOAL_ERR_STATE,
			                       "this peer serves no model (no --model)");
		}
		return;
	case SHOAL_CTLMSG_RUN_TOKEN:
	case SHOAL_CTLMSG_RUN_END: {
		/* a client waits for an answer to its seq: say why there is none */
		static const char no[] = "a run reply sent to a peer: send RUN_REQ";
		shoal_node_dropped(n, from, no);
		shoal_node_run_refused(n, from, m.seq, SHOAL_ERR_PROTO, no);
		return;
	}
	default:
		shoal_node_dropped(n, from, "a status answer sent to a node");
	}
}

/* -------------------------------------------------------------- link probes */

/* One target per (alive peer, our data endpoint, its data endpoint): the
 * probe leaves from our endpoint's address (ZeroMQ "tcp://SRC:0;DST:PORT")
 * to its endpoint's address on its control port. */
static void shoal_node_targets(shoal_node *n)
{
	shoal_swim_member *v = NULL;
	size_t nv = 0;
	if (shoal_swim_view(n->sw, &v, &nv) != SHOAL_OK)
		return;
	shoal_linkprobe_target t[SHOAL_RECORD_MAX_LINKS];
	size_t nt = 0;
	for (size_t i = 0; i < nv; i++) {
		if (v[i].is_self || v[i].state != SHOAL_SWIM_STATE_ALIVE)
			continue;
		const shoal_record *r = &v[i].record;
		int port = shoal_endpoint_port(r->ctl_endpoint);
		for (uint32_t a = 0; a < n->rec.n_data_ep; a++)
			for (uint32_t b = 0; b < r->n_data_ep && b < SHOAL_RECORD_MAX_DATA_EP;
			     b++) {
				char lip[64], rip[64];
				if (nt >= SHOAL_RECORD_MAX_LINKS)
					break;
				if (shoal_endpoint_ip(n->rec.data_ep[a].addr, lip, sizeof lip) ||
				    shoal_endpoint_ip(r->data_ep[b].addr, rip, sizeof rip) ||
				    port <= 0)
					continue;
				/* loopback only talks to loopback */
				if (!strncmp(lip, "127.", 4) != !strncmp(rip, "127.", 4))
					continue;
				t[nt].peer = v[i].id;
				t[nt].lep = (uint8_t)a;
				t[nt].rep = (uint8_t)b;
				snprintf(t[nt].endpoint, sizeof t[nt].endpoint, "tcp://%s:0;%s:%d",
				         lip, rip, port);
				nt++;
			}
	}
	shoal_swim_view_free(v);
	shoal_linkprobe_set_targets(n->lp, t, nt);
}

static void shoal_node_probe_one(shoal_node *n)
{
	shoal_ctlmsg m;
	const char *ep = NULL;
	if (!shoal_linkprobe_next(n->lp, shoal_node_now_us(NULL), &m, &ep))
		return;
	if (shoal_ctlmsg_encode(&m, &n->out) == SHOAL_OK)
		shoal_ctl_send(n->ctl, ep, n->out.data, n->out.len);
}

/* ----------------------------------------------------------------- new/free */

/* Bind the data-plane TCP listener (the data plane itself is a later
 * issue: for now connections are accepted and closed). */
static shoal_err shoal_node_data_listen(shoal_node *n, char *why, size_t why_len)
{
	char host[64] = "";
	uint16_t port = 0;
	if (n->cfg.data_listen) {
		shoal_err e =
		    shoal_endpoint_split(n->cfg.data_listen, 0, host, sizeof host, &port, why, why_len);
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

static shoal_err shoal_node_cluster_reply(void *ud, const shoal_ctl_route *to, const void *buf,
                                          size_t len)
{
	shoal_node *n = ud;
	return shoal_ctl_reply(n->ctl, to, buf, len);
}

static void shoal_node_cluster_tick(shoal_node *n);

/* ---- the HTTP API's ops: the cluster's, and the status the loop caches */

/* The cluster the API reaches; NULL while a peer without the file has no
 * weights yet (its requests get 503 with the reason). */
static shoal_cluster *shoal_node_api_cl(void *ctx, char *why, size_t why_len)
{
	shoal_node *n = ctx;
	shoal_cluster *cl = __atomic_load_n(&n->cl, __ATOMIC_ACQUIRE);
	if (!cl && why)
		shoal_why(why, why_len, SHOAL_ERR_STATE,
		          "this peer has no model yet: it is fetching its part of the weights "
		          "(see /v1/cluster); another peer may serve the request now");
	return cl;
}

static shoal_err shoal_node_api_prompt(void *ctx, const shoal_chat_msg *msgs, size_t n,
                                       const char *text, int32_t **ids, size_t *n_ids, char *why,
                                       size_t why_len)
{
	shoal_cluster *cl = shoal_node_api_cl(ctx, why, why_len);
	return cl ? shoal_cluster_prompt(cl, msgs, n, text, ids, n_ids, why, why_len)
	          : SHOAL_ERR_STATE;
}

static shoal_err shoal_node_api_submit(void *ctx, const int32_t *ids, size_t n,
                                       const shoal_api_gen *g, const shoal_api_sink *sink,
                                       uint32_t *handle, char *why, size_t why_len)
{
	shoal_cluster *cl = shoal_node_api_cl(ctx, why, why_len);
	return cl ? shoal_cluster_submit(cl, ids, n, g, sink, handle, why, why_len)
	          : SHOAL_ERR_STATE;
}

static void shoal_node_api_cancel(void *ctx, uint32_t handle)
{
	shoal_cluster *cl = shoal_node_api_cl(ctx, NULL, 0);
	if (cl)
		shoal_cluster_cancel(cl, handle);
}

static size_t shoal_node_api_token(void *ctx, int32_t id, char *buf, size_t cap)
{
	shoal_cluster *cl = shoal_node_api_cl(ctx, NULL, 0);
	return cl ? shoal_cluster_token_text(cl, id, buf, cap) : 0;
}

static char *shoal_node_api_status(void *ctx)
{
	shoal_node *n = ctx;
	pthread_mutex_lock(&n->status_mu);
	char *s = n->status_cache ? strdup(n->status_cache) : NULL;
	pthread_mutex_unlock(&n->status_mu);
	return s;
}

static void shoal_node_api_gauges(void *ctx, shoal_api_gauges *g)
{
	shoal_cluster *cl = shoal_node_api_cl(ctx, NULL, 0);
	if (cl)
		shoal_cluster_gauges(cl, g);
	else
		memset(g, 0, sizeof *g);
}

/* The API's name of a model: its file's, without the directory and .gguf. */
static void shoal_node_model_name(const char *path, char *out, size_t cap)
{
	const char *base = strrchr(path, '/');
	snprintf(out, cap, "%s", base ? base + 1 : path);
	size_t ml = strlen(out);
	if (ml > 5 && !strcmp(out + ml - 5, ".gguf"))
		out[ml - 5] = '\0';
}

/* --api; with --model-id the name comes when the weights do
 * (shoal_node_fetch_tick). */
static shoal_err shoal_node_api_start(shoal_node *n, char *why, size_t why_len)
{
	char host[64], model[256] = "";
	uint16_t port = 0;
	shoal_err e = shoal_endpoint_split(n->cfg.api, SHOAL_API_DEFAULT_PORT, host, sizeof host,
	                                   &port, why, why_len);
	if (e)
		return e;
	if (n->cfg.model)
		shoal_node_model_name(n->cfg.model, model, sizeof model);
	n->api_named = model[0] != '\0';
	if (pthread_mutex_init(&n->status_mu, NULL) != 0)
		return shoal_why(why, why_len, SHOAL_ERR_NOMEM, "cannot make a mutex");
	n->status_mu_ok = true;
	n->api_ops = (shoal_api_ops){.prompt = shoal_node_api_prompt,
	                             .submit = shoal_node_api_submit,
	                             .cancel = shoal_node_api_cancel,
	                             .token_text = shoal_node_api_token,
	                             .cluster_json = shoal_node_api_status,
	                             .gauges = shoal_node_api_gauges,
	                             .ctx = n};
	shoal_api_config ac = {
	    .host = host, .port = port, .key = n->cfg.api_key, .model = model[0] ? model : NULL};
	return shoal_api_start(&ac, &n->api_ops, &n->api, why, why_len);
}

/* The cluster saw a data link to a peer break without a goodbye. */
static void shoal_node_peer_gone(void *ud, const uint8_t id[16], uint64_t inc, const char *why)
{
	shoal_node *n = ud;
	shoal_peer_id pid;
	char hex[33];
	memcpy(pid.b, id, 16);
	shoal_peer_id_to_hex(&pid, hex);
	if (n->sw && shoal_swim_declare_dead(n->sw, &pid, inc) == SHOAL_OK) {
		SHOAL_LOG_W("node", "peer %.8s is dead: %s", hex, why);
		shoal_node_cluster_tick(n); /* re-plan now, not at the next period */
	}
}

/* Serve cfg.model: the data listener becomes the cluster's xfer listener
 * on the same address and port (the record already names it). */
static shoal_err shoal_node_cluster_new(shoal_node *n, shoal_wcache *wc, char *why,
                                        size_t why_len)
{
	char host[64] = "0.0.0.0";
	struct sockaddr_in sa;
	socklen_t sl = sizeof sa;
	if (getsockname(n->data_fd, (struct sockaddr *)&sa, &sl) == 0)
		inet_ntop(AF_INET, &sa.sin_addr, host, sizeof host);
	close(n->data_fd);
	n->data_fd = -1;
	shoal_cluster_config cc = {.model_path = n->cfg.model,
	                           .state_dir = n->state_dir,
	                           .mem_limit = n->cfg.mem_limit,
	                           .ctx = n->cfg.ctx,
	                           .sessions = n->cfg.sessions,
	                           .spread_experts = n->cfg.spread_experts != 0,
	                           .tensor_groups = n->cfg.tensor_groups != 0,
	                           .link_us = n->cfg.link_us,
	                           .threads = n->cfg.threads > 0 ? (uint32_t)n->cfg.threads
	                                      : n->si.cores      ? n->si.cores
	                                                         : 1,
	                           .hop_spin_us = n->cfg.spin_us < 0   ? 0u
	                                          : n->cfg.spin_us > 0 ? (uint32_t)n->cfg.spin_us
	                                                               : SHOAL_CLUSTER_HOP_SPIN_US,
	                           .key = n->keyed ? &n->key : NULL,
	                           .data_host = host,
	                           .data_port = n->data_port,
	                           .base_ms = (uint32_t)(n->base_us / 1000u),
	                           .rdma = n->cfg.rdma,
	                           .reply = shoal_node_cluster_reply,
	                           .peer_gone = shoal_node_peer_gone,
	                           .wcache = wc,
	                           .cache_max = n->cfg.cache_max ? n->cfg.cache_max
	                                                         : SHOAL_NODE_DEFAULT_CACHE_MAX,
	                           .ud = n};
	memcpy(cc.self, n->ident.id, 16);
	shoal_cluster *cl = NULL;
	shoal_err e = shoal_cluster_new(&cc, &cl, why, why_len);
	/* the API's threads read n->cl (shoal_node_api_cl) */
	__atomic_store_n(&n->cl, cl, __ATOMIC_RELEASE);
	return e;
}

/* A cache of model id `id` in the state dir: the cluster serves it (its
 * missing tensors fetched per plan). False when there is none yet. */
static bool shoal_node_fetch_open(shoal_node *n, const uint8_t id[32])
{
	char dir[1100], why[256], hex[65];
	shoal_wcache *wc = NULL;
	snprintf(dir, sizeof dir, "%s/" SHOAL_WEIGHTS_DIR, n->state_dir);
	shoal_model_id_hex(id, hex);
	if (shoal_wcache_open(dir, id, &wc, why, sizeof why) != SHOAL_OK) {
		SHOAL_LOG_I("node", "model %.16s: %s", hex, why);
		return false;
	}
	size_t held = 0;
	for (size_t i = 0; i < shoal_wcache_n_tensors(wc); i++)
		held += shoal_wcache_has(wc, i);
	SHOAL_LOG_I("node", "model %.16s: weights cache %s, %zu of %zu tensors held", hex,
	            shoal_wcache_path(wc), held, shoal_wcache_n_tensors(wc));
	if (shoal_node_cluster_new(n, wc, why, sizeof why) != SHOAL_OK) {
		SHOAL_LOG_W("node", "cannot serve the cached model %.16s: %s", hex, why);
		return false;
	}
	return true;
}

/* --model-id: the cached model at once, else a fetcher for its header. */
static shoal_err shoal_node_fetch_new(shoal_node *n, char *why, size_t why_len)
{
	n->fetch_any = !strcmp(n->cfg.model_id, "any");
	if (!n->fetch_any) {
		if (shoal_hex_decode(n->cfg.model_id, strlen(n->cfg.model_id), n->fetch_id, 32) !=
		    SHOAL_OK)
			return shoal_why(why, why_len, SHOAL_ERR_INVAL,
			                 "--model-id wants 64 hex digits or \"any\", not '%s'",
			                 n->cfg.model_id);
		n->have_fetch_id = true;
		if (shoal_node_fetch_open(n, n->fetch_id))
			return SHOAL_OK;
	}
	return SHOAL_OK; /* the fetcher is made once the id is known (fetch tick) */
}

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
	                       .on_message = shoal_node_on_message,
	                       .on_disconnect = shoal_node_on_disconnect,
	                       .ud = n};
	if ((e = shoal_ctl_new(&cc, &n->ctl, why, why_len)) != SHOAL_OK)
		goto fail;
	if ((e = shoal_node_data_listen(n, why, why_len)) != SHOAL_OK)
		goto fail;
	if ((e = shoal_linkprobe_new(&n->lp)) != SHOAL_OK)
		goto fail;
	/* Machine, record, membership. Loopback interfaces count when we
	 * listen on loopback (or on everything and there is nothing else). */
	shoal_sysinfo_probe(&n->si, !strncmp(n->listen_ip, "127.", 4));
	if (n->si.n_if == 0)
		shoal_sysinfo_probe(&n->si, 1);
	shoal_node_record_init(n);
	if (cfg->model && (e = shoal_node_cluster_new(n, NULL, why, why_len)) != SHOAL_OK)
		goto fail;
	if (!cfg->model && cfg->model_id && (e = shoal_node_fetch_new(n, why, why_len)) != SHOAL_OK)
		goto fail;
	if (cfg->api && !cfg->model && !cfg->model_id) {
		e = shoal_why(why, why_len, SHOAL_ERR_INVAL, "--api needs --model or --model-id");
		goto fail;
	}
	shoal_node_record_refresh(n);
	n->swim_ops = (shoal_swim_ops){.now_us = shoal_node_now_us,
	                               .rand64 = shoal_node_rand64,
	                               .send = shoal_node_swim_send,
	                               .member_changed = shoal_node_member_changed,
	                               .incarnation_changed = shoal_node_incarnation_changed};
	shoal_swim_config sc;
	shoal_swim_config_default(&sc);
	sc.base_us = (uint32_t)n->base_us;
	if ((e = shoal_swim_new(&sc, &n->rec, n->ident.incarnation, &n->swim_ops, n, &n->sw, why,
	                        why_len)) != SHOAL_OK)
		goto fail;
	/* Seeds. */
	n->seeds = calloc(cfg->n_seeds ? cfg->n_seeds : 1, sizeof *n->seeds);
	if (!n->seeds) {
		e = SHOAL_ERR_NOMEM;
		goto fail;
	}
	for (size_t i = 0; i < cfg->n_seeds; i++) {
		char ep[SHOAL_RECORD_EP_MAX];
		if ((e = shoal_endpoint_parse(cfg->seeds[i], SHOAL_CTL_DEFAULT_PORT, ep,
		                                   sizeof ep, why, why_len)) != SHOAL_OK)
			goto fail;
		if (!(n->seeds[n->n_seeds++] = strdup(ep))) {
			e = SHOAL_ERR_NOMEM;
			goto fail;
		}
	}
	if (cfg->api && (e = shoal_node_api_start(n, why, why_len)) != SHOAL_OK)
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
	shoal_cluster_free(n->cl);
	free(n->status_cache);
	if (n->status_mu_ok)
		pthread_mutex_destroy(&n->status_mu);
	shoal_weights_fetcher_free(n->wf);
	if (n->ctl)
		shoal_node_remove_control(n);
	shoal_swim_free(n->sw);
	shoal_ctl_free(n->ctl);
	shoal_linkprobe_free(n->lp);
	if (n->data_fd >= 0)
		close(n->data_fd);
	for (size_t i = 0; i < n->n_seeds; i++)
		free(n->seeds[i]);
	free(n->seeds);
	shoal_wire_buf_fini(&n->out);
	if (n->lock_fd >= 0)
		close(n->lock_fd);
	shoal_key_wipe(&n->key, sizeof n->key);
	free(n);
}

/* ----------------------------------------------------------------- the loop */

static void shoal_node_start_discovery(shoal_node *n)
{
	if (n->cfg.no_mdns) {
		SHOAL_LOG_I("node", "mDNS disabled (--no-mdns); %zu seed(s)", n->n_seeds);
		return;
	}
	const shoal_discovery_ops *ops =
	    n->cfg.discovery ? n->cfg.discovery : &shoal_discovery_dnssd;
	char instance[64], why[256];
	snprintf(instance, sizeof instance, "%.40s-%.8s", n->ident.name, n->ident.id_hex);
	shoal_discovery_config dc = {.instance = instance,
	                             .cluster = n->cluster,
	                             .id_hex = n->ident.id_hex,
	                             .incarnation = n->ident.incarnation,
	                             .port = shoal_ctl_port(n->ctl),
	                             .open = !n->keyed,
	                             .on_found = shoal_node_on_found,
	                             .ud = n};
	if (ops->open(&dc, &n->disc_state, why, sizeof why) != SHOAL_OK) {
		SHOAL_LOG_W("node", "%s; continuing with %zu seed(s) and gossip", why, n->n_seeds);
		n->disc_state = NULL;
		return;
	}
	n->disc = ops;
}

/* Planning and readiness, once per base period: a new plan or readiness
 * is published at once rather than with the next RECORD refresh, so a
 * plan becomes servable within a few gossip rounds. */
static void shoal_node_cluster_tick(shoal_node *n)
{
	shoal_swim_member *v = NULL;
	size_t nv = 0;
	char why[200];
	if (shoal_swim_view(n->sw, &v, &nv) != SHOAL_OK)
		return;
	int republish = shoal_cluster_update(n->cl, v, nv);
	shoal_swim_view_free(v);
	if (republish) {
		shoal_cluster_fill_record(n->cl, &n->rec, n->si.mem_available);
		if (shoal_swim_set_record(n->sw, &n->rec, why, sizeof why) != SHOAL_OK)
			SHOAL_LOG_W("node", "cannot publish our record: %s", why);
	}
}

/* --api with --model-id: the model's name is the one the peers that hold
 * the file give it (their file's name), so a client sees one name on every
 * peer. */
static void shoal_node_api_name_from_peers(shoal_node *n)
{
	shoal_swim_member *v = NULL;
	size_t nv = 0;
	if (!n->api || n->api_named || shoal_swim_view(n->sw, &v, &nv) != SHOAL_OK)
		return;
	for (size_t i = 0; i < nv; i++) {
		const shoal_record *r = &v[i].record;
		if (r->serving && r->n_models && !memcmp(r->models[0].digest, n->fetch_id, 32) &&
		    memcmp(r->id.b, n->ident.id, 16) && r->models[0].path[0] &&
		    !strstr(r->models[0].path, "/weights/")) { /* not another fetcher's cache */
			char name[256];
			shoal_node_model_name(r->models[0].path, name, sizeof name);
			shoal_api_set_model(n->api, name);
			n->api_named = true;
			break;
		}
	}
	shoal_swim_view_free(v);
}

/* --model-id without a cache yet, once per base period: pick the model id
 * (for "any": the one every serving peer names), then learn its header and
 * digests from a serving peer on the fetcher's thread; once the cache
 * exists the cluster takes over. */
static void shoal_node_fetch_tick(shoal_node *n)
{
	uint64_t now = shoal_node_now_us(NULL);
	if (now < n->fetch_retry_us)
		return;
	if (n->wf) {
		shoal_weights_progress pr;
		shoal_weights_get_progress(n->wf, &pr);
		int r = shoal_weights_poll(n->wf);
		if (pr.running)
			return;
		if (r == 1) {
			shoal_wcache *wc = shoal_weights_take_cache(n->wf);
			char why[256], w2[200];
			if (wc && shoal_node_cluster_new(n, wc, why, sizeof why) == SHOAL_OK) {
				shoal_node_record_refresh(n);
				if (shoal_swim_set_record(n->sw, &n->rec, w2, sizeof w2) != SHOAL_OK)
					SHOAL_LOG_W("node", "cannot publish our record: %s", w2);
				shoal_weights_fetcher_free(n->wf);
				n->wf = NULL;
				return;
			}
			if (wc)
				SHOAL_LOG_W("node", "cannot serve the fetched model: %s", why);
		}
		if (r == -1)
			n->fetch_retry_us = now + 10 * n->base_us; /* let gossip move on */
		if (r != 0 && now < n->fetch_retry_us)
			return;
	}
	shoal_swim_member *v = NULL;
	size_t nv = 0;
	if (shoal_swim_view(n->sw, &v, &nv) != SHOAL_OK)
		return;
	shoal_weights_src src[64];
	size_t ns = 0;
	bool agree = true, seen = false;
	bool want_lo = !strncmp(n->listen_ip, "127.", 4);
	for (size_t i = 0; i < nv; i++) {
		const shoal_record *r = &v[i].record;
		if ((v[i].state != SHOAL_SWIM_STATE_ALIVE && v[i].state != SHOAL_SWIM_STATE_SUSPECT) ||
		    !v[i].compatible || !r->serving || !r->n_models ||
		    !memcmp(r->id.b, n->ident.id, 16))
			continue;
		if (!n->have_fetch_id) { /* "any" */
			if (!seen)
				memcpy(n->fetch_id, r->models[0].digest, 32);
			else if (memcmp(r->models[0].digest, n->fetch_id, 32))
				agree = false;
			seen = true;
		} else if (memcmp(r->models[0].digest, n->fetch_id, 32)) {
			continue;
		}
		if (ns < sizeof src / sizeof src[0] &&
		    shoal_weights_pick_ep(r, want_lo, src[ns].host, &src[ns].port)) {
			memcpy(src[ns].id, r->id.b, 16);
			snprintf(src[ns].name, sizeof src[ns].name, "%s", r->name);
			ns++;
		}
	}
	shoal_swim_view_free(v);
	if (!ns)
		return;
	char hex[65];
	if (!n->have_fetch_id) {
		if (!agree) {
			SHOAL_LOG_W("node", "--model-id any: the serving peers name different models");
			memset(n->fetch_id, 0, 32);
			n->fetch_retry_us = now + 10 * n->base_us;
			return;
		}
		n->have_fetch_id = true;
		shoal_model_id_hex(n->fetch_id, hex);
		SHOAL_LOG_I("node", "--model-id any: the serving peers serve model %.16s", hex);
		if (shoal_node_fetch_open(n, n->fetch_id))
			return;
	}
	if (!n->wf) {
		shoal_weights_config wcf = {.key = n->key,
		                            .cache_max = n->cfg.cache_max ? n->cfg.cache_max
		                                                          : SHOAL_NODE_DEFAULT_CACHE_MAX,
		                            .tty = isatty(2) != 0};
		char dir[1100];
		snprintf(dir, sizeof dir, "%s/" SHOAL_WEIGHTS_DIR, n->state_dir);
		wcf.dir = dir;
		memcpy(wcf.self, n->ident.id, 16);
		memcpy(wcf.model_id, n->fetch_id, 32);
		shoal_err e = shoal_weights_fetcher_new(&wcf, &n->wf);
		sodium_memzero(&wcf.key, sizeof wcf.key);
		if (e != SHOAL_OK)
			return;
	}
	shoal_model_id_hex(n->fetch_id, hex);
	SHOAL_LOG_I("node", "model %.16s: learning its header and digests from %zu peer(s)", hex,
	            ns);
	shoal_weights_start(n->wf, src, ns, NULL, NULL, 0);
}

/* One loop turn: wait for traffic or the next timer, then do what is due. */
static void shoal_node_turn(shoal_node *n, uint64_t *next_probe, uint64_t *next_targets,
                            uint64_t *next_record, uint64_t *next_expire)
{
	uint64_t now = shoal_node_now_us(NULL);
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
	fds[nfds++] = (shoal_ctl_fd){.fd = n->cl ? shoal_cluster_event_fd(n->cl) : n->data_fd,
	                             .events = POLLIN};
	int dfds[SHOAL_NODE_MAX_FDS];
	size_t nd = 0;
	if (n->disc)
		nd = n->disc->fds(n->disc_state, dfds, SHOAL_NODE_MAX_FDS - 1);
	for (size_t i = 0; i < nd; i++)
		fds[nfds++] = (shoal_ctl_fd){.fd = dfds[i], .events = POLLIN};
	shoal_ctl_poll(n->ctl, timeout_ms, fds, nfds);
	if (n->cl && (fds[0].revents & POLLIN)) {
		shoal_cluster_drain(n->cl);
	} else if (fds[0].revents & POLLIN) {
		int c = accept(n->data_fd, NULL, NULL);
		if (c >= 0)
			close(c); /* membership only (no --model): no data plane */
	}
	for (int i = 1; i < nfds; i++)
		if (fds[i].revents & (POLLIN | POLLHUP | POLLERR))
			n->disc->process(n->disc_state, fds[i].fd);
	shoal_swim_tick(n->sw);
	now = shoal_node_now_us(NULL);
	if (n->cl && now >= n->next_cluster_us) {
		shoal_node_cluster_tick(n);
		n->next_cluster_us = now + n->base_us;
	} else if (!n->cl && n->cfg.model_id && !n->cfg.model && now >= n->next_cluster_us) {
		shoal_node_fetch_tick(n);
		n->next_cluster_us = now + n->base_us;
	}
	if (n->api && !n->api_named && now >= n->next_status_us)
		shoal_node_api_name_from_peers(n);
	if (n->api && now >= n->next_status_us) {
		char *js = shoal_node_status_json(n);
		pthread_mutex_lock(&n->status_mu);
		free(n->status_cache);
		n->status_cache = js;
		pthread_mutex_unlock(&n->status_mu);
		n->next_status_us = now + SHOAL_NODE_API_STATUS_MULT * n->base_us;
	}
	if (now >= *next_probe) {
		shoal_node_probe_one(n);
		*next_probe = now + SHOAL_NODE_PROBE_MULT * n->base_us;
	}
	if (now >= *next_targets) {
		shoal_node_targets(n);
		*next_targets = now + SHOAL_NODE_TARGETS_MULT * n->base_us;
	}
	if (now >= *next_record) {
		char why[200];
		shoal_node_record_refresh(n);
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
	shoal_node_write_control(n);
	shoal_node_start_discovery(n);
	for (size_t i = 0; i < n->n_seeds; i++) {
		SHOAL_LOG_I("node", "joining through seed %s", n->seeds[i]);
		shoal_swim_join(n->sw, n->seeds[i]);
	}
	uint64_t now = shoal_node_now_us(NULL);
	uint64_t next_probe = now + SHOAL_NODE_PROBE_MULT * n->base_us;
	uint64_t next_targets = now + n->base_us;
	uint64_t next_record = now + SHOAL_NODE_RECORD_MULT * n->base_us;
	uint64_t next_expire = now + SHOAL_NODE_TARGETS_MULT * n->base_us;
	while (!*stop)
		shoal_node_turn(n, &next_probe, &next_targets, &next_record, &next_expire);
	SHOAL_LOG_I("node", "leaving the cluster");
	shoal_swim_leave(n->sw);
	uint64_t until = shoal_node_now_us(NULL) + shoal_swim_leave_linger_us(n->sw);
	while (shoal_node_now_us(NULL) < until)
		shoal_node_turn(n, &next_probe, &next_targets, &next_record, &next_expire);
	shoal_node_remove_control(n);
	SHOAL_LOG_I("node", "stopped");
	return SHOAL_OK;
}

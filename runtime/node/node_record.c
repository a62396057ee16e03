/*
 * runtime/node/node_record.c: our record and what measures it: the clock and
 * randomness SWIM is given, the control file `shoal status` finds us by,
 * the machine and our devices (the compute probe is node_probe.c's), the
 * record's endpoints, and the link probes whose figures it gossips.
 * Node thread.
 */
#include "config.h"

#include "runtime/node/node_impl.h"

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <netinet/in.h>
#include <unistd.h>

#include <sodium.h>

#include "base/clock.h"
#include "base/hex.h"
#include "base/log.h"
#include "net/endpoint.h"
#include "base/statedir.h"
#include "runtime/backends.h"

uint64_t node__now_us(void *ctx)
{
	(void)ctx;
	return shoal_clock_now_us();
}

uint64_t node__rand64(void *ctx)
{
	(void)ctx;
	uint64_t v;
	randombytes_buf(&v, sizeof v);
	return v;
}

/* <state>/control: how `shoal status` reaches this node. */
void node__write_control(shoal_node *n)
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

void node__remove_control(shoal_node *n)
{
	char path[1100];
	snprintf(path, sizeof path, "%s/%s", n->state_dir, SHOAL_NODE_CONTROL_FILE);
	unlink(path);
}

/* --------------------------------------------------------------- the record */

/* Our compute devices (runtime/backends.h), as --backend chooses them: the
 * CPU first, with the compute probe's figures (kept across restarts) and
 * the memory we offer (node__record_refresh keeps that current), then each
 * GPU with the figures its backend measured. When the registry cannot say,
 * the CPU alone. */
static void node_devices(shoal_node *n, shoal_record *r)
{
	shoal_backend_devinfo d[SHOAL_RECORD_MAX_DEVICES];
	size_t nd = 0;
	char why[SHOAL_WHY_LEN] = "";
	uint32_t th = n->cfg.threads > 0 ? (uint32_t)n->cfg.threads : n->si.cores ? n->si.cores : 1;
	shoal_backend_limits lim = {
	    .n_threads = th, .max_ctx = 1, .max_rows = 1, .max_n = 32, .max_group = 1};
	shoal_err e =
	    shoal_backend_devices(&(shoal_backend_opts){.name = n->cfg.backend}, &lim, true, d,
	                          SHOAL_RECORD_MAX_DEVICES, &nd, why, sizeof why);
	if (e) {
		SHOAL_LOG_W("node", "cannot list the compute devices (%s): publishing the CPU",
		            why);
		nd = 0;
	}
	r->n_devices = 0;
	for (size_t i = 0; i < nd; i++) {
		shoal_record_device *x = &r->devices[r->n_devices++];
		memset(x, 0, sizeof *x);
		shoal_record_strcpy(x->backend, sizeof x->backend, d[i].backend);
		shoal_record_strcpy(x->name, sizeof x->name, d[i].name);
		x->kind = d[i].gpu ? SHOAL_RECORD_DEVICE_GPU : SHOAL_RECORD_DEVICE_CPU;
		x->unified = d[i].unified;
		x->software = d[i].software;
		x->mem_bytes = d[i].mem_bytes;
		x->read_mb_s = (uint64_t)(d[i].read_gbps * 1000.0); /* GB/s -> MB/s */
		x->mflops = (uint64_t)(d[i].gflops * 1000.0);       /* GFLOP/s -> MFLOP/s */
		if (i == 0) { /* the host's CPU: the probe's figures */
			x->read_mb_s = r->compute_mb_s;
			x->mflops = r->compute_mflops;
		}
	}
	if (!r->n_devices) {
		shoal_record_device *x = &r->devices[r->n_devices++];
		memset(x, 0, sizeof *x);
		shoal_record_strcpy(x->backend, sizeof x->backend, "cpu");
		shoal_record_strcpy(x->name, sizeof x->name, "cpu");
		x->unified = 1;
		x->read_mb_s = r->compute_mb_s;
		x->mflops = r->compute_mflops;
	}
#ifdef SHOAL_TEST_HOOKS
	/* SHOAL_TEST_GPU=BYTES:MB_S: a GPU of that memory and bandwidth that
	 * --backend computes on (the CPU here): the plan's split of a stage
	 * inside a peer, tested on machines without a GPU */
	const char *tg = getenv("SHOAL_TEST_GPU");
	unsigned long long tb = 0, tr = 0;
	if (tg && sscanf(tg, "%llu:%llu", &tb, &tr) == 2 && tb && tr &&
	    r->n_devices < SHOAL_RECORD_MAX_DEVICES) {
		shoal_record_device *x = &r->devices[r->n_devices++];
		memset(x, 0, sizeof *x);
		shoal_record_strcpy(x->backend, sizeof x->backend,
		                    n->cfg.backend ? n->cfg.backend : "cpu");
		shoal_record_strcpy(x->name, sizeof x->name, "test gpu (SHOAL_TEST_GPU)");
		x->kind = SHOAL_RECORD_DEVICE_GPU;
		x->mem_bytes = tb;
		x->read_mb_s = tr;
	}
#endif
#ifdef SHOAL_TEST_HOOKS
	/* SHOAL_TEST_GPU_MEM=BYTES: the memory the devices of a backend other
	 * than the CPU offer, at most (a software device's 2 GiB would take a
	 * test model whole: the split inside a peer needs a small one) */
	const char *tm = getenv("SHOAL_TEST_GPU_MEM");
	unsigned long long cap = tm ? strtoull(tm, NULL, 10) : 0;
	for (uint32_t i = 0; cap && i < r->n_devices; i++)
		if (strcmp(r->devices[i].backend, "cpu") && r->devices[i].mem_bytes > cap)
			r->devices[i].mem_bytes = cap;
#endif
	for (uint32_t i = 0; i < r->n_devices; i++) {
		const shoal_record_device *x = &r->devices[i];
		SHOAL_LOG_I("node", "device %u: %s %s '%s'%s%s, %.1f GB/s, %.1f GFLOP/s", i,
		            x->backend, x->kind == SHOAL_RECORD_DEVICE_GPU ? "gpu" : "cpu", x->name,
		            x->unified ? ", unified memory" : "", x->software ? ", software" : "",
		            (double)x->read_mb_s / 1000.0, (double)x->mflops / 1000.0);
	}
}

/* Fill the static parts of our record: identity, versions, endpoints,
 * machine. */
void node__record_init(shoal_node *n)
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
	node__probe_compute(n, r);
	node_devices(n, r);
}

/* The parts that change: memory available, load, links. */
void node__record_refresh(shoal_node *n)
{
	shoal_sysinfo_refresh(&n->si);
	n->rec.mem_total = n->si.mem_total;
	n->rec.mem_weights = n->si.mem_available;
	n->rec.load_permille = n->si.load_permille;
	n->rec.n_links =
	    (uint32_t)shoal_linkprobe_links(n->lp, n->rec.links, SHOAL_RECORD_MAX_LINKS);
	if (n->cl)
		shoal_serve_fill_record(n->cl, &n->rec, n->si.mem_available);
	if (n->rec.n_devices) /* the host's CPU holds what we offer */
		n->rec.devices[0].mem_bytes = n->rec.mem_weights;
}

/* -------------------------------------------------------------- link probes */

/* One target per (alive peer, our data endpoint, its data endpoint): the
 * probe leaves from our endpoint's address (ZeroMQ "tcp://SRC:0;DST:PORT")
 * to its endpoint's address on its control port. */
void node__targets(shoal_node *n)
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

void node__probe_one(shoal_node *n)
{
	shoal_ctlmsg m;
	const char *ep = NULL;
	if (!shoal_linkprobe_next(n->lp, node__now_us(NULL), &m, &ep))
		return;
	if (shoal_ctlmsg_encode(&m, &n->out) == SHOAL_OK)
		shoal_ctl_send(n->ctl, ep, n->out.data, n->out.len);
}

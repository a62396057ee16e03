/*
 * tests/helpers/verbs_double.c: the in-process verbs double (see verbs_double.h).
 *
 * A post_send runs the whole transfer at once under the fabric's mutex:
 * it takes the head of the peer QP's receive queue, copies the bytes, and
 * queues a receive completion on the peer's CQ and (when signaled, or on
 * an error) a send completion on ours; an armed CQ writes one byte to its
 * pipe (the channel fd). Divisions: fabric and layouts, objects, queue
 * pairs, data path.
 */
#include "tests/helpers/verbs_double.h"

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* 256 QPs: a test makes a few dozen; 4 devices per host cover the
 * layouts (2 Thunderbolt ports, 2 NIC ports). */
#define VD_MAX_QP   256
#define VD_MAX_DEVS 4

enum { VD_RESET, VD_INIT, VD_RTR, VD_RTS, VD_ERR };

typedef struct vd_host vd_host;

typedef struct vd_devspec {
	shoal_rdma_port_desc port; /* one port per device */
	uint32_t max_inline;
	int cable;
} vd_devspec;

struct vd_host {
	vd_fabric *f;
	int idx;
	size_t n_dev;
	vd_devspec dev[VD_MAX_DEVS];
	shoal_verbs_netif nif;
	int faults[VD_FAULT__COUNT];
	vd_host_stats st;
	vd_qp_view last;
	int have_last;
};

typedef struct vd_ctx {
	vd_host *h;
	int dev; /* index into h->dev */
} vd_ctx;

typedef struct vd_pd {
	vd_ctx *c;
} vd_pd;

typedef struct vd_mr {
	vd_pd *pd;
	uint8_t *addr;
	size_t len;
} vd_mr;

typedef struct vd_qp vd_qp;

typedef struct vd_cqe {
	shoal_verbs_wc wc;
	vd_qp *qp;       /* whose send it was (NULL: a receive) */
	uint64_t sq_pos; /* that send's place in its SQ */
	uint32_t owner;  /* the QP whose work request it completes */
} vd_cqe;

typedef struct vd_cq {
	vd_ctx *c;
	int depth;
	vd_cqe *e; /* (depth) ring */
	int head, count;
	int armed;
	int pipe[2];
} vd_cq;

typedef struct vd_rwr {
	uint64_t wr_id;
	uint8_t *addr;
	uint32_t len;
} vd_rwr;

struct vd_qp {
	vd_ctx *c;
	vd_pd *pd;
	vd_cq *cq;
	uint32_t qpn, remote_qpn, max_send, max_recv, max_inline;
	int state;
	int port, sgid_index;
	uint8_t sgid[16], dgid[16];
	vd_rwr *rq; /* (max_recv) ring */
	uint32_t rq_head, rq_count;
	uint64_t sq_posted, sq_retired; /* entries in use: the difference */
};

struct vd_fabric {
	pthread_mutex_t mu;
	vd_host host[VD_HOSTS];
	vd_qp *qps[VD_MAX_QP];
	uint32_t next_qpn;
	uint64_t overruns, sq_overruns, delivered, cq_overflows;
};

/* ---- fabric and layouts ---- */

static vd_devspec *add_dev(vd_host *h, const char *name, shoal_rdma_link_layer link,
                           const char *netdev, uint32_t max_inline)
{
	vd_devspec *d = &h->dev[h->n_dev++];
	memset(d, 0, sizeof *d);
	snprintf(d->port.device, sizeof d->port.device, "%s", name);
	snprintf(d->port.netdev, sizeof d->port.netdev, "%s", netdev);
	d->port.port = 1;
	d->port.active = 1;
	d->port.link = link;
	d->port.mtu = 4096;
	d->max_inline = max_inline;
	return d;
}

/* A GID from text: dotted IPv4 (mapped), IPv6, or "ll" (fe80::index+1). */
static void add_gid(vd_devspec *d, int index, shoal_rdma_gid_type type, const char *addr,
                    const char *netdev)
{
	shoal_rdma_gid *g = &d->port.gids[d->port.n_gid++];
	memset(g, 0, sizeof *g);
	g->index = index;
	g->type = type;
	snprintf(g->netdev, sizeof g->netdev, "%s", netdev);
	if (!strcmp(addr, "ll")) {
		g->gid[0] = 0xfe;
		g->gid[1] = 0x80;
		g->gid[15] = (uint8_t)(index + 1);
	} else if (shoal_rdma_addr_v4(addr, g->gid)) {
		inet_pton(AF_INET6, addr, g->gid);
	}
}

static void set_addr(uint8_t out[16], const char *addr)
{
	memset(out, 0, 16);
	if (shoal_rdma_addr_v4(addr, out))
		inet_pton(AF_INET6, addr, out);
}

static void host_default(vd_host *h)
{
	char name[16], netdev[16];
	snprintf(name, sizeof name, "vd%d", h->idx);
	snprintf(netdev, sizeof netdev, "vdnet%d", h->idx);
	h->n_dev = 0;
	vd_devspec *d = add_dev(h, name, SHOAL_RDMA_LINK_IB, netdev, 256);
	d->port.lid = (uint16_t)(h->idx + 1);
	add_gid(d, 0, SHOAL_RDMA_GID_IB, "ll", netdev);
	d->port.gids[0].gid[15] = (uint8_t)(h->idx + 1);
	snprintf(h->nif.ifname, sizeof h->nif.ifname, "%s", netdev);
	char a[32];
	snprintf(a, sizeof a, "10.9.0.%d", h->idx + 1);
	set_addr(h->nif.addr, a);
}

vd_fabric *vd_fabric_new(void)
{
	vd_fabric *f = calloc(1, sizeof *f);
	if (!f)
		return NULL;
	pthread_mutex_init(&f->mu, NULL);
	for (int i = 0; i < VD_HOSTS; i++) {
		f->host[i].f = f;
		f->host[i].idx = i;
		host_default(&f->host[i]);
	}
	f->next_qpn = 0x100;
	return f;
}

void vd_fabric_free(vd_fabric *f)
{
	if (!f)
		return;
	pthread_mutex_destroy(&f->mu);
	free(f);
}

void *vd_device(vd_fabric *f, int host)
{
	return &f->host[host];
}

void vd_layout_mac(vd_fabric *f, int host, int octet)
{
	char a[32];
	pthread_mutex_lock(&f->mu);
	vd_host *h = &f->host[host];
	h->n_dev = 0;
	vd_devspec *d = add_dev(h, "rdma_en2", SHOAL_RDMA_LINK_ETH, "", 128);
	add_gid(d, 0, SHOAL_RDMA_GID_ROCE_V2, "ll", "en0");
	snprintf(a, sizeof a, "10.0.2.%d", octet);
	add_gid(d, 1, SHOAL_RDMA_GID_ROCE_V2, a, "en2");
	d = add_dev(h, "rdma_en3", SHOAL_RDMA_LINK_ETH, "", 128);
	add_gid(d, 0, SHOAL_RDMA_GID_ROCE_V2, "ll", "en0");
	add_gid(d, 1, SHOAL_RDMA_GID_ROCE_V1, "ll", "en3");
	snprintf(a, sizeof a, "10.0.3.%d", octet);
	add_gid(d, 3, SHOAL_RDMA_GID_ROCE_V2, a, "en3");
	pthread_mutex_unlock(&f->mu);
}

void vd_layout_mlx5(vd_fabric *f, int host, int octet)
{
	char a[48];
	pthread_mutex_lock(&f->mu);
	vd_host *h = &f->host[host];
	h->n_dev = 0;
	vd_devspec *d = add_dev(h, "mlx5_0", SHOAL_RDMA_LINK_ETH, "ens1f0", 256);
	add_gid(d, 0, SHOAL_RDMA_GID_ROCE_V1, "ll", "ens1f0");
	add_gid(d, 1, SHOAL_RDMA_GID_ROCE_V2, "ll", "ens1f0");
	snprintf(a, sizeof a, "192.168.5.%d", octet);
	add_gid(d, 2, SHOAL_RDMA_GID_ROCE_V1, a, "ens1f0");
	add_gid(d, 3, SHOAL_RDMA_GID_ROCE_V2, a, "ens1f0");
	snprintf(a, sizeof a, "10.100.0.%d", octet);
	add_gid(d, 4, SHOAL_RDMA_GID_ROCE_V1, a, "ens1f0.100");
	add_gid(d, 5, SHOAL_RDMA_GID_ROCE_V2, a, "ens1f0.100");
	snprintf(a, sizeof a, "fd00::%d", octet);
	add_gid(d, 6, SHOAL_RDMA_GID_ROCE_V2, a, "ens1f0");
	d = add_dev(h, "mlx5_1", SHOAL_RDMA_LINK_ETH, "ens1f1", 256);
	d->port.active = 0;
	pthread_mutex_unlock(&f->mu);
}

void vd_layout_noinline(vd_fabric *f, int host, int octet)
{
	char a[32];
	pthread_mutex_lock(&f->mu);
	vd_host *h = &f->host[host];
	h->n_dev = 0;
	vd_devspec *d = add_dev(h, "rxe0", SHOAL_RDMA_LINK_ETH, "eth0", 0);
	add_gid(d, 0, SHOAL_RDMA_GID_ROCE_V2, "ll", "eth0");
	snprintf(a, sizeof a, "10.7.0.%d", octet);
	add_gid(d, 1, SHOAL_RDMA_GID_ROCE_V2, a, "eth0");
	pthread_mutex_unlock(&f->mu);
}

void vd_set_netif(vd_fabric *f, int host, const char *ifname, const char *addr)
{
	pthread_mutex_lock(&f->mu);
	snprintf(f->host[host].nif.ifname, sizeof f->host[host].nif.ifname, "%s", ifname);
	set_addr(f->host[host].nif.addr, addr);
	pthread_mutex_unlock(&f->mu);
}

void vd_set_cable(vd_fabric *f, int host, const char *dev, int cable)
{
	pthread_mutex_lock(&f->mu);
	vd_host *h = &f->host[host];
	for (size_t i = 0; i < h->n_dev; i++)
		if (!strcmp(h->dev[i].port.device, dev))
			h->dev[i].cable = cable;
	pthread_mutex_unlock(&f->mu);
}

void vd_inject(vd_fabric *f, int host, vd_fault fault)
{
	pthread_mutex_lock(&f->mu);
	f->host[host].faults[fault] = 1;
	pthread_mutex_unlock(&f->mu);
}

void vd_disconnect(vd_fabric *f, int host)
{
	pthread_mutex_lock(&f->mu);
	for (int i = 0; i < VD_MAX_QP; i++)
		if (f->qps[i] && f->qps[i]->c->h->idx == host)
			f->qps[i]->state = VD_ERR;
	pthread_mutex_unlock(&f->mu);
}

int vd_last_qp(vd_fabric *f, int host, vd_qp_view *out)
{
	pthread_mutex_lock(&f->mu);
	int have = f->host[host].have_last;
	*out = f->host[host].last;
	pthread_mutex_unlock(&f->mu);
	return have ? 0 : -1;
}

void vd_stats(vd_fabric *f, int host, vd_host_stats *out)
{
	pthread_mutex_lock(&f->mu);
	*out = f->host[host].st;
	pthread_mutex_unlock(&f->mu);
}

#define VD_STAT(name)                                                                              \
	uint64_t vd_##name(vd_fabric *f)                                                           \
	{                                                                                          \
		pthread_mutex_lock(&f->mu);                                                        \
		uint64_t v = f->name;                                                              \
		pthread_mutex_unlock(&f->mu);                                                      \
		return v;                                                                          \
	}
VD_STAT(overruns)
VD_STAT(sq_overruns)
VD_STAT(delivered)
VD_STAT(cq_overflows)

int vd_live_objects(vd_fabric *f)
{
	pthread_mutex_lock(&f->mu);
	int v = 0;
	for (int i = 0; i < VD_HOSTS; i++) {
		const vd_host_stats *s = &f->host[i].st;
		v += s->contexts + s->pds + s->mrs + s->cqs + s->qps;
	}
	pthread_mutex_unlock(&f->mu);
	return v;
}

/* ---- objects ---- */

/* Take an injected fault (under the lock): 1 if this call must fail. */
static int take_fault(vd_host *h, vd_fault k)
{
	int hit = h->faults[k];
	h->faults[k] = 0;
	return hit;
}

/* An injected failure of `call`, or the object counted in *live. */
static shoal_err faulted(vd_host *h, vd_fault k, int *live, const char *call, char *why,
                         size_t why_len)
{
	pthread_mutex_lock(&h->f->mu);
	int hit = take_fault(h, k);
	if (!hit)
		(*live)++;
	pthread_mutex_unlock(&h->f->mu);
	if (hit)
		return shoal_why(why, why_len, SHOAL_ERR_IO,
		                 "%s: Cannot allocate memory (injected)", call);
	return SHOAL_OK;
}

static void unlive(vd_fabric *f, int *live)
{
	pthread_mutex_lock(&f->mu);
	(*live)--;
	pthread_mutex_unlock(&f->mu);
}

static shoal_err d_netif(void *ctx, int fd, shoal_verbs_netif *out, char *why, size_t why_len)
{
	vd_host *h = ctx;
	(void)fd;
	pthread_mutex_lock(&h->f->mu);
	*out = h->nif;
	pthread_mutex_unlock(&h->f->mu);
	return SHOAL_OK;
}

static shoal_err d_devices(void *ctx, shoal_rdma_port_desc *ports, size_t cap, size_t *n, char *why,
                           size_t why_len)
{
	vd_host *h = ctx;
	shoal_err e = SHOAL_OK;
	*n = 0;
	pthread_mutex_lock(&h->f->mu);
	if (take_fault(h, VD_FAULT_DEVICES))
		e = shoal_why(why, why_len, SHOAL_ERR_IO,
		              "ibv_get_device_list: Function not implemented (injected)");
	else if (!h->n_dev)
		e = shoal_why(why, why_len, SHOAL_ERR_NOTFOUND, "ibv_get_device_list: no devices");
	for (size_t i = 0; !e && i < h->n_dev && *n < cap; i++)
		ports[(*n)++] = h->dev[i].port;
	pthread_mutex_unlock(&h->f->mu);
	return e;
}

static shoal_err d_open(void *ctx, const char *name, void **dev, char *why, size_t why_len)
{
	vd_host *h = ctx;
	int at = -1;
	pthread_mutex_lock(&h->f->mu);
	for (size_t i = 0; i < h->n_dev; i++)
		if (!strcmp(h->dev[i].port.device, name))
			at = (int)i;
	pthread_mutex_unlock(&h->f->mu);
	if (at < 0)
		return shoal_why(why, why_len, SHOAL_ERR_NOTFOUND, "no rdma device named %s", name);
	shoal_err e = faulted(h, VD_FAULT_OPEN, &h->st.contexts, "ibv_open_device", why, why_len);
	if (e)
		return e;
	vd_ctx *c = calloc(1, sizeof *c);
	c->h = h;
	c->dev = at;
	*dev = c;
	return SHOAL_OK;
}

static void d_close(void *dev)
{
	vd_ctx *c = dev;
	if (!c)
		return;
	unlive(c->h->f, &c->h->st.contexts);
	free(c);
}

static shoal_err d_alloc_pd(void *dev, void **out, char *why, size_t why_len)
{
	vd_ctx *c = dev;
	shoal_err e = faulted(c->h, VD_FAULT_PD, &c->h->st.pds, "ibv_alloc_pd", why, why_len);
	if (e)
		return e;
	vd_pd *pd = calloc(1, sizeof *pd);
	pd->c = c;
	*out = pd;
	return SHOAL_OK;
}

static void d_dealloc_pd(void *p)
{
	vd_pd *pd = p;
	unlive(pd->c->h->f, &pd->c->h->st.pds);
	free(pd);
}

static shoal_err d_reg_mr(void *p, void *addr, size_t len, void **out, char *why, size_t why_len)
{
	vd_pd *pd = p;
	shoal_err e = faulted(pd->c->h, VD_FAULT_MR, &pd->c->h->st.mrs, "ibv_reg_mr", why, why_len);
	if (e)
		return e;
	vd_mr *mr = calloc(1, sizeof *mr);
	*mr = (vd_mr){pd, addr, len};
	*out = mr;
	return SHOAL_OK;
}

static void d_dereg_mr(void *p)
{
	vd_mr *mr = p;
	unlive(mr->pd->c->h->f, &mr->pd->c->h->st.mrs);
	free(mr);
}

static shoal_err d_create_cq(void *dev, int depth, void **out, int *fd, char *why, size_t why_len)
{
	vd_ctx *c = dev;
	shoal_err e = faulted(c->h, VD_FAULT_CQ, &c->h->st.cqs, "ibv_create_cq", why, why_len);
	if (e)
		return e;
	vd_cq *cq = calloc(1, sizeof *cq);
	cq->c = c;
	cq->depth = depth;
	cq->e = calloc((size_t)depth, sizeof *cq->e);
	if (pipe(cq->pipe) == 0) {
		fcntl(cq->pipe[0], F_SETFL, O_NONBLOCK);
		fcntl(cq->pipe[1], F_SETFL, O_NONBLOCK);
	}
	*fd = cq->pipe[0];
	*out = cq;
	return SHOAL_OK;
}

static void d_destroy_cq(void *p)
{
	vd_cq *cq = p;
	unlive(cq->c->h->f, &cq->c->h->st.cqs);
	close(cq->pipe[0]);
	close(cq->pipe[1]);
	free(cq->e);
	free(cq);
}

/* ---- queue pairs ---- */

static shoal_err d_create_qp(void *p, void *c, uint32_t max_send, uint32_t max_recv,
                             uint32_t *max_inline, void **out, uint32_t *qpn, char *why,
                             size_t why_len)
{
	vd_pd *pd = p;
	vd_host *h = pd->c->h;
	vd_fabric *f = h->f;
	uint32_t dev_inline = h->dev[pd->c->dev].max_inline;
	if (*max_inline > dev_inline) /* as real devices do: EINVAL */
		return shoal_why(why, why_len, SHOAL_ERR_INVAL,
		                 "ibv_create_qp: Invalid argument (max_inline_data %u > %u)",
		                 *max_inline, dev_inline);
	if (!max_send || !max_recv || max_send > 4096 || max_recv > 4096)
		return shoal_why(why, why_len, SHOAL_ERR_INVAL,
		                 "ibv_create_qp: Invalid argument (%u send, %u recv)", max_send,
		                 max_recv);
	shoal_err e = faulted(h, VD_FAULT_QP, &h->st.qps, "ibv_create_qp", why, why_len);
	if (e)
		return e;
	vd_qp *qp = calloc(1, sizeof *qp);
	qp->c = pd->c;
	qp->pd = pd;
	qp->cq = c;
	qp->max_send = max_send;
	qp->max_recv = max_recv;
	qp->max_inline = *max_inline;
	qp->rq = calloc(max_recv, sizeof *qp->rq);
	pthread_mutex_lock(&f->mu);
	qp->qpn = f->next_qpn++;
	for (int i = 0; i < VD_MAX_QP; i++)
		if (!f->qps[i]) {
			f->qps[i] = qp;
			break;
		}
	pthread_mutex_unlock(&f->mu);
	*qpn = qp->qpn;
	*out = qp;
	return SHOAL_OK;
}

static void d_destroy_qp(void *p)
{
	vd_qp *qp = p;
	vd_fabric *f = qp->c->h->f;
	pthread_mutex_lock(&f->mu);
	for (int i = 0; i < VD_MAX_QP; i++)
		if (f->qps[i] == qp)
			f->qps[i] = NULL;
	/* its completions leave the CQ with it, as drivers clean them */
	vd_cq *cq = qp->cq;
	int k = 0;
	for (int i = 0; i < cq->count; i++) {
		vd_cqe e = cq->e[(cq->head + i) % cq->depth];
		if (e.owner != qp->qpn)
			cq->e[(cq->head + k++) % cq->depth] = e;
	}
	cq->count = k;
	qp->c->h->st.qps--;
	pthread_mutex_unlock(&f->mu);
	free(qp->rq);
	free(qp);
}

static shoal_err transition(vd_qp *qp, int from, int to, vd_fault k, const char *call, char *why,
                            size_t why_len)
{
	static const char *const names[] = {"RESET", "INIT", "RTR", "RTS", "ERR"};
	vd_fabric *f = qp->c->h->f;
	pthread_mutex_lock(&f->mu);
	int hit = take_fault(qp->c->h, k), state = qp->state;
	if (!hit && state == from)
		qp->state = to;
	pthread_mutex_unlock(&f->mu);
	if (hit)
		return shoal_why(why, why_len, SHOAL_ERR_IO, "%s: Invalid argument (injected)",
		                 call);
	if (state != from)
		return shoal_why(why, why_len, SHOAL_ERR_IO, "%s: QP is in %s, not %s", call,
		                 names[state], names[from]);
	return SHOAL_OK;
}

static shoal_err d_qp_init(void *p, const shoal_verbs_port *port, char *why, size_t why_len)
{
	vd_qp *qp = p;
	if (port->port != qp->c->h->dev[qp->c->dev].port.port)
		return shoal_why(why, why_len, SHOAL_ERR_IO, "ibv_modify_qp(INIT): no port %u",
		                 port->port);
	qp->port = port->port;
	return transition(qp, VD_RESET, VD_INIT, VD_FAULT_INIT, "ibv_modify_qp(INIT)", why,
	                  why_len);
}

static shoal_err d_qp_rtr(void *p, const shoal_verbs_port *port, const shoal_verbs_remote *r,
                          char *why, size_t why_len)
{
	vd_qp *qp = p;
	const shoal_rdma_port_desc *pd = &qp->c->h->dev[qp->c->dev].port;
	if (r->mtu < 256 || r->mtu > 4096)
		return shoal_why(why, why_len, SHOAL_ERR_IO, "ibv_modify_qp(RTR): path mtu %u",
		                 r->mtu);
	/* the source GID must be in the port's table (EINVAL otherwise) */
	const shoal_rdma_gid *g = NULL;
	for (size_t i = 0; i < pd->n_gid; i++)
		if (pd->gids[i].index == port->gid_index)
			g = &pd->gids[i];
	if (!g)
		return shoal_why(why, why_len, SHOAL_ERR_IO,
		                 "ibv_modify_qp(RTR): Invalid argument (sgid_index %d not in %s's "
		                 "table)",
		                 port->gid_index, pd->device);
	if (pd->link == SHOAL_RDMA_LINK_ETH && !port->hop_limit)
		return shoal_why(why, why_len, SHOAL_ERR_IO,
		                 "ibv_modify_qp(RTR): hop limit 0 on RoCE");
	qp->remote_qpn = r->qpn;
	qp->sgid_index = port->gid_index;
	memcpy(qp->sgid, g->gid, 16);
	memcpy(qp->dgid, r->gid, 16);
	return transition(qp, VD_INIT, VD_RTR, VD_FAULT_RTR, "ibv_modify_qp(RTR)", why, why_len);
}

static shoal_err d_qp_rts(void *p, const shoal_verbs_port *port, uint32_t psn, char *why,
                          size_t why_len)
{
	vd_qp *qp = p;
	shoal_err e =
	    transition(qp, VD_RTR, VD_RTS, VD_FAULT_RTS, "ibv_modify_qp(RTS)", why, why_len);
	if (e)
		return e;
	vd_host *h = qp->c->h;
	pthread_mutex_lock(&h->f->mu);
	vd_qp_view *v = &h->last;
	snprintf(v->device, sizeof v->device, "%s", h->dev[qp->c->dev].port.device);
	v->port = qp->port;
	v->sgid_index = qp->sgid_index;
	v->max_inline = qp->max_inline;
	v->hop_limit = port->hop_limit;
	v->traffic_class = port->traffic_class;
	v->sl = port->sl;
	v->rnr_retry = port->rnr_retry;
	h->have_last = 1;
	pthread_mutex_unlock(&h->f->mu);
	return SHOAL_OK;
}

/* ---- data path ---- */

static int in_mr(const vd_mr *mr, const void *addr, uint32_t len)
{
	const uint8_t *a = addr;
	return a >= mr->addr && len <= mr->len && (size_t)(a - mr->addr) <= mr->len - len;
}

/* Queue a completion (under the lock) and signal an armed CQ. A full CQ
 * is an overrun: said loudly, counted, and its QPs go to the error state
 * (a real CQ overrun is a fatal async event). */
static void push_wc(vd_cq *cq, vd_qp *sender, uint64_t sq_pos, uint64_t wr_id, int status,
                    int opcode, uint32_t len, uint32_t owner_qpn)
{
	vd_fabric *f = cq->c->h->f;
	if (cq->count == cq->depth) {
		fprintf(stderr, "verbs double: CQ overrun (depth %d) on host %d\n", cq->depth,
		        cq->c->h->idx);
		f->cq_overflows++;
		for (int i = 0; i < VD_MAX_QP; i++)
			if (f->qps[i] && f->qps[i]->cq == cq)
				f->qps[i]->state = VD_ERR;
		return;
	}
	vd_cqe *e = &cq->e[(cq->head + cq->count++) % cq->depth];
	e->wc =
	    (shoal_verbs_wc){.wr_id = wr_id, .status = status, .opcode = opcode, .byte_len = len};
	e->qp = sender;
	e->sq_pos = sq_pos;
	e->owner = owner_qpn;
	if (cq->count > (int)cq->c->h->st.cq_peak)
		cq->c->h->st.cq_peak = (uint32_t)cq->count;
	if (cq->armed) {
		cq->armed = 0;
		ssize_t k = write(cq->pipe[1], "e", 1);
		(void)k;
	}
}

static shoal_err d_post_recv(void *p, void *m, uint64_t wr_id, void *addr, uint32_t len, char *why,
                             size_t why_len)
{
	vd_qp *qp = p;
	vd_fabric *f = qp->c->h->f;
	if (!in_mr(m, addr, len))
		return shoal_why(why, why_len, SHOAL_ERR_INVAL, "ibv_post_recv: buffer outside MR");
	pthread_mutex_lock(&f->mu);
	shoal_err e = SHOAL_OK;
	if (take_fault(qp->c->h, VD_FAULT_POST_RECV))
		e = shoal_why(why, why_len, SHOAL_ERR_IO,
		              "ibv_post_recv: Cannot allocate memory (injected)");
	else if (qp->state == VD_RESET)
		e = shoal_why(why, why_len, SHOAL_ERR_IO, "ibv_post_recv: QP not ready");
	else if (qp->state == VD_ERR) /* flushed at once, as on hardware */
		push_wc(qp->cq, NULL, 0, wr_id, VD_WC_WR_FLUSH_ERR, SHOAL_VERBS_WC_RECV, 0,
		        qp->qpn);
	else if (qp->rq_count == qp->max_recv)
		e = shoal_why(why, why_len, SHOAL_ERR_NOMEM, "ibv_post_recv: receive queue full");
	else
		qp->rq[(qp->rq_head + qp->rq_count++) % qp->max_recv] = (vd_rwr){wr_id, addr, len};
	pthread_mutex_unlock(&f->mu);
	return e;
}

static vd_qp *find_qp(vd_fabric *f, uint32_t qpn)
{
	for (int i = 0; i < VD_MAX_QP; i++)
		if (f->qps[i] && f->qps[i]->qpn == qpn)
			return f->qps[i];
	return NULL;
}

/* Packets reach peer: a live QP on the same cable whose GID (RoCE) is the
 * one we address, of the same RoCE version. */
static int reachable(const vd_qp *qp, const vd_qp *peer)
{
	if (!peer || (peer->state != VD_RTR && peer->state != VD_RTS))
		return 0;
	const vd_devspec *a = &qp->c->h->dev[qp->c->dev], *b = &peer->c->h->dev[peer->c->dev];
	if (a->cable != b->cable)
		return 0;
	if (a->port.link == SHOAL_RDMA_LINK_IB)
		return 1;
	if (memcmp(qp->dgid, peer->sgid, 16) || memcmp(peer->dgid, qp->sgid, 16))
		return 0;
	int ta = -1, tb = -2;
	for (size_t i = 0; i < a->port.n_gid; i++)
		if (a->port.gids[i].index == qp->sgid_index)
			ta = (int)a->port.gids[i].type;
	for (size_t i = 0; i < b->port.n_gid; i++)
		if (b->port.gids[i].index == peer->sgid_index)
			tb = (int)b->port.gids[i].type;
	return ta == tb;
}

static shoal_err d_post_send(void *p, void *m, uint64_t wr_id, const void *addr, uint32_t len,
                             int flags, char *why, size_t why_len)
{
	vd_qp *qp = p;
	vd_host *h = qp->c->h;
	vd_fabric *f = h->f;
	int inl = (flags & SHOAL_VERBS_SEND_INLINE) != 0;
	if (inl && len > qp->max_inline) {
		fprintf(stderr, "verbs double: inline send of %u bytes, QP allows %u\n", len,
		        qp->max_inline);
		return shoal_why(why, why_len, SHOAL_ERR_INVAL,
		                 "ibv_post_send: inline send of %u bytes, the QP allows %u", len,
		                 qp->max_inline);
	}
	if (!inl && !in_mr(m, addr, len))
		return shoal_why(why, why_len, SHOAL_ERR_INVAL, "ibv_post_send: buffer outside MR");
	pthread_mutex_lock(&f->mu);
	shoal_err e = SHOAL_OK;
	if (take_fault(h, VD_FAULT_POST_SEND))
		e = shoal_why(why, why_len, SHOAL_ERR_IO,
		              "ibv_post_send: Cannot allocate memory (injected)");
	else if (qp->state == VD_ERR) { /* flushed at once, as on hardware */
		push_wc(qp->cq, qp, qp->sq_posted++, wr_id, VD_WC_WR_FLUSH_ERR, SHOAL_VERBS_WC_SEND,
		        0, qp->qpn);
		pthread_mutex_unlock(&f->mu);
		return SHOAL_OK;
	} else if (qp->state != VD_RTS)
		e = shoal_why(why, why_len, SHOAL_ERR_IO, "ibv_post_send: QP not in RTS");
	else if (qp->sq_posted - qp->sq_retired >= qp->max_send) {
		fprintf(stderr, "verbs double: send queue overrun on QP %u (depth %u)\n", qp->qpn,
		        qp->max_send);
		f->sq_overruns++;
		e = shoal_why(why, why_len, SHOAL_ERR_NOMEM, "ibv_post_send: send queue full");
	}
	if (e) {
		pthread_mutex_unlock(&f->mu);
		return e;
	}
	uint64_t pos = qp->sq_posted++;
	if (qp->sq_posted - qp->sq_retired > h->st.sq_peak)
		h->st.sq_peak = (uint32_t)(qp->sq_posted - qp->sq_retired);
	h->st.sends++;
	h->st.signaled += (flags & SHOAL_VERBS_SEND_SIGNALED) != 0;
	h->st.inlined += inl;
	vd_qp *peer = find_qp(f, qp->remote_qpn);
	int status = VD_WC_SUCCESS;
	if (take_fault(h, VD_FAULT_WC_ERROR) || !reachable(qp, peer)) {
		status = VD_WC_RETRY_EXC_ERR;
	} else if (!peer->rq_count) {
		fprintf(stderr, "verbs double: RNR: a send to QP %u found no receive posted\n",
		        peer->qpn);
		f->overruns++;
		status = VD_WC_RNR_RETRY_EXC_ERR;
	} else {
		vd_rwr r = peer->rq[peer->rq_head];
		peer->rq_head = (peer->rq_head + 1) % peer->max_recv;
		peer->rq_count--;
		if (len > r.len) {
			push_wc(peer->cq, NULL, 0, r.wr_id, VD_WC_LOC_LEN_ERR, SHOAL_VERBS_WC_RECV,
			        0, peer->qpn);
			status = VD_WC_LOC_LEN_ERR;
		} else {
			memcpy(r.addr, addr, len);
			if (len && take_fault(h, VD_FAULT_CORRUPT))
				r.addr[0] ^= 0xff;
			push_wc(peer->cq, NULL, 0, r.wr_id, VD_WC_SUCCESS, SHOAL_VERBS_WC_RECV, len,
			        peer->qpn);
			f->delivered++;
		}
	}
	if (status)
		qp->state = VD_ERR;
	if (status || (flags & SHOAL_VERBS_SEND_SIGNALED))
		push_wc(qp->cq, qp, pos, wr_id, status, SHOAL_VERBS_WC_SEND, 0, qp->qpn);
	pthread_mutex_unlock(&f->mu);
	return SHOAL_OK;
}

static int d_poll_cq(void *c, shoal_verbs_wc *wc, int n)
{
	vd_cq *cq = c;
	vd_fabric *f = cq->c->h->f;
	pthread_mutex_lock(&f->mu);
	if (take_fault(cq->c->h, VD_FAULT_POLL)) {
		pthread_mutex_unlock(&f->mu);
		return -1;
	}
	int k = 0;
	while (k < n && cq->count) {
		vd_cqe *e = &cq->e[cq->head];
		wc[k++] = e->wc;
		/* a polled send completion frees its SQ entry and all before */
		if (e->qp && e->sq_pos + 1 > e->qp->sq_retired)
			e->qp->sq_retired = e->sq_pos + 1;
		cq->head = (cq->head + 1) % cq->depth;
		cq->count--;
	}
	pthread_mutex_unlock(&f->mu);
	return k;
}

static shoal_err d_arm_cq(void *c, char *why, size_t why_len)
{
	vd_cq *cq = c;
	pthread_mutex_lock(&cq->c->h->f->mu);
	cq->armed = 1;
	pthread_mutex_unlock(&cq->c->h->f->mu);
	return SHOAL_OK;
}

static shoal_err d_take_event(void *c, char *why, size_t why_len)
{
	vd_cq *cq = c;
	char b[64];
	while (read(cq->pipe[0], b, sizeof b) > 0)
		;
	return SHOAL_OK;
}

static const char *d_wc_status_str(int s)
{
	switch (s) {
	case VD_WC_SUCCESS:
		return "success";
	case VD_WC_LOC_LEN_ERR:
		return "local length error";
	case VD_WC_LOC_PROT_ERR:
		return "local protection error";
	case VD_WC_WR_FLUSH_ERR:
		return "Work Request Flushed Error";
	case VD_WC_RETRY_EXC_ERR:
		return "transport retry counter exceeded";
	case VD_WC_RNR_RETRY_EXC_ERR:
		return "RNR retry counter exceeded";
	default:
		return "unknown";
	}
}

const shoal_verbs_ops vd_ops = {
    .name = "double",
    .netif = d_netif,
    .devices = d_devices,
    .open = d_open,
    .close = d_close,
    .alloc_pd = d_alloc_pd,
    .dealloc_pd = d_dealloc_pd,
    .reg_mr = d_reg_mr,
    .dereg_mr = d_dereg_mr,
    .create_cq = d_create_cq,
    .destroy_cq = d_destroy_cq,
    .create_qp = d_create_qp,
    .destroy_qp = d_destroy_qp,
    .qp_init = d_qp_init,
    .qp_rtr = d_qp_rtr,
    .qp_rts = d_qp_rts,
    .post_recv = d_post_recv,
    .post_send = d_post_send,
    .poll_cq = d_poll_cq,
    .arm_cq = d_arm_cq,
    .take_event = d_take_event,
    .wc_status_str = d_wc_status_str,
};

/*
 * tests/helpers/verbs_double.c: the in-process verbs double (see verbs_double.h).
 *
 * A post_send runs the whole transfer at once under the fabric's mutex:
 * it takes the head of the peer QP's receive queue, copies the bytes, and
 * queues a receive completion on the peer's CQ and a send completion on
 * ours; an armed CQ writes one byte to its pipe (the channel fd).
 */
#include "tests/helpers/verbs_double.h"

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* 64 QPs: a test makes a handful; 4096-entry queues are far above any ring. */
#define VD_MAX_QP    64
#define VD_MAX_QUEUE 4096

enum { VD_RESET, VD_INIT, VD_RTR, VD_RTS, VD_ERR };

typedef struct vd_dev {
	vd_fabric *f;
	int idx;
} vd_dev;

typedef struct vd_pd {
	vd_dev *d;
} vd_pd;

typedef struct vd_mr {
	vd_pd *pd;
	uint8_t *addr;
	size_t len;
} vd_mr;

typedef struct vd_cq {
	vd_dev *d;
	int depth;
	shoal_verbs_wc *wc; /* (depth) ring */
	int head, count;
	int armed;
	int pipe[2];
} vd_cq;

typedef struct vd_rwr {
	uint64_t wr_id;
	uint8_t *addr;
	uint32_t len;
} vd_rwr;

typedef struct vd_qp {
	vd_dev *d;
	vd_pd *pd;
	vd_cq *cq;
	uint32_t qpn, remote_qpn, max_send, max_recv;
	int state;
	vd_rwr *rq; /* (max_recv) ring */
	uint32_t rq_head, rq_count;
} vd_qp;

struct vd_fabric {
	pthread_mutex_t mu;
	vd_dev dev[2];
	int faults[2][VD_FAULT__COUNT];
	vd_qp *qps[VD_MAX_QP];
	uint32_t next_qpn;
	uint64_t overruns, delivered, cq_overflows;
	int live;
};

vd_fabric *vd_fabric_new(void)
{
	vd_fabric *f = calloc(1, sizeof *f);
	if (!f)
		return NULL;
	pthread_mutex_init(&f->mu, NULL);
	for (int i = 0; i < 2; i++)
		f->dev[i] = (vd_dev){f, i};
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

void *vd_device(vd_fabric *f, int i)
{
	return &f->dev[i];
}

void vd_inject(vd_fabric *f, int dev, vd_fault fault)
{
	pthread_mutex_lock(&f->mu);
	f->faults[dev][fault] = 1;
	pthread_mutex_unlock(&f->mu);
}

void vd_disconnect(vd_fabric *f, int dev)
{
	pthread_mutex_lock(&f->mu);
	for (int i = 0; i < VD_MAX_QP; i++)
		if (f->qps[i] && f->qps[i]->d->idx == dev)
			f->qps[i]->state = VD_ERR;
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
VD_STAT(delivered)
VD_STAT(cq_overflows)

int vd_live_objects(vd_fabric *f)
{
	pthread_mutex_lock(&f->mu);
	int v = f->live;
	pthread_mutex_unlock(&f->mu);
	return v;
}

/* Take an injected fault (under the lock): 1 if this call must fail. */
static int take_fault(vd_dev *d, vd_fault k)
{
	int hit = d->f->faults[d->idx][k];
	d->f->faults[d->idx][k] = 0;
	return hit;
}

static shoal_err faulted(vd_dev *d, vd_fault k, const char *call, char *why, size_t why_len)
{
	pthread_mutex_lock(&d->f->mu);
	int hit = take_fault(d, k);
	if (!hit)
		d->f->live++;
	pthread_mutex_unlock(&d->f->mu);
	if (hit)
		return shoal_why(why, why_len, SHOAL_ERR_IO,
		                 "%s: Cannot allocate memory (injected)", call);
	return SHOAL_OK;
}

static void unlive(vd_fabric *f)
{
	pthread_mutex_lock(&f->mu);
	f->live--;
	pthread_mutex_unlock(&f->mu);
}

/* ---- objects ---- */

static shoal_err d_open(void *ctx, const char *want, void **dev, shoal_verbs_port *port, char *why,
                        size_t why_len)
{
	vd_dev *d = ctx;
	char name[8];
	snprintf(name, sizeof name, "vd%d", d->idx);
	if (want && strcmp(want, name))
		return shoal_why(why, why_len, SHOAL_ERR_NOTFOUND, "no rdma device named %s", want);
	pthread_mutex_lock(&d->f->mu);
	int hit = take_fault(d, VD_FAULT_OPEN);
	if (!hit)
		d->f->live++;
	pthread_mutex_unlock(&d->f->mu);
	if (hit)
		return shoal_why(why, why_len, SHOAL_ERR_IO,
		                 "ibv_get_device_list: Function not implemented (injected)");
	memset(port, 0, sizeof *port);
	snprintf(port->name, sizeof port->name, "%s", name);
	port->port = 1;
	port->lid = (uint16_t)(d->idx + 1);
	port->mtu = 4096;
	port->gid[15] = (uint8_t)d->idx;
	*dev = d;
	return SHOAL_OK;
}

static void d_close(void *dev)
{
	if (dev)
		unlive(((vd_dev *)dev)->f);
}

static shoal_err d_alloc_pd(void *dev, void **out, char *why, size_t why_len)
{
	vd_dev *d = dev;
	shoal_err e = faulted(d, VD_FAULT_PD, "ibv_alloc_pd", why, why_len);
	if (e)
		return e;
	vd_pd *pd = calloc(1, sizeof *pd);
	pd->d = d;
	*out = pd;
	return SHOAL_OK;
}

static void d_dealloc_pd(void *p)
{
	vd_pd *pd = p;
	unlive(pd->d->f);
	free(pd);
}

static shoal_err d_reg_mr(void *p, void *addr, size_t len, void **out, char *why, size_t why_len)
{
	vd_pd *pd = p;
	shoal_err e = faulted(pd->d, VD_FAULT_MR, "ibv_reg_mr", why, why_len);
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
	unlive(mr->pd->d->f);
	free(mr);
}

static shoal_err d_create_cq(void *dev, int depth, void **out, int *fd, char *why, size_t why_len)
{
	vd_dev *d = dev;
	shoal_err e = faulted(d, VD_FAULT_CQ, "ibv_create_cq", why, why_len);
	if (e)
		return e;
	vd_cq *cq = calloc(1, sizeof *cq);
	cq->d = d;
	cq->depth = depth;
	cq->wc = calloc((size_t)depth, sizeof *cq->wc);
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
	unlive(cq->d->f);
	close(cq->pipe[0]);
	close(cq->pipe[1]);
	free(cq->wc);
	free(cq);
}

static shoal_err d_create_qp(void *p, void *c, uint32_t max_send, uint32_t max_recv, void **out,
                             uint32_t *qpn, char *why, size_t why_len)
{
	vd_pd *pd = p;
	vd_fabric *f = pd->d->f;
	shoal_err e = faulted(pd->d, VD_FAULT_QP, "ibv_create_qp", why, why_len);
	if (e)
		return e;
	vd_qp *qp = calloc(1, sizeof *qp);
	qp->d = pd->d;
	qp->pd = pd;
	qp->cq = c;
	qp->max_send = max_send;
	qp->max_recv = max_recv;
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
	vd_fabric *f = qp->d->f;
	pthread_mutex_lock(&f->mu);
	for (int i = 0; i < VD_MAX_QP; i++)
		if (f->qps[i] == qp)
			f->qps[i] = NULL;
	f->live--;
	pthread_mutex_unlock(&f->mu);
	free(qp->rq);
	free(qp);
}

static shoal_err transition(vd_qp *qp, int from, int to, vd_fault k, const char *call, char *why,
                            size_t why_len)
{
	static const char *const names[] = {"RESET", "INIT", "RTR", "RTS", "ERR"};
	vd_fabric *f = qp->d->f;
	pthread_mutex_lock(&f->mu);
	int hit = take_fault(qp->d, k), state = qp->state;
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

static shoal_err d_qp_init(void *qp, const shoal_verbs_port *port, char *why, size_t why_len)
{
	return transition(qp, VD_RESET, VD_INIT, VD_FAULT_INIT, "ibv_modify_qp(INIT)", why,
	                  why_len);
}

static shoal_err d_qp_rtr(void *p, const shoal_verbs_port *port, const shoal_verbs_remote *r,
                          char *why, size_t why_len)
{
	vd_qp *qp = p;
	if (r->mtu < 256 || r->mtu > 4096)
		return shoal_why(why, why_len, SHOAL_ERR_IO, "ibv_modify_qp(RTR): path mtu %u",
		                 r->mtu);
	qp->remote_qpn = r->qpn;
	return transition(qp, VD_INIT, VD_RTR, VD_FAULT_RTR, "ibv_modify_qp(RTR)", why, why_len);
}

static shoal_err d_qp_rts(void *qp, uint32_t psn, char *why, size_t why_len)
{
	return transition(qp, VD_RTR, VD_RTS, VD_FAULT_RTS, "ibv_modify_qp(RTS)", why, why_len);
}

/* ---- data path ---- */

static int in_mr(const vd_mr *mr, const void *addr, uint32_t len)
{
	const uint8_t *a = addr;
	return a >= mr->addr && len <= mr->len && (size_t)(a - mr->addr) <= mr->len - len;
}

/* Queue a completion (under the lock) and signal an armed CQ. */
static void push_wc(vd_cq *cq, uint64_t wr_id, int status, int opcode, uint32_t len)
{
	if (cq->count == cq->depth) {
		cq->d->f->cq_overflows++;
		return;
	}
	cq->wc[(cq->head + cq->count++) % cq->depth] =
	    (shoal_verbs_wc){.wr_id = wr_id, .status = status, .opcode = opcode, .byte_len = len};
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
	vd_fabric *f = qp->d->f;
	if (!in_mr(m, addr, len))
		return shoal_why(why, why_len, SHOAL_ERR_INVAL, "ibv_post_recv: buffer outside MR");
	pthread_mutex_lock(&f->mu);
	shoal_err e = SHOAL_OK;
	if (qp->state == VD_RESET || qp->state == VD_ERR)
		e = shoal_why(why, why_len, SHOAL_ERR_IO, "ibv_post_recv: QP not ready");
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

static shoal_err d_post_send(void *p, void *m, uint64_t wr_id, const void *addr, uint32_t len,
                             char *why, size_t why_len)
{
	vd_qp *qp = p;
	vd_fabric *f = qp->d->f;
	if (!in_mr(m, addr, len))
		return shoal_why(why, why_len, SHOAL_ERR_INVAL, "ibv_post_send: buffer outside MR");
	pthread_mutex_lock(&f->mu);
	if (qp->state != VD_RTS) {
		pthread_mutex_unlock(&f->mu);
		return shoal_why(why, why_len, SHOAL_ERR_IO, "ibv_post_send: QP not in RTS");
	}
	vd_qp *peer = find_qp(f, qp->remote_qpn);
	int status = VD_WC_SUCCESS;
	if (take_fault(qp->d, VD_FAULT_WC_ERROR) || !peer ||
	    (peer->state != VD_RTR && peer->state != VD_RTS)) {
		status = VD_WC_RETRY_EXC_ERR;
	} else if (!peer->rq_count) {
		f->overruns++;
		status = VD_WC_RNR_RETRY_EXC_ERR;
	} else {
		vd_rwr r = peer->rq[peer->rq_head];
		peer->rq_head = (peer->rq_head + 1) % peer->max_recv;
		peer->rq_count--;
		if (len > r.len) {
			push_wc(peer->cq, r.wr_id, VD_WC_LOC_LEN_ERR, SHOAL_VERBS_WC_RECV, 0);
			status = VD_WC_LOC_LEN_ERR;
		} else {
			memcpy(r.addr, addr, len);
			if (len && take_fault(qp->d, VD_FAULT_CORRUPT))
				r.addr[0] ^= 0xff;
			push_wc(peer->cq, r.wr_id, VD_WC_SUCCESS, SHOAL_VERBS_WC_RECV, len);
			f->delivered++;
		}
	}
	push_wc(qp->cq, wr_id, status, SHOAL_VERBS_WC_SEND, 0);
	pthread_mutex_unlock(&f->mu);
	return SHOAL_OK;
}

static int d_poll_cq(void *c, shoal_verbs_wc *wc, int n)
{
	vd_cq *cq = c;
	pthread_mutex_lock(&cq->d->f->mu);
	int k = 0;
	while (k < n && cq->count) {
		wc[k++] = cq->wc[cq->head];
		cq->head = (cq->head + 1) % cq->depth;
		cq->count--;
	}
	pthread_mutex_unlock(&cq->d->f->mu);
	return k;
}

static shoal_err d_arm_cq(void *c, char *why, size_t why_len)
{
	vd_cq *cq = c;
	pthread_mutex_lock(&cq->d->f->mu);
	cq->armed = 1;
	pthread_mutex_unlock(&cq->d->f->mu);
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

/*
 * net/verbs_ibv.c: the verbs interface (net/verbs.h) over libibverbs:
 * rdma-core on Linux, Apple's RDMA over Thunderbolt on macOS 26.2+.
 *
 * Part: net/. Built only when configure found libibverbs (SHOAL_RDMA).
 * One RC queue pair per link, send/recv only (no remote access flags),
 * a completion channel with a non-blocking fd per CQ. Every failure names
 * the ibv_* call and errno, as `shoal status` shows it.
 */
#include "config.h"

#include "net/verbs.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <infiniband/verbs.h>

/* RTS timeouts: 4.096 us * 2^14 = 67 ms per try, 7 tries: a dead peer is
 * seen within about half a second, a busy Thunderbolt hop never trips it.
 * RNR retry 7 means "forever", but credits make RNR impossible anyway. */
#define IBV_QP_TIMEOUT 14
#define IBV_QP_RETRY   7
/* 12: 0.64 ms between RNR retries (the IB table's code for 0.64 ms). */
#define IBV_MIN_RNR_TIMER 12

typedef struct ibv_dev {
	struct ibv_context *ctx;
} ibv_dev;

typedef struct ibv_cq_h {
	struct ibv_comp_channel *ch;
	struct ibv_cq *cq;
} ibv_cq_h;

static shoal_err errno_why(char *why, size_t why_len, const char *call)
{
	int e = errno ? errno : EIO;
	return shoal_why(why, why_len, e == ENOMEM ? SHOAL_ERR_NOMEM : SHOAL_ERR_IO, "%s: %s", call,
	                 strerror(e));
}

static uint32_t mtu_bytes(enum ibv_mtu m)
{
	return m >= IBV_MTU_256 && m <= IBV_MTU_4096 ? 128u << m : 1024u;
}

static enum ibv_mtu mtu_enum(uint32_t bytes)
{
	enum ibv_mtu m = IBV_MTU_256;
	while (m < IBV_MTU_4096 && (128u << (m + 1)) <= bytes)
		m = (enum ibv_mtu)(m + 1);
	return m;
}

static shoal_err v_open(void *ctx, const char *want, void **out, shoal_verbs_port *port, char *why,
                        size_t why_len)
{
	int n = 0;
	errno = 0;
	struct ibv_device **list = ibv_get_device_list(&n);
	if (!list)
		return errno_why(why, why_len, "ibv_get_device_list");
	struct ibv_context *c = NULL;
	shoal_err e = shoal_why(why, why_len, SHOAL_ERR_NOTFOUND, "%s%s",
	                        want ? "no rdma device named " : "ibv_get_device_list: no devices",
	                        want ? want : "");
	for (int i = 0; i < n && !c; i++) {
		const char *name = ibv_get_device_name(list[i]);
		if (want && strcmp(want, name))
			continue;
		c = ibv_open_device(list[i]);
		if (!c) {
			e = errno_why(why, why_len, "ibv_open_device");
			continue;
		}
		struct ibv_port_attr pa;
		if (ibv_query_port(c, 1, &pa)) {
			e = errno_why(why, why_len, "ibv_query_port");
		} else if (pa.state != IBV_PORT_ACTIVE) {
			e = shoal_why(why, why_len, SHOAL_ERR_IO, "%s port 1 is not active", name);
		} else {
			memset(port, 0, sizeof *port);
			snprintf(port->name, sizeof port->name, "%s", name);
			port->port = 1;
			port->lid = pa.lid;
			port->mtu = mtu_bytes(pa.active_mtu);
			union ibv_gid gid;
			if (!ibv_query_gid(c, 1, 0, &gid))
				memcpy(port->gid, gid.raw, 16);
			break;
		}
		ibv_close_device(c);
		c = NULL;
	}
	ibv_free_device_list(list);
	if (!c)
		return e;
	ibv_dev *d = calloc(1, sizeof *d);
	if (!d) {
		ibv_close_device(c);
		return SHOAL_ERR_NOMEM;
	}
	d->ctx = c;
	*out = d;
	return SHOAL_OK;
}

static void v_close(void *p)
{
	ibv_dev *d = p;
	if (!d)
		return;
	ibv_close_device(d->ctx);
	free(d);
}

static shoal_err v_alloc_pd(void *dev, void **pd, char *why, size_t why_len)
{
	*pd = ibv_alloc_pd(((ibv_dev *)dev)->ctx);
	return *pd ? SHOAL_OK : errno_why(why, why_len, "ibv_alloc_pd");
}

static void v_dealloc_pd(void *pd)
{
	ibv_dealloc_pd(pd);
}

static shoal_err v_reg_mr(void *pd, void *addr, size_t len, void **mr, char *why, size_t why_len)
{
	*mr = ibv_reg_mr(pd, addr, len, IBV_ACCESS_LOCAL_WRITE);
	return *mr ? SHOAL_OK : errno_why(why, why_len, "ibv_reg_mr");
}

static void v_dereg_mr(void *mr)
{
	ibv_dereg_mr(mr);
}

static shoal_err v_create_cq(void *dev, int depth, void **out, int *fd, char *why, size_t why_len)
{
	ibv_dev *d = dev;
	ibv_cq_h *h = calloc(1, sizeof *h);
	if (!h)
		return SHOAL_ERR_NOMEM;
	h->ch = ibv_create_comp_channel(d->ctx);
	if (!h->ch) {
		free(h);
		return errno_why(why, why_len, "ibv_create_comp_channel");
	}
	int fl = fcntl(h->ch->fd, F_GETFL);
	if (fl < 0 || fcntl(h->ch->fd, F_SETFL, fl | O_NONBLOCK)) {
		ibv_destroy_comp_channel(h->ch);
		free(h);
		return errno_why(why, why_len, "fcntl(completion channel)");
	}
	h->cq = ibv_create_cq(d->ctx, depth, NULL, h->ch, 0);
	if (!h->cq) {
		shoal_err e = errno_why(why, why_len, "ibv_create_cq");
		ibv_destroy_comp_channel(h->ch);
		free(h);
		return e;
	}
	*fd = h->ch->fd;
	*out = h;
	return SHOAL_OK;
}

static void v_destroy_cq(void *p)
{
	ibv_cq_h *h = p;
	ibv_destroy_cq(h->cq);
	ibv_destroy_comp_channel(h->ch);
	free(h);
}

static shoal_err v_create_qp(void *pd, void *cq, uint32_t max_send, uint32_t max_recv, void **qp,
                             uint32_t *qpn, char *why, size_t why_len)
{
	ibv_cq_h *h = cq;
	struct ibv_qp_init_attr a = {
	    .send_cq = h->cq,
	    .recv_cq = h->cq,
	    .qp_type = IBV_QPT_RC,
	    .cap = {.max_send_wr = max_send,
	            .max_recv_wr = max_recv,
	            .max_send_sge = 1,
	            .max_recv_sge = 1},
	};
	struct ibv_qp *q = ibv_create_qp(pd, &a);
	if (!q)
		return errno_why(why, why_len, "ibv_create_qp");
	*qp = q;
	*qpn = q->qp_num;
	return SHOAL_OK;
}

static void v_destroy_qp(void *qp)
{
	ibv_destroy_qp(qp);
}

static shoal_err modify(void *qp, struct ibv_qp_attr *a, int mask, const char *what, char *why,
                        size_t why_len)
{
	int rc = ibv_modify_qp(qp, a, mask);
	if (rc) {
		errno = rc;
		return errno_why(why, why_len, what);
	}
	return SHOAL_OK;
}

static shoal_err v_qp_init(void *qp, const shoal_verbs_port *port, char *why, size_t why_len)
{
	struct ibv_qp_attr a = {.qp_state = IBV_QPS_INIT,
	                        .pkey_index = 0,
	                        .port_num = port->port,
	                        .qp_access_flags = 0};
	return modify(qp, &a, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS,
	              "ibv_modify_qp(INIT)", why, why_len);
}

static shoal_err v_qp_rtr(void *qp, const shoal_verbs_port *port, const shoal_verbs_remote *r,
                          char *why, size_t why_len)
{
	static const uint8_t zero[16];
	struct ibv_qp_attr a = {
	    .qp_state = IBV_QPS_RTR,
	    .path_mtu = mtu_enum(r->mtu),
	    .dest_qp_num = r->qpn,
	    .rq_psn = r->psn,
	    .max_dest_rd_atomic = 1,
	    .min_rnr_timer = IBV_MIN_RNR_TIMER,
	    .ah_attr = {.dlid = r->lid, .sl = 0, .src_path_bits = 0, .port_num = port->port},
	};
	/* RoCE and Thunderbolt route by GID (no LID); InfiniBand by LID. */
	if (!r->lid || memcmp(r->gid, zero, 16)) {
		a.ah_attr.is_global = 1;
		memcpy(a.ah_attr.grh.dgid.raw, r->gid, 16);
		a.ah_attr.grh.sgid_index = (uint8_t)port->gid_index;
		a.ah_attr.grh.hop_limit = 1;
	}
	return modify(qp, &a,
	              IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN | IBV_QP_RQ_PSN |
	                  IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_MIN_RNR_TIMER,
	              "ibv_modify_qp(RTR)", why, why_len);
}

static shoal_err v_qp_rts(void *qp, uint32_t psn, char *why, size_t why_len)
{
	struct ibv_qp_attr a = {.qp_state = IBV_QPS_RTS,
	                        .timeout = IBV_QP_TIMEOUT,
	                        .retry_cnt = IBV_QP_RETRY,
	                        .rnr_retry = 7,
	                        .sq_psn = psn,
	                        .max_rd_atomic = 1};
	return modify(qp, &a,
	              IBV_QP_STATE | IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT | IBV_QP_RNR_RETRY |
	                  IBV_QP_SQ_PSN | IBV_QP_MAX_QP_RD_ATOMIC,
	              "ibv_modify_qp(RTS)", why, why_len);
}

static shoal_err v_post_recv(void *qp, void *mr, uint64_t wr_id, void *addr, uint32_t len,
                             char *why, size_t why_len)
{
	struct ibv_sge sge = {
	    .addr = (uintptr_t)addr, .length = len, .lkey = ((struct ibv_mr *)mr)->lkey};
	struct ibv_recv_wr wr = {.wr_id = wr_id, .sg_list = &sge, .num_sge = 1}, *bad;
	int rc = ibv_post_recv(qp, &wr, &bad);
	if (rc) {
		errno = rc;
		return errno_why(why, why_len, "ibv_post_recv");
	}
	return SHOAL_OK;
}

static shoal_err v_post_send(void *qp, void *mr, uint64_t wr_id, const void *addr, uint32_t len,
                             char *why, size_t why_len)
{
	struct ibv_sge sge = {
	    .addr = (uintptr_t)addr, .length = len, .lkey = ((struct ibv_mr *)mr)->lkey};
	struct ibv_send_wr wr = {.wr_id = wr_id,
	                         .sg_list = &sge,
	                         .num_sge = 1,
	                         .opcode = IBV_WR_SEND,
	                         .send_flags = IBV_SEND_SIGNALED},
	                   *bad;
	int rc = ibv_post_send(qp, &wr, &bad);
	if (rc) {
		errno = rc;
		return errno_why(why, why_len, "ibv_post_send");
	}
	return SHOAL_OK;
}

static int v_poll_cq(void *cq, shoal_verbs_wc *out, int n)
{
	struct ibv_wc wc[16];
	ibv_cq_h *h = cq;
	int got = ibv_poll_cq(h->cq, n < 16 ? n : 16, wc);
	for (int i = 0; i < got; i++) {
		out[i].wr_id = wc[i].wr_id;
		out[i].status = wc[i].status;
		out[i].opcode =
		    (wc[i].opcode & IBV_WC_RECV) ? SHOAL_VERBS_WC_RECV : SHOAL_VERBS_WC_SEND;
		out[i].byte_len = wc[i].byte_len;
	}
	return got;
}

static shoal_err v_arm_cq(void *cq, char *why, size_t why_len)
{
	int rc = ibv_req_notify_cq(((ibv_cq_h *)cq)->cq, 0);
	if (rc) {
		errno = rc;
		return errno_why(why, why_len, "ibv_req_notify_cq");
	}
	return SHOAL_OK;
}

static shoal_err v_take_event(void *cq, char *why, size_t why_len)
{
	ibv_cq_h *h = cq;
	struct ibv_cq *ev;
	void *ctx;
	if (ibv_get_cq_event(h->ch, &ev, &ctx)) {
		if (errno == EAGAIN)
			return SHOAL_OK; /* the fd was readable for an event already taken */
		return errno_why(why, why_len, "ibv_get_cq_event");
	}
	ibv_ack_cq_events(ev, 1);
	return SHOAL_OK;
}

static const char *v_wc_status_str(int status)
{
	return ibv_wc_status_str((enum ibv_wc_status)status);
}

static const shoal_verbs_ops shoal_verbs_ibv_ops = {
    .name = "ibverbs",
    .open = v_open,
    .close = v_close,
    .alloc_pd = v_alloc_pd,
    .dealloc_pd = v_dealloc_pd,
    .reg_mr = v_reg_mr,
    .dereg_mr = v_dereg_mr,
    .create_cq = v_create_cq,
    .destroy_cq = v_destroy_cq,
    .create_qp = v_create_qp,
    .destroy_qp = v_destroy_qp,
    .qp_init = v_qp_init,
    .qp_rtr = v_qp_rtr,
    .qp_rts = v_qp_rts,
    .post_recv = v_post_recv,
    .post_send = v_post_send,
    .poll_cq = v_poll_cq,
    .arm_cq = v_arm_cq,
    .take_event = v_take_event,
    .wc_status_str = v_wc_status_str,
};

const shoal_verbs_ops *shoal_verbs_ibv(void)
{
	return &shoal_verbs_ibv_ops;
}

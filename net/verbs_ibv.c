/*
 * net/verbs_ibv.c: the verbs interface (net/verbs.h) over libibverbs:
 * rdma-core on Linux, Apple's RDMA over Thunderbolt on macOS 26.2+.
 *
 * Part: net/. Built only when configure found libibverbs (SHOAL_RDMA).
 * RC queue pairs, send/recv only (no remote access flags), selective
 * signalling, inline sends as the QP grants, a completion channel with a
 * non-blocking fd per CQ. The GID table is read entry by entry
 * (ibv_query_gid, checked); each entry's type and netdev come from
 * ibv_query_gid_ex where the headers have it, else Linux sysfs
 * (/sys/class/infiniband/DEV/ports/P/gid_attrs/{types,ndevs}/IDX), else
 * they are unknown (macOS: the rdma_enX name gives the interface). Every
 * failure names the ibv_* call and errno, as `shoal status` shows it.
 */
#include "config.h"

#include "net/verbs.h"

#include <errno.h>
#include <fcntl.h>
#include <ifaddrs.h>
#include <net/if.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>

#include <infiniband/verbs.h>

#include "base/log.h"

/* RTS timeouts: 4.096 us * 2^14 = 67 ms per try, 7 tries: a dead peer is
 * seen within about half a second, a busy Thunderbolt hop never trips it.
 * RNR retries come from the transport (bounded: the credits make RNR
 * impossible, so one that persists is a bug to report, not to wait out). */
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
	return shoal_why(why, why_len,
	                 e == ENOMEM   ? SHOAL_ERR_NOMEM
	                 : e == EINVAL ? SHOAL_ERR_INVAL
	                               : SHOAL_ERR_IO,
	                 "%s: %s", call, strerror(e));
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

/* ---- the link's interface ---------------------------------------------- */

/* sa as 16 bytes: IPv6, or IPv4-mapped; -1 for other families. */
static int addr16(const struct sockaddr *sa, uint8_t out[16])
{
	if (sa && sa->sa_family == AF_INET) {
		memset(out, 0, 16);
		out[10] = out[11] = 0xff;
		memcpy(out + 12, &((const struct sockaddr_in *)sa)->sin_addr, 4);
		return 0;
	}
	if (sa && sa->sa_family == AF_INET6) {
		memcpy(out, &((const struct sockaddr_in6 *)sa)->sin6_addr, 16);
		return 0;
	}
	return -1;
}

static shoal_err v_netif(void *ctx, int fd, shoal_verbs_netif *out, char *why, size_t why_len)
{
	struct sockaddr_storage ss;
	socklen_t sl = sizeof ss;
	(void)ctx;
	memset(out, 0, sizeof *out);
	errno = 0;
	if (getsockname(fd, (struct sockaddr *)&ss, &sl))
		return errno_why(why, why_len, "getsockname");
	if (addr16((const struct sockaddr *)&ss, out->addr))
		return shoal_why(why, why_len, SHOAL_ERR_INVAL, "the socket is not IP");
	struct ifaddrs *all;
	if (getifaddrs(&all))
		return errno_why(why, why_len, "getifaddrs");
	for (struct ifaddrs *i = all; i; i = i->ifa_next) {
		uint8_t a[16];
		if (!addr16(i->ifa_addr, a) && !memcmp(a, out->addr, 16)) {
			snprintf(out->ifname, sizeof out->ifname, "%s", i->ifa_name);
			break;
		}
	}
	freeifaddrs(all);
	if (!out->ifname[0])
		return shoal_why(why, why_len, SHOAL_ERR_NOTFOUND,
		                 "no interface has the link's local address");
	return SHOAL_OK;
}

/* ---- devices, ports and GID tables ------------------------------------- */

#if !HAVE_DECL_IBV_QUERY_GID_EX
/* One line of a sysfs file into buf (newline cut); -1 when unreadable. */
static int sysfs_line(const char *path, char *buf, size_t cap)
{
	FILE *f = fopen(path, "r");
	if (!f)
		return -1;
	int ok = fgets(buf, (int)cap, f) != NULL;
	fclose(f);
	if (!ok)
		return -1;
	buf[strcspn(buf, "\n")] = '\0';
	return 0;
}
#endif

/* The type and netdev of GID entry g (index set, gid read) of dev/port. */
static void gid_attrs(struct ibv_context *c, const char *dev, uint8_t port, int ib,
                      shoal_rdma_gid *g)
{
	if (ib) {
		g->type = SHOAL_RDMA_GID_IB;
		return;
	}
	/* unknown: a link-local GID is taken as v1 (never chosen on its own),
	 * any other as v2 (chosen only when it carries the link's address) */
	g->type = g->gid[0] == 0xfe && (g->gid[1] & 0xc0) == 0x80 ? SHOAL_RDMA_GID_ROCE_V1
	                                                          : SHOAL_RDMA_GID_ROCE_V2;
#if HAVE_DECL_IBV_QUERY_GID_EX
	struct ibv_gid_entry e;
	(void)dev;
	if (ibv_query_gid_ex(c, port, (uint32_t)g->index, &e, 0))
		return;
	g->type = e.gid_type == IBV_GID_TYPE_ROCE_V2 ? SHOAL_RDMA_GID_ROCE_V2
	          : e.gid_type == IBV_GID_TYPE_IB    ? SHOAL_RDMA_GID_IB
	                                             : SHOAL_RDMA_GID_ROCE_V1;
	char nm[IF_NAMESIZE];
	if (e.ndev_ifindex && if_indextoname(e.ndev_ifindex, nm))
		snprintf(g->netdev, sizeof g->netdev, "%s", nm);
#else
	char path[256], line[64];
	(void)c;
	snprintf(path, sizeof path, "/sys/class/infiniband/%s/ports/%u/gid_attrs/types/%d", dev,
	         (unsigned)port, g->index);
	if (!sysfs_line(path, line, sizeof line))
		g->type = strstr(line, "v2") ? SHOAL_RDMA_GID_ROCE_V2 : SHOAL_RDMA_GID_ROCE_V1;
	snprintf(path, sizeof path, "/sys/class/infiniband/%s/ports/%u/gid_attrs/ndevs/%d", dev,
	         (unsigned)port, g->index);
	if (!sysfs_line(path, line, sizeof line))
		snprintf(g->netdev, sizeof g->netdev, "%s", line);
#endif
}

/* Port `port` of open device c into *p. -1 (and why) when unreadable. */
static int describe_port(struct ibv_context *c, const char *name, uint8_t port,
                         shoal_rdma_port_desc *p, char *why, size_t why_len)
{
	struct ibv_port_attr pa;
	memset(p, 0, sizeof *p);
	if (ibv_query_port(c, port, &pa)) {
		errno_why(why, why_len, "ibv_query_port");
		return -1;
	}
	snprintf(p->device, sizeof p->device, "%s", name);
	p->port = port;
	p->active = pa.state == IBV_PORT_ACTIVE;
	int ib = pa.link_layer == IBV_LINK_LAYER_INFINIBAND;
	p->link = ib ? SHOAL_RDMA_LINK_IB : SHOAL_RDMA_LINK_ETH;
	p->lid = pa.lid;
	p->mtu = mtu_bytes(pa.active_mtu);
	for (int i = 0; i < pa.gid_tbl_len && p->n_gid < SHOAL_RDMA_MAX_GIDS; i++) {
		static const uint8_t zero[16];
		union ibv_gid gid;
		if (ibv_query_gid(c, port, i, &gid) || !memcmp(gid.raw, zero, 16))
			continue; /* an empty entry */
		shoal_rdma_gid *g = &p->gids[p->n_gid++];
		g->index = i;
		memcpy(g->gid, gid.raw, 16);
		gid_attrs(c, name, port, ib, g);
#ifdef __linux__
		/* the default GID (index 0) belongs to the port's own netdev */
		if (i == 0)
			snprintf(p->netdev, sizeof p->netdev, "%s", g->netdev);
#endif
	}
	return 0;
}

/* ibv_get_device_list gave NULL: ENOSYS is a kernel without RDMA (no
 * device to find, not a failure of the call), said in plain words. */
static shoal_err list_why(char *why, size_t why_len)
{
	if (errno == ENOSYS)
		return shoal_why(why, why_len, SHOAL_ERR_NOTFOUND,
		                 "this machine has none; its kernel offers no RDMA");
	return errno_why(why, why_len, "ibv_get_device_list");
}

static shoal_err v_devices(void *ctx, shoal_rdma_port_desc *ports, size_t cap, size_t *n, char *why,
                           size_t why_len)
{
	int nd = 0;
	char last[SHOAL_WHY_LEN] = "";
	(void)ctx;
	*n = 0;
	errno = 0;
	struct ibv_device **list = ibv_get_device_list(&nd);
	if (!list)
		return list_why(why, why_len);
	for (int i = 0; i < nd && *n < cap; i++) {
		const char *name = ibv_get_device_name(list[i]);
		struct ibv_context *c = ibv_open_device(list[i]);
		struct ibv_device_attr da;
		if (!c) {
			errno_why(last, sizeof last, "ibv_open_device");
			continue;
		}
		if (ibv_query_device(c, &da)) {
			errno_why(last, sizeof last, "ibv_query_device");
			da.phys_port_cnt = 0;
		}
		for (uint8_t p = 1; p <= da.phys_port_cnt && *n < cap; p++)
			if (!describe_port(c, name, p, &ports[*n], last, sizeof last))
				(*n)++;
		ibv_close_device(c);
	}
	ibv_free_device_list(list);
	if (!*n)
		return shoal_why(why, why_len, SHOAL_ERR_NOTFOUND, "%s",
		                 nd ? last : "this machine has none");
	return SHOAL_OK;
}

static shoal_err v_open(void *ctx, const char *want, void **out, char *why, size_t why_len)
{
	int n = 0;
	(void)ctx;
	errno = 0;
	struct ibv_device **list = ibv_get_device_list(&n);
	if (!list)
		return list_why(why, why_len);
	struct ibv_context *c = NULL;
	shoal_err e = shoal_why(why, why_len, SHOAL_ERR_NOTFOUND, "no rdma device named %s", want);
	for (int i = 0; i < n && !c; i++)
		if (!strcmp(want, ibv_get_device_name(list[i])) && !(c = ibv_open_device(list[i])))
			e = errno_why(why, why_len, "ibv_open_device");
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

static shoal_err v_create_qp(void *pd, void *cq, uint32_t max_send, uint32_t max_recv,
                             uint32_t *max_inline, void **qp, uint32_t *qpn, char *why,
                             size_t why_len)
{
	ibv_cq_h *h = cq;
	struct ibv_qp_init_attr a = {
	    .send_cq = h->cq,
	    .recv_cq = h->cq,
	    .qp_type = IBV_QPT_RC,
	    .sq_sig_all = 0, /* selective signalling: the transport asks per send */
	    .cap = {.max_send_wr = max_send,
	            .max_recv_wr = max_recv,
	            .max_send_sge = 1,
	            .max_recv_sge = 1,
	            .max_inline_data = *max_inline},
	};
	errno = 0;
	struct ibv_qp *q = ibv_create_qp(pd, &a);
	if (!q)
		return errno_why(why, why_len, "ibv_create_qp");
	*max_inline = a.cap.max_inline_data; /* what the device granted */
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
	    .ah_attr = {.dlid = r->lid, .sl = port->sl, .src_path_bits = 0, .port_num = port->port},
	};
	/* RoCE and Thunderbolt route by GID (no LID); InfiniBand by LID. */
	if (!r->lid || memcmp(r->gid, zero, 16)) {
		a.ah_attr.is_global = 1;
		memcpy(a.ah_attr.grh.dgid.raw, r->gid, 16);
		a.ah_attr.grh.sgid_index = (uint8_t)port->gid_index;
		a.ah_attr.grh.hop_limit = port->hop_limit;
		a.ah_attr.grh.traffic_class = port->traffic_class;
	}
	return modify(qp, &a,
	              IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN | IBV_QP_RQ_PSN |
	                  IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_MIN_RNR_TIMER,
	              "ibv_modify_qp(RTR)", why, why_len);
}

static shoal_err v_qp_rts(void *qp, const shoal_verbs_port *port, uint32_t psn, char *why,
                          size_t why_len)
{
	struct ibv_qp_attr a = {.qp_state = IBV_QPS_RTS,
	                        .timeout = IBV_QP_TIMEOUT,
	                        .retry_cnt = IBV_QP_RETRY,
	                        .rnr_retry = port->rnr_retry < 7 ? port->rnr_retry : 6,
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
                             int flags, char *why, size_t why_len)
{
	struct ibv_sge sge = {
	    .addr = (uintptr_t)addr, .length = len, .lkey = ((struct ibv_mr *)mr)->lkey};
	struct ibv_send_wr wr = {.wr_id = wr_id,
	                         .sg_list = &sge,
	                         .num_sge = 1,
	                         .opcode = IBV_WR_SEND,
	                         .send_flags =
	                             ((flags & SHOAL_VERBS_SEND_SIGNALED) ? IBV_SEND_SIGNALED : 0) |
	                             ((flags & SHOAL_VERBS_SEND_INLINE) ? IBV_SEND_INLINE : 0)},
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

static const shoal_verbs_ops verbs_ibv_ops = {
    .name = "ibverbs",
    .netif = v_netif,
    .devices = v_devices,
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
	return &verbs_ibv_ops;
}

/*
 * tests/helpers/verbs_double.h: an in-process double of the verbs interface
 * (net/verbs.h): a fabric of hosts (each a verbs_ctx) whose devices have
 * the shapes of real machines, whose RC queue pairs move bytes between
 * registered buffers in memory, and whose completions go through a pipe
 * that stands in for the completion channel.
 *
 * Hosts 0..3 start with one InfiniBand-like device "vd<h>" on interface
 * "vdnet<h>" (the link's interface too). Layouts replace it: the macOS one
 * (rdma_en2, rdma_en3: one device per Thunderbolt port, index 0 of each
 * GID table another interface's), the mlx5 one (index 0 link-local RoCE
 * v1, v1/v2 pairs for an IPv4 address, a VLAN's and an IPv6 one; a second
 * port without cable) and a device without inline support.
 *
 * It checks what real hardware would punish, and says so on stderr: QP
 * state order (RESET -> INIT -> RTR -> RTS), buffers inside their MR, an
 * inline send longer than the QP allows, receive-length overflow, a send
 * that finds no posted receive (an RNR overrun), a send queue posted past
 * its depth (entries come back only through polled signaled completions)
 * and a CQ past its depth (its QPs go to the error state). Each is
 * counted; the tests assert the counts stay 0. Packets cross only between
 * ports on the same cable whose GIDs match (RoCE), as on a real fabric.
 * Faults can be injected per host, once each, at every step. Thread-safe
 * (one mutex).
 */
#ifndef SHOAL_TESTS_VERBS_DOUBLE_H
#define SHOAL_TESTS_VERBS_DOUBLE_H

#include <stdint.h>

#include "net/verbs.h"

typedef struct vd_fabric vd_fabric;

#define VD_HOSTS 4

typedef enum vd_fault {
	VD_FAULT_DEVICES,   /* devices: "ibv_get_device_list: Function not implemented" */
	VD_FAULT_OPEN,      /* open: "ibv_open_device: ..." */
	VD_FAULT_PD,        /* alloc_pd fails */
	VD_FAULT_MR,        /* reg_mr fails */
	VD_FAULT_CQ,        /* create_cq fails */
	VD_FAULT_QP,        /* create_qp fails */
	VD_FAULT_INIT,      /* qp_init fails */
	VD_FAULT_RTR,       /* qp_rtr fails */
	VD_FAULT_RTS,       /* qp_rts fails */
	VD_FAULT_POST_RECV, /* post_recv fails */
	VD_FAULT_POST_SEND, /* post_send fails */
	VD_FAULT_POLL,      /* poll_cq returns -1 */
	VD_FAULT_WC_ERROR,  /* the next send completes with "transport retry counter exceeded" */
	VD_FAULT_CORRUPT,   /* the next message sent arrives with its first byte flipped */
	VD_FAULT__COUNT
} vd_fault;

/* Status codes of the double's completions (the values of ibv_wc_status). */
enum {
	VD_WC_SUCCESS = 0,
	VD_WC_LOC_LEN_ERR = 1,
	VD_WC_LOC_PROT_ERR = 4,
	VD_WC_WR_FLUSH_ERR = 5,
	VD_WC_RETRY_EXC_ERR = 12,
	VD_WC_RNR_RETRY_EXC_ERR = 13,
};

extern const shoal_verbs_ops vd_ops;

vd_fabric *vd_fabric_new(void);
void vd_fabric_free(vd_fabric *f);                      /* after every object is destroyed */
void *vd_device(vd_fabric *f, int host);                /* the verbs_ctx of host 0..VD_HOSTS-1 */
void vd_inject(vd_fabric *f, int host, vd_fault fault); /* fails the next such call once */
/* Every QP of host goes to the error state: sends to it fail with
 * RETRY_EXC_ERR at the sender, as a pulled cable would. */
void vd_disconnect(vd_fabric *f, int host);

/* Layouts (replace the host's devices). octet: the host's last address
 * byte. macOS: rdma_en2 on en2 10.0.2.o (v2 GID at index 1), rdma_en3 on
 * en3 10.0.3.o (index 3); index 0 of both is a link-local GID of en0; no
 * port netdevs; 128 inline bytes. mlx5: mlx5_0 on ens1f0: 0 fe80 v1, 1
 * fe80 v2, 2 v1 and 3 v2 of 192.168.5.o, 4 v1 and 5 v2 of 10.100.0.o on
 * ens1f0.100, 6 v2 of fd00::o; mlx5_1 on ens1f1, port down; 256 inline
 * bytes. noinline: rxe0 on eth0, v2 GID of 10.7.0.o at index 1, no inline.
 * The link's interface stays to be set (vd_set_netif). */
void vd_layout_mac(vd_fabric *f, int host, int octet);
void vd_layout_mlx5(vd_fabric *f, int host, int octet);
void vd_layout_noinline(vd_fabric *f, int host, int octet);
/* The interface and address (dotted IPv4 or IPv6 text) of the host's next
 * links. */
void vd_set_netif(vd_fabric *f, int host, const char *ifname, const char *addr);
/* Device dev of host is on cable `cable` (all start on cable 0). */
void vd_set_cable(vd_fabric *f, int host, const char *dev, int cable);

/* What the last QP that reached RTS on host was given. */
typedef struct vd_qp_view {
	char device[64];
	int port, sgid_index;
	uint32_t max_inline;
	uint8_t hop_limit, traffic_class, sl, rnr_retry;
} vd_qp_view;
int vd_last_qp(vd_fabric *f, int host, vd_qp_view *out); /* -1: none yet */

/* Objects alive on a host and its sends. */
typedef struct vd_host_stats {
	int contexts, pds, mrs, cqs, qps;
	uint64_t sends, signaled, inlined;
	uint32_t sq_peak, cq_peak; /* most entries ever in use in one SQ / CQ */
} vd_host_stats;
void vd_stats(vd_fabric *f, int host, vd_host_stats *out);

uint64_t vd_overruns(vd_fabric *f);     /* sends that found no posted receive */
uint64_t vd_sq_overruns(vd_fabric *f);  /* sends posted past the SQ's depth */
uint64_t vd_delivered(vd_fabric *f);    /* messages moved */
uint64_t vd_cq_overflows(vd_fabric *f); /* completions beyond a CQ's depth */
int vd_live_objects(vd_fabric *f);      /* PDs+MRs+CQs+QPs+open devices not yet freed */

#endif

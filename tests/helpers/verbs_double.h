/*
 * tests/helpers/verbs_double.h: an in-process double of the verbs interface
 * (net/verbs.h): a fabric of two devices, "vd0" and "vd1", whose RC queue
 * pairs move bytes between registered buffers in memory and deliver
 * completions through a pipe that stands in for the completion channel.
 *
 * It checks what real hardware would punish: QP state order (RESET ->
 * INIT -> RTR -> RTS), buffers inside their MR, receive-length overflow,
 * and above all a send that finds no posted receive (an RNR overrun),
 * which it counts (vd_overruns) and fails with an error completion. Faults
 * can be injected per device, once each. Thread-safe (one mutex).
 */
#ifndef SHOAL_TESTS_VERBS_DOUBLE_H
#define SHOAL_TESTS_VERBS_DOUBLE_H

#include <stdint.h>

#include "net/verbs.h"

typedef struct vd_fabric vd_fabric;

typedef enum vd_fault {
	VD_FAULT_OPEN,     /* open: "vd: no such device" */
	VD_FAULT_PD,       /* alloc_pd fails */
	VD_FAULT_MR,       /* reg_mr fails */
	VD_FAULT_CQ,       /* create_cq fails */
	VD_FAULT_QP,       /* create_qp fails */
	VD_FAULT_INIT,     /* qp_init fails */
	VD_FAULT_RTR,      /* qp_rtr fails */
	VD_FAULT_RTS,      /* qp_rts fails */
	VD_FAULT_WC_ERROR, /* the next send completes with "transport retry counter exceeded" */
	VD_FAULT_CORRUPT,  /* the next message sent arrives with its first byte flipped */
	VD_FAULT__COUNT
} vd_fault;

/* Status codes of the double's completions (the values of ibv_wc_status). */
enum {
	VD_WC_SUCCESS = 0,
	VD_WC_LOC_LEN_ERR = 1,
	VD_WC_LOC_PROT_ERR = 4,
	VD_WC_RETRY_EXC_ERR = 12,
	VD_WC_RNR_RETRY_EXC_ERR = 13,
};

extern const shoal_verbs_ops vd_ops;

vd_fabric *vd_fabric_new(void);
void vd_fabric_free(vd_fabric *f);                     /* after every object is destroyed */
void *vd_device(vd_fabric *f, int i);                  /* verbs_ctx of device i (0 or 1) */
void vd_inject(vd_fabric *f, int dev, vd_fault fault); /* fails the next such call once */
/* Every QP of device dev goes to the error state: sends to it fail with
 * RETRY_EXC_ERR at the sender, as a pulled cable would. */
void vd_disconnect(vd_fabric *f, int dev);

uint64_t vd_overruns(vd_fabric *f);     /* sends that found no posted receive */
uint64_t vd_delivered(vd_fabric *f);    /* messages moved */
uint64_t vd_cq_overflows(vd_fabric *f); /* completions beyond a CQ's depth */
int vd_live_objects(vd_fabric *f);      /* PDs+MRs+CQs+QPs+open devices not yet freed */

#endif

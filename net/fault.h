/*
 * net/fault.h: the fault-injection test hook of the links (tests only).
 *
 * Part: net/. Built in only with ./configure --enable-test-hooks (the
 * default is off: a release binary cannot be told to damage its own
 * traffic; ./bootstrap, the developers' and CI's entry point, turns it
 * on). Without it shoal_fault_next always says SHOAL_FAULT_NONE.
 *
 * The environment variable SHOAL_TEST_FAULT holds rules, comma-separated:
 *
 *   LINK:FAULT[:OPT=VALUE]...
 *
 *   LINK   tcp   frames of the data links' TCP transport (net/xfer_tcp.c)
 *          rdma  frames of the data links' RDMA transport (net/xfer_rdma.c),
 *                the link's own (data, probe): not its CREDIT frames
 *          ctl   ZeroMQ control messages a node or client sends (net/ctl.c)
 *          swim  gossip datagrams only (net/swim.c; they also pass ctl)
 *   FAULT  drop      the frame is not sent (the sender thinks it was);
 *                    rdma: not posted, its send buffer, credit and the
 *                    credits it carried stay with the sender (the next
 *                    frame carries them), so only the link's seq shows it
 *          delay     sent ms later (rdma: the sleep comes before a credit
 *                    or a buffer is taken)
 *          truncate  tcp: a prefix is sent, then the stream ends (SHUT_WR);
 *                    rdma: a prefix of 1..len-1 bytes is posted as the
 *                    message (the receiver refuses it: short, or shorter
 *                    than its frame_len);
 *                    ctl, swim: a prefix is sent as the whole message
 *          corrupt   one bit flipped, after the checksums (on the wire;
 *                    rdma: in the send buffer, after sealing)
 *   OPT    n=COUNT   faults in all (default 1; 0: no limit)
 *          skip=K    eligible frames passed untouched first (default 0)
 *          p=FRAC    each eligible frame faulted with this probability
 *                    (default 1), drawn from seed: runs repeat exactly
 *          seed=S    (default 1) also picks the byte and bit
 *          ms=MS     delay (default 200)
 *          kind=K    tcp, rdma: only frames of this kind ("hidden", "token"...);
 *                    ctl: "reply" (ROUTER: answers to clients, such as
 *                    RUN_TOKEN), "send" (DEALER: gossip, requests to
 *                    peers) or "client" (shoal run/status requests)
 *
 * SHOAL_TEST_FAULT=@FILE reads the rules (comma- or line-separated) from
 * FILE instead, again whenever it changes, with fresh counters: a test
 * arms faults on a running node by writing the file.
 *
 * Each fault is logged (part "fault", warning level), so a test can check
 * that it happened. Counters are per process and per rule, under a lock.
 */
#ifndef SHOAL_NET_FAULT_H
#define SHOAL_NET_FAULT_H

#include <stddef.h>
#include <stdint.h>

typedef enum shoal_fault_kind {
	SHOAL_FAULT_NONE = 0,
	SHOAL_FAULT_DROP,
	SHOAL_FAULT_DELAY,
	SHOAL_FAULT_TRUNCATE,
	SHOAL_FAULT_CORRUPT,
} shoal_fault_kind;

typedef struct shoal_fault {
	shoal_fault_kind kind;
	uint32_t delay_ms;
	uint64_t pick; /* seeded: which byte to cut at or to flip (mod the length) */
} shoal_fault;

/* What to do with the next frame on LINK ("tcp", "rdma", "ctl", "swim"); what is
 * its kind name or NULL. Fills *f; SHOAL_FAULT_NONE for most frames. */
shoal_fault_kind shoal_fault_next(const char *link, const char *what, shoal_fault *f);

/* The hook on a message that goes out whole (ctl, swim): 1 when it is
 * dropped; else send *buf[*len], which a truncate shortened and a corrupt
 * points at a damaged copy in *copy (the caller frees it; else NULL). A
 * delay sleeps here, in the sender's thread. */
int shoal_fault_message(const char *link, const char *what, const void **buf, size_t *len,
                        void **copy);

/* Flip one bit of buf[len] (len > 0) chosen by pick. */
void shoal_fault_flip(uint8_t *buf, size_t len, uint64_t pick);
/* Sleep for ms (the delay fault). */
void shoal_fault_sleep(uint32_t ms);

#endif

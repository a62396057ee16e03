/*
 * net/linkprobe.h: measured links to the other peers, per endpoint pair.
 *
 * Part: net/. No I/O: the node gives the list of targets (peer, our
 * endpoint index, its endpoint index, the ZeroMQ endpoint that goes that
 * way), asks for the next probe to send, and feeds back the acks. Small
 * probes give the round-trip time (smoothed like TCP's SRTT, gain 1/8);
 * every SHOAL_LINKPROBE_BW_EVERY-th probe carries SHOAL_LINKPROBE_BW_BYTES
 * of padding, and (its RTT - the small RTT) gives a bandwidth estimate,
 * smoothed with gain 1/4. What is published (the record's links) is the
 * quarter-octave bucket of each (scheduler/view.h, with hysteresis), so the
 * figures every peer plans on change only when the link does. Iteration is
 * in target order, no randomness.
 */
#ifndef SHOAL_NET_LINKPROBE_H
#define SHOAL_NET_LINKPROBE_H

#include <stddef.h>
#include <stdint.h>

#include "base/err.h"
#include "net/ctlmsg.h"
#include "net/record.h"

/* 64 KiB: large enough that on a 1 Gbit/s link its transfer (~0.5 ms)
 * stands out of the ~0.1 ms RTT noise of ZeroMQ; small enough that probing
 * 8 pairs every second costs < 1% of such a link. */
#define SHOAL_LINKPROBE_BW_BYTES (64u << 10)
#define SHOAL_LINKPROBE_BW_EVERY 4
/* A probe unanswered after this long is lost (it only costs a sample). */
#define SHOAL_LINKPROBE_TIMEOUT_US 2000000u

typedef struct shoal_linkprobe shoal_linkprobe;

typedef struct shoal_linkprobe_target {
	shoal_peer_id peer;
	uint8_t lep, rep;                       /* our / its data endpoint index */
	char endpoint[2 * SHOAL_RECORD_EP_MAX]; /* ZeroMQ endpoint that takes that path */
} shoal_linkprobe_target;

shoal_err shoal_linkprobe_new(shoal_linkprobe **out);
void shoal_linkprobe_free(shoal_linkprobe *lp);

/* Replace the target list (copied). Measurements of targets that stay
 * (same peer, lep, rep) are kept; the others are forgotten. */
shoal_err shoal_linkprobe_set_targets(shoal_linkprobe *lp, const shoal_linkprobe_target *t,
                                      size_t n);

/* The next probe to send (round robin): fills *msg and *endpoint (borrowed
 * until the next call) and returns 1, or returns 0 with no targets. */
int shoal_linkprobe_next(shoal_linkprobe *lp, uint64_t now_us, shoal_ctlmsg *msg,
                         const char **endpoint);

/* An ack arrived: match it by seq; unknown or late seqs are ignored. */
void shoal_linkprobe_ack(shoal_linkprobe *lp, const shoal_ctlmsg *ack, uint64_t now_us);

/* Write up to cap measured links (those with an RTT sample) to out, as
 * bucket values. */
size_t shoal_linkprobe_links(const shoal_linkprobe *lp, shoal_record_link *out, size_t cap);

#endif

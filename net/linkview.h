/*
 * net/linkview.h: the links the peers measured (their gossiped records'
 * links, net/linkprobe.h) as the scheduler's view takes them.
 *
 * Part: net/ (pure: no I/O, no clock). Every peer plans from the records
 * it holds, so the combination depends only on the records, not on their
 * order or on who computes it:
 *  1. a peer's figure for another is its fastest measured endpoint pair to
 *     it (the least RTT; that pair's bandwidth), in the bucket values the
 *     record carries (quarter-octave, scheduler/view.h; re-bucketed here
 *     without history, which leaves bucket values as they are);
 *  2. a pair's latency is the larger of the two directions' RTT / 2 (a
 *     gather or a hop waits one way), its bandwidth the smaller measured
 *     one, else the view's default bandwidth;
 *  3. a pair neither of whose records measured the other keeps the view's
 *     default link (--link-us);
 *  4. with SHOAL_LINKVIEW_DATA, a pair's latency is the larger of the two
 *     directions' data-plane RTT / 2 where either record has one (its
 *     dlinks: what a hop or a round pays on the wire, the figure the
 *     control plane's RTT overstates by its queue and node thread), and
 *     its bandwidth the smaller data-plane one where either measured one;
 *     else both as 1-3 say (SHOAL_LINKVIEW_CTL) or the view's default.
 */
#ifndef SHOAL_NET_LINKVIEW_H
#define SHOAL_NET_LINKVIEW_H

#include <stddef.h>

#include "base/err.h"
#include "net/record.h"
#include "scheduler/view.h"

/* Which figures shoal_linkview_apply takes: the control plane's measured
 * links (1-3 above), the data plane's round trips (4), or both. */
#define SHOAL_LINKVIEW_CTL  1u
#define SHOAL_LINKVIEW_DATA 2u

/* Set v's link for every pair of the n records (each pair once) that one of
 * them measured (of the figures `what` names); pairs of records not in the
 * view are set too (the view keeps links of absent peers). Returns how many
 * links were set in *n_set (may be NULL). Errors: those of
 * shoal_view_set_link. */
shoal_err shoal_linkview_apply(shoal_view *v, const shoal_record *const *recs, size_t n,
                               unsigned what, size_t *n_set, char *why, size_t why_len);

#endif

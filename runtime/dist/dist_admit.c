/*
 * runtime/dist/dist_admit.c: a stage's admission of OPENs when its sessions
 * are all in use (issue 35). Owners whose OPEN was refused for want of a
 * session are remembered in arrival order; when a session frees, it goes
 * to the first of them, not to whichever OPEN happens to come next:
 *
 *   0. Only the first stage (cfg.has_embd) keeps the list: OPENs reach
 *      it in the owners' order, and the stages after it take what it
 *      admitted (lists of their own could each refuse what the other let
 *      through).
 *   1. A waiter is an owner (one entry per owner: its own queue keeps its
 *      runs in order), with the time of its first refusal and whether the
 *      refused OPEN was a replay (first_step > 0: a run paused by a plan
 *      change, holding tokens its client already has).
 *   2. Replays rank before new requests; within each, the earlier first
 *      refusal ranks first.
 *   3. An OPEN is admitted when the free sessions outnumber the live
 *      waiters that rank before it; its owner's entry is then dropped (its
 *      next refused run queues again at the back: round robin by owner).
 *   4. An owner tries again every SHOAL_SERVE_BUSY_RETRY_MS (200 ms); an
 *      entry not refreshed for DIST__WAIT_TTL_MS (5 retries) has given up
 *      (its run ended, or its owner died) and no longer holds a session.
 *
 * Part: runtime/ (distributed inference), the stage's (dist_stage.c).
 */
#include "config.h"

#include <string.h>

#include "runtime/dist/dist_impl.h"

static bool ranks_before(const dist__waiter *a, bool resumed, uint64_t first_ns)
{
	if (a->resumed != resumed)
		return a->resumed;
	return a->first_ns < first_ns;
}

static int waiter_find(const dist__admit *q, const uint8_t owner[SHOAL_PEER_ID_LEN])
{
	for (uint32_t i = 0; i < q->n; i++)
		if (!memcmp(q->w[i].owner, owner, SHOAL_PEER_ID_LEN))
			return (int)i;
	return -1;
}

static void waiter_drop(dist__admit *q, uint32_t i)
{
	q->w[i] = q->w[--q->n];
}

uint32_t dist__admit_ahead(dist__admit *q, const uint8_t owner[SHOAL_PEER_ID_LEN], bool resumed,
                           uint64_t now_ns)
{
	for (uint32_t i = 0; i < q->n;)
		if (now_ns - q->w[i].last_ns > (uint64_t)DIST__WAIT_TTL_MS * 1000000u)
			waiter_drop(q, i);
		else
			i++;
	int me = waiter_find(q, owner);
	uint64_t first = me >= 0 ? q->w[me].first_ns : now_ns;
	bool res = resumed || (me >= 0 && q->w[me].resumed);
	uint32_t ahead = 0;
	for (uint32_t i = 0; i < q->n; i++)
		if ((int)i != me && ranks_before(&q->w[i], res, first))
			ahead++;
	return ahead;
}

void dist__admit_refused(dist__admit *q, const uint8_t owner[SHOAL_PEER_ID_LEN], bool resumed,
                         uint64_t now_ns)
{
	int me = waiter_find(q, owner);
	if (me < 0) {
		if (q->n == DIST__MAX_WAITERS)
			return; /* more owners than that wait: the later ones race as before */
		me = (int)q->n++;
		memcpy(q->w[me].owner, owner, SHOAL_PEER_ID_LEN);
		q->w[me].first_ns = now_ns;
		q->w[me].resumed = false;
	}
	q->w[me].resumed |= resumed;
	q->w[me].last_ns = now_ns;
}

void dist__admit_taken(dist__admit *q, const uint8_t owner[SHOAL_PEER_ID_LEN])
{
	int me = waiter_find(q, owner);
	if (me >= 0)
		waiter_drop(q, (uint32_t)me);
}

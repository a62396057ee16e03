/*
 * tests/unit/test_dist_admit.c: a stage's admission order when its
 * sessions are all in use (runtime/dist/dist_admit.c, issue 35): owners
 * refused first are admitted first, replays before new requests, and an
 * owner that stopped retrying no longer holds a session.
 */
#include "config.h"

#include <string.h>

#include "runtime/dist/dist_impl.h"
#include "tests/unit/test.h"

#define MS 1000000ull

static void owner(uint8_t id[SHOAL_PEER_ID_LEN], uint8_t n)
{
	memset(id, 0, SHOAL_PEER_ID_LEN);
	id[0] = n;
}

static void test_fifo(void)
{
	dist__admit q;
	memset(&q, 0, sizeof q);
	uint8_t a[SHOAL_PEER_ID_LEN], b[SHOAL_PEER_ID_LEN], c[SHOAL_PEER_ID_LEN];
	owner(a, 1);
	owner(b, 2);
	owner(c, 3);
	ASSERT_EQ(dist__admit_ahead(&q, a, false, 10 * MS), 0); /* nobody waits */
	dist__admit_refused(&q, a, false, 10 * MS);
	dist__admit_refused(&q, b, false, 20 * MS);
	/* c, new, has both before it; b has a; a has nobody */
	ASSERT_EQ(dist__admit_ahead(&q, c, false, 30 * MS), 2);
	ASSERT_EQ(dist__admit_ahead(&q, b, false, 30 * MS), 1);
	ASSERT_EQ(dist__admit_ahead(&q, a, false, 30 * MS), 0);
	/* a retry keeps the first place */
	dist__admit_refused(&q, a, false, 40 * MS);
	ASSERT_EQ(dist__admit_ahead(&q, b, false, 40 * MS), 1);
	dist__admit_taken(&q, a);
	ASSERT_EQ(dist__admit_ahead(&q, b, false, 50 * MS), 0);
	ASSERT_EQ(dist__admit_ahead(&q, c, false, 50 * MS), 1);
}

static void test_replay_first(void)
{
	dist__admit q;
	memset(&q, 0, sizeof q);
	uint8_t a[SHOAL_PEER_ID_LEN], b[SHOAL_PEER_ID_LEN], c[SHOAL_PEER_ID_LEN];
	owner(a, 1);
	owner(b, 2);
	owner(c, 3);
	dist__admit_refused(&q, a, false, 10 * MS);
	dist__admit_refused(&q, b, true, 20 * MS); /* a paused run's replay */
	ASSERT_EQ(dist__admit_ahead(&q, b, true, 30 * MS), 0);
	ASSERT_EQ(dist__admit_ahead(&q, a, false, 30 * MS), 1);
	/* a replay that comes later still goes after b, before a */
	ASSERT_EQ(dist__admit_ahead(&q, c, true, 30 * MS), 1);
}

static void test_gave_up(void)
{
	dist__admit q;
	memset(&q, 0, sizeof q);
	uint8_t a[SHOAL_PEER_ID_LEN], b[SHOAL_PEER_ID_LEN];
	owner(a, 1);
	owner(b, 2);
	dist__admit_refused(&q, a, true, 10 * MS);
	ASSERT_EQ(dist__admit_ahead(&q, b, false, 10 * MS + DIST__WAIT_TTL_MS * MS), 1);
	/* a did not retry within the TTL: it no longer holds b back */
	ASSERT_EQ(dist__admit_ahead(&q, b, false, 11 * MS + DIST__WAIT_TTL_MS * MS), 0);
	ASSERT_EQ(q.n, 0);
}

static void test_full(void)
{
	dist__admit q;
	memset(&q, 0, sizeof q);
	uint8_t o[SHOAL_PEER_ID_LEN];
	for (uint32_t i = 0; i < DIST__MAX_WAITERS + 4; i++) {
		owner(o, (uint8_t)(i + 1));
		dist__admit_refused(&q, o, false, (10 + i) * MS);
	}
	ASSERT_EQ(q.n, DIST__MAX_WAITERS); /* the table never overflows */
}

TEST_MAIN(TEST_CASE(test_fifo), TEST_CASE(test_replay_first), TEST_CASE(test_gave_up),
          TEST_CASE(test_full))

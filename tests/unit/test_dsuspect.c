/*
 * tests/unit/test_dsuspect.c: which peers the plan leaves out for their
 * data plane (runtime/node/serve_probe.c, serve__dsuspects): a peer that
 * two other candidates name in their records' data suspects, never on one
 * observer's word, and not on the word of a peer that names every other
 * (a peer whose own data plane fails finds every other failing).
 */
#include "runtime/node/serve_impl.h"

#include <stdlib.h>
#include <string.h>

#include "tests/unit/test.h"

#define N 5

static shoal_swim_member m[N];
static const shoal_swim_member *all[N];

/* N peers, ids 1..N, named p0..p4, nobody suspected. */
static void reset(void)
{
	memset(m, 0, sizeof m);
	for (int i = 0; i < N; i++) {
		m[i].id.b[0] = (uint8_t)(i + 1);
		m[i].record.id = m[i].id;
		snprintf(m[i].record.name, sizeof m[i].record.name, "p%d", i);
		m[i].state = SHOAL_SWIM_STATE_ALIVE;
		all[i] = &m[i];
	}
}

/* observer o names peer x in its record */
static void names(int o, int x)
{
	shoal_record *r = &m[o].record;
	r->dsuspect[r->n_dsuspect++] = m[x].id;
}

static size_t left_out(bool *out)
{
	return serve__dsuspects(all, N, out);
}

static void test_one_observer_removes_nobody(void)
{
	bool out[N];
	reset();
	names(0, 3);
	ASSERT_EQ(left_out(out), 0);
	ASSERT_FALSE(out[3]);
	/* the same observer naming it twice is still one */
	names(0, 3);
	ASSERT_EQ(left_out(out), 0);
}

static void test_two_observers_remove_it(void)
{
	bool out[N];
	char who[64];
	reset();
	names(0, 3);
	names(2, 3);
	ASSERT_EQ(left_out(out), 1);
	ASSERT_TRUE(out[3]);
	ASSERT_EQ(serve__dsuspect_votes(all, N, 3, NULL, who, sizeof who), 2);
	ASSERT_STR_EQ(who, "p0, p2");
	/* naming oneself does not count */
	reset();
	names(3, 3);
	names(0, 3);
	ASSERT_EQ(left_out(out), 0);
}

/* The faulty peer names everyone (its own probes fail): one voice each;
 * the others name it: it alone goes. */
static void test_faulty_observer_alone(void)
{
	bool out[N];
	reset();
	for (int x = 0; x < N; x++)
		if (x != 4)
			names(4, x);
	names(0, 4);
	names(1, 4);
	ASSERT_EQ(left_out(out), 1);
	ASSERT_TRUE(out[4]);
}

/* Two faulty peers name everyone, each other included, before anyone
 * names them: each healthy peer has two voices against it, but both come
 * from peers that name every other, and count for nothing. Once the
 * healthy peers name the two, those two go, and only they. */
static void test_two_faulty_observers_mute(void)
{
	bool out[N];
	reset();
	for (int f = 3; f < N; f++)
		for (int x = 0; x < N; x++)
			if (x != f)
				names(f, x);
	ASSERT_EQ(left_out(out), 0);
	names(0, 3);
	names(1, 3);
	names(0, 4);
	names(1, 4);
	ASSERT_EQ(left_out(out), 2);
	ASSERT_FALSE(out[0]);
	ASSERT_FALSE(out[1]);
	ASSERT_FALSE(out[2]);
	ASSERT_TRUE(out[3]);
	ASSERT_TRUE(out[4]);
}

/* A healthy peer that finds most others failing (not all) still counts. */
static void test_most_but_not_all(void)
{
	bool out[N];
	reset();
	for (int x = 2; x < N; x++) {
		names(0, x);
		names(1, x);
	}
	ASSERT_EQ(left_out(out), 3);
	ASSERT_FALSE(out[0]);
	ASSERT_FALSE(out[1]);
	ASSERT_TRUE(out[2] && out[3] && out[4]);
}

/* The same records in another order give the same peers. */
static void test_order_free(void)
{
	bool out[N], out2[N];
	reset();
	names(0, 3);
	names(2, 3);
	names(3, 1);
	left_out(out);
	const shoal_swim_member *rev[N];
	for (int i = 0; i < N; i++)
		rev[i] = all[N - 1 - i];
	serve__dsuspects(rev, N, out2);
	for (int i = 0; i < N; i++)
		ASSERT_EQ(out[i], out2[N - 1 - i]);
}

TEST_MAIN(TEST_CASE(test_one_observer_removes_nobody), TEST_CASE(test_two_observers_remove_it),
          TEST_CASE(test_faulty_observer_alone), TEST_CASE(test_two_faulty_observers_mute),
          TEST_CASE(test_most_but_not_all), TEST_CASE(test_order_free))

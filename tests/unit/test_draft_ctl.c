/*
 * tests/unit/test_draft_ctl.c: one stream's speculation control
 * (runtime/engine/draft_ctl.h) with a drafter that guesses at every step,
 * as a draft model does, and steps timed by the test: drafts that are all
 * kept but make each token slower than a step without drafts must pause
 * drafting (never slower than without, issue 38), at once when they are
 * far slower, and drafts that make tokens faster must not. Before the control took steps without
 * drafts to time against, such a drafter was judged by its acceptance alone and never paused.
 *
 * Part: tests of runtime/ (engine).
 */
#include <stdio.h>
#include <string.h>

#include "runtime/engine/draft_ctl.h"
#include "tests/unit/test.h"

/* A drafter that always proposes k ids (7s). */
static size_t always_propose(void *self, const int32_t *hist, size_t n, int32_t *out, size_t k)
{
	(void)self;
	(void)hist;
	(void)n;
	for (size_t i = 0; i < k; i++)
		out[i] = 7;
	return k;
}

static int freed;
static void always_free(void *self)
{
	(void)self;
	freed++;
}

static const shoal_drafter_ops always_ops = {
    .name = "always", .propose = always_propose, .free = always_free};

typedef struct {
	uint32_t steps, drafted_steps, plain_steps, pauses, first_pause;
} run_stats;

/* n steps, every draft kept; a step costs base_ns plus row_ns per
 * drafted row. */
static run_stats run(uint32_t n, uint64_t base_ns, uint64_t row_ns)
{
	static const int32_t prompt[4] = {1, 2, 3, 4};
	shoal_draft_ctl sp;
	run_stats st = {0};
	if (shoal_draft_ctl_init(&sp, (shoal_drafter){&always_ops, NULL}, 4, prompt, 4, 4096))
		return st;
	uint64_t t = 1000000;
	for (uint32_t i = 0; i < n; i++) {
		uint32_t nd = shoal_draft_ctl_plan(&sp, 8, t);
		t += base_ns + row_ns * nd;
		for (uint32_t j = 0; j <= nd; j++)
			shoal_draft_ctl_token(&sp, 7);
		st.steps++;
		if (nd)
			st.drafted_steps++;
		else
			st.plain_steps++;
		if (shoal_draft_ctl_done(&sp, nd, t)) {
			if (!st.pauses)
				st.first_pause = i;
			st.pauses++;
		}
	}
	shoal_draft_ctl_fini(&sp);
	return st;
}

/* Drafts all kept, but a step of k + 1 rows costs 1 + 2k units: ~1.6 units
 * a token against 1 without drafts. */
static void test_slow_drafts_pause(void)
{
	freed = 0;
	run_stats st = run(200, 1000, 2000);
	printf("slow: %u steps, %u with drafts, %u without, %u pauses (first at %u)\n", st.steps,
	       st.drafted_steps, st.plain_steps, st.pauses, st.first_pause);
	ASSERT_EQ(st.steps, 200);
	ASSERT_GT(st.pauses, 0);
	/* 4 steps to time against, then 3 with drafts: far slower, judged at once */
	ASSERT_LT(st.first_pause, 4 + 3 + 1);
	/* paused most of the time: a pause lasts 32 steps and more */
	ASSERT_GT(st.plain_steps, st.drafted_steps);
	ASSERT_EQ(freed, 1);
}

/* Drafts all kept, a little slower than without: a step of 5 rows costs
 * 6.2 units, 1.24 a token. Judged when the window of 12 steps ends. */
static void test_mild_drafts_window(void)
{
	run_stats st = run(200, 1000, 1300);
	printf("mild: %u steps, %u with drafts, %u without, %u pauses (first at %u)\n", st.steps,
	       st.drafted_steps, st.plain_steps, st.pauses, st.first_pause);
	ASSERT_GT(st.pauses, 0);
	ASSERT_EQ(st.first_pause, 4 + 12 - 1);
}

/* Drafts all kept and cheap: a step of k + 1 rows costs 1 + k/10 units. */
static void test_fast_drafts_go_on(void)
{
	run_stats st = run(200, 1000, 100);
	printf("fast: %u steps, %u with drafts, %u without, %u pauses\n", st.steps,
	       st.drafted_steps, st.plain_steps, st.pauses);
	ASSERT_EQ(st.pauses, 0);
	/* the few steps without drafts that give the time to compare with */
	ASSERT_GT(st.plain_steps, 0);
	ASSERT_LE(st.plain_steps, 4);
}

TEST_MAIN(TEST_CASE(test_slow_drafts_pause), TEST_CASE(test_mild_drafts_window),
          TEST_CASE(test_fast_drafts_go_on))

/*
 * tests/unit/test.h: the typed assertions every C test program uses.
 *
 * A failed assertion prints file:line and the values, counts a failure and
 * returns from the current test function; TEST_MAIN runs the listed tests
 * and exits 0 (all passed), 1 (a failure) or 77 (SKIP, with the reason
 * printed by TEST_SKIP). Each program prints "N passed, N failed" last.
 */
#ifndef SHOAL_TESTS_TEST_H
#define SHOAL_TESTS_TEST_H

#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int test_failures_;
static int test_skipped_;
static const char *test_skip_reason_;

#define TEST_FAIL_(...)                                                                            \
	do {                                                                                       \
		fprintf(stderr, "%s:%d: ", __FILE__, __LINE__);                                    \
		fprintf(stderr, __VA_ARGS__);                                                      \
		fprintf(stderr, "\n");                                                             \
		test_failures_++;                                                                  \
		return;                                                                            \
	} while (0)

#define ASSERT_TRUE(c)                                                                             \
	do {                                                                                       \
		if (!(c))                                                                          \
			TEST_FAIL_("ASSERT_TRUE(%s) failed", #c);                                  \
	} while (0)
#define ASSERT_FALSE(c) ASSERT_TRUE(!(c))

#define ASSERT_INT_OP_(a, op, b)                                                                   \
	do {                                                                                       \
		long long a_ = (long long)(a), b_ = (long long)(b);                                \
		if (!(a_ op b_))                                                                   \
			TEST_FAIL_("%s %s %s failed: %lld vs %lld", #a, #op, #b, a_, b_);          \
	} while (0)
#define ASSERT_EQ(a, b) ASSERT_INT_OP_(a, ==, b)
#define ASSERT_NE(a, b) ASSERT_INT_OP_(a, !=, b)
#define ASSERT_LT(a, b) ASSERT_INT_OP_(a, <, b)
#define ASSERT_LE(a, b) ASSERT_INT_OP_(a, <=, b)
#define ASSERT_GT(a, b) ASSERT_INT_OP_(a, >, b)
#define ASSERT_GE(a, b) ASSERT_INT_OP_(a, >=, b)

#define ASSERT_U64_EQ(a, b)                                                                        \
	do {                                                                                       \
		unsigned long long a_ = (a), b_ = (b);                                             \
		if (a_ != b_)                                                                      \
			TEST_FAIL_("%s == %s failed: %llu vs %llu", #a, #b, a_, b_);               \
	} while (0)

#define ASSERT_NEAR(a, b, tol)                                                                     \
	do {                                                                                       \
		double a_ = (double)(a), b_ = (double)(b), t_ = (double)(tol);                     \
		if (!(fabs(a_ - b_) <= t_))                                                        \
			TEST_FAIL_("|%s - %s| <= %g failed: %.9g vs %.9g", #a, #b, t_, a_, b_);    \
	} while (0)

#define ASSERT_STR_EQ(a, b)                                                                        \
	do {                                                                                       \
		const char *a_ = (a), *b_ = (b);                                                   \
		if (!a_ || !b_ || strcmp(a_, b_))                                                  \
			TEST_FAIL_("%s == %s failed: \"%s\" vs \"%s\"", #a, #b,                    \
			           a_ ? a_ : "(null)", b_ ? b_ : "(null)");                        \
	} while (0)

#define ASSERT_MEM_EQ(a, b, n)                                                                     \
	do {                                                                                       \
		if (memcmp((a), (b), (n)))                                                         \
			TEST_FAIL_("memcmp(%s, %s, %s) != 0", #a, #b, #n);                         \
	} while (0)

/* Mark the whole program as skipped (exit 77) with a reason. */
#define TEST_SKIP(reason)                                                                          \
	do {                                                                                       \
		test_skipped_ = 1;                                                                 \
		test_skip_reason_ = (reason);                                                      \
		return;                                                                            \
	} while (0)

typedef void (*test_fn_)(void);
typedef struct {
	const char *name;
	test_fn_ fn;
} test_case_;

#define TEST_CASE(f)                                                                               \
	{                                                                                          \
#f, f                                                                              \
	}

static inline int test_run_(const test_case_ *cases, size_t n)
{
	int passed = 0, failed = 0;
	for (size_t i = 0; i < n; i++) {
		int before = test_failures_;
		test_skipped_ = 0;
		cases[i].fn();
		if (test_skipped_) {
			printf("SKIP %s: %s\n", cases[i].name,
			       test_skip_reason_ ? test_skip_reason_ : "");
			continue;
		}
		if (test_failures_ > before) {
			printf("FAIL %s\n", cases[i].name);
			failed++;
		} else {
			printf("ok   %s\n", cases[i].name);
			passed++;
		}
	}
	printf("%d passed, %d failed\n", passed, failed);
	if (failed)
		return 1;
	return passed ? 0 : 77;
}

#define TEST_MAIN(...)                                                                             \
	int main(void)                                                                             \
	{                                                                                          \
		static const test_case_ cases_[] = {__VA_ARGS__};                                  \
		return test_run_(cases_, sizeof cases_ / sizeof cases_[0]);                        \
	}

/* The directory of the test data (tests/data), from $SHOAL_DATA. */
static inline const char *test_data_dir(void)
{
	const char *d = getenv("SHOAL_DATA");
	return d ? d : "tests/data";
}

#endif

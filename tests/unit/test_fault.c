/*
 * tests/unit/test_fault.c: the fault-injection test hook (net/fault.h):
 * rules read from SHOAL_TEST_FAULT=@FILE and re-read when it changes,
 * their n, skip, kind and p (seeded: the same seed, the same frames), a
 * malformed rule arming nothing, and what each fault does to a message.
 * Skipped in a build without --enable-test-hooks.
 */
#include "config.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "net/fault.h"
#include "tests/unit/test.h"

static char rules_path[64];

/* Replace the rules (pad: extra newlines, so that the size changes even
 * when the text and the mtime's tick do not). */
static void rules(const char *text, int pad)
{
	FILE *f = fopen(rules_path, "w");
	fprintf(f, "%s%.*s", text, pad, "\n\n\n\n\n\n\n\n");
	fclose(f);
}

static int run_of(const char *link, const char *what, int n, shoal_fault_kind *seq)
{
	int hits = 0;
	for (int i = 0; i < n; i++) {
		shoal_fault f;
		seq[i] = shoal_fault_next(link, what, &f);
		hits += seq[i] != SHOAL_FAULT_NONE;
	}
	return hits;
}

static void test_rules(void)
{
#ifndef SHOAL_TEST_HOOKS
	TEST_SKIP("built without --enable-test-hooks");
#endif
	shoal_fault f;
	shoal_fault_kind s[1000], s2[1000];
	ASSERT_EQ(shoal_fault_next("tcp", "hidden", &f), SHOAL_FAULT_NONE); /* no file yet */
	rules("tcp:drop:n=2:skip=1", 1);
	ASSERT_EQ(run_of("tcp", "hidden", 4, s), 2);
	ASSERT_EQ(s[0], SHOAL_FAULT_NONE);
	ASSERT_EQ(s[1], SHOAL_FAULT_DROP);
	ASSERT_EQ(s[2], SHOAL_FAULT_DROP);
	ASSERT_EQ(s[3], SHOAL_FAULT_NONE);
	ASSERT_EQ(shoal_fault_next("ctl", NULL, &f), SHOAL_FAULT_NONE); /* another link */
	rules("tcp:corrupt:kind=hidden,ctl:delay:ms=7", 2);
	ASSERT_EQ(shoal_fault_next("tcp", "token", &f), SHOAL_FAULT_NONE);
	ASSERT_EQ(shoal_fault_next("tcp", NULL, &f), SHOAL_FAULT_NONE);
	ASSERT_EQ(shoal_fault_next("tcp", "hidden", &f), SHOAL_FAULT_CORRUPT);
	ASSERT_EQ(shoal_fault_next("tcp", "hidden", &f), SHOAL_FAULT_NONE); /* n=1 */
	ASSERT_EQ(shoal_fault_next("ctl", NULL, &f), SHOAL_FAULT_DELAY);
	ASSERT_EQ(f.delay_ms, 7u);
	/* p: about half of 1000, and the same frames again for the same seed */
	rules("swim:truncate:n=0:p=0.5:seed=3", 3);
	int hits = run_of("swim", NULL, 1000, s);
	ASSERT_TRUE(hits > 400 && hits < 600);
	rules("swim:truncate:n=0:p=0.5:seed=3", 4);
	ASSERT_EQ(run_of("swim", NULL, 1000, s2), hits);
	ASSERT_MEM_EQ(s, s2, sizeof s);
	rules("swim:truncate:n=0:p=0.5:seed=4", 5);
	run_of("swim", NULL, 1000, s2);
	ASSERT_TRUE(memcmp(s, s2, sizeof s) != 0);
	/* malformed rules arm nothing (each logs an error) */
	rules("tcp:explode,tcp:drop:n=x,tcp:drop:what=1,tcp", 1);
	ASSERT_EQ(run_of("tcp", "hidden", 10, s), 0);
	unlink(rules_path);
	ASSERT_EQ(shoal_fault_next("tcp", "hidden", &f), SHOAL_FAULT_NONE);
}

static void test_message_faults(void)
{
#ifndef SHOAL_TEST_HOOKS
	TEST_SKIP("built without --enable-test-hooks");
#endif
	static const uint8_t msg[40] = "a control message of forty bytes........";
	const void *buf = msg;
	size_t len = sizeof msg;
	void *copy;
	rules("ctl:drop", 1);
	ASSERT_EQ(shoal_fault_message("ctl", "send", &buf, &len, &copy), 1);
	ASSERT_TRUE(copy == NULL);
	rules("ctl:truncate:kind=reply", 2);
	ASSERT_EQ(shoal_fault_message("ctl", "send", &buf, &len, &copy), 0);
	ASSERT_EQ(len, sizeof msg); /* another kind: untouched */
	ASSERT_EQ(shoal_fault_message("ctl", "reply", &buf, &len, &copy), 0);
	ASSERT_TRUE(len < sizeof msg && buf == msg && copy == NULL);
	rules("ctl:corrupt:seed=11", 3);
	len = sizeof msg;
	ASSERT_EQ(shoal_fault_message("ctl", "reply", &buf, &len, &copy), 0);
	ASSERT_TRUE(copy != NULL && buf == copy && len == sizeof msg);
	int bits = 0;
	for (size_t i = 0; i < len; i++)
		bits += __builtin_popcount(((const uint8_t *)buf)[i] ^ msg[i]);
	ASSERT_EQ(bits, 1);
	free(copy);
	unlink(rules_path);
}

int main(void)
{
	snprintf(rules_path, sizeof rules_path, "/tmp/shoal-test-fault-%d", (int)getpid());
	char env[80];
	snprintf(env, sizeof env, "@%s", rules_path);
	setenv("SHOAL_TEST_FAULT", env, 1);
	static const test_case_ cases[] = {TEST_CASE(test_rules), TEST_CASE(test_message_faults)};
	return test_run_(cases, sizeof cases / sizeof cases[0]);
}

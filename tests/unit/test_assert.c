/*
 * tests/unit/test_assert.c: base/assert.h: a true condition passes; a false
 * one prints file:line and the expression on stderr and aborts (run in a
 * child process).
 */
#include "config.h"

#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include "base/assert.h"
#include "tests/unit/test.h"

static void test_true_passes(void)
{
	int calls = 0;
	SHOAL_ASSERT(++calls == 1); /* evaluated exactly once */
	ASSERT_EQ(calls, 1);
}

static void test_false_aborts(void)
{
	int fd[2];
	ASSERT_EQ(pipe(fd), 0);
	int line = __LINE__ + 6;
	pid_t pid = fork();
	ASSERT_TRUE(pid >= 0);
	if (pid == 0) {
		dup2(fd[1], 2);
		int two = 2;
		SHOAL_ASSERT(two + 2 == 5);
		_exit(0); /* not reached */
	}
	close(fd[1]);
	char got[512];
	size_t n = 0;
	ssize_t r;
	while (n < sizeof got - 1 && (r = read(fd[0], got + n, sizeof got - 1 - n)) > 0)
		n += (size_t)r;
	got[n] = '\0';
	close(fd[0]);
	int st;
	ASSERT_EQ(waitpid(pid, &st, 0), pid);
	ASSERT_TRUE(WIFSIGNALED(st));
	ASSERT_EQ(WTERMSIG(st), SIGABRT);
	char want[256];
	snprintf(want, sizeof want, "%s:%d: assertion failed: two + 2 == 5\n", __FILE__, line);
	ASSERT_STR_EQ(got, want);
}

TEST_MAIN(TEST_CASE(test_true_passes), TEST_CASE(test_false_aborts))

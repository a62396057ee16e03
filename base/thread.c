/*
 * base/thread.c: background and compute threads (see thread.h).
 */
#include "base/thread.h"

#include <errno.h>
#include <pthread.h>
#include <sched.h>

#if defined(__linux__)
/* on Linux, 0 names the calling thread, not the whole process */
static int thread_policy(int policy)
{
	struct sched_param sp = {0};
	return sched_setscheduler(0, policy, &sp) ? errno : 0;
}

int shoal_thread_background(void)
{
	return thread_policy(SCHED_BATCH);
}

int shoal_thread_compute(void)
{
	return thread_policy(SCHED_OTHER);
}
#else
int shoal_thread_background(void)
{
	return 0;
}

int shoal_thread_compute(void)
{
	return 0;
}
#endif

void shoal_thread_name(const char *name)
{
#if defined(__linux__)
	pthread_setname_np(pthread_self(), name);
#elif defined(__APPLE__)
	pthread_setname_np(name);
#else
	(void)name;
#endif
}

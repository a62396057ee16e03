/*
 * base/thread.c: background and compute threads (see thread.h).
 */
#include "base/thread.h"

#include <errno.h>
#include <pthread.h>
#include <sched.h>

static int shoal_thread_policy(int policy)
{
#if defined(__linux__)
	/* on Linux, 0 names the calling thread, not the whole process */
	struct sched_param sp = {0};
	return sched_setscheduler(0, policy, &sp) ? errno : 0;
#else
	(void)policy;
	return 0;
#endif
}

int shoal_thread_background(void)
{
#if defined(__linux__) && defined(SCHED_BATCH)
	return shoal_thread_policy(SCHED_BATCH);
#else
	return 0;
#endif
}

int shoal_thread_compute(void)
{
	return shoal_thread_policy(SCHED_OTHER);
}

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

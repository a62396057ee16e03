/*
 * runtime/node/serve_wake.c: how the serving state's threads signal each
 * other: a byte into a wake-up pipe (the node thread and the API wake the
 * data thread; the data thread wakes the expert thread) and the event ring
 * that takes a control-plane run's tokens and ends, and the deaths a data
 * link showed, to the node thread (serve_clients.c drains it).
 */
#include "config.h"

#include "runtime/node/serve_impl.h"

#include <errno.h>
#include <string.h>
#include <unistd.h>

#include "base/log.h"

/* One byte into the write end of a wake-up pipe (full: already woken). */
void serve__poke(int fd, const char *what)
{
	char c = 1;
	if (write(fd, &c, 1) < 0 && errno != EAGAIN)
		SHOAL_LOG_W("cluster", "%s: %s", what, strerror(errno));
}

void serve__wake(shoal_serve *cl)
{
	serve__poke(cl->wake[1], "wake");
}

void serve__xwake(shoal_serve *cl)
{
	serve__poke(cl->xwake[1], "expert wake");
}

/* Queue an event for the node thread; waits while the ring is full (the
 * node thread drains it every base period). */
void serve__event_push(shoal_serve *cl, const shoal_serve_event *ev)
{
	pthread_mutex_lock(&cl->mu);
	while (cl->ev_n == SHOAL_SERVE_EVENTS && !cl->stop)
		pthread_cond_wait(&cl->cv, &cl->mu);
	if (!cl->stop) {
		cl->ev[(cl->ev_head + cl->ev_n) % SHOAL_SERVE_EVENTS] = *ev;
		cl->ev_n++;
	}
	pthread_mutex_unlock(&cl->mu);
	serve__poke(cl->evfd[1], "event pipe");
}

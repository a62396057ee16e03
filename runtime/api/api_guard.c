/*
 * runtime/api/api_guard.c: the API's guard against slow clients (see
 * api_guard.h). Each connection has a slot with a dup of its socket, its
 * phase and when it began waiting for its request; the guard's thread
 * shuts down (shutdown(2) on the dup: the connection's own thread then
 * sees the end and libmicrohttpd closes it) a connection whose request
 * did not arrive in time, and a new connection that finds the table near
 * full sheds the oldest one still waiting for its request. The dup keeps
 * the socket itself alive until libmicrohttpd reports the close, so a
 * shutdown never lands on a descriptor number that was reused.
 *
 * Divisions: slots; the thread; libmicrohttpd's callbacks.
 */
#include "config.h"

#include "runtime/api/api_guard.h"

#include <errno.h>
#include <poll.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "base/clock.h"
#include "base/log.h"
#include "base/thread.h"

#define LOG_PART "api"
/* A request's headers must arrive within API_HEAD_MS of when the
 * connection began waiting for it (opened, or its previous reply done),
 * and its body within API_BODY_MS: a client on a home network sends a
 * request in milliseconds, a 1 MiB body (the default limit) at 100 KB/s
 * in 10 s; a trickle of bytes does not move the deadline. */
#define API_HEAD_MS 10000u
#define API_BODY_MS 30000u
/* The guard looks for late requests every API_GUARD_TICK_MS: a late one
 * is shed at most a quarter of a second after its deadline. */
#define API_GUARD_TICK_MS 250
/* When a new connection finds fewer than max_conns / API_ROOM_DIV free
 * slots (16 of the default 128), the oldest connection that waits for its
 * request is shed: new requests always find room. */
#define API_ROOM_DIV 8u
/* Sheds are logged at most once per API_GUARD_LOG_MS, with their count. */
#define API_GUARD_LOG_MS 10000u
/* A late connection whose whole request head waits unread on its socket
 * (the blank line that ends it among the first API_PEEK_BYTES unread
 * bytes) is the server's delay, not the client's: it is not shed. A
 * trickling client never sends that blank line. */
#define API_PEEK_BYTES 16384

typedef struct guard_slot {
	bool used, shed;
	int fd; /* a dup of the connection's socket */
	api__guard_phase phase;
	uint64_t since_us; /* when it began waiting for its request */
} guard_slot;

struct api__guard {
	pthread_mutex_t mu;
	guard_slot *slot; /* (n_slot) */
	unsigned n_slot, max_conns, live, room;
	uint64_t shed_deadline, shed_room, logged_deadline, logged_room, log_us;
	int stop[2]; /* a byte stops the thread */
	pthread_t thr;
	bool thr_ok;
};

/* ------------------------------------------------------------------ slots */

static void slot_shed(api__guard *g, guard_slot *s, bool deadline)
{
	shutdown(s->fd, SHUT_RDWR);
	s->shed = true;
	if (deadline)
		g->shed_deadline++;
	else
		g->shed_room++;
}

/* Whether a request head, complete, waits on fd unread by libmicrohttpd. */
static bool head_waits(int fd)
{
	char b[API_PEEK_BYTES];
	ssize_t n = recv(fd, b, sizeof b, MSG_PEEK | MSG_DONTWAIT);
	for (ssize_t i = 0; i + 3 < n; i++)
		if (b[i] == '\r' && !memcmp(b + i, "\r\n\r\n", 4))
			return true;
	return false;
}

/* Under mu: the oldest connection that waits for its request, not `but`. */
static guard_slot *oldest_waiting(api__guard *g, const guard_slot *but)
{
	guard_slot *o = NULL;
	for (unsigned i = 0; i < g->n_slot; i++) {
		guard_slot *s = &g->slot[i];
		if (s->used && !s->shed && s != but && s->phase != API__GUARD_SERVE &&
		    (!o || s->since_us < o->since_us))
			o = s;
	}
	return o;
}

static void log_sheds(api__guard *g, uint64_t now)
{
	if (now - g->log_us < API_GUARD_LOG_MS * 1000u ||
	    (g->shed_deadline == g->logged_deadline && g->shed_room == g->logged_room))
		return;
	SHOAL_LOG_W(LOG_PART,
	            "shed %llu connection(s) whose request was late and %llu idle one(s) to "
	            "make room (%u open now)",
	            (unsigned long long)(g->shed_deadline - g->logged_deadline),
	            (unsigned long long)(g->shed_room - g->logged_room), g->live);
	g->logged_deadline = g->shed_deadline;
	g->logged_room = g->shed_room;
	g->log_us = now;
}

/* ------------------------------------------------------------- the thread */

static void *guard_main(void *arg)
{
	api__guard *g = arg;
	shoal_thread_name("shoal-apiguard");
	struct pollfd p = {.fd = g->stop[0], .events = POLLIN};
	for (;;) {
		int r = poll(&p, 1, API_GUARD_TICK_MS);
		if (r > 0 || (r < 0 && errno != EINTR))
			break; /* told to stop */
		uint64_t now = shoal_clock_now_us();
		pthread_mutex_lock(&g->mu);
		for (unsigned i = 0; i < g->n_slot; i++) {
			guard_slot *s = &g->slot[i];
			if (!s->used || s->shed || s->phase == API__GUARD_SERVE)
				continue;
			uint64_t limit = s->phase == API__GUARD_HEAD ? API_HEAD_MS : API_BODY_MS;
			if (now - s->since_us > limit * 1000u &&
			    !(s->phase == API__GUARD_HEAD && head_waits(s->fd)))
				slot_shed(g, s, true);
		}
		log_sheds(g, now);
		pthread_mutex_unlock(&g->mu);
	}
	return NULL;
}

shoal_err api__guard_new(unsigned max_conns, api__guard **out, char *why, size_t why_len)
{
	*out = NULL;
	api__guard *g = calloc(1, sizeof *g);
	if (!g)
		return SHOAL_ERR_NOMEM;
	g->stop[0] = g->stop[1] = -1;
	/* libmicrohttpd may report a new connection before the close of the
	 * one it replaces: a few slots over its limit */
	g->max_conns = max_conns;
	g->n_slot = max_conns + 8;
	g->room = max_conns / API_ROOM_DIV ? max_conns / API_ROOM_DIV : 1;
	g->slot = calloc(g->n_slot, sizeof *g->slot);
	if (!g->slot || pthread_mutex_init(&g->mu, NULL)) {
		free(g->slot);
		free(g);
		return SHOAL_ERR_NOMEM;
	}
	if (pipe(g->stop) || pthread_create(&g->thr, NULL, guard_main, g)) {
		int e = errno;
		api__guard_free(g);
		return shoal_why(why, why_len, SHOAL_ERR_IO, "the API's connection guard: %s",
		                 strerror(e));
	}
	g->thr_ok = true;
	*out = g;
	return SHOAL_OK;
}

void api__guard_free(api__guard *g)
{
	if (!g)
		return;
	if (g->thr_ok) {
		char b = 1;
		if (write(g->stop[1], &b, 1) != 1)
			SHOAL_LOG_E(LOG_PART, "cannot stop the connection guard: %s",
			            strerror(errno));
		pthread_join(g->thr, NULL);
	}
	for (unsigned i = 0; i < g->n_slot; i++)
		if (g->slot[i].used)
			close(g->slot[i].fd);
	if (g->stop[0] >= 0)
		close(g->stop[0]);
	if (g->stop[1] >= 0)
		close(g->stop[1]);
	pthread_mutex_destroy(&g->mu);
	free(g->slot);
	free(g);
}

/* ------------------------------------------------- libmicrohttpd's callbacks */

void api__guard_notify(void *cls, struct MHD_Connection *c, void **socket_context,
                       enum MHD_ConnectionNotificationCode toe)
{
	api__guard *g = cls;
	if (toe == MHD_CONNECTION_NOTIFY_CLOSED) {
		guard_slot *s = *socket_context;
		if (!s)
			return;
		pthread_mutex_lock(&g->mu);
		close(s->fd);
		s->used = false;
		g->live--;
		pthread_mutex_unlock(&g->mu);
		*socket_context = NULL;
		return;
	}
	*socket_context = NULL;
	const union MHD_ConnectionInfo *ci =
	    MHD_get_connection_info(c, MHD_CONNECTION_INFO_CONNECTION_FD);
	int fd = ci ? dup(ci->connect_fd) : -1;
	if (fd < 0)
		return; /* not guarded: libmicrohttpd's own timeout still applies */
	uint64_t now = shoal_clock_now_us();
	pthread_mutex_lock(&g->mu);
	guard_slot *s = NULL;
	for (unsigned i = 0; i < g->n_slot && !s; i++)
		if (!g->slot[i].used)
			s = &g->slot[i];
	if (s) {
		*s =
		    (guard_slot){.used = true, .fd = fd, .phase = API__GUARD_HEAD, .since_us = now};
		g->live++;
		*socket_context = s;
		/* near full: the oldest connection still waiting for its
		 * request makes room */
		unsigned open = 0;
		for (unsigned i = 0; i < g->n_slot; i++)
			open += g->slot[i].used && !g->slot[i].shed;
		guard_slot *o;
		if (open + g->room > g->max_conns && (o = oldest_waiting(g, s)))
			slot_shed(g, o, false);
		log_sheds(g, now);
	}
	pthread_mutex_unlock(&g->mu);
	if (!s)
		close(fd);
#ifdef SHOAL_TEST_HOOKS
	/* test hook SHOAL_TEST_API_STALL_MS: the server reads no request of
	 * a new connection for that long (a loaded machine) */
	const char *st = getenv("SHOAL_TEST_API_STALL_MS");
	if (st) {
		unsigned long ms = strtoul(st, NULL, 10);
		nanosleep(&(struct timespec){.tv_sec = (time_t)(ms / 1000),
		                             .tv_nsec = (long)(ms % 1000) * 1000000},
		          NULL);
	}
#endif
}

void api__guard_set(api__guard *g, struct MHD_Connection *c, api__guard_phase p)
{
	const union MHD_ConnectionInfo *ci =
	    MHD_get_connection_info(c, MHD_CONNECTION_INFO_SOCKET_CONTEXT);
	guard_slot *s = ci ? ci->socket_context : NULL;
	if (!s)
		return;
	pthread_mutex_lock(&g->mu);
	if (p == API__GUARD_HEAD)
		s->since_us = shoal_clock_now_us();
	s->phase = p;
	pthread_mutex_unlock(&g->mu);
}

void api__guard_counts(api__guard *g, uint32_t *live, uint64_t *shed_deadline, uint64_t *shed_room)
{
	pthread_mutex_lock(&g->mu);
	*live = g->live;
	*shed_deadline = g->shed_deadline;
	*shed_room = g->shed_room;
	pthread_mutex_unlock(&g->mu);
}
